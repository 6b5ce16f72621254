"""Scrape every endpoint's ``/metrics`` on a fixed interval and keep its state current.

One asyncio task per (scheduler, endpoint), started and stopped by :meth:`Scraper.sync` as discovery
changes the pools. Each successful scrape stores the parsed signals with the clock time it finished;
a failed one (timeout, refused connection, non-200, unreadable page) marks the endpoint failing,
which excludes it from scheduling until a scrape succeeds again.

Missing signals are reported loudly and exactly once per (endpoint, family): a warning log naming
the family and what to do about it, the gauge ``igw_endpoint_signal_missing`` (via the endpoint
state) and the ``/readyz`` detail. ``/metrics`` answering 404 is itself reported as the missing
signal ``/metrics`` (an SGLang server started without ``--enable-metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Final

import aiohttp

from igw.engines import ENGINES
from igw.gateway.endpoints import EndpointState
from igw.gateway.metrics_parser import parse_page
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.telemetry import GatewayMetrics

log = logging.getLogger("igw.gateway.scraper")

MAX_PAGE_BYTES: Final = 16 * 1024 * 1024
PAGE_MISSING: Final = "/metrics"
NO_AUTOTUNE: Final = (
    "prefix block size and LRU size cannot be auto-tuned: defaults (64 characters, 31250) apply"
)
ADVICE: Final[Mapping[str, str]] = {
    **{e.families.cache_config: NO_AUTOTUNE for e in ENGINES.values() if e.families.cache_config is not None},
    **{family: advice for e in ENGINES.values() for family, advice in e.missing_advice.items()},
    PAGE_MISSING: "the model server has no /metrics page (SGLang needs --enable-metrics): "
    "the endpoint is excluded from scheduling",
}
"""Missing family -> what to do, from the engine catalogue (:mod:`igw.engines`) plus the gateway's own."""
_LORA_FAMILIES: Final = frozenset(e.families.lora for e in ENGINES.values() if e.families.lora is not None)

TaskKey = tuple[str, str]


class Scraper:
    def __init__(
        self,
        *,
        runtime: Callable[[], GatewayRuntime],
        session: aiohttp.ClientSession,
        clock: Callable[[], float],
        metrics: GatewayMetrics,
    ) -> None:
        self._runtime = runtime
        self._session = session
        self._clock = clock
        self._metrics = metrics
        self._tasks: dict[TaskKey, asyncio.Task[None]] = {}
        self._reported: set[tuple[str, str, str]] = set()

    def sync(self) -> None:
        """Start tasks for new endpoints and stop those of endpoints that left."""
        rt = self._runtime()
        wanted = {(name, key) for name, sr in rt.schedulers.items() for key in sr.pool.states}
        for tk in list(self._tasks):
            if tk not in wanted:
                self._tasks.pop(tk).cancel()
        for tk in wanted - set(self._tasks):
            self._tasks[tk] = asyncio.create_task(self._loop(*tk), name=f"scrape {tk[0]} {tk[1]}")

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    def _lookup(self, scheduler: str, key: str) -> tuple[SchedulerRuntime, EndpointState] | None:
        sr = self._runtime().schedulers.get(scheduler)
        state = None if sr is None else sr.pool.states.get(key)
        return None if sr is None or state is None else (sr, state)

    async def _loop(self, scheduler: str, key: str) -> None:
        while True:
            found = self._lookup(scheduler, key)
            if found is None:
                return
            sr, state = found
            settings = self._runtime().settings
            started = self._clock()
            await self.scrape_once(sr, state, timeout_s=settings.scrape_timeout_s)
            elapsed = self._clock() - started
            await asyncio.sleep(max(0.0, settings.scrape_interval_s - elapsed))

    async def scrape_once(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> None:
        url = f"http://{state.key}/metrics"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status == 404:
                    self._fail(sr, state, "GET /metrics answered 404", missing=frozenset({PAGE_MISSING}))
                    return
                if resp.status != 200:
                    self._fail(sr, state, f"GET /metrics answered HTTP {resp.status}")
                    return
                raw = await resp.content.read(MAX_PAGE_BYTES)
            text = raw.decode("utf-8", errors="replace")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._fail(sr, state, f"scrape failed: {type(exc).__name__}: {exc}".rstrip(": "))
            return
        parsed = parse_page(text, sr.families)
        missing = parsed.missing
        if not sr.spec.lora_adapters:
            missing = missing - _LORA_FAMILIES
        state.metrics = parsed.metrics
        state.kv_source = parsed.kv_source
        state.scraped_at = self._clock()
        if state.scrape_failing:
            log.info("endpoint %s (%s) scrapes again: back in scheduling", state.key, sr.spec.name)
        state.scrape_failing = False
        state.last_error = None
        self._set_missing(sr, state, missing)
        self._metrics.child(self._metrics.scrapes, "ok").inc()

    def _fail(
        self, sr: SchedulerRuntime, state: EndpointState, error: str, *, missing: frozenset[str] = frozenset()
    ) -> None:
        self._metrics.child(self._metrics.scrapes, "error").inc()
        if not state.scrape_failing:
            log.warning("endpoint %s (%s) excluded from scheduling: %s", state.key, sr.spec.name, error)
        state.scrape_failing = True
        state.last_error = error
        if missing:
            self._set_missing(sr, state, state.missing | missing)

    def _set_missing(self, sr: SchedulerRuntime, state: EndpointState, missing: frozenset[str]) -> None:
        for family in missing - state.missing:
            tag = (sr.spec.name, state.key, family)
            if tag not in self._reported:
                self._reported.add(tag)
                log.warning(
                    "endpoint %s (scheduler %s, engine %s) does not publish %s: %s",
                    state.key,
                    sr.spec.name,
                    sr.spec.engine_type,
                    family,
                    ADVICE.get(family, "routing treats this signal as missing (imputed, not zero)"),
                )
        for family in state.missing - missing:
            log.info("endpoint %s now publishes %s", state.key, family)
        state.missing = missing
