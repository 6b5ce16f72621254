"""When each endpoint is scraped: scrape groups on a fixed grid, and slower scrapes of idle endpoints.

Scrapes run in groups of up to :data:`SCRAPE_GROUP` endpoints that fire together, the groups spread
evenly over the interval (:func:`next_scrape_delay`): requests sent in the same turn of the event loop
share its wake-ups and their answers arrive together, which costs less CPU per scrape than one
wake-up per endpoint at a random phase, while a group stays small enough not to hold the loop for long.

An endpoint is *idle* when its last scrape found the same page as the one before (no token moved),
an empty queue, no request of this gateway in flight there and no dispatch to it since the scrape
before. Scraping it every interval would only confirm what the gateway already holds, so each idle
scrape doubles the gap to the next one, up to :func:`idle_gap_limit` - bounded by the scheduler's
``staleThreshold`` so that an idle endpoint never ages out of scheduling. The endpoint stays on its
group's grid: at every tick of its group the scraper checks (without a request) whether it became
busy, so the first dispatch to it, or a request in flight, brings it back to the fast interval at its
group's next tick, exactly when a busy endpoint would have been scraped.

What the slower pace gives up: a change on an idle endpoint that this gateway did not cause (another
gateway replica's first request to it) is seen up to one idle gap later instead of one interval.
"""

from __future__ import annotations

import math
from typing import Final

SCRAPE_GROUP: Final = 16
"""Endpoints whose scrapes start in the same turn of the event loop (see the module docstring)."""


def next_scrape_due(now: float, interval_s: float, slot: int, endpoints: int) -> float:
    """When, after ``now``, the group of the endpoint in ``slot`` is next due: the endpoints form
    ``ceil(endpoints / SCRAPE_GROUP)`` groups (slot modulo the group count) whose phases split the
    interval evenly, so each endpoint is due once per interval, with its group (every member of a
    group computes the same time)."""
    groups = max(1, math.ceil(endpoints / SCRAPE_GROUP))
    offset = (slot % groups) / groups * interval_s
    ticks = math.floor((now - offset) / interval_s) + 1
    due = ticks * interval_s + offset
    if due <= now:
        # ``now`` on a tick (a member re-enqueued at the tick its scrape started at) can divide to
        # just under a whole number of intervals once the monotonic clock is large (a node up for
        # an hour: ~1e5 intervals), naming that same tick again and scraping twice in it; the next
        # tick is written with the same formula, so every member of a group names the same float
        due = (ticks + 1) * interval_s + offset
    return due


def next_scrape_delay(now: float, interval_s: float, slot: int, endpoints: int) -> float:
    """Seconds from ``now`` until :func:`next_scrape_due`."""
    return max(0.0, next_scrape_due(now, interval_s, slot, endpoints) - now)


def idle_gap_limit(interval_s: float, stale_threshold_s: float) -> float:
    """The longest gap between two scrapes of an idle endpoint: half the stale threshold (a scrape
    may take up to its timeout to land, and a failed one is retried at the fast interval), and at
    least two intervals short of the threshold (a scrape starts on its group's tick, up to one
    interval after it is due); never shorter than the interval itself."""
    return max(interval_s, min(stale_threshold_s / 2, stale_threshold_s - 2 * interval_s))


class IdlePacing:
    """One endpoint's pace: every interval while it may be changing, ever less often while idle."""

    __slots__ = ("gap", "picks", "started")

    def __init__(self) -> None:
        self.gap = 0.0
        """Seconds between this endpoint's scrapes now (at most one interval: every tick)."""
        self.started = -math.inf
        """Event-loop time the last scrape started."""
        self.picks = -1
        """Dispatches to the endpoint (this gateway's, all workers) when the last scrape started."""

    def due(self, now: float, *, picks: int, inflight: int, interval_s: float) -> bool:
        """True when the endpoint should be scraped at this tick of its group."""
        return (
            self.gap <= interval_s
            or inflight > 0
            or picks != self.picks
            or now - self.started >= self.gap - interval_s / 2  # ticks land within half an interval
        )

    def scraped(self, started: float, *, picks: int, quiet: bool, interval_s: float, limit_s: float) -> None:
        """Record a scrape that started at ``started`` with ``picks`` dispatches seen. ``quiet``: it
        found the page unchanged, the queue empty and nothing of this gateway in flight; with no
        dispatch since the scrape before either, the endpoint is idle and the next gap doubles, up
        to ``limit_s``; otherwise the endpoint is scraped every interval again."""
        idle = quiet and picks == self.picks
        self.started, self.picks = started, picks
        self.gap = min(limit_s, max(interval_s, self.gap) * 2) if idle else interval_s
