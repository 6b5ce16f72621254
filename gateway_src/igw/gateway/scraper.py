"""Scrape every endpoint's ``/metrics`` on a fixed interval and keep its state current.

One asyncio task per (scheduler, endpoint), started and stopped by :meth:`Scraper.sync` as discovery
changes the pools. Each successful scrape stores the parsed signals with the clock time it finished;
a failed one (timeout, refused connection, non-200, unreadable page) marks the endpoint failing,
which excludes it from scheduling until a scrape succeeds again. Pages are fetched through a
:class:`~igw.gateway.scrape_client.PageGetter` (the gateway's: one kept-alive connection per pod);
with ``igw serve --workers`` only worker 0 scrapes and publishes each outcome to the other workers
(:mod:`igw.gateway.scrape_share`).

A page that is still served but no longer changes is *frozen*: when the page stays byte-identical
for ``staleThreshold`` after the gateway dispatched a request to the endpoint (a live model server's
counters move with every request it receives), its metrics are no longer trusted - the endpoint is
treated as stale from the page's last change, so it is excluded at most ``staleThreshold`` plus one
scrape interval after the first request it did not account for. It is logged once, shown as
``igw_endpoint_metrics_frozen`` and in ``/readyz``, and trusted again as soon as the page changes.

Each endpoint's context window (``max_model_len``) is read from its ``/v1/models`` (vLLM and SGLang
publish it per model) when its scraping starts and every :data:`MODEL_INFO_REFRESH_S` after that;
the ``context-length-filter`` uses it.

Missing signals are reported loudly and exactly once per (endpoint, family): a warning log naming
the family and what to do about it, the gauge ``igw_endpoint_signal_missing`` (via the endpoint
state) and the ``/readyz`` detail. ``/metrics`` answering 404 is itself reported as the missing
signal ``/metrics`` (an SGLang server started without ``--enable-metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Final, Protocol

import orjson
import xxhash

from igw.engines import ENGINES, MetricFamilies
from igw.gateway.endpoints import EndpointState
from igw.gateway.metrics_parser import parse_page
from igw.gateway.model_info import max_model_len
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_client import PageGetter
from igw.gateway.telemetry import GatewayMetrics

log = logging.getLogger("igw.gateway.scraper")

MAX_PAGE_BYTES: Final = 16 * 1024 * 1024
MAX_MODELS_BYTES: Final = 1024 * 1024
MODEL_INFO_REFRESH_S: Final = 60.0
"""How often an endpoint's ``/v1/models`` is read again (a restarted pod may have a new limit)."""
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
IMPUTED: Final = "routing treats this signal as missing (imputed, not zero)"
LABEL_ADVICE: Final = (
    "the label is absent or not an integer: prefix auto-tuning (block size, cache size) or LoRA slot "
    "accounting cannot use it"
)
_LORA_FAMILIES: Final = frozenset(e.families.lora for e in ENGINES.values() if e.families.lora is not None)

TaskKey = tuple[str, str]
ScrapePublisher = Callable[[str, EndpointState], None]
"""Called with (scheduler, endpoint state) after each scrape changed it (``--workers``: the leader)."""
RemoteUsage = Callable[[str, str], tuple[int, int]]
"""(scheduler, endpoint) -> other workers' (dispatches ever, requests in flight) there."""


class ScrapeService(Protocol):
    """What keeps endpoint states scraped: a :class:`Scraper`, or a ``--workers`` follower."""

    def sync(self) -> None:
        """Follow the pools' current endpoints (called when discovery or the config changes them)."""

    async def close(self) -> None: ...


def _no_remote_usage(scheduler: str, key: str) -> tuple[int, int]:
    return 0, 0


