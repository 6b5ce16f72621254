"""``POST /v1/chat/completions`` and ``POST /v1/completions``: the whole request path.

authenticate -> read body (413) -> parse (400) -> body-based route (404) -> authorize -> admit ->
schedule (429 saturated + Retry-After, 503 no endpoints) -> proxy (connect retry once; SSE relay;
routeTimeout 504 / terminal event) -> account -> metrics, scheduler feedback, access log.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from igw.gateway.access_log import AccessRecord
from igw.gateway.default_backend import DEFAULT_BACKEND_SCHEDULER
from igw.gateway.errors import error_response
from igw.gateway.guards import GuardDenied, Principal, RequestGuard
from igw.gateway.model_router import BASE_MODEL_HEADER, MODEL_HEADER, NO_MATCH_MESSAGE, ModelRoute
from igw.gateway.request_body import BadRequestBody, BodyTooLarge, InferenceBody, parse_body, read_limited
from igw.gateway.runtime import SchedulerRuntime
from igw.gateway.state import GatewayState
from igw.gateway.telemetry import UNKNOWN_MODEL
from igw.gateway.upstream import (
    ClientGone,
    ConnectFailed,
    ExchangeResult,
    exchange,
    terminal_timeout,
    upstream_headers,
)
from igw.scheduling.types import DecisionKind, RequestOutcome, RoutingDecision, RoutingRequest

STATE_KEY = web.AppKey("igw_state", GatewayState)
SESSION_KEY = web.AppKey("igw_upstream_session", aiohttp.ClientSession)
REQUEST_ID_HEADER = "x-request-id"
CLIENT_CLOSED = 499
"""Status recorded (metrics, access log) for requests the client abandoned (nginx's convention)."""
MAX_ATTEMPTS = 2
"""The pick plus one retry on the next-best endpoint after a connect failure."""


@dataclass(slots=True)
class _Ctx:
    state: GatewayState
    guard: RequestGuard
    """The guard this request started with: a hot reload may swap ``state.guard`` meanwhile."""
    record: AccessRecord
    started: float
    model_label: str = UNKNOWN_MODEL


def _finish(ctx: _Ctx, response: web.StreamResponse) -> web.StreamResponse:
    rec = ctx.record
    rec.status = response.status
    rec.duration_ms = round((time.perf_counter() - ctx.started) * 1000, 3)
    m = ctx.state.metrics
    m.child(m.requests, ctx.model_label, str(response.status)).inc()
    m.child(m.duration, ctx.model_label).observe(time.perf_counter() - ctx.started)
    rec.emit()
    return response


async def handle_inference(request: web.Request, *, chat: bool) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    started = time.perf_counter()
    request_id = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    guard = state.guard
    record = AccessRecord(request_id=request_id, method=request.method, path=request.path)
    ctx = _Ctx(state, guard, record, started)
    rt = state.runtime
    try:
        principal = await guard.authenticate(request.headers)
        try:
            raw = await read_limited(request, limit=rt.config.bbr.max_request_body_bytes)
            body = parse_body(raw, chat=chat, header_model=request.headers.get(MODEL_HEADER))
        except BodyTooLarge as exc:
            return _finish(
                ctx, error_response(413, message=str(exc), error_type="invalid_request_error", code=413)
            )
        except BadRequestBody as exc:
            return _finish(
                ctx,
                error_response(400, message=exc.message, error_type="invalid_request_error", param=exc.param),
            )
        route = rt.router.resolve(body.model) if body.model else None
        if route is None:
            target = state.default_backend.address(rt.config.bbr.default_backend)
            if target is not None:
                ctx.record.model, ctx.record.scheduler = body.model, DEFAULT_BACKEND_SCHEDULER
                ctx.record.stream = body.stream
                guard.authorize(principal, model=body.model or "")
                await guard.admit(
                    principal, model=body.model or "", est_tokens=body.prompt_tokens + (body.max_tokens or 0)
                )
                return await _proxy_to_default_backend(request, ctx, target, body, principal)
            return _finish(
                ctx,
                error_response(
                    404,
                    message=NO_MATCH_MESSAGE,
                    error_type="invalid_request_error",
                    param="model",
                    code="model_not_found",
                ),
            )
        ctx.model_label = route.model
        ctx.record.model, ctx.record.base_model, ctx.record.scheduler = (
            route.model,
            route.base_model,
            route.scheduler,
        )
        ctx.record.stream = body.stream
        guard.authorize(principal, model=route.model)
        await guard.admit(
            principal, model=route.model, est_tokens=body.prompt_tokens + (body.max_tokens or 0)
        )
        sr = rt.schedulers[route.scheduler]
        return await _schedule_and_proxy(request, ctx, sr, route, body, principal)
    except GuardDenied as denied:
        return _finish(
            ctx,
            error_response(
                denied.status,
                message=denied.message,
                error_type=denied.error_type,
                code=denied.code,
                headers=denied.headers,
            ),
        )


def _decide(ctx: _Ctx, sr: SchedulerRuntime, rreq: RoutingRequest) -> RoutingDecision:
    t0 = time.perf_counter()
    decision = sr.scheduler.pick(rreq, sr.pool.views(), now=ctx.state.clock())
    elapsed = time.perf_counter() - t0
    ctx.state.metrics.child(ctx.state.metrics.decision, sr.spec.name).observe(elapsed)
    ctx.record.decision_us = round(elapsed * 1e6, 1)
    ctx.record.reason = decision.reason or None
    ctx.record.scores = decision.scores or None  # rounded only if the access log is written
    return decision


async def _schedule_and_proxy(
    request: web.Request,
    ctx: _Ctx,
    sr: SchedulerRuntime,
    route: ModelRoute,
    body: InferenceBody,
    principal: Principal,
) -> web.StreamResponse:
    state = ctx.state
    rreq = RoutingRequest(
        request_id=ctx.record.request_id,
        model=route.model,
        base_model=route.base_model,
        prefix_text=body.prefix_text,
        prompt_tokens=body.prompt_tokens,
        max_tokens=body.max_tokens,
        adapter=route.adapter,
        tenant=principal.tenant,
    )
    decision = _decide(ctx, sr, rreq)
    if decision.kind is DecisionKind.SATURATED:
        retry = str(math.ceil(decision.retry_after_s or 1))
        state.metrics.child(state.metrics.rejections, route.model, "saturated").inc()
        return _finish(
            ctx,
            error_response(
                429,
                message=(
                    f"inference pool for {route.base_model!r} is saturated ({decision.reason}); "
                    f"retry after {retry}s"
                ),
                error_type="rate_limit_error",
                code="pool_saturated",
                headers={"Retry-After": retry},
            ),
        )
    if decision.kind is DecisionKind.NO_ENDPOINTS or decision.endpoint is None:
        state.metrics.child(state.metrics.rejections, route.model, "no_endpoints").inc()
        return _finish(
            ctx,
            error_response(
                503,
                message=f"no model server endpoint available for {route.base_model!r}: {decision.reason}",
                error_type="service_unavailable",
                code="no_endpoints",
            ),
        )
    strip = (
        ctx.guard.stripped_request_headers
        | {MODEL_HEADER, BASE_MODEL_HEADER}
        | {h.lower() for h in principal.forward_headers}
    )
    add = {
        **principal.forward_headers,
        "X-Gateway-Model-Name": route.model,
        "X-Gateway-Base-Model-Name": route.base_model,
        "X-Request-Id": ctx.record.request_id,
    }
    headers = upstream_headers(request.headers, strip=strip, add=add)
    candidates = [decision.endpoint, *decision.fallbacks][:MAX_ATTEMPTS]
    timeout_s = sr.route_timeout_s
    prepared: list[web.StreamResponse] = []
    result: ExchangeResult | None = None
    for attempt, key in enumerate(candidates, start=1):
        ep = sr.pool.states.get(key)
        if ep is None:
            continue
        ctx.record.attempts, ctx.record.endpoint = attempt, key
        ep.inflight += 1
        ep.inflight_tokens += body.prompt_tokens + (body.max_tokens or 0)
        ep.picks += 1
        state.metrics.child(state.metrics.picks, sr.spec.name, key).inc()
        ok = False
        connected = True
        try:
            async with asyncio.timeout(timeout_s):
                result = await exchange(
                    request,
                    session=request.app[SESSION_KEY],
                    endpoint=key,
                    body=body.raw,
                    headers=headers,
                    started=ctx.started,
                    connect_timeout_s=state.runtime.settings.connect_timeout_s,
                    idle_timeout_s=state.runtime.settings.stream_idle_timeout_s if body.stream else None,
                    response_headers={"X-Request-Id": ctx.record.request_id},
                    on_prepared=prepared.append,
                    keepalive_s=state.runtime.settings.sse_keepalive_interval_s,
                )
            ok = result.ok
        except ConnectFailed as exc:
            connected = False
            ctx.record.error = f"connect to {key} failed: {exc}"
            if attempt < len(candidates):
                state.metrics.child(state.metrics.retries, sr.spec.name).inc()
            continue
        except TimeoutError:
            ctx.record.error = f"routeTimeout {timeout_s:g}s exceeded"
            if prepared:
                await terminal_timeout(prepared[0], seconds=timeout_s or 0)
                state.metrics.child(state.metrics.stream_errors, ctx.model_label).inc()
                return _finish(ctx, prepared[0])
            return _finish(
                ctx,
                error_response(
                    504,
                    message=f"routeTimeout of {timeout_s:g}s exceeded waiting for {route.base_model!r}",
                    error_type="timeout",
                    code=504,
                ),
            )
        except ClientGone:
            _client_gone(ctx)
            return prepared[0] if prepared else web.Response(status=CLIENT_CLOSED)
        except asyncio.CancelledError:
            _client_gone(ctx)
            raise
        finally:
            ep.inflight -= 1
            ep.inflight_tokens -= body.prompt_tokens + (body.max_tokens or 0)
            if connected:
                _feedback(ctx, sr, key, result, ok)
        break
    if result is None:
        return _finish(
            ctx,
            error_response(
                502,
                message=(
                    f"could not connect to a model server for {route.base_model!r} "
                    f"after {ctx.record.attempts} attempts"
                ),
                error_type="upstream_error",
                code=502,
            ),
        )
    return await _complete(ctx, result, body=body, principal=principal, model=route.model)


async def _complete(
    ctx: _Ctx, result: ExchangeResult, *, body: InferenceBody, principal: Principal, model: str
) -> web.StreamResponse:
    """After the upstream exchange: metrics, errors, token accounting with the guard, access log."""
    m = ctx.state.metrics
    _observe(ctx, result)
    if result.error:
        ctx.record.error = result.error
        if result.streamed:
            m.child(m.stream_errors, ctx.model_label).inc()
    usage = result.usage or {}
    prompt_tokens = usage.get("prompt_tokens", body.prompt_tokens)
    completion_tokens = usage.get("completion_tokens", result.events)
    ctx.record.prompt_tokens, ctx.record.completion_tokens = prompt_tokens, completion_tokens
    with contextlib.suppress(GuardDenied):
        await ctx.guard.account(
            principal, model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    return _finish(ctx, result.response)


async def _proxy_to_default_backend(
    request: web.Request, ctx: _Ctx, target: str, body: InferenceBody, principal: Principal
) -> web.StreamResponse:
    """Forward, unscheduled, to ``spec.bbr.defaultBackend`` (see :mod:`igw.gateway.default_backend`)."""
    settings = ctx.state.runtime.settings
    ctx.record.endpoint, ctx.record.attempts = target, 1
    add = {**principal.forward_headers, "X-Request-Id": ctx.record.request_id}
    if body.model:
        add["X-Gateway-Model-Name"] = body.model
    strip = (
        ctx.guard.stripped_request_headers
        | {MODEL_HEADER, BASE_MODEL_HEADER}
        | {h.lower() for h in principal.forward_headers}
    )
    prepared: list[web.StreamResponse] = []
    try:
        result = await exchange(
            request,
            session=request.app[SESSION_KEY],
            endpoint=target,
            body=body.raw,
            headers=upstream_headers(request.headers, strip=strip, add=add),
            started=ctx.started,
            connect_timeout_s=settings.connect_timeout_s,
            idle_timeout_s=settings.stream_idle_timeout_s if body.stream else None,
            response_headers={"X-Request-Id": ctx.record.request_id},
            on_prepared=prepared.append,
            keepalive_s=settings.sse_keepalive_interval_s,
        )
    except ConnectFailed as exc:
        ctx.record.error = f"connect to default backend {target} failed: {exc}"
        return _finish(
            ctx,
            error_response(
                502,
                message=f"could not connect to the default backend {target}",
                error_type="upstream_error",
                code=502,
            ),
        )
    except ClientGone:
        _client_gone(ctx)
        return prepared[0] if prepared else web.Response(status=CLIENT_CLOSED)
    except asyncio.CancelledError:
        _client_gone(ctx)
        raise
    return await _complete(ctx, result, body=body, principal=principal, model=body.model or "")


def _client_gone(ctx: _Ctx) -> None:
    """The client went away: the upstream request was cancelled (its connection closed)."""
    m = ctx.state.metrics
    ctx.record.error = "client disconnected; upstream request cancelled"
    ctx.record.status = CLIENT_CLOSED
    m.child(m.client_disconnects, ctx.model_label).inc()
    m.child(m.requests, ctx.model_label, str(CLIENT_CLOSED)).inc()
    ctx.record.emit()


def _observe(ctx: _Ctx, result: ExchangeResult) -> None:
    m = ctx.state.metrics
    if result.ttft_s is not None:
        m.child(m.ttft, ctx.model_label).observe(result.ttft_s)
        ctx.record.ttft_ms = round(result.ttft_s * 1000, 3)
    itl = m.child(m.itl, ctx.model_label)
    for gap in result.gaps:
        itl.observe(gap)
    if result.usage:
        if "prompt_tokens" in result.usage:
            m.child(m.tokens, ctx.model_label, "in").inc(result.usage["prompt_tokens"])
        if "completion_tokens" in result.usage:
            m.child(m.tokens, ctx.model_label, "out").inc(result.usage["completion_tokens"])


def _feedback(ctx: _Ctx, sr: SchedulerRuntime, key: str, result: ExchangeResult | None, ok: bool) -> None:
    """Tell the scheduler how the request went (drain rate, measured speed)."""
    itl = None
    out_tokens = 0
    ttft = None
    if result is not None:
        usage = result.usage or {}
        out_tokens = usage.get("completion_tokens", result.events)
        ttft = result.ttft_s
        if result.gaps:
            itl = sum(result.gaps) / len(result.gaps)
        elif out_tokens >= 2:
            itl = (time.perf_counter() - ctx.started) / out_tokens
    sr.scheduler.on_complete(
        RequestOutcome(
            request_id=ctx.record.request_id,
            endpoint=key,
            ok=ok,
            ttft_s=ttft,
            itl_s=itl,
            prompt_tokens=ctx.record.prompt_tokens or 0,
            output_tokens=out_tokens,
        ),
        now=ctx.state.clock(),
    )
