"""Pick notes: how the schedulers of N gateway workers tell each other what they picked.

With ``igw serve --workers N`` each worker schedules alone, so each worker's prefix index knows
only the prompts that worker routed, and requests sharing a prefix land on pods that do not hold
it. Plugins with the optional :class:`~igw.scheduling.framework.SharesPicks` hook fix that: after
each pick the scheduler asks them for a *note* (:class:`PickNoteOutbox`, the only request-path
work: one call per sharing plugin and an append), the transport carries the notes to the other
workers every :data:`NOTE_INTERVAL_S` (at most a scrape interval), and there :func:`learn_notes`
hands each note to the same plugin of the same scheduler. The DES model of the workers
(``igw.bench.policies.workers``, share mode ``picks``) uses this same outbox and learner
(through :meth:`Scheduler.share_picks <igw.scheduling.scheduler.Scheduler.share_picks>` and
``learn_picks``), so what it measures is this code path.

Which built-in plugins share, and why:

* ``prefix-cache-scorer`` - shares: its index (which pod was sent which prompt blocks) is built by
  picks alone; the note is the prompt's block hashes and the pod's LRU capacity, never the text.
* ``no-hit-lru-scorer`` - shares: its order of pods given a cold request is built by picks alone;
  the note is a flag sent only for a cold pick.
* ``lora-slot-filter`` - does not: next to the adapters sent per pod it counts each adapter's
  requests in flight, released when the request completes, which only the owning worker sees; a
  learned pick would hold a slot for ever.
* ``prefill-collision-scorer`` - does not: it tracks each pod's prefills for the tens of
  milliseconds they last, worked off at a rate learned from the worker's own completions; a note
  arrives up to one scrape interval late, when most such prefills are over, and out of the time
  order its queue relies on.
* ``backlog-ttft-scorer`` - shares its backlogs: the note is the pick time, the prompt tokens the
  pick added to the pod's backlog and the rate it drains at (numbers, never the prompt); a backlog
  drains by time, so a learned dispatch leaves it without a completion. Its fits do not travel:
  each pairs a dispatch with that request's first token, which only the owning worker sees.
* ``lora-affinity-scorer`` and the other scorers: no pick state (they read scrapes or in-flight
  counts).
* the scheduler's dispatch ledger (not a plugin; notes named ``@dispatch-ledger``) - shares: it
  counts the dispatches to each pod since its last scrape, which every worker's picks add to; the
  note is the pick's time. Its time-to-first-token estimate, learnt from the worker's own
  completions, does not travel. A dispatch that flow control steers to another endpoint after the
  pick moves in the ledger and in its note alike (:meth:`PickNoteOutbox.retarget`); a dispatch flow
  control sends without a pick (to an engine that preempts a lower band for it) is noted as one
  (:meth:`PickNoteOutbox.add`), in a pool of any size.

* outlier detection (not a plugin; notes named ``@outlier-detection``) - shares its ejections, as
  they happen rather than per pick (:meth:`PickNoteOutbox.add`): the note is the ejection's end and
  its number in a row. Its failure counts do not travel: each counts the failures of the requests
  its worker sent, which only that worker sees end.
* a 404 for an adapter (``Scheduler.on_model_missing``, notes named ``@model-missing``) - shared as it
  arrives: the note is the adapter's name and the time, which the other workers' ``lora-slot-filter``
  remembers as if their own request had been answered so.

Which pools note: a scheduler notes a pick only when its pool (the endpoints it was handed, before
the per-request context-window fit and the filters) has more than one endpoint. With one endpoint
every worker's pick goes to it whatever the notes say: the prefix index and the no-hit order only
rank candidates, and the backlogs only rank them and feed ``prefill-admission-scorer``'s comparison
between candidates. One reader outside the ranking remains: flow control and saturation detection
read the dispatch ledger's count of dispatches since the pod's scrape, which in a pool of several
endpoints includes the other workers' (their ledger notes); in a one-endpoint pool each worker counts
only its own until the next scrape (at most a scrape interval), a gap kept so that such a pool (a
single replica, or ``igw perf workers``' backend) pays neither the note nor its learning at the other
workers (noted in session s22, not measured). The check is made per pick, so the notes resume with the
first pick after the pool grows; the other workers' indexes then lack the one-endpoint period's
picks of this worker, which costs at most a cold first placement per such prefix (the lone pod
already holds them; the new one holds none).

Bounds: an outbox keeps at most ``capacity`` notes between two drains and drops the oldest beyond
that (counted in :attr:`PickNoteOutbox.dropped`), so a stalled transport never blocks or grows the
request path; :func:`learn_notes` drops notes older than the scheduler's stale threshold (a pick
that old says little about what the pod holds now) and malformed ones, and counts both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from igw.scheduling.framework import CycleContext, SharesPicks
from igw.scheduling.types import EndpointView

MAX_PENDING_NOTES: Final = 8192
"""Notes an outbox keeps between two drains (one note interval, or longer while the transport is
stalled): far above one worker's picks per interval; beyond it the oldest are dropped."""

NOTE_INTERVAL_S: Final = 0.005
"""How often the workers exchange their pick notes (or every scrape interval, when that is shorter).

Why not once per scrape interval: N workers each unaware of the others' picks for that long place
requests on the same pod in the same few tens of milliseconds - on mixed-fleet-8b the tail of the
N-worker TTFT was short prompts queued behind such collisions, and in the DES notes every 5 ms
instead of every 50 ms brought 8 workers' p99 back to about one worker's (docs/gateway.md, routing
quality with N in-flight ledgers). A batch every 5 ms is one write and one wake-up per peer, so
the request path does not pay for the shorter interval. Only while there are notes: a worker whose
outboxes stayed empty sleeps until a pick notes something (:attr:`PickNoteOutbox.wake`) rather
than waking every interval for an empty batch (2026-12-03, session s17)."""


