"""Scrape every endpoint's ``/metrics`` on a fixed interval and keep its state current.

:meth:`Scraper.sync` starts and stops the scraping of each (scheduler, endpoint) as discovery changes
the pools. When each endpoint is scraped is :mod:`igw.gateway.scrape_pacing`'s: in groups that fire
together on a grid spread over the interval, and less often while the endpoint is idle (bounded by
``staleThreshold``; back to every interval at the first dispatch to it).

A group is scraped from its tick's one timer callback, without a task or a future per endpoint: in
the steady state (the endpoint's page mode known, its ``/v1/models`` not due, an idle kept-alive
connection to it) the callback sends each due member's pre-encoded request
(:meth:`~igw.gateway.scrape_client.ScrapeClient.start`) and each answer is read and stored from the
connection's ``data_received``; the members share the client's deadline timer, set to the group's
first tick after the scrape timeout (checked in that tick's event-loop turn: a wake-up of an idle
process costs more than the check), so a member that has not answered by then (a frozen pod that
keeps the connection open) is marked failing from that timer, and one whose pod closed mid-answer as
soon as the connection drops, as any failed scrape is, while the others land when they answer. Each
member then waits for its group's tick after the one it was sent at.
Everything else - the first scrape (connecting), the once-per-endpoint filter check, a pod without
``/metrics``, the ``/v1/models`` read, a client without :meth:`start` (``igw perf scrape``'s aiohttp
baseline) - runs as a task for that one scrape, which waits for the next tick the same way when it
is done.

Each successful scrape stores the parsed signals with the clock time it finished; a failed one
(timeout, refused connection, non-200, unreadable page) marks the endpoint failing, which excludes
it from scheduling until a scrape succeeds again. Pages are fetched through a
:class:`~igw.gateway.scrape_client.PageGetter` (the gateway's: one kept-alive connection per pod);
with ``igw serve --workers`` only worker 0 scrapes and publishes each outcome to the other workers
(:mod:`igw.gateway.scrape_share`).

A page that is still served but no longer changes is *frozen*: when the page stays byte-identical
for ``staleThreshold`` after the gateway dispatched a request to the endpoint (a live model server's
counters move with every request it receives; one it refused with an error head is not counted,
:meth:`~igw.gateway.endpoints.EndpointState.refused`), its metrics are no longer trusted - the endpoint is
treated as stale from the page's last change, so it is excluded at most ``staleThreshold`` plus one
scrape interval after the first request it did not account for. It is logged once, shown as
``igw_endpoint_metrics_frozen`` and in ``/readyz``, and trusted again as soon as the page changes.

A page byte-identical to the endpoint's previous one (an idle pod's filtered page: no token moved)
is not parsed again: its reading still holds, only the scrape time moves. A small page whose lines
differ from the previous one only in their values is read through that page's template
(:mod:`igw.gateway.page_template`), not parsed from scratch.

Each endpoint's context window (``max_model_len``) is read from its ``/v1/models`` (vLLM and SGLang
publish it per model) when its scraping starts and every :data:`MODEL_INFO_REFRESH_S` after that;
the ``context-length-filter`` uses it.

Where the engine supports it (the catalogue's ``name_filter``: vLLM, SGLang), the scraper asks for
the routing families alone (:mod:`igw.gateway.page_filter`): about 2 KB instead of a 50 KB
page. Each endpoint's first scrape checks the answer once: a page with samples that were not asked
for (the server ignores the filter) or one lacking routing families that the whole page carries (an
empty answer) switches that endpoint to the whole page; a failed scrape, or a filtered page whose
missing families change, makes the next scrape check again.

Missing signals are reported loudly and exactly once per (endpoint, family), forgotten when the
endpoint leaves the pool: a warning log naming
the family and what to do about it, the gauge ``igw_endpoint_signal_missing`` (via the endpoint
state) and the ``/readyz`` detail. ``/metrics`` answering 404 is itself reported as the missing
signal ``/metrics`` (an SGLang server started without ``--enable-metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Final, Protocol, cast

import orjson
import xxhash

from igw.engines import ENGINES, MetricFamilies
from igw.gateway.endpoints import EndpointState
from igw.gateway.metrics_parser import parse_page
from igw.gateway.model_info import lists_model, max_model_len
from igw.gateway.page_encoding import plain_body
from igw.gateway.page_filter import METRICS_PATH, filter_names, filter_path, unrequested_sample
from igw.gateway.page_template import PageReader
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_client import Landed, PageGetter, ScrapeRequestError, ScrapeResponse
from igw.gateway.scrape_pacing import IdlePacing, idle_gap_limit, next_scrape_due
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


class PageStarter(Protocol):
    """A :class:`PageGetter` that can also start a request answered through a callback
    (:meth:`igw.gateway.scrape_client.ScrapeClient.start`): the scraper's steady state. Told apart by
    its ``start`` attribute, not ``isinstance``: a ``@runtime_checkable`` protocol does not import
    compiled (mypyc/mypyc#909)."""

    def start(
        self,
        key: str,
        path: str,
        *,
        timeout_s: float,
        max_bytes: int,
        done: Landed,
        deadline: float | None = None,
    ) -> bool: ...


class ScrapeService(Protocol):
    """What keeps endpoint states scraped: a :class:`Scraper`, or a ``--workers`` follower."""

    def sync(self) -> None:
        """Follow the pools' current endpoints (called when discovery or the config changes them)."""

    async def close(self) -> None: ...


def _no_remote_usage(scheduler: str, key: str) -> tuple[int, int]:
    return 0, 0


@dataclasses.dataclass(frozen=True, slots=True)
class FilteredPage:
    """The endpoint honours the ``name[]`` filter; ``missing`` is what its filtered page lacked when
    that was checked (a change means the server changed: check again)."""

    missing: frozenset[str]


class _Member:
    """One (scheduler, endpoint) being scraped: its pace, its slot on the group grid, and what its
    scrape in flight (if any) was started with."""

    __slots__ = (
        "done",
        "flight",
        "gone",
        "idle",
        "interval",
        "key",
        "models_read_at",
        "pacing",
        "picks",
        "plan",
        "scheduler",
        "slot",
        "started",
        "state",
        "task",
        "tk",
    )

    def __init__(self, tk: TaskKey, slot: int) -> None:
        self.tk = tk
        self.scheduler, self.key = tk
        self.slot = slot
        self.pacing = IdlePacing()
        self.state: EndpointState | None = None
        """The endpoint state it was started for: another one at the same key is another pod."""
        self.models_read_at: float | None = None
        self.task: asyncio.Task[None] | None = None
        """The task of a scrape off the steady path (connect, filter check, ``/v1/models``)."""
        self.gone = False
        """Removed by :meth:`Scraper.sync` (or the scraper closed): nothing more is done for it."""
        self.idle = False
        """Waiting on the slower idle pace: checked at each tick, scraped only when due."""
        self.interval = 0.0
        self.done: Landed = _no_landing
        """Bound once to this member: the callback of its steady-path scrapes."""
        self.started = 0.0
        self.picks = 0
        self.flight: tuple[SchedulerRuntime, EndpointState, MetricFamilies, float] | None = None
        """What the steady-path scrape in flight reads the answer for, and the stale threshold."""
        self.plan: tuple[SchedulerRuntime, object, MetricFamilies, str | None] | None = None
        """(scheduler runtime, model router) -> the families to read and the filtered path: both
        change only when one of those objects is replaced (a reload, new bbr adapters)."""


def _no_landing(status: int, body: bytes, error: BaseException | None) -> None:
    """A member's ``done`` before the scraper binds it."""


WHOLE_PAGE: Final = "whole page"
"""The endpoint is scraped without the filter (it ignores it, or its filtered answer lacks families)."""
PAGE_ABSENT: Final = "page absent"
"""The endpoint answered 404 to both the filtered and the whole page: it is asked for the whole page
alone (one request per scrape, not two) until it has one, and then the filter is checked again."""
PageMode = FilteredPage | str


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
        name_filter: bool = True,
        idle_pacing: bool = True,
    ) -> None:
        """``publish`` and ``remote_usage``: the scrape-sharing hooks of ``igw serve --workers``
        (:mod:`igw.gateway.scrape_share`); a single process leaves them unset. ``name_filter=False``
        always reads whole pages, ``idle_pacing=False`` scrapes idle endpoints every interval too
        (``igw perf scrape`` measures each against the gateway's way)."""
        self._name_filter = name_filter
        self._idle_pacing = idle_pacing
        self._modes: dict[TaskKey, PageMode] = {}
        self._paces: dict[TaskKey, IdlePacing] = {}
        self._readers: dict[TaskKey, PageReader] = {}
        self._ticks: dict[float, tuple[asyncio.TimerHandle, list[_Member]]] = {}
        """Due time -> the timer of the group tick due then, and its waiting members."""
        self._read: dict[TaskKey, tuple[int, MetricFamilies, EndpointState, frozenset[str]]] = {}
        """The digest of the page last parsed per endpoint, what it was read for, and its missing."""
        self._slots = itertools.count()
        self._runtime = runtime
        self._publish = publish
        self._remote_usage = remote_usage
        self._client = client
        self._starter = cast(PageStarter, client) if callable(getattr(client, "start", None)) else None
        self._clock = clock
        self._metrics = metrics
        self._scrapes_ok = metrics.child(metrics.scrapes, "ok")
        """Batched (:meth:`GatewayMetrics.child`): a plain addition per scrape, summed when collected."""
        self._members: dict[TaskKey, _Member] = {}
        self._unlisted: set[TaskKey] = set()
        """(scheduler, endpoint) whose ``/v1/models`` does not list the scheduler's model (warned once)."""
        self._reported: dict[TaskKey, set[str]] = {}
        """(scheduler, endpoint) -> the missing families already warned about (once each); dropped
        with the endpoint, so pod IP churn does not grow it (it kept every address ever seen until
        session s39)."""
        self._without_lora: dict[MetricFamilies, MetricFamilies] = {}
        self._event_loop: asyncio.AbstractEventLoop | None = None

    def sync(self) -> None:
        """Start scraping new endpoints and stop scraping those that left.

        An address whose endpoint state was replaced (another pod behind a reused IP:
        :meth:`~igw.gateway.endpoints.EndpointPool.replace`) is started afresh: the old pod's page
        mode, parsed page, ``/v1/models`` reading time, "model not listed" flag, reported missing
        signals and kept-alive connections are not the new pod's (its context window stayed
        unknown or wrong until the next ``/v1/models`` read, up to a minute later)."""
        rt = self._runtime()
        wanted = {
            (name, key): state for name, sr in rt.schedulers.items() for key, state in sr.pool.states.items()
        }
        for tk, member in list(self._members.items()):
            state = wanted.get(tk)
            if state is member.state:
                continue
            self._drop(self._members.pop(tk))
            self._modes.pop(tk, None)
            self._read.pop(tk, None)
            self._paces.pop(tk, None)
            self._unlisted.discard(tk)
            self._readers.pop(tk, None)
            self._reported.pop(tk, None)  # gone, or another pod at the address: warned afresh
            # another pod at this address (a new endpoint), or no scheduler scrapes the address now
            if state is not None or not any(other[1] == tk[1] for other in wanted):
                self._client.forget(tk[1])
        for tk in sorted(wanted.keys() - self._members.keys()):
            member = self._members[tk] = _Member(tk, next(self._slots))
            member.state = wanted[tk]
            member.done = functools.partial(self._landed, member)
            self._paces[tk] = member.pacing
            self._run(member)

    @staticmethod
    def _drop(member: _Member) -> None:
        member.gone = True
        if member.task is not None:
            member.task.cancel()

    async def close(self) -> None:
        members = list(self._members.values())
        self._members.clear()
        for timer, _ in self._ticks.values():
            timer.cancel()
        self._ticks.clear()
        tasks = [m.task for m in members if m.task is not None]
        for member in members:
            self._drop(member)
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    def _run(
        self,
        member: _Member,
        rt: GatewayRuntime | None = None,
        tick: float | None = None,
        deadline: float | None = None,
    ) -> None:
        """``member``'s turn at its group's tick: scrape it when its pace says so (on the steady path
        from here, else in a task), or wait for the next tick. A tick passes what its members share
        (the runtime, the loop time, the deadline of the requests it sends), read once per group."""
        if rt is None:
            rt = self._runtime()
        sr = rt.schedulers.get(member.scheduler)
        state = None if sr is None else sr.pool.states.get(member.key)
        if sr is None or state is None:
            return  # no longer in the pools: the next sync drops it
        settings = rt.settings
        interval = member.interval = settings.scrape_interval_s
        remote = self._remote_usage
        remote_picks, remote_inflight = (0, 0) if remote is _no_remote_usage else remote(*member.tk)
        picks = state.picks + remote_picks
        if tick is None:
            tick = self._loop().time()
        pacing = member.pacing
        if pacing.gap > interval and not pacing.due(
            tick, picks=picks, inflight=state.inflight + remote_inflight, interval_s=interval
        ):
            self._wait(member)
            return
        member.started, member.picks = tick, picks
        started = self._clock()
        models_due = member.models_read_at is None or started - member.models_read_at >= MODEL_INFO_REFRESH_S
        starter = self._starter
        if starter is not None and not models_due:
            plan = member.plan
            if plan is None or plan[0] is not sr or plan[1] is not rt.router:
                families = self._families(sr)
                plan = member.plan = (sr, rt.router, families, self._filter_path(families))
            path = self._steady_path(member.tk, plan[3])
            if path is not None:
                member.flight = (sr, state, plan[2], settings.stale_threshold_s)
                timeout_s = settings.scrape_timeout_s
                if deadline is None:
                    deadline = self._deadline(tick, timeout_s, interval, member.slot)
                if starter.start(
                    member.key,
                    path,
                    timeout_s=timeout_s,
                    max_bytes=MAX_PAGE_BYTES,
                    done=member.done,
                    deadline=deadline,
                ):
                    return
        member.task = asyncio.create_task(
            self._scrape_in_task(member, sr, state, started, models_due, settings.scrape_timeout_s),
            name=f"scrape {member.scheduler} {member.key}",
        )

    async def _scrape_in_task(
        self,
        member: _Member,
        sr: SchedulerRuntime,
        state: EndpointState,
        started: float,
        models_due: bool,
        timeout_s: float,
    ) -> None:
        """A scrape off the steady path (see the module docstring)."""
        if models_due and await self.read_model_info(sr, state, timeout_s=timeout_s):
            member.models_read_at = started
        quiet = await self.scrape_once(sr, state, timeout_s=timeout_s)
        member.task = None
        self._scraped(member, sr, state, quiet)

    def _landed(self, member: _Member, status: int, body: bytes, error: BaseException | None) -> None:
        """The answer (or failure) of ``member``'s steady-path scrape, called by the client."""
        flight = member.flight
        if member.gone or flight is None:
            return
        sr, state, families, stale_after_s = flight
        try:
            if error is None:
                quiet = self._settle(sr, state, families, status, body, stale_after_s)
            else:
                quiet = self._failed_fetch(sr, state, error)
            if self._publish is not None:
                self._publish(sr.spec.name, state)
        except Exception:  # called from the client's I/O callback: never lose the endpoint's schedule
            log.exception("endpoint %s (%s): storing the scrape failed", state.key, sr.spec.name)
            quiet = False
        self._scraped(member, sr, state, quiet)

    def _scraped(self, member: _Member, sr: SchedulerRuntime, state: EndpointState, quiet: bool) -> None:
        """Record the scrape in ``member``'s pace and wait for its group's next tick."""
        if member.gone:
            return
        interval = member.interval
        if quiet and self._idle_pacing:
            remote_inflight = self._remote_usage(member.scheduler, member.key)[1]
            quiet = state.inflight + remote_inflight == 0
        member.pacing.scraped(
            member.started,
            picks=member.picks,
            quiet=quiet and self._idle_pacing,
            interval_s=interval,
            # the limit matters only to a quiet scrape (any other one sets the gap to the interval)
            limit_s=idle_gap_limit(interval, sr.scheduler.settings.stale_threshold_s) if quiet else interval,
        )
        self._wait(member)

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop, looked up once (``asyncio.get_running_loop`` asks the kernel for
        the process id on every call, to notice a fork)."""
        loop = self._event_loop
        if loop is None:
            loop = self._event_loop = asyncio.get_running_loop()
        return loop

    def _wait(self, member: _Member) -> None:
        """Wait for the member's group's next tick after the one its last scrape started at."""
        loop = self._loop()
        member.idle = member.pacing.gap > member.interval
        # not from the loop's clock alone: it runs in whole milliseconds and a timer may fire up to
        # one before its due time, so an answer landing in that millisecond would find the tick it
        # was sent at still ahead and be scraped twice in one tick
        after = max(loop.time(), member.started)
        self._enqueue(loop, next_scrape_due(after, member.interval, member.slot, len(self._members)), member)

    def _enqueue(self, loop: asyncio.AbstractEventLoop, due: float, member: _Member) -> None:
        """Wait for the tick at ``due``: the members of a group share one timer."""
        waiting = self._ticks.get(due)
        if waiting is None:
            waiting = self._ticks[due] = (loop.call_at(due, self._wake, loop, due), [])
        waiting[1].append(member)

    def _deadline(self, tick: float, timeout_s: float, interval_s: float, slot: int) -> float:
        """When a request sent at ``tick`` by the member in ``slot`` fails unanswered: its group's first
        tick after ``timeout_s`` (up to one interval late), so that the client checks it in that
        tick's event-loop turn instead of waking the process once more for it."""
        return next_scrape_due(tick + timeout_s, interval_s, slot, len(self._members))

    def _wake(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        """The tick at ``due``: scrape its members, except idle ones not due yet, which wait for their
        group's next tick (checking them here costs far less than a scrape)."""
        members = self._ticks.pop(due)[1]
        rt = self._runtime()
        tick = max(loop.time(), due)  # the loop's millisecond clock may still read just before ``due``
        settings = rt.settings
        # the members of one tick are one group: their requests share a deadline
        deadline = self._deadline(
            tick, settings.scrape_timeout_s, settings.scrape_interval_s, members[0].slot
        )
        for member in members:
            if member.gone:
                continue
            if not member.idle or self._idle_ends(member, due, rt):
                self._run(member, rt, tick, deadline)
            else:
                after = due + member.interval / 4  # past this tick, well before the next
                self._enqueue(
                    loop, next_scrape_due(after, member.interval, member.slot, len(self._members)), member
                )

    def _idle_ends(self, member: _Member, now: float, rt: GatewayRuntime) -> bool:
        """True when the idle ``member`` is due at the tick ``now`` (or gone from the pools)."""
        sr = rt.schedulers.get(member.scheduler)
        state = None if sr is None else sr.pool.states.get(member.key)
        if state is None:
            return True
        remote = self._remote_usage
        remote_picks, remote_inflight = (0, 0) if remote is _no_remote_usage else remote(*member.tk)
        return member.pacing.due(
            now,
            picks=state.picks + remote_picks,
            inflight=state.inflight + remote_inflight,
            interval_s=member.interval,
        )

    def _filter_path(self, families: MetricFamilies) -> str | None:
        """The filtered page's path for ``families``, or ``None`` where the whole page is read."""
        return filter_path(families) if self._name_filter else None

    def _steady_path(self, tk: TaskKey, filtered: str | None) -> str | None:
        """The path to ask ``tk`` for on the steady path (``filtered``: its filtered page's, if
        any), or ``None`` while its page mode is not settled (first scrape, filter check pending,
        page absent)."""
        if filtered is None:
            return METRICS_PATH
        mode = self._modes.get(tk)
        if mode == WHOLE_PAGE:
            return METRICS_PATH
        return filtered if isinstance(mode, FilteredPage) else None

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
        listed = lists_model(doc, model=sr.spec.model_name)
        unlisted = (sr.spec.name, state.key) in self._unlisted
        if listed is False and not unlisted:
            self._unlisted.add((sr.spec.name, state.key))
            log.warning(
                "endpoint %s (%s) does not list model %r in GET /v1/models: its requests will be answered "
                "404 (check the model server's --served-model-name against spec.schedulers[].modelName); "
                "outlier detection ejects it after failed requests in a row",
                state.key,
                sr.spec.name,
                sr.spec.model_name,
            )
        elif listed and unlisted:
            self._unlisted.discard((sr.spec.name, state.key))
            log.info("endpoint %s (%s) lists model %r again", state.key, sr.spec.name, sr.spec.model_name)
        limit = max_model_len(doc, model=sr.spec.model_name)
        if limit != state.max_model_len:
            log.info("endpoint %s (%s) context window: %s tokens", state.key, sr.spec.name, limit)
            state.max_model_len = limit
        return True

    async def scrape_once(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> bool:
        """Scrape ``state``'s page once and store the outcome (and publish it, with ``--workers``).

        True when the scrape found the endpoint quiet: the same page as the scrape before, an empty
        queue (what :class:`~igw.gateway.scrape_pacing.IdlePacing` needs to know)."""
        quiet = await self._scrape(sr, state, timeout_s=timeout_s)
        if self._publish is not None:
            self._publish(sr.spec.name, state)
        return quiet

    def pace(self, scheduler: str, key: str) -> IdlePacing | None:
        """When ``key`` is next scraped for ``scheduler`` (``None`` before its scraping started)."""
        return self._paces.get((scheduler, key))

    def page_mode(self, scheduler: str, key: str) -> PageMode | None:
        """How ``key`` is scraped for ``scheduler``: filtered, the whole page, or ``None`` (not known
        yet, or the engine has no filter)."""
        return self._modes.get((scheduler, key))

    async def _get(self, key: str, path: str, timeout_s: float) -> ScrapeResponse:
        return await self._client.get(key, path, timeout_s=timeout_s, max_bytes=MAX_PAGE_BYTES)

    async def _fetch(
        self, sr: SchedulerRuntime, state: EndpointState, families: MetricFamilies, timeout_s: float
    ) -> ScrapeResponse:
        """The page to parse: filtered where the engine supports it and the endpoint honours it."""
        path = filter_path(families) if self._name_filter else None
        tk = (sr.spec.name, state.key)
        mode = self._modes.get(tk)
        if path is None or mode == WHOLE_PAGE:
            return await self._get(state.key, METRICS_PATH, timeout_s)
        if mode == PAGE_ABSENT:
            whole = await self._get(state.key, METRICS_PATH, timeout_s)
            if whole.status != 404:
                del self._modes[tk]  # the page appeared (or something else answered): check again
            return whole
        resp = await self._get(state.key, path, timeout_s)
        if mode is not None:
            return resp
        return await self._check_filter(sr, state, families, resp, timeout_s)

    async def _check_filter(
        self,
        sr: SchedulerRuntime,
        state: EndpointState,
        families: MetricFamilies,
        filtered: ScrapeResponse,
        timeout_s: float,
    ) -> ScrapeResponse:
        """Decide once per endpoint whether its filtered answer can replace the whole page."""
        tk = (sr.spec.name, state.key)
        missing: frozenset[str] | None = None
        if filtered.status == 200:
            text = plain_body(filtered.body, max_bytes=MAX_PAGE_BYTES).decode("utf-8", errors="replace")
            stray = unrequested_sample(text, frozenset(filter_names(families)))
            if stray is not None:
                log.info(
                    "endpoint %s (%s) ignores the name[] filter of /metrics (its answer has %s): "
                    "scraping the whole page",
                    state.key,
                    sr.spec.name,
                    stray,
                )
                self._switch(state, tk, WHOLE_PAGE)
                return filtered
            missing = self._reportable(sr, parse_page(text, families).missing)
            if not missing:
                self._switch(state, tk, FilteredPage(missing))
                return filtered
        whole = await self._get(state.key, METRICS_PATH, timeout_s)
        if whole.status == 404 and filtered.status == 404:
            self._modes[tk] = PAGE_ABSENT
            return whole
        if whole.status != 200:
            return whole  # nothing learnt: the next scrape checks again
        if missing is not None:
            whole_text = plain_body(whole.body, max_bytes=MAX_PAGE_BYTES).decode("utf-8", errors="replace")
            whole_missing = self._reportable(sr, parse_page(whole_text, families).missing)
            if whole_missing == missing:  # the filter hides nothing the page has
                self._switch(state, tk, FilteredPage(missing))
                return filtered
        log.info(
            "endpoint %s (%s) answered /metrics?name[]=... with HTTP %d%s: scraping the whole page",
            state.key,
            sr.spec.name,
            filtered.status,
            "" if missing is None else " without " + ", ".join(sorted(missing)),
        )
        self._switch(state, tk, WHOLE_PAGE)
        return whole

    def _switch(self, state: EndpointState, tk: TaskKey, mode: PageMode) -> None:
        self._modes[tk] = mode
        state.page.family_starts.clear()  # positions on the other kind of page are no use

    def _reportable(self, sr: SchedulerRuntime, missing: frozenset[str]) -> frozenset[str]:
        """``missing`` without the LoRA family where the scheduler has no ``loraAdapters``."""
        if not missing or sr.spec.lora_adapters:
            return missing
        return frozenset(m for m in missing if m.split("{")[0] not in _LORA_FAMILIES)

    async def _scrape(self, sr: SchedulerRuntime, state: EndpointState, *, timeout_s: float) -> bool:
        """One scrape (see :meth:`scrape_once`); True when it found the endpoint quiet."""
        families = self._families(sr)
        try:
            resp = await self._fetch(sr, state, families, timeout_s)
        except (TimeoutError, OSError) as exc:
            return self._failed_fetch(sr, state, exc)
        stale_after_s = self._runtime().settings.stale_threshold_s
        return self._settle(sr, state, families, resp.status, resp.body, stale_after_s)

    def _failed_fetch(self, sr: SchedulerRuntime, state: EndpointState, exc: BaseException) -> bool:
        """No complete answer (timeout, refused, reset, malformed): the endpoint is failing."""
        self._fail(sr, state, f"scrape failed: {type(exc).__name__}: {exc}".rstrip(": "))
        return False

    def _settle(
        self,
        sr: SchedulerRuntime,
        state: EndpointState,
        families: MetricFamilies,
        status: int,
        raw: bytes,
        stale_after_s: float,
    ) -> bool:
        """Store the answer ``status``/``raw`` of one scrape; True when it found the endpoint quiet."""
        if status == 404:
            absent = self._modes.get((sr.spec.name, state.key)) == PAGE_ABSENT
            self._fail(
                sr, state, "GET /metrics answered 404", missing=frozenset({PAGE_MISSING}), keep_mode=absent
            )
            return False
        if status != 200:
            self._fail(sr, state, f"GET /metrics answered HTTP {status}")
            return False
        try:
            raw = plain_body(raw, max_bytes=MAX_PAGE_BYTES)
        except ScrapeRequestError as exc:
            return self._failed_fetch(sr, state, exc)
        now = self._clock()
        # xxh3 rather than hash(): the page is a fresh bytes object each scrape, and CPython's SipHash
        # over a whole page costs as much as parsing it.
        digest = xxhash.xxh3_64_intdigest(raw)
        if self._frozen(sr, state, digest, now, stale_after_s=stale_after_s):
            return False
        tk = (sr.spec.name, state.key)
        read = self._read.get(tk)
        if read is not None and read[0] == digest and read[1] is families and read[2] is state:
            unchanged, missing = True, read[3]  # the same page as last time (an idle pod): still holds
        else:
            unchanged = False
            reader = self._readers.get(tk)
            if reader is None:
                reader = self._readers[tk] = PageReader()
            parsed = reader.read(raw.decode("utf-8", errors="replace"), families, state.page.family_starts)
            missing = self._reportable(sr, parsed.missing)
            mode = self._modes.get(tk)
            if isinstance(mode, FilteredPage) and mode.missing != missing:
                del self._modes[tk]  # the server changed what it publishes: check the filter again
            # only fields that changed are written: each write of a view field drops the cached view
            if parsed.metrics is not state.metrics:
                state.metrics = parsed.metrics
            if parsed.kv_source != state.kv_source:
                state.kv_source = parsed.kv_source
            self._read[tk] = (digest, families, state, missing)
        state.scraped_at = now
        if state.scrape_failing:
            log.info("endpoint %s (%s) scrapes again: back in scheduling", state.key, sr.spec.name)
            state.scrape_failing = False
        if state.last_error is not None:
            state.last_error = None
        self._set_missing(sr, state, missing)
        self._scrapes_ok.inc()
        metrics = state.metrics
        return unchanged and not (metrics is not None and metrics.waiting)

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
        remote = self._remote_usage
        remote_picks, remote_inflight = (
            (0, 0) if remote is _no_remote_usage else remote(sr.spec.name, state.key)
        )
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
        self,
        sr: SchedulerRuntime,
        state: EndpointState,
        error: str,
        *,
        missing: frozenset[str] = frozenset(),
        keep_mode: bool = False,
    ) -> None:
        self._metrics.child(self._metrics.scrapes, "error").inc()
        if not keep_mode:
            self._modes.pop((sr.spec.name, state.key), None)  # a restarted server may answer differently
        if not state.scrape_failing:
            log.warning("endpoint %s (%s) excluded from scheduling: %s", state.key, sr.spec.name, error)
        state.scrape_failing = True
        state.last_error = error
        if missing:
            self._set_missing(sr, state, state.missing | missing)

    def _set_missing(self, sr: SchedulerRuntime, state: EndpointState, missing: frozenset[str]) -> None:
        if missing == state.missing:
            return  # as on the scrape before (almost always)
        for family in missing - state.missing:
            reported = self._reported.setdefault((sr.spec.name, state.key), set())
            if family not in reported:
                reported.add(family)
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
