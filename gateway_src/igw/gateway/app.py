"""The gateway's aiohttp application: routes, background services, and the app factory.

:func:`create_app` is the one way to build a gateway (``igw serve``, tests, ``igw perf gateway``)::

    app = create_app(config, discovery=StaticFileDiscovery(path, names=...), guard=my_guard)
    async with serve_app(app, host="127.0.0.1", port=0) as url: ...

Background services live in the app's cleanup context, started in order and stopped in reverse:
guard -> upstream HTTP session and scrape client -> scraper -> upstream stall watchdog -> discovery -> config
reloader.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter

from igw.config.model import GatewayConfig
from igw.gateway.debug_api import DecisionDebug, add_debug_routes
from igw.gateway.decision_log import DecisionLog
from igw.gateway.discovery import DiscoverySource
from igw.gateway.emf import emf_context, emf_reporter
from igw.gateway.errors import REQUEST_ID_HEADER, anthropic_shaped, denial_response, gateway_error
from igw.gateway.forwarded_answer import ORIGIN_FIELDS, as_response
from igw.gateway.guards import GuardDenied, GuardFactory, OpenGuard, Principal, RequestGuard
from igw.gateway.heartbeat import EXTENSION as HEARTBEAT_EXTENSION
from igw.gateway.heartbeat import heartbeat_context, publishes_heartbeat
from igw.gateway.inference import (
    REQUEST_ID_KEY,
    SESSION_KEY,
    STATE_KEY,
    handle_anthropic_inference,
    handle_inference,
    handle_stored_response,
    request_id_for,
)
from igw.gateway.inference_apis import (
    ANTHROPIC_APIS,
    INFERENCE_PATHS,
    STORED_RESPONSE_ROUTES,
    InferenceApi,
    anthropic_path,
)
from igw.gateway.lean_server import LEAN_ROUTES_KEY, LeanHandler, LeanRequestHandler, lean_enabled
from igw.gateway.reload import GUARD_READY_TIMEOUT_S, ConfigReloader, PickerConfigLoader
from igw.gateway.runtime import PickerConfigs
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scrape_share import share_config_reloads, start_discovery, start_scraping
from igw.gateway.server_identity import name_every_answer
from igw.gateway.serving import CONNECTION_HANDLER_KEY, INFLIGHT_KEY
from igw.gateway.state import GatewayState
from igw.gateway.upstream import proxy_session
from igw.gateway.upstream_watchdog import UpstreamWatchdog
from igw.gateway.worker_metrics import WorkerMetrics
from igw.gateway.workers import WorkerRole
from igw.redaction import redact

if TYPE_CHECKING:
    from igw.gateway.tracing import Tracing

log = logging.getLogger("igw.gateway")

WORKER_KEY = web.AppKey("igw_worker", WorkerRole)
WORKER_METRICS_KEY = web.AppKey("igw_worker_metrics", WorkerMetrics)


def _inference_route(api: InferenceApi) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of ``api``'s route (every request the lean side hands over, and all of
    them with ``IGW_HTTP_SERVER=aiohttp``)."""

    serve = handle_anthropic_inference if api in ANTHROPIC_APIS else handle_inference

    async def handle(request: web.Request) -> web.StreamResponse:
        return as_response(await serve(request, api=api))

    return handle


def _lean_routes(state: GatewayState) -> dict[str, LeanHandler]:
    """The lean side's handlers: :func:`handle_inference` itself (a partial adds no coroutine of
    its own: one Python frame less per request than an ``async def`` wrapper awaiting it), given the
    app's state (no ``request.app[STATE_KEY]``, an interpreted call in the compiled build)."""
    return {
        path: functools.partial(
            handle_anthropic_inference if api in ANTHROPIC_APIS else handle_inference, api=api, state=state
        )
        for path, api in INFERENCE_PATHS.items()
    }


MODEL_ROUTE: Final = "/v1/models/{model:.+}"
"""``GET /v1/models/{model}``, the OpenAI SDK's ``models.retrieve``: ``.+`` because model names hold
a ``/`` (``meta-llama/Llama-3.1-8B-Instruct``), which a client sends as it is (curl) or encoded as
``%2F`` (the OpenAI SDK), both the same name here."""


def model_answer(listed: Sequence[Mapping[str, object]], model: str) -> web.Response:
    """The answer to ``GET /v1/models/{model}``: the entry of ``listed`` (what ``GET /v1/models``
    shows the same caller) whose ``id`` is ``model``, else a 404 ``model_not_found`` - the same answer
    for a model not served and for one the caller may not use, so the route tells no caller which
    other models exist. Before session s39 every retrieval answered 404 ``not_found`` (no route), so
    a client that checks its model with ``models.retrieve`` before use refused to start."""
    for entry in listed:
        if entry.get("id") == model:
            return web.Response(body=orjson.dumps(entry), content_type="application/json")
    shown = redact(model[:200])
    return gateway_error("model_not_found", f"The model {shown!r} does not exist", param="model")


