"""A live, OpenAI-compatible model server (vLLM or SGLang flavour) wrapping one :class:`Engine`.

Cheap on CPU by construction: the engine is stepped by one asyncio task per pod that sleeps exactly
until the end of the current step (virtual step time x ``time_scale``) - no polling, no busy loop - so a
single event loop can host many pods. Requests join the engine's waiting queue when they arrive and
are scheduled at the next step boundary (continuous batching). Client disconnect cancels the handler
(aiohttp ``handler_cancellation``), which aborts the request and frees its KV blocks at once.

Faults (``FaultSpec``) are applied per pod, at start or at run time through :meth:`LivePod.inject`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web

from igw import engines
from igw.sim import messages_api as message_events
from igw.sim.engine import Engine, EngineRequest, RequestRejected
from igw.sim.messages_api import error_response as messages_error
from igw.sim.messages_api import message_object, parse_messages_request
from igw.sim.metrics_page import (
    CONTENT_TYPE,
    NAME_FILTER,
    PageContext,
    SchedulerRank,
    render_sglang,
    render_tgi,
    render_vllm,
    restrict_page,
)
from igw.sim.openai_api import (
    MAX_BODY_BYTES,
    ApiError,
    ParsedRequest,
    json_response,
    parse_request,
    read_json,
    sse_event,
    usage,
)
from igw.sim.pod_stats import PodStats
from igw.sim.responses_api import (
    UNFINISHED,
    ResponseEvents,
    ResponsesRequest,
    ResponseStore,
    StoredResponse,
    created_now,
    parse_responses_request,
    response_object,
)
from igw.sim.spec import EngineKind, FaultKind, FaultSpec, PodSpec, StreamCut
from igw.sim.tokens import (
    count_tokens,
    generated_text,
    output_token_text,
    request_block_hashes,
    token_ids,
)

TIME_SCALE_HEADER: Final = "x-igw-sim-time-scale"
RESYNC_WALL_S: Final = 0.05
"""A pod whose step ends more than this (wall seconds) late restarts its virtual clock from now."""
SGLANG_UNSET_PRIORITY: Final = 2**63 - 1
"""SGLang's priority for a request without one under priority scheduling (``sys.maxsize``, as the
least important end: negated when higher values come first)."""
SGLANG_PRIORITY_DISABLED: Final = (
    "Using priority is disabled for this server. Please send a new request without a priority."
)
"""SGLang's abort message for a request with a priority on a server without priority scheduling."""
TRACE_CONTEXTS_KEPT: Final = 256
"""Received trace contexts a pod remembers (:attr:`LivePod.trace_contexts`)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class PodArrival:
    """One request as the pod took it in: its engine request (whose timings fill in as it runs), the
    pod's batch and queue just before it joined (:attr:`LivePod.arrivals`), and when its first
    token was written.

    ``taken_s`` and ``first_token_s`` are read from the wall clock (:meth:`LivePod.vnow`), not the
    engine's virtual clock: that one stays continuous across timer overshoot, so it can run up to
    :data:`RESYNC_WALL_S` behind the wall (never before the newest arrival). Step durations on the
    engine's clock are exact.
    """

    request: EngineRequest
    running: int
    waiting: int
    taken_s: float
    first_token_s: float | None = None
    """When the first token was written to the client (streamed answers only)."""


class _Rank:
    """One scheduler of the pod (one SGLang data-parallel rank; the whole pod when ``dp_size`` is 1):
    its engine, its step loop's clock and wake-ups, and its scheduler-level statistics.

    Each rank is a full replica of the preset with its own waiting queue, running batch and KV pool,
    stepped by its own driver task, as SGLang runs one scheduler process per ``--dp-size`` rank.
    """

    __slots__ = (
        "engine",
        "gen_mark",
        "gen_throughput",
        "index",
        "last_arrival",
        "stats",
        "step_wait",
        "vclock",
        "wake",
        "was_busy",
    )

    def __init__(self, *, index: int, engine: Engine, stats: PodStats) -> None:
        self.index = index
        self.engine = engine
        self.stats = stats
        """Scheduler-level statistics (queue time, stages, the last prefill's hit rate): the pod's
        own :class:`PodStats` when the pod has one rank, a rank-private one otherwise."""
        self.vclock = 0.0
        self.last_arrival = 0.0
        """Virtual time the newest request joined this rank: no step may start before it."""
        self.wake = asyncio.Event()
        self.step_wait: asyncio.Future[None] | None = None
        """The wake-up of the step the driver is sleeping through (a fault change resolves it early)."""
        self.was_busy = False
        self.gen_mark = (0.0, 0)
        self.gen_throughput = 0.0


class _Stream:
    """Token events of one request, pushed by the driver and consumed by its handler."""

    __slots__ = ("arrival", "done", "engine", "queue", "req")

    def __init__(self, req: EngineRequest, engine: Engine, arrival: PodArrival | None = None) -> None:
        self.req = req
        self.engine = engine
        """The engine (data-parallel rank) running the request."""
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.done = False
        self.arrival = arrival


class LivePod:
    """One simulated model-server pod on a real loopback socket."""

    def __init__(self, *, spec: PodSpec, seed: int, time_scale: float, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.host = host
        self.time_scale = time_scale
        self.preset = spec.resolved_preset()
        self._rng = random.Random(seed)
        self.stats = PodStats(max_model_len=self.preset.max_model_len)
        self.ranks = [
            _Rank(
                index=i,
                engine=Engine(
                    preset=self.preset,
                    # rank 0 draws what a single-rank pod always drew (same seed, same records)
                    rng=random.Random((seed ^ 0x5EED) + i),
                    jitter_sigma=spec.jitter_sigma,
                    prefix_caching=spec.prefix_caching,
                    max_loras=spec.effective_max_loras,
                    priority=spec.priority_scheduling(),
                ),
                stats=self.stats if spec.dp_size == 1 else PodStats(max_model_len=self.preset.max_model_len),
            )
            for i in range(spec.dp_size)
        ]
        """The pod's schedulers: one, or one per SGLang data-parallel rank (``dp_size``)."""
        self._next_rank = 0
        """The round-robin DP controller's next rank (SGLang's default ``--load-balance-method``)."""
        self.port = spec.port
        self.faults: dict[FaultKind, FaultSpec] = {}
        self._created_unix = time.time()
        self._ctx = PageContext(
            model_name=spec.model_name,
            version=spec.version,
            max_model_len=self.preset.max_model_len,
            gpu_memory_utilization=self.preset.gpu_memory_utilization,
            prefix_caching=spec.prefix_caching,
            created_unix=self._created_unix,
            max_lora=spec.effective_max_loras,
        )
        self._streams: dict[str, _Stream] = {}
        self._active: dict[int, web.Request] = {}
        self._ids = itertools.count()
        self._unhang = asyncio.Event()
        self._unhang.set()
        self._frozen_page: str | None = None
        self.responses = ResponseStore()
        """The Responses API responses this pod stored (lost when it is killed, as a restart loses them)."""
        self._background: set[asyncio.Task[None]] = set()
        self._page_cache: tuple[tuple[int | float, ...], str] | None = None
        self._restricted_cache: tuple[str, tuple[str, ...], str] | None = None
        self._fault_tasks: list[asyncio.Task[None]] = []
        self._windows: list[tuple[FaultKind, asyncio.Task[None]]] = []
        """Run-time fault windows still pending (:meth:`schedule`), by kind."""
        self._t0 = 0.0
        self._drivers: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.killed = False
        self.lagged_steps = 0
        """Steps that started more than RESYNC_WALL_S late (the host is too slow for this time scale)."""
        self.max_lag_s = 0.0
        self.trace_contexts: deque[tuple[str, str | None]] = deque(maxlen=TRACE_CONTEXTS_KEPT)
        """The W3C ``(traceparent, tracestate)`` of the latest requests that carried one, oldest
        first: lets a test check that the gateway propagates trace context to model servers."""
        self.arrivals: dict[str, PodArrival] | None = None
        """Off (``None``) unless a benchmark sets a dict: then every request is recorded under its
        ``X-Request-Id`` (else the pod's own id), so a client's slow request can be split into the
        time it queued at the pod and the time its first step took."""

    # ------------------------------------------------------------------ lifecycle
    @property
    def engine(self) -> Engine:
        """The pod's engine (the first data-parallel rank's when it runs several: see :attr:`ranks`)."""
        return self.ranks[0].engine

    @property
    def key(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def catalogue_entry(self) -> engines.Engine:
        """What the engine catalogue says about the impersonated engine (its HTTP paths, names)."""
        return engines.engine(self.spec.engine.value)

    def vnow(self) -> float:
        """Virtual (GPU) seconds since start: wall seconds / time_scale."""
        return (asyncio.get_running_loop().time() - self._t0) / self.time_scale

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        entry = self.catalogue_entry
        app.router.add_get(entry.model_info_path, self._models)
        app.router.add_get(entry.readiness_path, self._health)
        app.router.add_get(entry.metrics_path, self._metrics)
        if self.spec.engine is EngineKind.VLLM:
            # vLLM's token endpoints: vllm-router's cache_aware matches prefixes on the ids they return.
            app.router.add_post("/tokenize", self._tokenize)
            app.router.add_post("/v1/completions/render", self._render_completion)
            # vLLM's Responses API, its store in this process's memory
            app.router.add_post("/v1/responses", self._responses)
            app.router.add_get("/v1/responses/{response_id}", self._stored_response)
            app.router.add_post("/v1/responses/{response_id}/cancel", self._cancel_response)
            # vLLM's Anthropic Messages API (0.11.1 on)
            app.router.add_post("/v1/messages", self._messages)
            app.router.add_post("/v1/messages/count_tokens", self._count_message_tokens)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await self._listen()
        self._drivers = [
            asyncio.create_task(self._drive(rank), name=f"sim-pod-{self.spec.name}-dp{rank.index}")
            for rank in self.ranks
        ]
        for fault in self.spec.faults:
            if fault.start_s == 0:
                await self.inject(fault)
            if fault.start_s > 0 or fault.end_s is not None:
                self._fault_tasks.append(asyncio.create_task(self._fault_window(fault)))

    async def _fault_window(self, fault: FaultSpec) -> None:
        """Start and/or end a fault at its simulated times from now (mapped through the time scale)."""
        if fault.start_s > 0:
            await asyncio.sleep(fault.start_s * self.time_scale)
            await self.inject(fault)
        if fault.end_s is not None:
            await asyncio.sleep((fault.end_s - fault.start_s) * self.time_scale)
            await self._end(fault.kind)

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await self._site.start()
        server = self._site._server
        if self.port == 0 and server is not None:
            sockets = getattr(server, "sockets", None) or []
            self.port = sockets[0].getsockname()[1]
        self.killed = False

    async def stop(self) -> None:
        for task in self._fault_tasks:
            task.cancel()
        self._cancel_windows(None)
        self._forget_background()
        self._unhang.set()
        for driver in self._drivers:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
        self._drivers = []
        self._cut_all(StreamCut.FIN)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ faults
    async def schedule(self, fault: FaultSpec) -> None:
        """Inject ``fault`` at run time, honouring its window counted from now: it starts
        ``start_s`` simulated seconds from now and, with an ``end_s``, ends by itself ``end_s``
        seconds from now. Replaces a fault of the same kind and any window of that kind still pending.

        (The admin API and :meth:`RunningFleet.inject` call this; :meth:`inject` alone started the
        fault at once and never ended it, whatever window it carried.)
        """
        self._cancel_windows(fault.kind)
        if fault.start_s == 0:
            await self.inject(fault)
        if fault.start_s > 0 or fault.end_s is not None:
            task = asyncio.create_task(self._fault_window(fault))
            self._windows.append((fault.kind, task))
            task.add_done_callback(lambda t: self._windows.remove((fault.kind, t)))

    def _cancel_windows(self, kind: FaultKind | None) -> None:
        """Cancel the pending run-time windows of ``kind`` (all kinds for ``None``)."""
        for k, task in list(self._windows):
            if kind is None or k is kind:
                task.cancel()

    async def inject(self, fault: FaultSpec) -> None:
        """Start a fault now (replacing one of the same kind); its window is not looked at."""
        self.faults[fault.kind] = fault
        if fault.kind is FaultKind.SLOW:
            self._set_slowdown(fault.factor)
        elif fault.kind is FaultKind.HANG:
            self._unhang.clear()
        elif fault.kind is FaultKind.FREEZE_METRICS:
            self._frozen_page = self._render()
        elif fault.kind is FaultKind.KILL and not self.killed:
            self.killed = True
            if self._site is not None:
                await self._site.stop()
                self._site = None
            self._cut_all(StreamCut.RST)
            self._close_idle_connections()
            for rank in self.ranks:
                rank.engine.pool.reset_prefix_cache()  # a restarted server starts with an empty cache
            self._forget_background()
            self.responses = ResponseStore()  # ... and an empty response store

    async def clear(self, kind: FaultKind | None = None) -> None:
        """End one fault (or all) and cancel its pending run-time windows; a killed pod listens
        again on the same port."""
        self._cancel_windows(kind)
        await self._end(kind)

    async def _end(self, kind: FaultKind | None) -> None:
        """End one fault (or all), leaving pending windows alone."""
        kinds = list(self.faults) if kind is None else [kind]
        for k in kinds:
            self.faults.pop(k, None)
            if k is FaultKind.SLOW:
                self._set_slowdown(1.0)
            elif k is FaultKind.HANG:
                self._unhang.set()
            elif k is FaultKind.FREEZE_METRICS:
                self._frozen_page = None
            elif k is FaultKind.KILL and self.killed:
                await self._listen()

    def _forget_background(self) -> None:
        """End the background responses still generating (the pod stops or dies)."""
        for task in list(self._background):
            task.cancel()
        self._background.clear()

    def _close_idle_connections(self) -> None:
        """Close every remaining (idle keep-alive) connection, as the kernel does for a dead process.

        Stopping the listener alone would leave pooled clients (the gateway's scraper) talking to a
        "killed" pod over connections they opened before the kill.
        """
        server = self._runner.server if self._runner is not None else None
        if server is None:
            return
        for handler in server.connections:
            handler.force_close()

    def _cut_all(self, mode: StreamCut) -> None:
        now = self._vnow_safe()
        for stream in list(self._streams.values()):
            stream.engine.abort(stream.req.request_id, now=now)
        for request in list(self._active.values()):
            _cut_connection(request, mode)
        self._active.clear()

    def _vnow_safe(self) -> float:
        try:
            return self.vnow()
        except RuntimeError:
            return max(rank.vclock for rank in self.ranks)

    # ------------------------------------------------------------------ engine driver
    async def _drive(self, rank: _Rank) -> None:
        """Step one rank's engine in virtual time mapped to wall time; sleeps while idle."""
        engine = rank.engine
        stats = self.stats
        rank_stats = rank.stats if rank.stats is not stats else None
        while True:
            if not engine.has_work():
                rank.was_busy = False
                rank.wake.clear()
                await rank.wake.wait()
                continue
            # Keep virtual time continuous across timer overshoot (sleep targets are absolute, so a late
            # wake-up does not accumulate); re-sync only when the loop fell clearly behind. A step never
            # starts before the newest request that joined the queue: after a short idle gap the old
            # clock lies before that arrival, and starting there ran its prefill partly in the past (a
            # request 30 ms after the previous step answered 35 ms early, its queue time negative).
            vnow = self.vnow()
            late = vnow - rank.vclock
            if late < RESYNC_WALL_S / self.time_scale:
                start = max(rank.vclock, rank.last_arrival)
            else:
                start = vnow
                if rank.vclock > 0 and rank.was_busy:
                    # The host could not keep up: simulated latencies now include event-loop delay.
                    self.lagged_steps += 1
                    self.max_lag_s = max(self.max_lag_s, late * self.time_scale)
            q0, h0 = engine.counters.prefix_queries, engine.counters.prefix_hits
            batch = engine.schedule(start)
            if batch is None:
                rank.wake.clear()
                await rank.wake.wait()
                continue
            dq = engine.counters.prefix_queries - q0
            if dq:
                rank.stats.last_prefill_hit_rate = (engine.counters.prefix_hits - h0) / dq
            end = await self._step_end(rank, start + batch.duration)
            rank.vclock = end
            rank.was_busy = True
            previous = {r.request_id: r.last_token_at for r in batch.requests}
            out = engine.complete(batch, end)
            stats.iteration_tokens.observe(batch.num_tokens)
            for req in out.emitted:
                stats.on_token(req, previous_token_at=previous.get(req.request_id), now=end)
                stream = self._streams.get(req.request_id)
                if stream is not None:
                    stream.queue.put_nowait(req.output_tokens)
            for req in out.finished:
                stats.on_finish(req, requested_max_tokens=req.max_output_tokens)
                if rank_stats is not None:  # the rank's own queue-time and stage histograms
                    rank_stats.on_finish(req, requested_max_tokens=req.max_output_tokens)
                stream = self._streams.get(req.request_id)
                if stream is not None:
                    stream.done = True
                    stream.queue.put_nowait(-1)
            if self.spec.effective_max_loras:
                stats.note_lora_state(
                    running=",".join(sorted(engine.running_adapters())),
                    waiting=",".join(sorted(engine.waiting_adapters())),
                    unix_now=time.time(),
                )

    async def _step_end(self, rank: _Rank, end: float) -> float:
        """Sleep until the running step ends at virtual time ``end`` and return when it ended.

        A ``slow`` fault injected or cleared while the step runs rescales what is left of it to the
        new factor (the part already run keeps the old one), as a GPU whose clocks change mid-step
        would: without that, a step scheduled under ``factor=1000`` kept its slowed length after
        ``clear`` and the pod looked hung long after the fault was gone.
        """
        loop = asyncio.get_running_loop()
        factor = rank.engine.slowdown
        while (delay := (end - self.vnow()) * self.time_scale) > 0:
            woken: asyncio.Future[None] = loop.create_future()
            timer = loop.call_later(delay, _resolve, woken)
            rank.step_wait = woken
            try:
                await woken
            finally:
                timer.cancel()
                rank.step_wait = None
            new = rank.engine.slowdown
            if new != factor:
                now = self.vnow()
                if end > now:
                    end = now + (end - now) * new / factor
                factor = new
        return end

    def _set_slowdown(self, factor: float) -> None:
        """Change the step-time multiplier and wake the driver so the step it is sleeping through
        is rescaled to ``factor`` at once (:meth:`_step_end`)."""
        for rank in self.ranks:
            rank.engine.slowdown = factor
            if rank.step_wait is not None:
                _resolve(rank.step_wait)

    # ------------------------------------------------------------------ HTTP
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        self._active[id(request)] = request
        status = 500
        try:
            if not self._unhang.is_set():
                await self._unhang.wait()
            try:
                response = await handler(request)
            except ApiError as exc:
                response = exc.response()
            except web.HTTPException as exc:
                status = exc.status
                raise
            if not response.prepared:
                response.headers[TIME_SCALE_HEADER] = repr(self.time_scale)
            status = response.status
            return response
        finally:
            self._active.pop(id(request), None)
            if request.path not in (self.catalogue_entry.metrics_path, self.catalogue_entry.readiness_path):
                # Unmatched paths are grouped as "none" like prometheus-fastapi-instrumentator, so a
                # scanner cannot grow the page without bound.
                resource = request.match_info.route.resource
                self.stats.on_http(
                    handler=resource.canonical if resource is not None else "none",
                    method=request.method,
                    status=status,
                    duration_s=time.monotonic() - started,
                )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        created = int(self._created_unix)
        base = self.spec.model_name
        owner = self.catalogue_entry.name
        if self.spec.engine is EngineKind.TGI:
            # TGI's router lists the one model it serves, owned by its model id, nothing more.
            tgi = {"id": base, "object": "model", "created": created, "owned_by": base}
            return web.json_response({"object": "list", "data": [tgi]})
        data: list[dict[str, Any]] = [
            {
                "id": base,
                "object": "model",
                "created": created,
                "owned_by": owner,
                "root": base,
                "parent": None,
                "max_model_len": self.preset.max_model_len,
            }
        ]
        data += [
            {
                "id": a,
                "object": "model",
                "created": created,
                "owned_by": owner,
                "root": f"/adapters/{a}",
                "parent": base,
            }
            for a in self.spec.lora_adapters
        ]
        return json_response({"object": "list", "data": data})

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self.spec.exposes_metrics:
            return web.Response(status=404, text="Not Found")
        text = self._frozen_page if self._frozen_page is not None else self._render()
        names = request.query.getall(NAME_FILTER, [])
        if names and self.catalogue_entry.families.name_filter:
            text = self._restricted(text, tuple(names))
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    def _restricted(self, text: str, names: tuple[str, ...]) -> str:
        """prometheus_client's ``name[]`` filter applied to ``text`` (vLLM and SGLang serve their page
        through it), reused while the page and the names stay the same."""
        cached = self._restricted_cache
        if cached is not None and cached[0] is text and cached[1] == names:
            return cached[2]
        restricted = restrict_page(text, names)
        self._restricted_cache = (text, names, restricted)
        return restricted

    def _render(self) -> str:
        """The current page; an idle pod's page is reused until something it shows changes."""
        key: tuple[int | float, ...] = ()
        for rank in self.ranks:
            e = rank.engine
            c = e.counters
            key += (
                c.steps,
                c.preemptions,
                sum(c.finished_by_reason.values()),
                e.num_waiting,
                e.num_running,
                e.pool.num_free,
            )
        key += (
            self.stats.requests_received,
            sum(self.stats.http_requests.values()),
            len(self.stats.lora_series),
            int(time.time()),
        )
        if self._page_cache is not None and self._page_cache[0] == key:
            return self._page_cache[1]
        text = self._render_now()
        self._page_cache = (key, text)
        return text

    def _render_now(self) -> str:
        vnow = self._vnow_safe()
        if self.spec.engine is EngineKind.TGI:
            return render_tgi(ctx=self._ctx, engine=self.engine)
        if self.spec.engine is EngineKind.SGLANG:
            views: list[SchedulerRank] = []
            for rank in self.ranks:
                t_mark, g_mark = rank.gen_mark
                gen = rank.engine.counters.generation_tokens
                if vnow - t_mark >= 1.0:
                    rank.gen_throughput = (gen - g_mark) / (vnow - t_mark)
                    rank.gen_mark = (vnow, gen)
                views.append(
                    SchedulerRank(
                        engine=rank.engine,
                        stats=rank.stats,
                        gen_throughput=rank.gen_throughput,
                        dp_rank=rank.index if len(self.ranks) > 1 else None,
                    )
                )
            return render_sglang(ctx=self._ctx, stats=self.stats, ranks=views)
        return render_vllm(
            ctx=self._ctx,
            engine=self.engine,
            stats=self.stats,
            unix_now=time.time(),
            uptime_s=time.time() - self._created_unix,
        )

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM ``POST /tokenize``: a completion (``prompt``) or chat (``messages``) body."""
        body = await read_json(request)
        chat = isinstance(body, dict) and "messages" in body
        parsed = parse_request(
            body, chat=chat, base_model=self.spec.model_name, adapters=self.spec.lora_adapters
        )
        ids = token_ids(parsed.prompt_text)
        return json_response(
            {"count": len(ids), "max_model_len": self.preset.max_model_len, "tokens": ids, "token_strs": None}
        )

    async def _render_completion(self, request: web.Request) -> web.Response:
        """vLLM ``POST /v1/completions/render``: the prompt's token ids, without generating anything."""
        body = await read_json(request)
        parsed = parse_request(
            body, chat=False, base_model=self.spec.model_name, adapters=self.spec.lora_adapters
        )
        rendered = {
            "request_id": f"cmpl-{self.spec.name}-render-{next(self._ids)}",
            "token_ids": token_ids(parsed.prompt_text),
            "sampling_params": {"max_tokens": parsed.max_tokens},
            "model": parsed.model,
            "token_offsets": None,
        }
        return json_response([rendered])

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        self._note_trace_context(request)
        body = await read_json(request)
        parsed = parse_request(
            body, chat=chat, base_model=self.spec.model_name, adapters=self.spec.lora_adapters
        )
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{self.spec.name}-{next(self._ids)}"
        async with self._generating(parsed, request_id=request_id, headers=request.headers) as stream:
            if parsed.stream:
                return await self._respond_stream(request, parsed, stream)
            return await self._respond_whole(parsed, stream)

    def _note_trace_context(self, request: web.Request) -> None:
        traceparent = request.headers.get("traceparent")
        if traceparent is not None:
            self.trace_contexts.append((traceparent, request.headers.get("tracestate")))

    @contextlib.asynccontextmanager
    async def _generating(
        self, parsed: ParsedRequest, *, request_id: str, headers: Mapping[str, str]
    ) -> AsyncIterator[_Stream]:
        """Admit ``parsed`` to the engine as ``request_id`` (the injected error rate, the size
        checks, the priority rules first: an :class:`ApiError` before anything runs) and yield its
        token stream; on exit a request not finished is aborted (the client left)."""
        err = self.faults.get(FaultKind.ERROR_RATE)
        if err is not None and self._rng.random() < err.rate:
            raise ApiError(err.status, "injected fault: simulated server error")
        self.stats.requests_received += 1
        prompt_tokens = count_tokens(parsed.prompt_text)
        # Checked before anything sized by max_tokens is built (a huge max_tokens must be a fast 400).
        # Every rank is the same preset: any of them answers for the pod.
        problem = self.engine.size_error(prompt_tokens, parsed.max_tokens)
        if problem is not None:
            # vLLM raises these as a plain ValueError: its ErrorResponse names no ``param``
            raise ApiError(400, problem)
        priority = self._priority(parsed.priority)
        req = EngineRequest(
            request_id=request_id,
            prompt_tokens=prompt_tokens,
            max_output_tokens=parsed.max_tokens,
            block_hashes=request_block_hashes(
                parsed.prompt_text,
                output_tokens=parsed.max_tokens,
                block_size=self.engine.block_size,
                salt=(parsed.adapter or "") + ("\x00" + parsed.cache_salt if parsed.cache_salt else ""),
            ),
            adapter=parsed.adapter,
            arrival=self.vnow(),
            priority=priority,
        )
        rank = self._dispatch()
        engine = rank.engine
        running = sum(r.engine.num_running for r in self.ranks)
        waiting = sum(r.engine.num_waiting for r in self.ranks)
        try:
            engine.add(req)
        except RequestRejected as exc:
            raise ApiError(400, str(exc)) from None
        record = None
        if self.arrivals is not None:
            record = PodArrival(req, running, waiting, taken_s=req.arrival)
            self.arrivals[headers.get("X-Request-Id", request_id)] = record
        stream = _Stream(req, engine, record)
        self._streams[request_id] = stream
        rank.last_arrival = max(rank.last_arrival, req.arrival)
        rank.wake.set()
        try:
            yield stream
        finally:
            self._streams.pop(request_id, None)
            if req.finish_reason is None:
                engine.abort(request_id, now=self._vnow_safe())

    def _abort(self, request_id: str) -> None:
        """Abort ``request_id`` on the rank running it (nothing when it is no longer in flight)."""
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.engine.abort(request_id, now=self._vnow_safe())

    def _dispatch(self) -> _Rank:
        """The rank a new request joins: SGLang's DP controller with its default
        ``--load-balance-method round_robin`` (the only rank when ``dp_size`` is 1)."""
        rank = self.ranks[self._next_rank % len(self.ranks)]
        self._next_rank += 1
        return rank

    def _priority(self, given: int | None) -> int:
        """The engine priority of a request whose body carries ``given``, as the real server treats it.

        vLLM refuses a non-zero priority unless started with ``--scheduling-policy priority``
        (its processor's check, 400); SGLang aborts a request carrying a priority unless started
        with ``--enable-priority-scheduling``, and with it gives a request without one the least
        important value (so unmarked traffic never outranks marked traffic).
        """
        policy = self.engine.priority
        if self.spec.engine is EngineKind.VLLM:
            if given and policy is None:
                raise ApiError(
                    400, f"Got priority {given} but Priority scheduling is not enabled.", param="priority"
                )
            return given or 0
        if self.spec.engine is EngineKind.SGLANG:
            if policy is None:
                if given is not None:
                    raise ApiError(503, SGLANG_PRIORITY_DISABLED)
                return 0
            if given is None:
                return SGLANG_UNSET_PRIORITY if policy.low_values_first else -SGLANG_UNSET_PRIORITY
            return given
        return 0

    async def _respond_whole(self, parsed: ParsedRequest, stream: _Stream) -> web.Response:
        await _generated(stream)
        req = stream.req
        text = generated_text(req.output_tokens)
        created = int(time.time())
        if parsed.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": req.finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason}
            obj = "text_completion"
        return json_response(
            {
                "id": req.request_id,
                "object": obj,
                "created": created,
                "model": parsed.model,
                "choices": [choice],
                "usage": usage(req),
            }
        )

    async def _respond_stream(
        self, request: web.Request, parsed: ParsedRequest, stream: _Stream
    ) -> web.StreamResponse:
        resp = await self._open_event_stream(request)
        req = stream.req
        created = int(time.time())
        obj = "chat.completion.chunk" if parsed.chat else "text_completion"
        cut = self.faults.get(FaultKind.DIE_MID_STREAM)
        sent = 0
        # vLLM sends a chat stream's role chunk together with the first generated token (after
        # prefill), not when the request arrives; it is prepended to the first token's event.
        role = b""
        if parsed.chat:
            first = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            role = sse_event(req.request_id, obj, created, parsed.model, first)
        while True:
            idx = await stream.queue.get()
            if idx == -1:
                break
            if cut is not None and sent >= cut.after_tokens:
                await self._die_mid_stream(request, req, cut)
                return resp
            finish = "length" if idx >= req.max_output_tokens else None
            text = output_token_text(idx - 1)
            if parsed.chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": {"content": text},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            event = sse_event(req.request_id, obj, created, parsed.model, choice)
            if sent == 0 and stream.arrival is not None:
                stream.arrival.first_token_s = self.vnow()
            await resp.write(role + event if sent == 0 else event)
            sent += 1
        if parsed.include_usage:
            payload = {
                "id": req.request_id,
                "object": obj,
                "created": created,
                "model": parsed.model,
                "choices": [],
                "usage": usage(req),
            }
            await resp.write(b"data: " + orjson.dumps(payload) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _die_mid_stream(self, request: web.Request, req: EngineRequest, cut: FaultSpec) -> None:
        """The ``die-mid-stream`` fault: the request aborted, the client's connection cut (or, for
        ``stall``, left open and silent for good)."""
        self._abort(req.request_id)
        _cut_connection(request, cut.mode)
        if cut.mode is StreamCut.STALL:
            await asyncio.Event().wait()

    # ------------------------------------------------------------------ Responses API (vLLM)
    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """vLLM ``POST /v1/responses``: generated as a chat request, whole, streamed as the Responses
        API's named events, or (``background``) answered at once and generated on."""
        self._note_trace_context(request)
        body = await read_json(request)
        asked = parse_responses_request(
            body, base_model=self.spec.model_name, adapters=self.spec.lora_adapters, store=self.responses
        )
        response_id = asked.response_id
        created = created_now()
        if asked.background:
            queued = response_object(
                response_id=response_id, req=asked, status="queued", created_at=created, engine_req=None
            )
            stored = StoredResponse(body=queued, conversation="", background=True, request_id=response_id)
            self.responses.put(response_id, stored)
            task = asyncio.create_task(self._in_background(asked, stored, dict(request.headers), created))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            if asked.parsed.stream:
                # vLLM streams a background response's events (its background stream generator);
                # the generation goes on whatever this connection does
                return await self._respond_background_events(request, stored)
            return json_response(queued)
        async with self._generating(asked.parsed, request_id=response_id, headers=request.headers) as stream:
            if asked.parsed.stream:
                return await self._respond_events(request, asked, stream, created)
            await _generated(stream)
            return json_response(self._finish_response(asked, stream.req, created))

    def _finish_response(
        self, asked: ResponsesRequest, req: EngineRequest, created: int, stored: StoredResponse | None = None
    ) -> dict[str, Any]:
        """The finished ``response`` object, put in ``stored`` (a background response's) or, when the
        request asked for it, stored anew."""
        done = response_object(
            response_id=req.request_id, req=asked, status="completed", created_at=created, engine_req=req
        )
        conversation = asked.parsed.prompt_text + generated_text(req.output_tokens)
        if stored is not None:
            stored.body, stored.conversation = done, conversation
        elif asked.store:
            stored = StoredResponse(
                body=done, conversation=conversation, background=False, request_id=req.request_id
            )
            stored.finished.set()
            self.responses.put(req.request_id, stored)
        return done

    async def _respond_events(
        self, request: web.Request, asked: ResponsesRequest, stream: _Stream, created: int
    ) -> web.StreamResponse:
        resp = await self._open_event_stream(request)
        req = stream.req
        events = ResponseEvents(req.request_id)
        started = response_object(
            response_id=req.request_id, req=asked, status="in_progress", created_at=created, engine_req=None
        )
        await resp.write(events.opening(started))  # before the prefill, as vLLM sends it
        async for idx in self._tokens(request, stream):
            await resp.write(events.delta(idx))
        if not stream.done:
            return resp  # cut by the die-mid-stream fault
        await resp.write(events.closing(self._finish_response(asked, req, created)))
        await resp.write_eof()
        return resp

    async def _respond_background_events(
        self, request: web.Request, stored: StoredResponse
    ) -> web.StreamResponse:
        """The event stream of a ``background`` + ``stream`` response: opened at once, each text
        delta as its token is generated (vLLM's background stream generator forwards the events as
        they come), the closing events once the response has finished (or failed, or was cancelled).
        The generation goes on whatever this connection does."""
        resp = await self._open_event_stream(request)
        events = ResponseEvents(stored.request_id)
        await resp.write(events.opening({**stored.body, "status": "in_progress"}))
        sent = 0
        while True:
            progress = stored.progress
            ended = stored.finished.is_set()
            while sent < stored.generated:
                sent += 1
                await resp.write(events.delta(sent))
            if ended:
                break
            if stored.generated == sent:
                await progress.wait()
        await resp.write(events.closing(stored.body))
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ Anthropic Messages API (vLLM)
    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """vLLM ``POST /v1/messages``: generated as a chat request, whole or as Anthropic's named
        events; errors in that API's shape (:mod:`igw.sim.messages_api`)."""
        self._note_trace_context(request)
        try:
            parsed = parse_messages_request(
                await read_json(request), base_model=self.spec.model_name, adapters=self.spec.lora_adapters
            )
            message_id = f"msg_{uuid.uuid4().hex}"
            async with self._generating(parsed, request_id=message_id, headers=request.headers) as stream:
                if parsed.stream:
                    return await self._respond_message_events(request, parsed, stream)
                await _generated(stream)
                text = generated_text(stream.req.output_tokens)
                return json_response(message_object(stream.req, model=parsed.model, text=text))
        except ApiError as refused:
            return messages_error(refused)

    async def _respond_message_events(
        self, request: web.Request, parsed: ParsedRequest, stream: _Stream
    ) -> web.StreamResponse:
        resp = await self._open_event_stream(request)
        req = stream.req
        opening = message_events.opening(req, model=parsed.model)
        async for idx in self._tokens(request, stream):
            # the message opens with its first token, after the prefill (vLLM converts its chat stream)
            await resp.write(opening + message_events.delta(idx))
            opening = b""
        if not stream.done:
            return resp  # cut by the die-mid-stream fault
        await resp.write(message_events.closing(req))
        await resp.write_eof()
        return resp

    async def _count_message_tokens(self, request: web.Request) -> web.Response:
        """vLLM ``POST /v1/messages/count_tokens``: the conversation's input tokens, nothing run."""
        try:
            parsed = parse_messages_request(
                await read_json(request),
                base_model=self.spec.model_name,
                adapters=self.spec.lora_adapters,
                counting=True,
            )
        except ApiError as refused:
            return messages_error(refused)
        return json_response({"input_tokens": count_tokens(parsed.prompt_text)})

    async def _tokens(self, request: web.Request, stream: _Stream) -> AsyncIterator[int]:
        """The indexes of the tokens ``stream``'s request generates, in order (the first one's time
        noted), until it finishes (``stream.done``) or the die-mid-stream fault cuts it after its
        token count (the connection cut; ``stream.done`` stays false)."""
        cut = self.faults.get(FaultKind.DIE_MID_STREAM)
        sent = 0
        while (idx := await stream.queue.get()) != -1:
            if cut is not None and sent >= cut.after_tokens:
                await self._die_mid_stream(request, stream.req, cut)
                return
            if sent == 0 and stream.arrival is not None:
                stream.arrival.first_token_s = self.vnow()
            yield idx
            sent += 1

    async def _open_event_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                TIME_SCALE_HEADER: repr(self.time_scale),
            }
        )
        await resp.prepare(request)
        return resp

    async def _in_background(
        self, asked: ResponsesRequest, stored: StoredResponse, headers: Mapping[str, str], created: int
    ) -> None:
        """Generate a background response; the stored object goes ``in_progress``, then
        ``completed`` (or ``failed`` with the error a foreground request would have got)."""
        try:
            async with self._generating(
                asked.parsed, request_id=stored.request_id, headers=headers
            ) as stream:
                stored.body = {**stored.body, "status": "in_progress"}
                while (idx := await stream.queue.get()) != -1:
                    if idx == 1 and asked.parsed.stream and stream.arrival is not None:
                        stream.arrival.first_token_s = self.vnow()  # streamed to the client now
                    stored.generated = idx
                    stored.advanced()
                if stored.body["status"] != "cancelled":
                    self._finish_response(asked, stream.req, created, stored)
        except ApiError as failed:
            error = {"code": str(failed.status), "message": failed.message}
            stored.body = {**stored.body, "status": "failed", "error": error}
        finally:
            stored.finished.set()
            stored.advanced()

    async def _stored_response(self, request: web.Request) -> web.StreamResponse:
        """vLLM ``GET /v1/responses/{response_id}``: the stored object; ``?stream=true`` replays its
        events once it has finished (``starting_after``: from the event after that number)."""
        stored = self.responses.get(request.match_info["response_id"])
        if request.query.get("stream") != "true":
            return json_response(stored.body)
        raw_after = request.query.get("starting_after", "-1")
        try:
            starting_after = int(raw_after)
        except ValueError:
            raise ApiError(400, "'starting_after' must be an integer", param="starting_after") from None
        await stored.finished.wait()
        resp = await self._open_event_stream(request)
        events = ResponseEvents(stored.request_id, starting_after=starting_after)
        tokens = (stored.body.get("usage") or {}).get("output_tokens", 0)
        for chunk in events.replay(stored.body, tokens=tokens):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def _cancel_response(self, request: web.Request) -> web.Response:
        """vLLM ``POST /v1/responses/{response_id}/cancel``: a background response still generating
        is aborted and stored as ``cancelled``; a finished one is returned as it is."""
        stored = self.responses.get(request.match_info["response_id"])
        if not stored.background:
            raise ApiError(400, "Cannot cancel a synchronous response.")
        if stored.body["status"] in UNFINISHED:
            stored.body = {**stored.body, "status": "cancelled"}
            self._abort(stored.request_id)
            stream = self._streams.get(stored.request_id)
            if stream is not None:
                stream.queue.put_nowait(-1)
        return json_response(stored.body)


def _resolve(waiter: asyncio.Future[None]) -> None:
    """Wake ``waiter`` unless it already woke (or was cancelled with the driver)."""
    if not waiter.done():
        waiter.set_result(None)


async def _generated(stream: _Stream) -> None:
    """Wait until ``stream``'s request has finished (or was aborted by a cancel)."""
    while await stream.queue.get() != -1:
        pass


def _cut_connection(request: web.Request, mode: StreamCut) -> None:
    """Drop a client connection: FIN (orderly close), RST (linger 0) or STALL (leave it open, silent)."""
    if mode is StreamCut.STALL:
        return
    transport = request.transport
    if transport is None:
        return
    if mode is StreamCut.RST:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()