class Scraper:
    def __init__(
        self,
        *,
        runtime: Callable[[], GatewayRuntime],
        client: PageGetter,
        clock: Callable[[], float],
        metrics: GatewayMetrics,
        publish: ScrapePublisher | None = None,
        remote_usage: RemoteUsage = _no_remote_usage,
    ) -> None:
        """``publish`` and ``remote_usage``: the scrape-sharing hooks of ``igw serve --workers``
        (:mod:`igw.gateway.scrape_share`); a single process leaves them unset."""
        self._runtime = runtime
        self._publish = publish
        self._remote_usage = remote_usage
        self._client = client
        self._clock = clock
        self._metrics = metrics
        self._tasks: dict[TaskKey, asyncio.Task[None]] = {}
        self._reported: set[tuple[str, str, str]] = set()
        self._without_lora: dict[MetricFamilies, MetricFamilies] = {}

    def sync(self) -> None:
        """Start tasks for new endpoints and stop those of endpoints that left."""
        rt = self._runtime()
        wanted = {(name, key) for name, sr in rt.schedulers.items() for key in sr.pool.states}
        for tk in list(self._tasks):
            if tk not in wanted:
                self._tasks.pop(tk).cancel()
                if not any(other[1] == tk[1] for other in wanted):
                    self._client.forget(tk[1])
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
        models_read_at: float | None = None
        while True:
            found = self._lookup(scheduler, key)
            if found is None:
                return
            sr, state = found
            settings = self._runtime().settings
            started = self._clock()
            due = models_read_at is None or started - models_read_at >= MODEL_INFO_REFRESH_S
            if due and await self.read_model_info(sr, state, timeout_s=settings.scrape_timeout_s):
                models_read_at = started
            await self.scrape_once(sr, state, timeout_s=settings.scrape_timeout_s)
            elapsed = self._clock() - started
            await asyncio.sleep(max(0.0, settings.scrape_interval_s - elapsed))

    async def read_model_info(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> bool:
        """Learn ``max_model_len`` from ``GET /v1/models``; True when the page was read."""
        try:
            resp = await self._client.get(
                state.key, "/v1/models", timeout_s=timeout_s, max_bytes=MAX_MODELS_BYTES
            )
            if resp.status != 200:
                return resp.status == 404  # a server without the page: do not ask every scrape
            doc = orjson.loads(resp.body)
        except (TimeoutError, OSError, orjson.JSONDecodeError):
            return False
        limit = max_model_len(doc, model=sr.spec.model_name)
        if limit != state.max_model_len:
            log.info("endpoint %s (%s) context window: %s tokens", state.key, sr.spec.name, limit)
            state.max_model_len = limit
        return True

    async def scrape_once(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> None:
        """Scrape ``state``'s page once and store the outcome (and publish it, with ``--workers``)."""
        await self._scrape(sr, state, timeout_s=timeout_s)
        if self._publish is not None:
            self._publish(sr.spec.name, state)

    async def _scrape(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> None:
        try:
            resp = await self._client.get(
                state.key, "/metrics", timeout_s=timeout_s, max_bytes=MAX_PAGE_BYTES
            )
        except (TimeoutError, OSError) as exc:
            self._fail(sr, state, f"scrape failed: {type(exc).__name__}: {exc}".rstrip(": "))
            return
        if resp.status == 404:
            self._fail(sr, state, "GET /metrics answered 404", missing=frozenset({PAGE_MISSING}))
            return
        if resp.status != 200:
            self._fail(sr, state, f"GET /metrics answered HTTP {resp.status}")
            return
        raw = resp.body
        now = self._clock()
        # xxh3 rather than hash(): the page is a fresh bytes object each scrape, and CPython's SipHash
        # over a whole page costs as much as parsing it.
        digest = xxhash.xxh3_64_intdigest(raw)
        if self._frozen(sr, state, digest, now, stale_after_s=self._runtime().settings.stale_threshold_s):
            return
        parsed = parse_page(
            raw.decode("utf-8", errors="replace"), self._families(sr), state.page.family_starts
        )
        missing = parsed.missing
        if not sr.spec.lora_adapters:
            missing = frozenset(m for m in missing if m.split("{")[0] not in _LORA_FAMILIES)
        state.metrics = parsed.metrics
        state.kv_source = parsed.kv_source
        state.scraped_at = now
        if state.scrape_failing:
            log.info("endpoint %s (%s) scrapes again: back in scheduling", state.key, sr.spec.name)
        state.scrape_failing = False
        state.last_error = None
        self._set_missing(sr, state, missing)
        self._metrics.child(self._metrics.scrapes, "ok").inc()

    def _families(self, sr: SchedulerRuntime) -> MetricFamilies:
        """The families to read for ``sr``: without the LoRA family when no adapter request can reach
        this scheduler (no ``loraAdapters``, no bbr-managed adapter of its model), since nothing but
        adapter routing reads it and an absent family costs a scan of the whole page."""
        lora = sr.families.lora
        if lora is None or sr.spec.lora_adapters:
            return sr.families
        if sr.spec.model_name in self._runtime().router.bbr_adapters.values():
            return sr.families
        trimmed = self._without_lora.get(sr.families)
        if trimmed is None:
            trimmed = self._without_lora[sr.families] = dataclasses.replace(sr.families, lora=None)
        return trimmed

    def _frozen(
        self, sr: SchedulerRuntime, state: EndpointState, digest: int, now: float, *, stale_after_s: float
    ) -> bool:
        """Track page changes; True while the page is frozen (its metrics must not be refreshed)."""
        page = state.page
        remote_picks, remote_inflight = self._remote_usage(sr.spec.name, state.key)
        picks = state.picks + remote_picks
        if digest != page.digest:
            page.digest, page.changed_at, page.picks_seen, page.unseen_since = digest, now, picks, None
            if page.frozen:
                page.frozen = False
                log.info("endpoint %s (%s) metrics move again: back in scheduling", state.key, sr.spec.name)
            return False
        if page.frozen:
            return True
        if picks > page.picks_seen or state.inflight + remote_inflight > 0:
            if page.unseen_since is None:
                page.unseen_since = now
            elif now - page.unseen_since >= stale_after_s:
                page.frozen = True
                if page.changed_at is not None:
                    state.scraped_at = min(state.scraped_at or page.changed_at, page.changed_at)
                log.warning(
                    "endpoint %s (%s) excluded from scheduling: its /metrics page has not changed for "
                    "%.1fs while requests were sent to it (frozen metrics)",
                    state.key,
                    sr.spec.name,
                    now - (page.changed_at or now),
                )
                return True
        return False

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
                    ADVICE.get(family, LABEL_ADVICE if "{" in family else IMPUTED),
                )
        for family in state.missing - missing:
            log.info("endpoint %s now publishes %s", state.key, family)
        state.missing = missing