def _listed_models(state: GatewayState, guard: RequestGuard, principal: Principal) -> list[dict[str, object]]:
    """The models this gateway serves that ``principal`` may use (``modelAccess``): before session s34
    every caller saw every model and adapter, other tenants' included, which named them (and, with
    adapters named per customer, the customers)."""
    routes = state.runtime.router.models()
    data: list[dict[str, object]] = [
        {
            "id": r.model,
            "object": "model",
            "created": 0,
            "owned_by": "igw",
            "root": r.base_model,
            "parent": r.base_model if r.adapter else None,
        }
        for r in routes
        if guard.may_use(principal, model=r.model)
    ]
    served = {r.model for r in routes}
    rewrites = state.runtime.rewrites
    for name in sorted(set(rewrites.rules) - served):  # canary names clients may call
        # A request naming it is authorized for the target it is split to, not for the name: listed
        # only where every target it can go to is allowed. Until session s42 the name itself was
        # checked, so a tenant allowed `llama` saw it listed and was refused (403) on every call,
        # and one allowed both targets called it with success but was told it does not exist.
        if all(guard.may_use(principal, model=target) for target in rewrites.targets_of(name)):
            data.append(
                {"id": name, "object": "model", "created": 0, "owned_by": "igw", "root": name, "parent": None}
            )
    return data


async def _callers_models(request: web.Request) -> list[dict[str, object]] | web.Response:
    """The models the authenticated caller may use (:func:`_listed_models`), or the denial."""
    state = request.app[STATE_KEY]
    guard = state.guard
    try:
        principal = await guard.authenticate(request.headers)
    except GuardDenied as denied:
        return denial_response(denied)
    return _listed_models(state, guard, principal)