def note_interval(scrape_interval_s: float) -> float:
    """Seconds between two exchanges of pick notes for a given scrape interval."""
    return min(NOTE_INTERVAL_S, scrape_interval_s)


PickNote = tuple[float, str, str, object]
"""(pick time, plugin name, endpoint key, the plugin's note)."""


def sharing_plugins(plugins: Iterable[object]) -> dict[str, SharesPicks]:
    """Those of ``plugins`` that share their picks, by name."""
    return {p.name: p for p in plugins if isinstance(p, SharesPicks)}


class PickNoteOutbox:
    """The notes of one scheduler's picks since the last drain (bounded, oldest dropped first)."""

    __slots__ = ("_capacity", "_notes", "_plugins", "dropped", "wake")

    def __init__(self, plugins: Iterable[SharesPicks], *, capacity: int = MAX_PENDING_NOTES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be at least 1 (got {capacity})")
        self._plugins = tuple(plugins)
        self._capacity = capacity
        self._notes: deque[PickNote] = deque(maxlen=capacity)
        self.dropped = 0
        """Notes dropped because the outbox was full, since whoever reports the count last took it
        (:mod:`igw.gateway.pick_share` adds it to its own total and sets it back to 0)."""
        self.wake: Callable[[], None] | None = None
        """Called when a pick puts the first note into an empty outbox: the transport's way to sleep
        while there is nothing to send rather than drain an empty outbox every note interval
        (:mod:`igw.gateway.pick_share`). At most one call per drain."""

    def record(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """Keep every sharing plugin's note of this pick (called by the scheduler after on_picked)."""
        notes = self._notes
        was_empty = not notes
        for plugin in self._plugins:
            note = plugin.pick_note(ctx, endpoint)
            if note is not None:
                if len(notes) == self._capacity:
                    self.dropped += 1
                notes.append((ctx.now, plugin.name, endpoint.key, note))
        if was_empty and notes and self.wake is not None:
            self.wake()

    def add(self, at: float, plugin: str, endpoint: str, note: object) -> None:
        """Keep one note made outside a pick (a dispatch the scheduler did not choose, recorded by
        :meth:`Scheduler.record_dispatch <igw.scheduling.scheduler.Scheduler.record_dispatch>`)."""
        notes = self._notes
        was_empty = not notes
        if len(notes) == self._capacity:
            self.dropped += 1
        notes.append((at, plugin, endpoint, note))
        if was_empty and self.wake is not None:
            self.wake()

    def retarget(self, plugin: str, source: str, target: str) -> bool:
        """Make the latest note of ``plugin`` about ``source`` name ``target`` instead (a dispatch
        moved after its pick, :meth:`Scheduler.move_dispatch
        <igw.scheduling.scheduler.Scheduler.move_dispatch>`); whether there was one."""
        notes = self._notes
        for i in range(len(notes) - 1, -1, -1):
            at, name, key, note = notes[i]
            if name == plugin and key == source:
                notes[i] = (at, name, target, note)
                return True
        return False

    def withdraw(self, plugin: str, endpoint: str) -> bool:
        """Drop the latest note of ``plugin`` about ``endpoint`` (a dispatch never sent,
        :meth:`Scheduler.release_dispatch <igw.scheduling.scheduler.Scheduler.release_dispatch>`);
        whether there was one still unsent."""
        notes = self._notes
        for i in range(len(notes) - 1, -1, -1):
            _, name, key, _ = notes[i]
            if name == plugin and key == endpoint:
                del notes[i]
                return True
        return False

    def drain(self) -> list[PickNote]:
        """The notes kept since the last drain, oldest first; the outbox is empty afterwards."""
        out = list(self._notes)
        self._notes.clear()
        return out


@dataclass(slots=True)
class LearnCounts:
    """What :func:`learn_notes` did with a batch of notes (accumulates over calls)."""

    learned: int = 0
    stale: int = 0
    """Older than the scheduler's stale threshold."""
    unknown: int = 0
    """For a plugin this scheduler does not have (a reload in between) or that does not share, or
    (counted by :mod:`igw.gateway.pick_share`) for a scheduler or endpoint this worker does not have."""
    malformed: int = 0


def learn_notes(
    plugins: Mapping[str, SharesPicks],
    notes: Sequence[Sequence[object]],
    *,
    now: float,
    max_age_s: float,
    counts: LearnCounts | None = None,
) -> LearnCounts:
    """Teach ``plugins`` (by name) another worker's notes (``[at, plugin, endpoint, note]`` each, as
    :meth:`PickNoteOutbox.drain` returns them or a channel decoded them); notes older than
    ``max_age_s`` are dropped."""
    counts = counts if counts is not None else LearnCounts()
    oldest = now - max_age_s
    for row in notes:
        if len(row) != 4:
            counts.malformed += 1
            continue
        at, name, endpoint, note = row
        if not isinstance(at, int | float) or not isinstance(name, str) or not isinstance(endpoint, str):
            counts.malformed += 1
            continue
        if at < oldest:
            counts.stale += 1
            continue
        plugin = plugins.get(name)
        if plugin is None:
            counts.unknown += 1
            continue
        try:
            plugin.learn_pick(endpoint, note)
        except ValueError:
            counts.malformed += 1
            continue
        counts.learned += 1
    return counts
