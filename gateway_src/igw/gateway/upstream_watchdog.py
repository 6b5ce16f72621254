"""End requests in flight that the gateway no longer expects an answer for.

Two bounds, checked once a second (:data:`SWEEP_INTERVAL_S`) by one timer per process - not a timer
or a clock read per request: the upstream pool's stall sweep
(:meth:`~igw.gateway.upstream_client.UpstreamPool.end_stalled`) measures each connection's
silence to within one sweep.

* ``unresponsiveTimeout`` (``spec.extensions.routing``, 10 s): an endpoint the gateway excluded
  because its scrapes fail (a frozen or stopped process: the kernel still accepts connections and
  answers TCP keep-alive probes, but nothing answers HTTP) or because its ``/metrics`` page froze
  while requests were sent to it (a hung engine behind a live HTTP server) has, once it has stayed
  excluded that long, its requests that heard nothing for as long ended with 504
  ``upstream_unresponsive`` (a started stream: a final SSE error event). Both conditions, so
  a scrape that times out once under load ends nothing, and a stream still delivering tokens is
  never cut. Not retried elsewhere: the model server had the request (the retry rule of
  :mod:`igw.gateway.upstream`).
* ``responseTimeout`` (600 s): a request still waiting for its response head after that long - for
  a non-streamed request, its whole answer - ends with 504 ``upstream_timeout`` whatever the
  endpoint's state (a live model server that lost one request).

Each ended request is counted in ``igw_upstream_stalled_total{reason}`` and its access-log line
carries the cause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from igw.gateway.runtime import GatewayRuntime
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.upstream_client import UpstreamPool

SWEEP_INTERVAL_S: Final = 1.0
"""Seconds between two stall sweeps: the precision of both bounds."""

log = logging.getLogger("igw.gateway.upstream")


class UpstreamWatchdog:
    """Runs the stall sweep of ``pool`` every :data:`SWEEP_INTERVAL_S` with the current runtime's
    timeouts and the endpoints excluded for failing scrapes or frozen pages for at least
    ``unresponsiveTimeout``."""

    def __init__(
        self,
        *,
        runtime: Callable[[], GatewayRuntime],
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        interval_s: float = SWEEP_INTERVAL_S,
    ) -> None:
        self._runtime = runtime
        self._pool = pool
        self._metrics = metrics
        self._interval_s = interval_s
        self._excluded_since: dict[tuple[str, str], float] = {}
        """(scheduler, endpoint) -> the loop time the sweep first found it excluded, while it stays so."""
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._interval_s, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.sweep(loop.time())
        except Exception:  # a bug here must not stop the timer: log it, sweep again next time
            log.exception("the upstream stall sweep failed")
        self._timer = loop.call_later(self._interval_s, self._tick)

    def sweep(self, now: float) -> None:
        """One sweep at loop time ``now``."""
        settings = self._runtime().settings
        grace = settings.unresponsive_timeout_s
        unresponsive: dict[str, str] = {}
        seen: set[tuple[str, str]] = set()
        for name, sr in self._runtime().schedulers.items():
            for key, state in sr.pool.states.items():
                if state.scrape_failing:
                    why = "its /metrics scrapes fail"
                elif state.page.frozen:
                    why = "its /metrics page is frozen"
                else:
                    continue
                tag = (name, key)
                seen.add(tag)
                since = self._excluded_since.setdefault(tag, now)
                if grace is not None and now - since >= grace:
                    unresponsive[key] = f"{why}: excluded from scheduling for {now - since:.0f}s"
        for tag in self._excluded_since.keys() - seen:
            del self._excluded_since[tag]
        ended = self._pool.end_stalled(
            response_timeout_s=settings.response_timeout_s,
            unresponsive=unresponsive,
            silent_for_s=grace or 0.0,
        )
        for reason, count in ended.items():
            self._metrics.upstream_stalled.labels(reason).inc(count)
            log.warning("ended %d request(s) in flight: %s", count, _REASONS[reason])


_REASONS: Final = {
    "unresponsive": "their endpoint stayed excluded (failing scrapes or a frozen page) and silent "
    "for unresponsiveTimeout",
    "response_timeout": "no response head within responseTimeout",
}