async def _models(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models``: the models the caller may use."""
    data = await _callers_models(request)
    if isinstance(data, web.Response):
        return data
    return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")


async def _model(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models/{model}``: one of the models ``GET /v1/models`` lists (:func:`model_answer`)."""
    data = await _callers_models(request)
    if isinstance(data, web.Response):
        return data
    return model_answer(data, request.match_info["model"])


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def detailed_readyz(request: web.Request) -> web.StreamResponse:
    """Readiness with every scheduler's endpoints (pod addresses, scrape errors) and this worker: the
    single port's ``/readyz``, or the management listener's (:mod:`igw.gateway.management`)."""
    ready, detail = request.app[STATE_KEY].readiness()
    worker = request.app.get(WORKER_KEY)
    if worker is not None:
        detail["worker"] = {"index": worker.index, "count": worker.count, "pid": os.getpid()}
    body = orjson.dumps({"ready": ready, **detail}, option=orjson.OPT_INDENT_2)
    return web.Response(status=200 if ready else 503, body=body, content_type="application/json")


async def _plain_readyz(request: web.Request) -> web.StreamResponse:
    """The inference port's ``/readyz`` when a management listener holds the detail: 200/503 and
    nothing the load balancer's health check does not need (no pod address, error or pid)."""
    ready, _ = request.app[STATE_KEY].readiness()
    body = b'{"ready":true}' if ready else b'{"ready":false}'
    return web.Response(status=200 if ready else 503, body=body, content_type="application/json")


async def metrics_page(request: web.Request) -> web.StreamResponse:
    """The Prometheus exposition (with ``--workers``: every worker's, labelled by worker)."""
    workers = request.app.get(WORKER_METRICS_KEY)
    if workers is not None:
        payload = await workers.page()
    else:
        payload = await request.app[STATE_KEY].metrics.page.render()
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


_HTTP_ERROR_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


_ENCODED_SLASH_NOTE: Final = (
    " (the path as decoded: its %2F is a '/' inside a segment, not a separator between segments)"
)


def _encoded_slash_note(request: web.Request) -> str:
    """A note for a path with a percent-encoded ``/``: the message shows the decoded path, which
    then reads as a real route (``POST /v1%2Fcompletions`` as ``POST /v1/completions: Not Found``).
    The raw path is not shown instead: a token percent-encoded in it would pass the redaction."""
    target = request.raw_path.partition("?")[0]
    return _ENCODED_SLASH_NOTE if "%2f" in target.lower() else ""


@web.middleware
async def openai_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every response carries an ``X-Request-Id``; aiohttp's own 4xx become OpenAI-shaped errors (also
    used by the global router)."""
    request_id = request_id_for(request.headers)
    request[REQUEST_ID_KEY] = request_id
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_ERROR_CODES.get(exc.status, "invalid_request")
        response = gateway_error(
            code,
            f"{request.method} {redact(request.path[:200])}: {exc.reason}{_encoded_slash_note(request)}",
            status=exc.status,
            headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )
        if anthropic_path(request.path):
            response = anthropic_shaped(response, request_id=request_id)
    if not response.prepared and REQUEST_ID_HEADER not in response.headers:
        response.headers[REQUEST_ID_HEADER] = request_id
    return response


def _once_true(check: Callable[[], bool]) -> Callable[[], bool]:
    """``check`` until it answers true, then true without asking (the group serving: a file's
    existence, not looked up at every ``/readyz`` once it is there)."""
    seen = False

    def answer() -> bool:
        nonlocal seen
        seen = seen or check()
        return seen

    return answer


def create_app(
    config: GatewayConfig,
    *,
    guard: RequestGuard | None = None,
    guard_factory: GuardFactory | None = None,
    guard_ready_timeout_s: float = GUARD_READY_TIMEOUT_S,
    discovery: DiscoverySource | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    picker_configs: PickerConfigs | None = None,
    config_path: Path | None = None,
    config_digest: str | None = None,
    load_picker_configs: PickerConfigLoader | None = None,
    registry: CollectorRegistry | None = None,
    service_domain: str | None = None,
    decision_debug: DecisionDebug | None = None,
    emf_interval_s: float | None = None,
    tracing: Tracing | None = None,
    worker: WorkerRole | None = None,
    management_listener: bool = False,
    index_blocks: int | None = None,
    max_header_field_bytes: int | None = None,
    limit_options: frozenset[str] = frozenset(),
    holds_refused: Counter | None = None,
) -> web.Application:
    """Build the gateway for ``config``.

    ``guard``: request security (default: ``guard_factory(config)``, else :class:`OpenGuard`);
    ``guard_factory``: also rebuilds the guard when a hot reload changes what it reads
    (``spec.auth``, ``spec.extensions.authorization``/``rateLimits``; without a factory the guard is
    fixed); ``discovery``: where endpoints come from; ``config_path``: enables hot reload of that
    file; ``config_digest``: that file's :func:`~igw.gateway.reload.file_digest` taken before
    ``config`` was loaded from it (an edit made since is reloaded; ``None``: the file as it is when the
    app starts is taken for ``config``); ``load_picker_configs``: resolves the ``configMapRef``
    EndpointPickerConfigs of a reloaded config (in-cluster: from ConfigMaps); ``service_domain``: in-cluster
    ``<namespace>.svc``, the DNS suffix of ``spec.bbr.defaultBackend`` Services;
    ``decision_debug``: keep the last decisions and serve them at ``/debug/decisions``;
    ``emf_interval_s``: log CloudWatch EMF documents (logger ``igw.emf``) at this interval;
    ``tracing``: OpenTelemetry spans of every inference request (shut down, flushing what is
    buffered, when the app stops).
    ``worker``: this process's place in an ``igw serve --workers`` group (shared scraping, host-wide
    ``/metrics``; see :mod:`igw.gateway.workers`).
    ``index_blocks``: the blocks this process's prefix indexes may hold together (``None``: no bound;
    see :func:`igw.gateway.memory.memory_plan`).
    ``max_header_field_bytes``: the listener's header field limit (``ServerLimits``), fixed at start:
    a hot reload whose token cap it cannot carry is rejected (``None``: not checked).
    ``limit_options``: the ``ServerLimits`` fields given on ``igw serve``'s command line, which a
    reload's ``serverLimits`` does not change (``maxBodyBytesHeld``, the one it applies).
    ``management_listener``: ``/metrics``, the detailed ``/readyz`` and ``/debug/decisions`` are served
    by :func:`igw.gateway.management.management_app` on a port of their own, so this app keeps only
    ``/healthz`` and a ``/readyz`` without detail next to the inference routes.
    ``holds_refused``: the guard's counter of held token bounds its local rate-limit buckets refused,
    reported in EMF as ``RateLimitHoldsRefused`` (``None``: not reported; made by ``igw.security``,
    which the gateway does not import, so ``igw serve`` passes it in).
    """
    if guard is None:
        guard = guard_factory(config) if guard_factory is not None else OpenGuard()
    state = GatewayState(
        config,
        guard=guard,
        clock=clock,
        rng=rng if rng is not None else random.Random(),
        picker_configs=picker_configs,
        registry=registry,
        service_domain=service_domain,
        index_blocks=index_blocks,
        exports_scrapes=worker is None or worker.leads_scraping,
    )
    app = name_every_answer(
        web.Application(client_max_size=config.bbr.max_request_body_bytes, middlewares=[openai_errors])
    )
    app[STATE_KEY] = state
    app[INFLIGHT_KEY] = state.inflight

    def follow_body_limit(applied: GatewayConfig) -> None:
        # The listener reads the application's bound before any handler does: an `Expect:
        # 100-continue` head over it is refused there (igw.gateway.serving). Kept at the running
        # spec.bbr.maxRequestBodyBytes; it stayed at the start-up value, so after a reload that raised
        # the limit such a request was refused citing the old one.
        app._client_max_size = applied.bbr.max_request_body_bytes

    state.on_config_applied.append(follow_body_limit)
    worker_metrics = None
    if worker is not None:
        app[WORKER_KEY] = worker
        state.group_serving = _once_true(worker.group_serving)
        worker_metrics = app[WORKER_METRICS_KEY] = WorkerMetrics(
            index=worker.index,
            sockets=[worker.metrics_socket(i) for i in range(worker.count)],
            render=state.metrics.page.render,
        )
    for path, api in INFERENCE_PATHS.items():
        app.router.add_post(path, _inference_route(api))
    for method, path in STORED_RESPONSE_ROUTES:
        app.router.add_route(method, path, handle_stored_response)
    if lean_enabled():  # the same handlers, reached without aiohttp's request machinery
        app[LEAN_ROUTES_KEY] = _lean_routes(state)
        app[CONNECTION_HANDLER_KEY] = LeanRequestHandler
    app.router.add_get("/v1/models", _models)
    app.router.add_get(MODEL_ROUTE, _model)
    app.router.add_get("/healthz", healthz)
    if management_listener:
        app.router.add_get("/readyz", _plain_readyz)
    else:
        app.router.add_get("/readyz", detailed_readyz)
        app.router.add_get("/metrics", metrics_page)
    if decision_debug is not None:
        state.decision_log = DecisionLog(decision_debug.capacity, token=decision_debug.token)
        if not management_listener:
            add_debug_routes(app, state.decision_log)
    state.tracing = tracing
    if tracing is not None and tracing.export_stats is not None:
        state.metrics.registry.register(tracing.export_stats)

    async def services(app: web.Application) -> AsyncIterator[None]:
        await state.guard.start()
        # a pod's answer never sets state on the gateway's origin, which fronts every pod (ORIGIN_FIELDS)
        upstream = proxy_session(
            hooks=None if tracing is None else tracing.connect_hooks(), dropped_fields=ORIGIN_FIELDS
        )
        scrape = ScrapeClient()
        app[SESSION_KEY] = state.upstream = upstream
        state.scraper = await start_scraping(
            worker, runtime=lambda: state.runtime, client=scrape, clock=clock, metrics=state.metrics
        )
        if worker_metrics is not None:
            await worker_metrics.start()
        watchdog = UpstreamWatchdog(runtime=lambda: state.runtime, pool=upstream, metrics=state.metrics)
        watchdog.start()
        reloader = (
            ConfigReloader(
                config_path,
                state=state,
                load_picker_configs=load_picker_configs,
                guard_factory=guard_factory,
                guard_ready_timeout_s=guard_ready_timeout_s,
                loaded_digest=config_digest,
                max_header_field_bytes=max_header_field_bytes,
                limit_options=limit_options,
            )
            if config_path is not None
            else None
        )
        try:
            if discovery is not None:
                if await start_discovery(state.scraper, discovery, state):
                    state.on_config_applied.append(lambda cfg: discovery.retarget(cfg.schedulers))
                    log.info("endpoint discovery: %s", discovery.describe())
                else:
                    log.info("endpoint discovery: worker 0's (%s)", discovery.describe())
            state.scraper.sync()
            if reloader is not None:
                share_config_reloads(state.scraper, reloader)
                reloader.start()
                state.check_config_now = reloader.nudge
            yield
        finally:
            state.heap_trim.close()
            state.check_config_now = None
            if reloader is not None:
                await reloader.stop()
            if discovery is not None:
                await discovery.stop()
            watchdog.stop()
            await state.scraper.close()
            if worker_metrics is not None:
                await worker_metrics.close()
            await upstream.close()
            await scrape.close()
            await state.guard.close()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # the exporter's final flush blocks

    app.cleanup_ctx.append(services)
    if emf_interval_s is not None:
        heartbeat = config.extensions.get(HEARTBEAT_EXTENSION)
        cluster = str(heartbeat["cluster"]) if heartbeat else None
        reporter = emf_reporter(state.metrics, heartbeat_cluster=cluster, holds_refused=holds_refused)
        app.cleanup_ctx.append(emf_context(reporter, interval_s=emf_interval_s))
    if config.extensions.get(HEARTBEAT_EXTENSION) and publishes_heartbeat(
        None if worker is None else worker.index
    ):
        workers = 1 if worker is None else worker.count
        app.cleanup_ctx.append(
            heartbeat_context(state, config.extensions[HEARTBEAT_EXTENSION], workers=workers)
        )
    return app
