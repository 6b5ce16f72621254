"""The inference routes (``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/responses``: :data:`~igw.gateway.inference_apis.INFERENCE_PATHS`): the whole request path.

authenticate -> read body (413) -> parse (400) -> canary rewrite (``spec.extensions.modelRewrites``)
-> body-based route (404) -> authorize -> admit -> context length (400) -> schedule (saturated: wait
in the flow-control band's queue when ``spec.extensions.flowControl`` is set, else 429 +
Retry-After; 503 no endpoints) -> forward (a refused attempt retried on the next-best endpoint per
``spec.extensions.routing.retry``; SSE relay; routeTimeout 504 / terminal event) -> account.

Requests that match no scheduler but have a ``spec.bbr.defaultBackend`` take the same forward path
with that one target and no scheduler. Telemetry (metrics, access log) goes through the request's
:class:`~igw.gateway.observer.RequestObserver`; error responses come from the one table in
:mod:`igw.gateway.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import os
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from igw.gateway.body_budget import RETRY_AFTER_S as BODY_RETRY_AFTER_S
from igw.gateway.body_budget import BodyHold
from igw.gateway.cache_salt import SALTED_APIS, SALTING_ENGINES, request_salt
from igw.gateway.decision_log import DEBUG_TOKEN_HEADER, DECISION_HEADER, DecisionLog, decision_header
from igw.gateway.default_backend import DEFAULT_BACKEND_SCHEDULER
from igw.gateway.emf_metrics import USAGE_UNREAD_CLIENT_GONE
from igw.gateway.endpoints import EndpointState
from igw.gateway.errors import (
    ANTHROPIC_REQUEST_ID_HEADER,
    SHOULD_RETRY_HEADER,
    anthropic_shaped,
    denial_response,
    gateway_error,
    sse_error_event,
)
from igw.gateway.event_tokens import TokensPerEvent
from igw.gateway.flow_gate import (
    HELD_BY_FLOW_CONTROL,
    MAX_QUEUE_MS_HEADER,
    BadQueueDeadline,
    EndpointSample,
    EndpointSamples,
    Refused,
    client_max_queue_s,
    endpoint_samples,
    flow_tenant,
    queued_size_bytes,
    request_head_bytes,
)
from igw.gateway.forwarded_answer import ForwardedAnswer, as_response
from igw.gateway.guards import GuardDenied, Principal, RequestGuard, caller_scope
from igw.gateway.hedged_search import LAST, NEXT, WIN, hedged
from igw.gateway.inference_apis import (
    ANTHROPIC_APIS,
    GENERATING_APIS,
    INFERENCE_PATHS,
    InferenceApi,
    anthropic_path,
)
from igw.gateway.log_throttle import RepeatThrottle
from igw.gateway.lora_field import LORA_PATH_ENGINES, lora_path_refusal
from igw.gateway.model_rewrite import retargeted
from igw.gateway.model_router import BASE_MODEL_HEADER, MODEL_HEADER, NO_MATCH_MESSAGE
from igw.gateway.observer import QUEUED_CLIENT_GONE, RequestObserver
from igw.gateway.request_body import (
    MAX_RESPONSE_ID_LENGTH,
    BadRequestBody,
    BodyBudgetFull,
    BodyTooLarge,
    DeclaredBodyTooLarge,
    InferenceBody,
    UnsupportedContentEncoding,
    check_content_encoding,
    estimated_tokens,
    parse_body,
    read_limited,
    received_whole,
    relayed_tokens,
    with_fields,
    with_leading_field,
)
from igw.gateway.response_ids import MINTING_ENGINES, believed, logged_id, logged_path, mint, minted_for
from igw.gateway.response_search import SEARCH_ASK_LEAST_S, SEARCH_TIMEOUT, SearchPlace, search_context
from igw.gateway.retries import refused_status, request_digest, retry_condition
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.serving import LIMITS_KEY, ServerLimits, refuse_rest_of_body
from igw.gateway.state import GatewayState
from igw.gateway.stream_usage import (
    RELAY_USAGE,
    RELAY_USAGE_HEADER,
    UNASKED_OPTIONS,
    USAGE_ENGINES,
    StreamUsage,
    with_usage_asked,
)
from igw.gateway.telemetry import CLIENT_CLOSED
from igw.gateway.tenant_fields import header_refusal_message, refusal_message, refused_field, refused_header
from igw.gateway.upstream import (
    UNPROVABLE_REQUEST_HEADERS,
    UPSTREAM_ACCEPT_ENCODING,
    WHOLE_ANSWER_BUFFER_BYTES,
    ClientGone,
    ConnectFailed,
    ExchangeResult,
    end_unfinished,
    exchange,
    names_itself,
    upstream_header_block,
    upstream_headers,
)
from igw.gateway.upstream_client import UpstreamPool
from igw.scheduling.plugins.context_length_filter import surely_too_long
from igw.scheduling.response_affinity import RESPONSE_SEARCH
from igw.scheduling.retry_policy import RetryCondition, retried_for
from igw.scheduling.retry_spread import spread_retry_after
from igw.scheduling.scheduler import PENDING_SCORES
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    RequestOutcome,
    RoutingDecision,
    RoutingRequest,
)

misnamed_log = logging.getLogger("igw.gateway.misnamed_usage")
"""The warning for a retrieval's answer that shows usage under another response's id (not settled,
:func:`_forward`): the first per pod, then one a minute at most with the count held
(:class:`~igw.gateway.log_throttle.RepeatThrottle` keyed by the pod)."""
misnamed_log.addFilter(RepeatThrottle(keyed_args=1))
STATE_KEY = web.AppKey("igw_state", GatewayState)
SESSION_KEY = web.AppKey("igw_upstream_session", UpstreamPool)
REQUEST_ID_HEADER: Final = "x-request-id"
REQUEST_ID_KEY: Final = web.RequestKey("igw_request_id", str)
"""Where the app's middleware leaves the request's id (see :func:`request_id_for`)."""
DEFAULT_LIMITS: Final = ServerLimits()
_CLOSE: Final = {"Connection": "close"}
_GATEWAY_REQUEST_HEADERS: Final = frozenset(
    {MODEL_HEADER, BASE_MODEL_HEADER, DEBUG_TOKEN_HEADER.lower(), RELAY_USAGE_HEADER}
)
"""Request headers the gateway owns: a client's copy is never forwarded (lower case)."""
_CHARSET: Final = "utf-8"
_UNDECODABLE: Final = "surrogateescape"
_STRIPPED: dict[frozenset[str], tuple[frozenset[str], frozenset[bytes]]] = {}
"""A guard's stripped request headers -> with the gateway's own added, as text and as field names."""


_UNPROVABLE_FIELDS: Final = frozenset(name.encode() for name in UNPROVABLE_REQUEST_HEADERS)
""":data:`~igw.gateway.upstream.UNPROVABLE_REQUEST_HEADERS` as the raw header block strips them."""


def _stripped(guard_strips: frozenset[str]) -> tuple[frozenset[str], frozenset[bytes]]:
    """The request headers never forwarded (besides the hop-by-hop set) for a guard that strips
    ``guard_strips``, made once per distinct set (a hot reload may build a new guard)."""
    found = _STRIPPED.get(guard_strips)
    if found is None:
        names = guard_strips | _GATEWAY_REQUEST_HEADERS
        if len(_STRIPPED) >= 64:
            _STRIPPED.clear()
        found = _STRIPPED[guard_strips] = (
            names,
            frozenset(name.encode(_CHARSET, _UNDECODABLE) for name in names),
        )
    return found


_CLIENT_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""A client-supplied ``X-Request-Id`` is reused only when it looks like an id (it is echoed back and
logged); anything else - a token pasted by mistake, control bytes, a 10 kB value - gets a fresh id."""


_FRESH_IDS: list[str] = []
"""Fresh request ids drawn ahead: 128 random bits each (a uuid4's randomness and shape without
building a UUID object), taken from one ``os.urandom`` read per :data:`_IDS_PER_DRAW` requests
instead of a system call per request. Emptied in a forked child, which must not reuse its parent's."""
_IDS_PER_DRAW: Final = 256
os.register_at_fork(after_in_child=_FRESH_IDS.clear)


def fresh_request_id() -> str:
    """A new random request id (32 lower-case hex digits)."""
    if not _FRESH_IDS:
        drawn = os.urandom(16 * _IDS_PER_DRAW).hex()
        _FRESH_IDS.extend([drawn[i : i + 32] for i in range(0, len(drawn), 32)])
    return _FRESH_IDS.pop()


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's ``X-Request-Id`` when it is a plausible id, else a fresh one."""
    given = headers.get(REQUEST_ID_HEADER)
    if given and _CLIENT_REQUEST_ID.fullmatch(given) and given.count(".") < 2:  # not a JWT
        return given
    return fresh_request_id()


UPSTREAM_SUFFIX_HEX: Final = 16
"""Hex digits of the request's own key appended to a client's id in the model server's copy."""


def upstream_request_id(request_id: str, *, key: str, headers: Mapping[str, str]) -> str:
    """The ``X-Request-Id`` a model server gets for a request the gateway names ``request_id``
    (whose scheduler key is ``key``, 32 fresh hex digits): a client's own id with ``-`` and the
    first :data:`UPSTREAM_SUFFIX_HEX` digits of ``key`` after it, a fresh id as it is.

    Why: vLLM takes the header as the engine's id of the request (``_base_request_id``, whatever
    its flags; ``--enable-request-id-headers`` only echoes it), and its releases before
    vllm-project/vllm#27987 (Nov 2025) refuse a second request under an id in flight (400 ``Request
    id ... already running``; an abort racing a reuse could also end or leak the other request,
    vllm-project/vllm#23697). Before session s40 the client's id went to the pod as it came: two
    requests under one id (a client's session id, a retrying SDK) on one pod failed, and a tenant
    knowing the ids another tenant sends could keep requests in flight under them so that
    tenant's were refused. The client's id still leads the pod's, so the pod's log lines are found
    by it; the client gets its own id back (the gateway's answer and access log keep it)."""
    if headers.get(REQUEST_ID_HEADER) != request_id:
        return request_id  # the gateway's own: fresh, unique
    return f"{request_id}-{key[:UPSTREAM_SUFFIX_HEX]}"


@dataclass(slots=True)
class _Prepared:
    """A routed body as prepared for one pool's engine (:func:`_prepared_for`), and what forwarding
    it needs to know of that preparation."""

    body: InferenceBody
    strip_usage: bool
    """The gateway asked the engine for the stream's usage chunk and the client did not
    (:attr:`_Forward.strip_usage`)."""
    band: int | None
    """The request's band where the pool's engine preempts for a batch slot (:attr:`_Forward.priority`)."""
    minted: str | None
    """The stored response's id written into the body (:attr:`_Forward.minted`)."""


@dataclass(slots=True)
class _Version:
    """Another canary version's pool asked in a continuation's search (since session s49)."""

    sr: SchedulerRuntime
    """Its scheduler: accounting and feedback."""
    model: str
    base_model: str
    prepared: _Prepared
    """The body with this version's ``model``, prepared for this pool's engine."""
    routing: RoutingRequest
    """The request as this pool's scheduler routes it (its model, adapter and salt): picked among
    the pod asked alone when sent there (:meth:`~igw.scheduling.scheduler.Scheduler.pick_sent`)."""


@dataclass(slots=True, kw_only=True, init=False)
class _Forward:
    """Where and how one request is forwarded (a scheduled pick, the default backend, or the pod
    storing a response). The
    keyword-only ``__init__`` is written out so that the mypyc build compiles it (as
    :class:`~igw.scheduling.values.RoutingRequest`'s)."""

    candidates: list[str]
    sr: SchedulerRuntime | None
    """The scheduler that picked ``candidates`` (in-flight accounting and feedback), or ``None``."""
    add_headers: dict[str, str]
    timeout_s: float | None
    what: str
    """What the client asked for, for error messages (``'model-x'`` or ``the default backend``)."""
    response_headers: dict[str, str]
    """Added to the client's response (the opt-in decision summary); a fresh dict by default."""
    priority: int | None
    """The request's flow-control band (``None`` without flow control): counted per endpoint while
    in flight where the pool's engine preempts by priority."""
    adapter: str | None
    """The LoRA adapter the request names (``None``: the base model): a 404 for it tells the scheduler
    that endpoint does not serve it."""
    method: bytes
    """The upstream request's method: ``POST``, but for a stored response's retrieval or deletion."""
    generates: bool
    """The model server generates for this request (its usage is counted: token metrics, token rate
    limits); not for a stored response's retrieval, whose answer repeats the stored usage."""
    search_for: str | None
    """The stored response's id, for a continuation or a retrieval whose response's pod no scheduler
    here knows (else ``None``): a 404 from one candidate (the response is not stored there) moves on
    to the next without counting as a retry (``candidates`` then holds the pool, or for a retrieval
    the pools the caller may use, up to :data:`RESPONSE_SEARCH_LIMIT`); a retrieval's search also
    passes a pod it cannot reach (a pod that is gone took its stored responses with it). Bounded by
    :mod:`igw.gateway.response_search`."""
    search_within: str
    """The context a search's outcome is listed within (:func:`search_context`: the caller's scope,
    the pools searched); ``""`` when there is no search."""
    routed_body: bytes
    """The body as the client sent it and it was routed (before an engine priority was written into
    it): a failure blamed on the request is recognised by its digest (:mod:`igw.scheduling.outliers`)."""
    search_pools: dict[str, str]
    """A retrieval's search (``sr`` is ``None``): candidate -> its scheduler's name, the label of the
    search's ``igw_upstream_retries_total``; empty otherwise."""
    strip_usage: bool
    """The gateway asked the engine for the stream's usage chunk and the client did not: the relay
    reads it and does not write it (:mod:`igw.gateway.stream_usage`)."""
    settles: str | None
    """A stored response's retrieval or cancel (else ``None``): the response's id, under which the
    output bound charged for it in the background is held; an answer showing its usage settles that
    charge (:meth:`RequestGuard.settle`)."""
    minted: str | None
    """The stored response's id the gateway wrote into the request (``request_id``,
    :mod:`igw.gateway.response_ids`), or the one a retrieval or cancel names in its path, else
    ``None``: the only id an answer is believed to name (a retrieval's answer naming another id
    settles nothing since session s44)."""
    carried: bool
    """Set by :func:`_forward` for a retrieval or cancel (``settles``): the answer relayed carries
    that response (names its id), the only answer whose pod a search remembers as its holder."""
    holder: str | None
    """A request about a response whose pod is remembered (a retrieval not streamed since session
    s47; a streamed replay, a deletion, a cancel since s48): that pod, ``candidates``' first, asked
    alone and bounded as a search's attempt (a replay's head alone), its answer in time the client's;
    silent, the other pods are searched (``candidates``' rest; the holder not asked again) within
    the search's deadline. ``None``: no such request."""
    elsewhere: dict[str, _Version]
    """A continuation's search past its canary version's pool (since session s49): each candidate
    of another version's pool -> that version (:class:`_Version`: its scheduler, its model, the body
    prepared for its engine); empty otherwise."""

    def __init__(
        self,
        *,
        candidates: list[str],
        sr: SchedulerRuntime | None,
        add_headers: dict[str, str],
        timeout_s: float | None,
        what: str,
        response_headers: dict[str, str] | None = None,
        priority: int | None = None,
        adapter: str | None = None,
        method: bytes = b"POST",
        generates: bool = True,
        search_for: str | None = None,
        search_within: str = "",
        routed_body: bytes = b"",
        search_pools: dict[str, str] | None = None,
        strip_usage: bool = False,
        settles: str | None = None,
        minted: str | None = None,
        carried: bool = False,
        holder: str | None = None,
        elsewhere: dict[str, _Version] | None = None,
    ) -> None:
        self.candidates = candidates
        self.sr = sr
        self.add_headers = add_headers
        self.timeout_s = timeout_s
        self.what = what
        self.response_headers = {} if response_headers is None else response_headers
        self.priority = priority
        self.adapter = adapter
        self.method = method
        self.generates = generates
        self.search_for = search_for
        self.search_within = search_within
        self.routed_body = routed_body
        self.search_pools = {} if search_pools is None else search_pools
        self.strip_usage = strip_usage
        self.settles = settles
        self.minted = minted
        self.carried = carried
        self.holder = holder
        self.elsewhere = {} if elsewhere is None else elsewhere


async def handle_inference(
    request: web.Request, *, api: InferenceApi, state: GatewayState | None = None
) -> web.StreamResponse | ForwardedAnswer:
    """Serve one inference request: a model server's answer (forwarded as it came, or relayed as a
    stream) or the gateway's error. A :class:`ForwardedAnswer` is written by the lean server as it
    is; for aiohttp it is converted (:meth:`ForwardedAnswer.to_response`). ``state``: the app's
    (the lean routes pass it), else looked up in ``request.app``."""
    if state is None:
        state = request.app[STATE_KEY]
    request_id = request.get(REQUEST_ID_KEY) or request_id_for(request.headers)
    obs = RequestObserver(
        state.metrics,
        request_id=request_id,
        method=request.method,
        path=request.path,
        key=fresh_request_id(),  # the scheduler's: the client's id may name several requests
    )
    if state.tracing is not None:  # tracing hook
        obs.trace = state.tracing.start(
            request.headers, method=request.method, path=request.path, started=obs.started
        )
    guard = state.guard  # a hot reload may swap state.guard while this request runs
    try:
        principal = await guard.authenticate(request.headers)
        obs.authenticated()  # tracing hook
        # The body's bytes are counted from here until queued or forwarded (igw.gateway.body_budget);
        # a declared length over the body limit is refused unread, so it takes nothing.
        length = request.content_length or 0
        hold = state.body_budget.take(
            length if length <= state.runtime.config.bbr.max_request_body_bytes else 0
        )
        if hold is None:
            return obs.finish(_server_busy(request, state, obs.request_id))
        try:
            routed = await _route(request, state, guard, principal, obs, api=api, hold=hold)
        finally:
            hold.release()
        if not isinstance(routed, tuple):  # an error answer (a tuple check: StreamResponse's is an ABC's)
            return obs.finish(routed)
        forward, body = routed
        # the lean server's request names its handler's task; aiohttp's (whose ``task`` is its
        # connection's) does not: the registry then looks the calling task up
        task = state.inflight.enter(getattr(request, "handler_task", None))
        try:
            if forward.search_for is None:
                return await _forward(request, state, guard, principal, obs, body, forward)
            # A continuation searching the pool holds one of the process's search places (of its
            # caller scope's share) while it searches: given back when the forward ends or
            # search_timeout_s after it was taken (a pod that has not answered 404 by then is
            # generating the answer; until session s46 held for the whole generation). The place
            # was free before the pick (_search_refusal); taken since, while the pick waited in
            # flow control's queue, the request goes to the pick's own candidates only (the retry
            # policy's attempts), as in a one-pod pool.
            searches = state.response_searches
            place = searches.take(_search_scope(principal), release_after_s=searches.search_timeout_s)
            if place is None:
                forward.search_for = None
            try:
                return await _forward(request, state, guard, principal, obs, body, forward)
            finally:
                if place is not None:
                    place.release()
        finally:
            state.inflight.leave(task)
            # Interpreted, a cancelled handler's traceback keeps this frame, whose ``task`` holds
            # that CancelledError: a cycle that kept the whole request (see LeanRequestHandler._serve).
            task = None
    except GuardDenied as denied:
        return obs.finish(denial_response(denied, request_id=obs.request_id))


def _authorize_target(
    guard: RequestGuard, principal: Principal, *, model: str, requested: str | None
) -> None:
    """Authorize ``model``, the model a request is routed to; ``requested`` is the name the client
    sent when a canary rule (``modelRewrites``) replaced it.

    A refusal names the model the client sent, not the canary's target: the target is the
    operator's (``GET /v1/models`` hides it from a caller not allowed it), and before session s42
    any caller learnt a canary's target names by calling the name it rewrites (403 ``tenant 't' is
    not allowed to use model 'secret'``)."""
    try:
        guard.authorize(principal, model=model)
    except GuardDenied as denied:
        if requested is None or repr(model) not in denied.message:
            raise
        raise GuardDenied(
            status=denied.status,
            message=denied.message.replace(repr(model), repr(requested)),
            error_type=denied.error_type,
            code=denied.code,
            headers=denied.headers,
        ) from None


def _search_scope(principal: Principal) -> str | None:
    """The scope whose share of the search places a search of ``principal``'s takes: its caller
    scope, none for scope ``""`` (a gateway without authentication: every caller one scope, nobody to
    share with; the process's limit alone). As the global router's."""
    return caller_scope(principal) or None


def _search_refusal(
    state: GatewayState,
    response_id: str,
    scope: str | None,
    *,
    within: str,
    request_id: str,
    param: str | None = None,
) -> web.Response | None:
    """The answer to a request that would search the pods for stored response ``response_id``, when
    it must not (:mod:`igw.gateway.response_search`): 404 ``response_not_found`` for an id such a
    search found nowhere moments ago (a search ``within`` the same context: this caller scope's, of
    these pools; since session s46, before any caller's of any pools), 503 ``response_search_busy``
    when the process runs as many searches as it may, or ``scope`` its share of them (since session
    s46; before, one tenant looping made-up ids took every place), its ``Retry-After`` 1 s spread by
    :func:`_retry_after`, as every tier-1 refusal's (a fixed 1 until session s43); else ``None``."""
    searches = state.response_searches
    if searches.recently_unfound(response_id, now=state.clock(), within=within):
        message = (
            f"no model server this gateway routes to for you stores response {response_id!r} "
            f"(every one asked answered 404 less than {searches.ttl_s:g}s ago)"
        )
        state.metrics.searches_refused.labels("unfound").inc()
        return gateway_error("response_not_found", message, param=param, request_id=request_id)
    busy = searches.busy(scope)
    if busy is not None:
        state.metrics.searches_refused.labels(busy).inc()
        # a search lasts a pod round trip or a few: 1 s, spread like every other refusal's wait so
        # that the continuations refused in one burst do not all come back in the same second
        retry_after = _retry_after(state, 1)
        whose = (
            f"{searches.limit} others"
            if busy == "busy"
            else f"{searches.per_scope} others of yours (your share of its searches)"
        )
        message = (
            f"response {response_id!r} is not known to this gateway replica and it is already searching "
            f"the model servers for {whose}; retry after {retry_after}s"
        )
        return gateway_error(
            "response_search_busy",
            message,
            param=param,
            request_id=request_id,
            headers={"Retry-After": retry_after},
        )
    return None


def _stores(rt: GatewayRuntime, response_id: str) -> Callable[[str], bool]:
    """Whether the pool serving a canary target is known to store ``response_id``: a continuation
    follows its response to that target (``ModelRewrites.split``), since the draw alone sent it to
    the other version's pool, where no pod has it (404), as often as that version's share."""

    def holds(target: str) -> bool:
        route = rt.router.resolve(target)
        sr = rt.schedulers.get(route.scheduler) if route is not None else None
        return sr is not None and sr.scheduler.responses.endpoint_of(response_id) is not None

    return holds


def _stored_outside(rt: GatewayRuntime, response_id: str, targets: tuple[str, ...]) -> str | None:
    """The model of the pool that is known to store ``response_id`` when that pool serves none of
    a canary rule's ``targets`` (its version left the rule by a reload, its scheduler kept); ``None``
    when no pool of this gateway knows the response (made through another replica: searched for)."""
    serving = {route.scheduler for t in targets if (route := rt.router.resolve(t)) is not None}
    for name, sr in rt.schedulers.items():
        if name not in serving and sr.scheduler.responses.endpoint_of(response_id) is not None:
            return sr.spec.model_name
    return None


def _version_left(
    obs: RequestObserver, response_id: str, requested: str, named: str | None, rid: str
) -> web.Response:
    """404 ``response_not_found`` for a continuation whose response is stored by a version that its
    canary rule no longer lists (``named``: that version's model, ``None`` for a caller that may not
    use it). No version the rule lists stores it, so until session s50 the request was forwarded to
    the drawn one's pod, whose bare 404 ("not found") did not say the conversation still exists."""
    obs.rejected("response_not_found")
    where = f"model {named!r}" if named is not None else "a version"
    message = (
        f"response {response_id!r} is stored by {where}, which the canary rule for {requested!r} does "
        "not route to (a version a reload removed from it): none of the rule's versions can continue it"
    )
    if named is not None:
        message += f"; continue it by sending model {named!r}"
    return gateway_error("response_not_found", message, param="previous_response_id", request_id=rid)


def _has_fresh_endpoint(rt: GatewayRuntime, now: float) -> Callable[[str], bool]:
    """Whether the pool serving a canary target has an endpoint with fresh metrics: a target whose
    pool has none (scaled to zero, every pod gone) gives its draw to one that has
    (``ModelRewrites.split``); before session s48 that target's whole share was answered 503
    ``no_endpoints`` or 502 while the other version's pods were healthy."""

    def usable(target: str) -> bool:
        route = rt.router.resolve(target)
        sr = rt.schedulers.get(route.scheduler) if route is not None else None
        if sr is None:  # not a pool of this gateway's: nothing to judge it by
            return True
        fresh = sr.scheduler.is_fresh
        return any(fresh(view, now) for view in sr.pool.views())

    return usable


def _other_versions(
    rt: GatewayRuntime,
    guard: RequestGuard,
    principal: Principal,
    targets: tuple[str, ...],
    drawn: SchedulerRuntime,
    lora_path: str | None,
) -> list[tuple[str, SchedulerRuntime]]:
    """The canary ``targets`` (a continuation's rule's, :attr:`~igw.gateway.model_rewrite.Split.targets`)
    whose pools besides ``drawn`` a search for the response continued asks, in the rule's order: each
    target with its scheduler, one per pool, only those ``principal`` may use. A response this replica
    does not know (made through another replica, before a restart) may be stored by any version's pod;
    until session s49 only the drawn version's pool was searched, and a conversation another version
    stored answered 404 as often as the draw missed it.

    Nor a target the client's own ``lora_path`` would be refused for (:func:`lora_path_refusal`, as
    for the drawn route): an SGLang pod serves the adapter ``lora_path`` names whatever the body's
    ``model``, so until session s49's follow-up an adapter canary sent another version's pod an
    adapter checked only against the drawn version's."""
    found: list[tuple[str, SchedulerRuntime]] = []
    seen = {drawn.spec.name}
    for target in targets:
        route = rt.router.resolve(target)
        other = rt.schedulers.get(route.scheduler) if route is not None else None
        if other is None or other.spec.name in seen or not guard.may_use(principal, model=target):
            continue
        if (
            route is not None
            and lora_path_refusal(lora_path, adapter=route.adapter, model=route.model) is not None
        ):
            continue
        seen.add(other.spec.name)
        found.append((target, other))
    return found


def _version_unready(
    state: GatewayState, obs: RequestObserver, response_id: str, model: str, rid: str
) -> web.Response:
    """503 ``no_endpoints`` for a continuation whose canary version (``model``) stores the response
    and has no usable endpoint (:attr:`~igw.gateway.model_rewrite.Split.unready`): no other version's
    pod stores it, so moved there (until session s49) it was answered 404 ``response_not_found`` for a
    conversation that still exists. ``Retry-After`` as the scheduler's ``no_endpoints``."""
    return _no_endpoints(
        state,
        obs,
        f"no model server endpoint available for {model!r}, the version that stores response "
        f"{response_id!r} (no other can continue it): none is ready",
        rid,
    )


def _no_endpoints(state: GatewayState, obs: RequestObserver, cause: str, rid: str) -> web.Response:
    """503 ``no_endpoints``: ``cause``, then when to come back. ``Retry-After`` as a 429's, from
    ``retryAfter.minSeconds`` and spread (before session s48: none, so the SDKs' retries came back on
    their own short backoff, all at once, while the pool scaled)."""
    obs.rejected("no_endpoints")
    retry = _retry_after(state, state.runtime.settings.retry_after_min_s)
    message = f"{cause}; retry after {retry}s"
    return gateway_error("no_endpoints", message, headers={"Retry-After": retry}, request_id=rid)


def _not_yours(response_id: str, *, request_id: str, param: str | None = None) -> web.Response:
    """404 ``response_not_found`` for a response id the gateway minted for another caller
    (:mod:`igw.gateway.response_ids`): decided from the id alone, before any pod is asked."""
    message = (
        f"response {response_id!r} was not made for you: a stored response is read, continued, "
        "cancelled and deleted only by callers of the tenant (without a tenant claim, the subject) "
        "that made it"
    )
    return gateway_error("response_not_found", message, param=param, request_id=request_id)


async def handle_anthropic_inference(
    request: web.Request, *, api: InferenceApi, state: GatewayState | None = None
) -> web.StreamResponse | ForwardedAnswer:
    """:func:`handle_inference` for an API of Anthropic's shape (:data:`ANTHROPIC_APIS`): the
    gateway's own errors re-rendered in that shape (:func:`anthropic_shaped`), the model server's
    answers as they came."""
    answer = await handle_inference(request, api=api, state=state)
    return anthropic_shaped(answer) if isinstance(answer, web.Response) else answer


RESPONSE_SEARCH_LIMIT: Final = 32
"""At most this many pods are asked for a continuation or a stored response's retrieval whose
response's pod is not known here (a 404 each is about a round trip on the pool's network: a bound on
what one request costs)."""


def _tenant_refusal(
    request: web.Request, body: InferenceBody, principal: Principal, rid: str
) -> web.Response | None:
    """The answer to an authenticated request carrying a body field or a header no tenant may send
    to a model server that serves every tenant (:mod:`igw.gateway.tenant_fields`: code for it to
    run, its own request id, a stored session, a KV-cache transfer, a data-parallel rank; the
    headers by which SGLang and vLLM set them) and ``allowedEngineFields`` does not allow: 400
    naming the field or header. ``None``: nothing refused. Without authentication (no tenants:
    network controls only) the request goes to the model server, whose own flags decide."""
    if not principal.authenticated:
        return None
    allowed = principal.engine_fields
    field = refused_field(body.tenant_fields, allowed) if body.tenant_fields else None
    if field is not None:
        return gateway_error("invalid_request", refusal_message(field), param=field, request_id=rid)
    header = refused_header(request.headers.keys(), allowed)
    if header is not None:
        return gateway_error("invalid_request", header_refusal_message(header), param=header, request_id=rid)
    return None


NO_BODY: Final = InferenceBody(
    raw=b"", model=None, stream=False, prefix_text="", prompt_tokens=0, max_tokens=None
)
"""The body of a request that sends none (a stored response's retrieval)."""


async def handle_stored_response(request: web.Request) -> web.StreamResponse:
    """``GET`` / ``DELETE /v1/responses/{response_id}``, ``POST .../cancel``, ``GET .../input_items``:
    forwarded, unscheduled, to the pod that stored the response (the Responses API's background mode
    polls and resumes a response there; no other pod holds it). The pod is the one this gateway's
    schedulers remember (:mod:`igw.scheduling.response_affinity`), authorized as a request for its
    pool's model. A response nobody here remembers (made through another gateway replica, or before
    this one restarted) is searched for among the pods of the pools the caller may use, a 404 or an
    answer naming another response moving on to the next pod (:data:`RESPONSE_SEARCH_LIMIT` at most);
    the pod whose answer carries it (its id; input items: a list, no id) is remembered.
    None has it: the last pod's 404 (a pod the search stopped waiting for, since session s46: its 504,
    :mod:`igw.gateway.response_search`); no pool to ask: a 404 ``response_not_found``. An answer naming
    another response is never relayed (since session s45): the 404 of a pod before it, else the
    gateway's ``response_not_found`` (not a streamed one, relayed as its events arrive). ``?stream=true``
    (resuming a background response's events) is relayed as a stream."""
    state = request.app[STATE_KEY]
    request_id = request.get(REQUEST_ID_KEY) or request_id_for(request.headers)
    # the path logged without the response's id (igw.gateway.response_ids.logged_path)
    path = logged_path(request.path)
    obs = RequestObserver(state.metrics, request_id=request_id, method=request.method, path=path)
    if state.tracing is not None:
        # a server span as an inference request's, named by the route's template (since session
        # s50; before, none: the router's attempt span had no child and the pod got its context)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else path
        obs.trace = state.tracing.start(
            request.headers, method=request.method, path=path, started=obs.started, route=route
        )
    guard = state.guard
    try:
        principal = await guard.authenticate(request.headers)
        obs.authenticated()  # tracing hook
        response_id = request.match_info["response_id"]
        if len(response_id) > MAX_RESPONSE_ID_LENGTH:  # no engine makes such an id: not searched for
            message = f"no response has an id longer than {MAX_RESPONSE_ID_LENGTH} characters"
            return obs.finish(gateway_error("response_not_found", message, request_id=obs.request_id))
        if "/" in response_id:
            # Sent as %2F: aiohttp decodes it into the id, the engines' servers (uvicorn) into the path
            # they route, so `GET /v1/responses/<id>%2Finput_items` was an id of no minted shape here
            # (not checked) and another tenant's `/v1/responses/<id>/input_items` at the pod (before
            # session s39). No engine makes an id with a slash: not searched for.
            message = "no response has an id containing '/'"
            return obs.finish(gateway_error("response_not_found", message, request_id=obs.request_id))
        if minted_for(response_id, caller_scope(principal)) is False:
            return obs.finish(_not_yours(response_id, request_id=obs.request_id))
        found = stored_response_holder(state, response_id)
        stream = request.query.get("stream") == "true"
        holder = None
        if found is not None:
            sr, key = found
            guard.authorize(principal, model=sr.spec.model_name)
            # The holder bounded as a search's attempt, the other pods searched if it is silent (a
            # frozen holder held the client until responseTimeout, 600 s by default): a retrieval not
            # streamed since session s47 (hedged), a streamed replay (its answer head bounded), a
            # deletion and a cancel since s48 (one pod after another)
            holder = key
            others = _search_candidates(state, guard, principal)
            others.pop(key, None)
            ordered = state.response_searches.ordered(list(others), now=state.clock())
            owners = {key: sr, **{other: others[other] for other in ordered}}
        else:
            owners = _search_candidates(state, guard, principal)
            if not owners:
                message = (
                    f"no model server this gateway routes to for you is known to store response "
                    f"{response_id!r}, and there is no pool of a model you may use to search"
                )
                return obs.finish(gateway_error("response_not_found", message, request_id=obs.request_id))
        within = search_context(caller_scope(principal), (owner.spec.name for owner in owners.values()))
        # the holder's model (its pool's headers), the other pods searched or not
        models = {owner.spec.model_name for owner in owners.values()}
        if found is not None:
            models = {found[0].spec.model_name}
        model = next(iter(models)) if len(models) == 1 else None  # a search over several pools: no one model
        first = next(iter(owners.values()))
        obs.routed(model=model, base_model=model, scheduler=first.spec.name, stream=stream, configured=True)
        # generates nothing: the request limit alone (a tenant in debt for a background response's
        # bound may still poll for it)
        await guard.admit(principal, model=first.spec.model_name, est_tokens=None)
        obs.admitted()  # tracing hook
        candidates = list(owners)
        if found is None:  # pods a search stopped waiting for lately asked last (since session s47)
            candidates = state.response_searches.ordered(candidates, now=state.clock())
        plan = _Forward(
            candidates=candidates,
            sr=None,  # no pick: nothing for the scheduler to learn from a retrieval
            add_headers={} if model is None else {"X-Gateway-Model-Name": model, BASE_MODEL_HEADER: model},
            timeout_s=None,
            what=f"the model server storing {response_id!r}",
            method=request.method.encode("ascii"),
            generates=False,
            search_for=response_id,
            search_within=within,
            search_pools={key: owner.spec.name for key, owner in owners.items()},
            settles=response_id,
            minted=response_id,  # the only id an answer is believed to name: a settlement's proof
            holder=holder,
        )
        body = NO_BODY if not stream else dataclasses.replace(NO_BODY, stream=True)
        searching = found is None
        scope = _search_scope(principal)
        if searching:
            refused = _search_refusal(state, response_id, scope, within=within, request_id=obs.request_id)
            if refused is not None:
                return obs.finish(refused)
            state.response_searches.begin(scope)  # free: the check above, and no await since
        task = state.inflight.enter(None)
        try:
            answer = await _forward(request, state, guard, principal, obs, body, plan)
        finally:
            state.inflight.leave(task)
            if searching:
                state.response_searches.end(scope)
        answered_by = obs.record.endpoint
        # a deletion done past a silent remembered holder: the pod that did it stored the response,
        # remembered in the holder's place so that the next request about the id asks it (its 404 at
        # once), not the frozen holder first (until s48 the holder stayed remembered: that request
        # waited its search timeout, then got its 504); a deletion a search found is not remembered
        deleted_past = request.method == "DELETE" and found is not None
        if (
            (found is None or answered_by != found[1])  # found elsewhere than remembered: moved there
            and answer.status < 400
            and (request.method != "DELETE" or deleted_past)
            # the answer carries the response asked for (input items: a list, no id to compare):
            # an answer naming another (a pod's lie or mix-up) shows no holder (before s44 it did)
            and (plan.carried or request.path.endswith("/input_items") or deleted_past)
            and answered_by in owners
            and answered_by in owners[answered_by].pool.states  # not if it left its pool meanwhile
        ):
            owners[answered_by].scheduler.remember_response(response_id, answered_by, now=state.clock())
            if found is not None:  # the pod remembered did not answer in time: forgotten
                found[0].scheduler.disown_response(response_id, found[1], now=state.clock())
        return as_response(answer)
    except GuardDenied as denied:
        return obs.finish(denial_response(denied, request_id=obs.request_id))


def stored_response_holder(state: GatewayState, response_id: str) -> tuple[SchedulerRuntime, str] | None:
    """The scheduler and endpoint that stored ``response_id``, while that endpoint is in its pool."""
    for sr in state.runtime.schedulers.values():
        key = sr.scheduler.responses.endpoint_of(response_id)
        if key is not None and key in sr.pool.states:
            return sr, key
    return None


def _search_candidates(
    state: GatewayState, guard: RequestGuard, principal: Principal
) -> dict[str, SchedulerRuntime]:
    """The pods a search for a stored response asks, each with its scheduler: those of the pools
    whose model ``principal`` may use, pool by pool in the configuration's order, at most
    :data:`RESPONSE_SEARCH_LIMIT` (a pod in two pools is asked once)."""
    owners: dict[str, SchedulerRuntime] = {}
    for sr in state.runtime.schedulers.values():
        if not guard.may_use(principal, model=sr.spec.model_name):
            continue
        for key in sr.pool.states:
            if len(owners) >= RESPONSE_SEARCH_LIMIT:
                return owners
            owners.setdefault(key, sr)
    return owners


async def _route(
    request: web.Request,
    state: GatewayState,
    guard: RequestGuard,
    principal: Principal,
    obs: RequestObserver,
    *,
    api: InferenceApi,
    hold: BodyHold,
) -> tuple[_Forward, InferenceBody] | web.Response:
    """Read and parse the body, find the scheduler, admit, and pick: a forward plan or an error.
    ``hold``: the body's bytes in the process's budget, given back before the request waits in flow
    control's queue (which counts them against its own ``maxBytes``)."""
    rt = state.runtime
    rid = obs.request_id
    try:
        check_content_encoding(request.headers)
        max_bytes = rt.config.bbr.max_request_body_bytes
        if request.content.is_eof():  # the body arrived with the head (the usual case): no timer
            raw = received_whole(request, limit=max_bytes)
        else:
            async with asyncio.timeout(_body_timeout_s(request)):
                raw = await read_limited(request, limit=max_bytes, hold=hold)
        body = parse_body(raw, api=api, header_model=request.headers.get(MODEL_HEADER))
    except TimeoutError:
        message = f"request body not received within {_body_timeout_s(request):g}s"
        return gateway_error("request_timeout", message, request_id=rid, headers=_CLOSE)
    except BodyTooLarge as too_large:
        closing = _CLOSE if isinstance(too_large, DeclaredBodyTooLarge) else None  # the body stays unread
        return gateway_error("request_too_large", str(too_large), request_id=rid, headers=closing)
    except BodyBudgetFull:
        return _server_busy(request, state, rid)
    except UnsupportedContentEncoding as coded:
        accept = {"Accept-Encoding": coded.accepted()}
        return gateway_error(
            "unsupported_content_encoding", coded.message, param=coded.HEADER, request_id=rid, headers=accept
        )
    except BadRequestBody as bad_body:
        return gateway_error("invalid_request", bad_body.message, param=bad_body.param, request_id=rid)
    continues = body.previous_response_id
    if continues is not None and minted_for(continues, caller_scope(principal)) is False:
        return _not_yours(continues, request_id=rid, param="previous_response_id")
    unready = False  # the version storing the response continued has no usable endpoint (s49)
    versions: tuple[str, ...] = ()  # a continuation's canary targets: the search's pools (s49)
    left: tuple[str, str] | None = None  # the name sent, and a version storing it that left its rule (s50)
    if body.model and rt.rewrites.configured:
        # `stickyBy: tenant` keys by the tenant flow control queues the request under: the token's
        # claim, the fairness header only where the gateway authenticates nobody, and none (a random
        # draw) for a verified token without a tenant claim, whose caller would otherwise pick its
        # target by picking the header's value.
        tenant = flow_tenant(principal.tenant, principal.authenticated, request.headers) or None
        holds = None if continues is None else _stores(rt, continues)
        split = rt.rewrites.split(
            body.model,
            headers=request.headers,
            tenant=tenant,
            rng=state.rng,
            holds=holds,
            usable=_has_fresh_endpoint(rt, state.clock()),
        )
        if split is not None:
            obs.on_finish = state.rewrite_metrics.on_finish(split)
            unready = split.unready
            versions = split.targets if continues is not None else ()
            if continues is not None and holds is not None and not any(map(holds, split.targets)):
                stored_by = _stored_outside(rt, continues, split.targets)
                left = None if stored_by is None else (body.model, stored_by)
            if split.target != body.model:
                obs.rewritten(body.model, named=split.named)
                body = retargeted(body, split.target)
    est_tokens = estimated_tokens(body)
    route = rt.router.resolve(body.model) if body.model else None
    if route is None:
        target = state.default_backend.address(rt.config.bbr.default_backend)
        if target is None:
            if body.model:
                # A name the caller may not use is refused as one that exists is (403), so the answer
                # does not tell which models and adapters are served to others: GET /v1/models hides
                # them, and tier 2 authorizes first too. Before session s39 a served name answered
                # 403 and an unknown one 404 here, so any tenant could test names.
                guard.authorize(principal, model=body.model)
            return gateway_error("model_not_found", NO_MATCH_MESSAGE, param="model", request_id=rid)
        obs.routed(model=body.model, scheduler=DEFAULT_BACKEND_SCHEDULER, stream=body.stream)
        refused = _tenant_refusal(request, body, principal, rid)
        if refused is not None:
            return refused
        # the backend's engine is unknown: a lora_path may name the model authorized, nothing else
        refusal = lora_path_refusal(body.lora_path, adapter=body.model, model=body.model)
        if refusal is not None:
            return gateway_error("invalid_request", refusal, param="lora_path", request_id=rid)
        guard.authorize(principal, model=body.model or "")
        await guard.admit(principal, model=body.model or "", est_tokens=est_tokens)
        obs.admitted()  # tracing hook
        add = {"X-Gateway-Model-Name": body.model} if body.model else {}
        plan = _Forward(
            candidates=[target], sr=None, add_headers=add, timeout_s=None, what="the default backend"
        )
        return plan, body
    obs.routed(
        model=route.model,
        base_model=route.base_model,
        scheduler=route.scheduler,
        stream=body.stream,
        configured=True,
    )
    refused = _tenant_refusal(request, body, principal, rid)
    if refused is not None:
        return refused
    refusal = lora_path_refusal(body.lora_path, adapter=route.adapter, model=route.model)
    if refusal is not None:  # igw.gateway.lora_field: the adapter served is the one authorized
        return gateway_error("invalid_request", refusal, param="lora_path", request_id=rid)
    _authorize_target(guard, principal, model=route.model, requested=obs.record.requested_model)
    if unready and continues is not None:  # authorized first: the target is named to callers allowed it
        return _version_unready(state, obs, continues, route.model, rid)
    if left is not None and continues is not None:  # authorized first, as above
        named = left[1] if guard.may_use(principal, model=left[1]) else None
        return _version_left(obs, continues, left[0], named, rid)
    await guard.admit(principal, model=route.model, est_tokens=est_tokens)
    obs.admitted()  # tracing hook
    sr = rt.schedulers[route.scheduler]
    limit = sr.pool.largest_context()
    # each of its n answers is a sequence of its own: n does not multiply this
    if limit is not None and surely_too_long(body.prompt_tokens, body.max_tokens, limit):
        obs.rejected("context_length")
        output = body.max_tokens or 0
        message = (
            f"this request needs more than {limit} tokens (prompt ~{body.prompt_tokens} estimated + "
            f"max_tokens {output}), the most any model server for {route.base_model!r} accepts"
        )
        param = "max_tokens" if output >= limit else None  # the prompt alone: vLLM names no field
        return gateway_error("context_length_exceeded", message, param=param, request_id=rid)
    # a continuation no scheduler here knows the pod of: the other canary versions' pools the caller
    # may use are searched too, after the drawn one's (since session s49)
    other_versions = (
        []
        if continues is None or sr.scheduler.responses.endpoint_of(continues) is not None
        else _other_versions(rt, guard, principal, versions, sr, body.lora_path)
    )
    if (
        continues is not None
        and (len(sr.pool.states) > 1 or any(other.pool.states for _, other in other_versions))
        and sr.scheduler.responses.endpoint_of(continues) is None
    ):
        pools_searched = [sr.spec.name, *(other.spec.name for _, other in other_versions)]
        refused = _search_refusal(
            state,
            continues,
            _search_scope(principal),
            within=search_context(caller_scope(principal), pools_searched),
            request_id=rid,
            param="previous_response_id",
        )
        if refused is not None:  # before the pick: nothing picked is left unsent
            return refused
    faults = sr.scheduler.outliers.request_faults
    avoid = None
    if faults.entries and faults.active(state.clock()):
        # a request failed moments ago: if it was this one (the same body), its new try goes elsewhere
        avoid = faults.failed_at(hash(body.raw), now=state.clock())
    # the client's own salt, as the engine reads it, with prefixCacheIsolation's (tenant)
    salt = _salt_for(api, sr.engine, principal.cache_salt, body.cache_salt or None)
    rreq = RoutingRequest(
        request_id=obs.key,
        model=route.model,
        base_model=route.base_model,
        prefix_text=body.prefix_text,
        prompt_tokens=body.prompt_tokens,
        max_tokens=body.max_tokens,
        adapter=route.adapter,
        tenant=principal.tenant,
        stream=body.stream,
        previous_response_id=body.previous_response_id,
        avoid=avoid,
        cache_salt=salt,
    )
    flow_on = rt.flow_settings is not None
    priority: int | None = None
    max_queue_s: float | None = None
    held = False
    if flow_on:
        try:  # checked on arrival, so a malformed value is refused whether or not the pool is busy
            max_queue_s = client_max_queue_s(request.headers.get(MAX_QUEUE_MS_HEADER))
        except BadQueueDeadline as bad:
            return gateway_error("invalid_request", str(bad), param=MAX_QUEUE_MS_HEADER, request_id=rid)
        # Per-band headroom and queue places, judged before the scheduler runs (a pick that is not
        # sent would count as a dispatch in its ledger): a band that keeps room for higher ones
        # queues past its dispatchBelow or while no endpoint has a queue place for it, and no
        # arrival overtakes queued work of its own or a higher band. (The gate holds the settings
        # of the runtime applied last: GatewayState hands them over at start and on each reload.)
        priority = _priority(request, state, principal, rreq, sr.spec.name, obs)
        held = state.flow.must_wait(
            sr.spec.name,
            priority=priority,
            utilisation=_utilisation(state, sr)(),
            endpoints=_endpoint_samples(state, sr)(),
        )
    views = sr.pool.views()
    elapsed: float | None = None
    if held:
        decision = HELD_BY_FLOW_CONTROL  # replaced by the queue's decision
        obs.held(sr.spec.name, decision, candidates=len(views))
    else:
        t0 = time.perf_counter()
        # Without flow control (which moves a pick's ledger entry right after it), the pick's own
        # bookkeeping waits until the request is sent: the scheduler settles it at the first token
        # (a stream), the outcome, or its next pick, whichever comes first (Scheduler.pick). So
        # does a forced choice's scoring (one candidate left), unless the decision log or a trace
        # reads the scores before the request is sent (the debug header, the trace's span).
        forced_later = not flow_on and state.decision_log is None and obs.trace is None
        decision = sr.scheduler.pick(
            rreq,
            views,
            now=state.clock(),
            settle_later=not flow_on,
            on_decided=obs.scored if forced_later else None,
        )
        elapsed = time.perf_counter() - t0
        if priority is not None:
            steered = _steered(state, sr, priority, decision, rreq.request_id)
            decision = _preempting(state, sr, priority, steered)
            if decision.kind is DecisionKind.PICKED:
                state.flow.sent_straight(sr.spec.name, priority)  # capacity turning over: Retry-After's rate
        if decision.scores is PENDING_SCORES:
            obs.decided_later(sr.spec.name, elapsed)
        else:
            obs.decided(sr.spec.name, decision, elapsed, candidates=len(views))
    log = state.decision_log
    if log is not None:
        log.record(
            request_id=rid,
            scheduler=sr.spec.name,
            model=route.model,
            candidates=len(views),
            decision=decision,
            elapsed_s=elapsed,
        )
    if (decision.kind is DecisionKind.SATURATED or held) and state.flow.settings is not None:
        queued_at = state.clock()
        # A queued request is owed an answer on shutdown like one being forwarded: counted in flight,
        # it gets the stream grace to be dispatched, and is then answered 503 instead of being dropped.
        task = state.inflight.enter(getattr(request, "handler_task", None))
        hold.release()  # flow control's queue counts the body from here
        try:
            queued, priority = await _wait_in_queue(
                request, state, principal, sr, rreq, _queued_bytes(request, body), obs, priority, max_queue_s
            )
        except asyncio.CancelledError:
            if not state.inflight.cutting:
                # The client went away: the gate has already taken it out of the queue. Finished
                # here, so it is counted (igw_client_disconnects_total, igw_requests_total's 499, an
                # access-log line with its band and queue time) as a client leaving a forward is:
                # before session s42 a client that gave up while queued was counted nowhere.
                obs.waited(state.clock() - queued_at, "client_gone")
                obs.client_gone(QUEUED_CLIENT_GONE)
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            obs.failed("ended by shutdown after the stream grace while queued", stream_broken=False)
            message = "the gateway is shutting down; retry the request"
            return gateway_error("shutting_down", message, request_id=rid)
        finally:
            state.inflight.leave(task)
            task = None  # a cancelled wait's traceback keeps this frame (see handle_inference)
        waited_s = state.clock() - queued_at
        obs.waited(waited_s, queued.reason.value if isinstance(queued, Refused) else queued)
        if log is not None and not isinstance(queued, Refused):  # why this pod, after the queue
            log.record(
                request_id=rid,
                scheduler=sr.spec.name,
                model=route.model,
                candidates=len(sr.pool.views()),
                decision=queued,
                elapsed_s=None,
                queued_s=waited_s,
            )
        if isinstance(queued, Refused):
            obs.rejected("shed")
            retry = _retry_after(state, queued.retry_after_s)
            message = (
                f"inference pool for {route.base_model!r} is saturated and flow control shed this "
                f"priority {queued.priority} request ({queued.reason.value}); retry after {retry}s"
            )
            return gateway_error("request_shed", message, headers={"Retry-After": retry}, request_id=rid)
        decision = queued
        sr = _current(state, sr)  # the scheduler that placed it (a reload may have rebuilt it)
    if decision.kind is DecisionKind.SATURATED:
        obs.rejected("saturated")
        retry = _retry_after(state, math.ceil(decision.retry_after_s or 1))
        message = (
            f"inference pool for {route.base_model!r} is saturated ({decision.reason}); retry after {retry}s"
        )
        return gateway_error("pool_saturated", message, headers={"Retry-After": retry}, request_id=rid)
    if decision.kind is DecisionKind.NO_ENDPOINTS or decision.endpoint is None:
        return _no_endpoints(
            state, obs, f"no model server endpoint available for {route.base_model!r}: {decision.reason}", rid
        )
    routed_body = body.raw  # the client's body as routed: a failure's digest is taken of it
    unprepared = body  # another canary version's pod gets it prepared for its own engine
    mine = _prepared_for(request, state, principal, api, sr, route.adapter, body, priority, salt)
    body = mine.body
    attempts = state.runtime.settings.retry.attempts
    candidates = [decision.endpoint, *decision.fallbacks]
    search_for = None
    continues = body.previous_response_id
    elsewhere: dict[str, _Version] = {}
    pools_searched = [sr.spec.name]
    if continues is not None and sr.scheduler.responses.endpoint_of(continues) is None:
        # A continuation of a response no scheduler here knows the pod of (made through another
        # replica, before a restart): every pod of the pool may be asked, the decision's first, then
        # (since session s49) those of the other canary versions' pools, each sent its own model in a
        # body prepared for its own engine (until s49 the drawn pool's engine's, model alone changed)
        picked = set(candidates)
        candidates += [v.key for v in sr.pool.views() if v.key not in picked]
        minted = mine.minted
        for target, other in other_versions:
            other_route = rt.router.resolve(target)
            if other_route is None:
                continue
            retold = retargeted(unprepared, target)
            their_salt = _salt_for(api, other.engine, principal.cache_salt, unprepared.cache_salt or None)
            theirs = _prepared_for(
                request,
                state,
                principal,
                api,
                other,
                other_route.adapter,
                retold,
                priority,
                their_salt,
                minted,
            )
            minted = theirs.minted or minted  # one id for every attempt: only the pod that answers stores it
            # the same request as that version's scheduler sees it: its model, adapter and salt; the
            # drawn pool's failed endpoints (``avoid``) name none of that pool's
            routing = dataclasses.replace(
                rreq,
                model=other_route.model,
                base_model=other_route.base_model,
                adapter=other_route.adapter,
                avoid=None,
                cache_salt=their_salt,
            )
            version = _Version(other, other_route.model, other_route.base_model, theirs, routing)
            for view in other.pool.views():
                if view.key not in picked and view.key not in elsewhere and view.key not in candidates:
                    elsewhere[view.key] = version
            pools_searched.append(other.spec.name)
        candidates += list(elsewhere)
        search_for = continues if len(candidates) > 1 else None
    plan = _Forward(
        candidates=candidates[:RESPONSE_SEARCH_LIMIT] if search_for else candidates[:attempts],
        sr=sr,
        add_headers={"X-Gateway-Model-Name": route.model, "X-Gateway-Base-Model-Name": route.base_model},
        timeout_s=sr.route_timeout_s,
        what=repr(route.base_model),
        priority=mine.band,
        adapter=route.adapter,
        generates=api in GENERATING_APIS,
        search_for=search_for,
        search_within=search_context(caller_scope(principal), pools_searched) if search_for else "",
        strip_usage=mine.strip_usage,
        routed_body=routed_body,
        minted=mine.minted,
        elsewhere=elsewhere if search_for else None,
    )
    if log is not None and log.opens(request.headers.get(DEBUG_TOKEN_HEADER)):
        plan.response_headers[DECISION_HEADER] = decision_header(decision)
    return plan, body


def _salt_for(api: InferenceApi, engine: str, scope_salt: str | None, client_salt: str | None) -> str | None:
    """The ``cache_salt`` an engine of that name reads for ``api`` (:mod:`igw.gateway.cache_salt`):
    the caller's scope's salt (prefixCacheIsolation) combined with the client's own, ``None`` for an
    engine or an API that takes none."""
    if scope_salt is None and client_salt is None:
        return None
    salted = api in SALTED_APIS and engine in SALTING_ENGINES
    return request_salt(scope_salt, client_salt) if salted else None


def _prepared_for(
    request: web.Request,
    state: GatewayState,
    principal: Principal,
    api: InferenceApi,
    sr: SchedulerRuntime,
    adapter: str | None,
    body: InferenceBody,
    priority: int | None,
    salt: str | None,
    minted: str | None = None,
) -> _Prepared:
    """``body`` (as routed, its ``model`` the pool's) prepared for the engine of ``sr``'s pool: the
    fields that engine reads written (``priority``, ``lora_path``, a minted ``request_id``,
    ``stream_options``, ``cache_salt``; ``salt`` from :func:`_salt_for` for that engine), none an
    engine that does not read them would refuse. One path for the drawn pool and for each other canary
    version's pool a continuation's search asks; ``minted``: the id already written for another pool,
    reused (only the pod that answers stores it)."""
    # Not into an Anthropic-shaped body: vLLM's Anthropic request model would drop the field unread.
    engine = (
        state.flow.engine_priority(sr.spec.name)
        if priority is not None and api not in ANTHROPIC_APIS
        else None
    )
    fields: dict[str, object] = {}
    if engine is not None and priority is not None:
        fields["priority"] = engine.value(priority)
    if adapter is not None and body.lora_path is None and sr.engine in LORA_PATH_ENGINES:
        fields["lora_path"] = adapter  # SGLang serves its base model for a bare adapter name
    written = None
    if api is InferenceApi.RESPONSES and sr.engine in MINTING_ENGINES:
        # The stored response's id, bound to the caller (igw.gateway.response_ids); the same on
        # every attempt: only the pod that answers stores it.
        written = fields["request_id"] = minted if minted is not None else mint(caller_scope(principal))
    asks_usage = body.stream_usage is not None and sr.engine in USAGE_ENGINES
    if asks_usage:  # the usage chunk asked for where the client did not (igw.gateway.stream_usage)
        if body.stream_usage is StreamUsage.UNASKED:
            if fields or body.cache_salt is not None:
                fields["stream_options"] = UNASKED_OPTIONS
            else:
                body = with_leading_field(body, "stream_options", UNASKED_OPTIONS)
        elif body.stream_usage is StreamUsage.OTHER_OPTIONS:
            body = dataclasses.replace(body, raw=with_usage_asked(body.raw))
        else:
            asks_usage = False
        if asks_usage and request.headers.get(RELAY_USAGE_HEADER) == RELAY_USAGE:
            asks_usage = False  # asked for the tier-2 router, which reads the chunk: relayed
    if principal.cache_salt is not None and salt is not None:  # the caller's scope's salt, written
        if fields or body.cache_salt is not None:  # a client's own replaced: parsed and serialised
            fields["cache_salt"] = salt
        else:
            body = with_leading_field(body, "cache_salt", salt)
    if fields:
        body = with_fields(body, fields)
    band = priority if engine is not None and engine.preempts_for_slot else None
    return _Prepared(body=body, strip_usage=asks_usage, band=band, minted=written)


def _server_busy(request: web.Request, state: GatewayState, request_id: str) -> web.Response:
    """503 ``server_busy``: the process holds as many request-body bytes as
    ``serverLimits.maxBodyBytesHeld`` lets it (:mod:`igw.gateway.body_budget`). A body not read to
    its end is left unread: the connection closes once answered (aiohttp's side too, which would
    otherwise read and discard the upload for its 10 s lingering time first), the close lingering."""
    retry = _retry_after(state, BODY_RETRY_AFTER_S)
    message = (
        "the gateway is receiving as many request bodies as it may hold at once "
        f"(spec.extensions.serverLimits.maxBodyBytesHeld); retry after {retry}s"
    )
    response = gateway_error("server_busy", message, request_id=request_id, headers={"Retry-After": retry})
    if not request.content.is_eof():
        response.force_close()
        refuse_rest_of_body(request)
    return response


def _body_timeout_s(request: web.Request) -> float:
    """How long a body still arriving after its head may take (the server's limits)."""
    return request.app.get(LIMITS_KEY, DEFAULT_LIMITS).body_timeout_s


def _queued_bytes(request: web.Request, body: InferenceBody) -> int:
    """What ``request`` holds while queued, counted against flow control's ``maxBytes``
    (:func:`~igw.gateway.flow_gate.queued_size_bytes`): the head from the fields as received (the
    lean server's ``raw_fields``, aiohttp's ``raw_headers``)."""
    fields: Sequence[tuple[bytes, bytes]] | None = getattr(request, "raw_fields", None)
    head = request_head_bytes(
        request.method, request.path_qs, request.raw_headers if fields is None else fields
    )
    return queued_size_bytes(body=body.raw, prompt_text=body.prefix_text, head_bytes=head)


async def _wait_in_queue(
    request: web.Request,
    state: GatewayState,
    principal: Principal,
    sr: SchedulerRuntime,
    rreq: RoutingRequest,
    size_bytes: int,
    obs: RequestObserver,
    priority: int | None,
    max_queue_s: float | None,
) -> tuple[RoutingDecision | Refused, int]:
    """Wait in the request's flow-control band until the pool can take it (or it is shed);
    ``max_queue_s``: the client's own deadline (:func:`~igw.gateway.flow_gate.client_max_queue_s`).

    Returns the outcome and the request's band then: a reload applied while it waited classifies
    it again (:meth:`~igw.gateway.flow_gate.FlowGates.wait`'s ``classify``), and the band it is
    dispatched from is the one the engine's ``priority`` field, the in-flight count per band and
    the access log carry."""
    headers = request.headers
    tenant = flow_tenant(principal.tenant, principal.authenticated, headers)
    if priority is None:
        priority = _priority(request, state, principal, rreq, sr.spec.name, obs)
    obs.record.priority = priority
    obs.record.tenant = tenant or state.flow.anonymous_tenant  # the name the metrics use
    band = _QueuedBand(priority)

    def classify() -> int:
        band.priority = obs.record.priority = _priority(
            request, state, principal, rreq, sr.spec.name, obs, count_denied=False
        )
        return band.priority

    result = await state.flow.wait(
        scheduler=sr.spec.name,
        request_id=rreq.request_id,
        priority=priority,
        tenant=tenant,
        size_bytes=size_bytes,
        max_queue_s=max_queue_s,
        pick=lambda: _queued_pick(state, sr, rreq, band.priority),
        utilisation=_utilisation(state, sr),
        endpoints=_endpoint_samples(state, sr),
        classify=classify,
        release=lambda decision: _release_pick(state, sr, decision, rreq.request_id),
    )
    return result, band.priority


@dataclasses.dataclass(slots=True)
class _QueuedBand:
    """A queued request's band: the one it arrived in, until a reload that changes its objective's
    priority moves it (the gate's ``classify``); read when the request is placed and dispatched."""

    priority: int


def _current(state: GatewayState, sr: SchedulerRuntime) -> SchedulerRuntime:
    """``sr``'s scheduler as the runtime applied last has it (``sr`` when a reload removed it).

    A queued request is placed by the scheduler of the runtime in force when the queue dispatches,
    not the one it arrived under: a reload that rebuilt the scheduler (a raised saturation threshold,
    new weights) left the queued requests picked by the old one, which still called the pool
    saturated, so the oldest blocked its band (and every arrival queued behind it) until its TTL."""
    return state.runtime.schedulers.get(sr.spec.name, sr)


def _queued_pick(
    state: GatewayState, sr: SchedulerRuntime, rreq: RoutingRequest, priority: int
) -> RoutingDecision:
    """The decision for a queued request, by :func:`_current`'s scheduler and pool now."""
    now_sr = _current(state, sr)
    picked = now_sr.scheduler.pick(rreq, now_sr.pool.views(), now=state.clock())
    return _preempting(state, now_sr, priority, _steered(state, now_sr, priority, picked, rreq.request_id))


def _release_pick(
    state: GatewayState, sr: SchedulerRuntime, decision: RoutingDecision, request_id: str
) -> None:
    """Take back a queued request's pick that will not be sent (flow control left the request queued
    after picking for it, or its client went away in the turn the queue handed it over): the
    scheduler that placed it (:func:`_current`'s) forgets the dispatch, and its prefix index the
    prompt it would have sent there."""
    if decision.endpoint is not None:
        _current(state, sr).scheduler.release_dispatch(
            decision.endpoint, now=state.clock(), request_id=request_id
        )


def _steered(
    state: GatewayState, sr: SchedulerRuntime, priority: int, decision: RoutingDecision, request_id: str
) -> RoutingDecision:
    """The top band's pick moved to the candidate with the smallest predicted wait for a batch slot
    (flow control's :meth:`~igw.gateway.flow_gate.FlowGates.steer`), the dispatch ledger and the
    prefix index told (the prompt is placed on the pod it is sent to)."""
    if decision.endpoint is None or not decision.fallbacks or not state.flow.steers(priority):
        return decision
    steered = state.flow.steer(decision, _endpoint_samples(state, sr)())
    if steered.endpoint is not None and steered.endpoint != decision.endpoint:
        target = sr.pool.states.get(steered.endpoint)
        sr.scheduler.move_dispatch(
            decision.endpoint,
            steered.endpoint,
            now=state.clock(),
            request_id=request_id,
            sent_to=None if target is None else target.view(),
        )
    return steered


def _preempting(
    state: GatewayState, sr: SchedulerRuntime, priority: int, decision: RoutingDecision
) -> RoutingDecision:
    """A saturated top-band pick sent instead to an endpoint whose engine will preempt a lower band's
    running request for it (``enginePriority`` on an engine that preempts for a batch slot;
    :meth:`~igw.gateway.flow_gate.FlowGates.preempting_endpoint`), the dispatch ledger told (and
    through its pick note the other workers'); otherwise ``decision`` unchanged."""
    if (
        decision.kind is not DecisionKind.SATURATED
        or state.flow.engine_priority(sr.spec.name) is None
        or not state.flow.steers(priority)
    ):
        return decision
    key = state.flow.preempting_endpoint(sr.spec.name, priority, _endpoint_samples(state, sr)())
    if key is None:
        return decision
    sr.scheduler.record_dispatch(key, now=state.clock())
    return RoutingDecision(
        kind=DecisionKind.PICKED,
        endpoint=key,
        reason="the engine preempts a lower band for it (enginePriority)",
    )


def _priority(
    request: web.Request,
    state: GatewayState,
    principal: Principal,
    rreq: RoutingRequest,
    scheduler: str,
    obs: RequestObserver,
    *,
    count_denied: bool = True,
) -> int:
    """The request's flow-control band (objective header, else its model's or tenant's objective;
    the model routed to, else the name the client sent before a canary rule replaced it);
    ``count_denied``: see :meth:`~igw.gateway.flow_gate.FlowGates.priority`."""
    tenant = flow_tenant(principal.tenant, principal.authenticated, request.headers)
    return state.flow.priority(
        request.headers,
        scheduler=scheduler,
        model=rreq.model,
        tenant=tenant,
        authenticated_tenant=principal.tenant,
        requested_model=obs.record.requested_model,
        count_denied=count_denied,
    )


def _utilisation(state: GatewayState, sr: SchedulerRuntime) -> Callable[[], float]:
    """A probe of the pool's load now, as a fraction of its saturation point (per-band headroom)."""

    def probe() -> float:
        now_sr = _current(state, sr)  # a reload may have rebuilt it while requests queue
        return now_sr.scheduler.utilisation(now_sr.pool.views(), now=state.clock())

    return probe


def _endpoint_samples(state: GatewayState, arrived: SchedulerRuntime) -> EndpointSamples:
    """A probe of each fresh endpoint's queue, batch, in-flight requests and completion rate (flow
    control's places), of the scheduler ``arrived`` names as the runtime now has it."""

    def probe() -> Mapping[EndpointKey, EndpointSample]:
        now = state.clock()
        sr = _current(state, arrived)  # a reload may have rebuilt it while requests queue
        sr.scheduler.settle()  # a pick made before flow control was turned on: its ledger entry
        fresh = [v for v in sr.pool.views() if sr.scheduler.is_fresh(v, now)]
        ledger = sr.scheduler.ledger
        views = ledger.annotate(fresh, now=now) if ledger is not None else fresh
        return endpoint_samples(views, lambda key: sr.scheduler.drain.rate(key, now))

    return probe


async def _forward(
    request: web.Request,
    state: GatewayState,
    guard: RequestGuard,
    principal: Principal,
    obs: RequestObserver,
    body: InferenceBody,
    plan: _Forward,
) -> web.StreamResponse | ForwardedAnswer:
    """Send to the first candidate that accepts a connection; relay its answer; account."""
    settings = state.runtime.settings
    strip, strip_fields = _stripped(guard.stripped_request_headers)
    # A guard strips the client's copies of the headers its principals carry (SecurityGuard's
    # ``stripped_request_headers`` holds every forwarded name, lower-case): then nothing to add here.
    if principal.forward_headers and not principal.forward_headers.keys() <= strip:
        named = {h.lower() for h in principal.forward_headers}
        strip = strip | named
        strip_fields = strip_fields | {h.encode(_CHARSET, _UNDECODABLE) for h in named}
    proves = _proves(request, plan)  # an answer below 400 must carry the response to be taken
    if proves:  # so never one drawn bodiless or partial by a conditional or range request (s50)
        strip = strip | UNPROVABLE_REQUEST_HEADERS
        strip_fields = strip_fields | _UNPROVABLE_FIELDS
    upstream_id = upstream_request_id(obs.request_id, key=obs.key, headers=request.headers)
    add = {
        **principal.forward_headers,
        **plan.add_headers,
        **UPSTREAM_ACCEPT_ENCODING,
        "X-Request-Id": upstream_id,
    }
    # A request the lean server parsed carries its fields as received: without a trace context to
    # inject, the upstream head's fields are serialised from them directly (no header maps).
    fields: Sequence[tuple[bytes, bytes]] | None = getattr(request, "raw_fields", None)
    headers: CIMultiDict[str] | bytes
    if fields is not None and obs.trace is None:
        headers = upstream_header_block(fields, strip=strip_fields, add=add)
    else:
        headers = upstream_headers(request.headers, strip=strip, add=add)
    drawn_headers = headers
    # another canary version's pod (a continuation's search) is told its own model: headers of its
    # own, made once per version (until session s49's follow-up it was told the drawn version's)
    version_headers: dict[str, CIMultiDict[str] | bytes] = {}
    est_tokens = estimated_tokens(body)
    scheduler = plan.sr.spec.name if plan.sr is not None else None
    prepared: list[web.StreamResponse] = []
    result: ExchangeResult | None = None
    refusal: ExchangeResult | None = None  # a retried attempt's answer: the client's if no later one
    budgeted: str | None = None  # the running attempt is a retry counted in this pool's retry budget
    searched = 0  # attempts that found no stored response (``plan.search_for``): not retries
    missed = 0  # candidates that answered a search 404 or with another response, the last one's included
    # The pool's endpoint holding the pick's dispatch that did not take the request - its connection
    # failed, or it refused the request (an answer retried elsewhere: nothing prefilled there): moved
    # to the next attempt's endpoint when it starts, given back if none does (_sent_instead)
    unsent: EndpointKey | None = None
    # the last candidate whose answer to a retrieval named another response (never relayed)
    withheld: str | None = None
    # A retrieval's search waits search_timeout_s for each pod's answer head, then asks the next (since
    # session s46), and as long for a whole answer's body (since s47: a head then a stalled body held
    # the search until responseTimeout): the 504 of the last pod it stopped waiting for, the client's
    # if no other has it
    polling = plan.search_for is not None and not plan.generates
    head_timeout_s = state.response_searches.search_timeout_s if polling else None
    # ... and the search as a whole search_deadline_s (since s47: past enough frozen pods it outlasted
    # the global router's 5 s wait for the cluster); a pod asked only while SEARCH_ASK_LEAST_S is left
    search_deadline = (time.monotonic() + state.response_searches.search_deadline_s) if polling else None
    cut_short = False  # the search's deadline passed with pods not asked
    stalled: ExchangeResult | None = None
    place: SearchPlace | None = None  # a silent remembered holder's search of the others (since s48)
    # routeTimeout bounds every attempt together: each retry gets what is left of it
    deadline = None if plan.timeout_s is None else time.monotonic() + plan.timeout_s
    candidates = plan.candidates
    if polling and not body.stream and plan.method == b"GET" and len(candidates) > 1 and deadline is None:
        # A retrieval not streamed: hedged, its answers held until one wins (since session s47)
        if not isinstance(headers, bytes):
            obs.propagate(headers)  # tracing hook: one trace context for the attempts in flight together
        search = _HedgedSearch(state, plan, obs, missed=missed, proves=proves)
        ask = search.asker(request, headers, body, settings, head_timeout_s, search_deadline)
        delay_s = state.response_searches.hedge_delay_s
        ask_until = None if search_deadline is None else search_deadline - SEARCH_ASK_LEAST_S
        try:
            if plan.holder is None:
                silent = await hedged(
                    candidates,
                    ask,
                    search.decide,
                    delay_s=delay_s,
                    ask_until=ask_until,
                    silent_s=head_timeout_s,
                )
            else:
                relay = search.asker(
                    request, headers, body, settings, head_timeout_s, search_deadline, relay_to=prepared
                )
                silent = await _holder_first(state, plan, principal, search, (relay, ask), delay_s, ask_until)
        except ClientGone:  # while the holder's answer was relayed (nothing else in flight then)
            _ = search.settled(gone=True)
            obs.client_gone()
            return prepared[0] if prepared else web.Response(status=CLIENT_CLOSED)
        except asyncio.CancelledError:  # its attempts cancelled and ended; nothing relayed yet
            if not state.inflight.cutting:
                # the pods asked, in the access log's attempts (until s47: none, as if no pod had
                # been asked); nothing listed as found or unfound, no pod as slow
                _ = search.settled(gone=True)
                obs.client_gone()
                raise
            _ = search.settled()  # the attempts heard, in the access log
            return obs.finish(_shut_down_search(obs))
        # the pods abandoned silent the whole search timeout: asked last for a while, as stalled ones
        # (until s48 those silent the hedge delay, 0.3 s: a pod merely slower than the winner was
        # asked last for 60 s, a rule the pods cut by the deadline were spared since s47)
        for key in silent:
            state.response_searches.slow(key, now=state.clock())
        result, refusal, stalled, withheld, missed = search.settled()
        cut_short = search.cut_short(len(candidates) if search.searched else len(search.asked))
        # an answer the hedge could not hold (a stream, a large one): that pod asked again, relaying
        candidates = [] if search.unheld is None else [search.unheld]
    for attempt, key in enumerate(candidates, start=1):
        # another canary version's pod (a continuation's search): its pool's scheduler, its model, the
        # body prepared for its engine
        version = plan.elsewhere.get(key) if plan.elsewhere else None
        owner, sent, band, strip_usage, minted = (
            (plan.sr, body, plan.priority, plan.strip_usage, plan.minted)
            if version is None
            else (
                version.sr,
                version.prepared.body,
                version.prepared.band,
                version.prepared.strip_usage,
                version.prepared.minted,
            )
        )
        ep = owner.pool.states.get(key) if owner is not None else None
        if owner is not None and ep is None:
            continue
        if version is None:
            headers = drawn_headers
        else:
            own = version_headers.get(version.model)
            if own is None:
                # the spellings of the plan's add_headers: the same keys replaced, none added twice
                told = {
                    **add,
                    "X-Gateway-Model-Name": version.model,
                    "X-Gateway-Base-Model-Name": version.base_model,
                }
                if isinstance(drawn_headers, bytes) and fields is not None:
                    own = upstream_header_block(fields, strip=strip_fields, add=told)
                else:
                    own = upstream_headers(request.headers, strip=strip, add=told)
                version_headers[version.model] = own
            headers = own
        bound_s = head_timeout_s  # a search's attempt: what is left of its deadline, if less
        if search_deadline is not None and head_timeout_s is not None:
            left_s = search_deadline - time.monotonic()
            if left_s < SEARCH_ASK_LEAST_S:
                cut_short = True  # the pods left are not asked (a 504 below unless one answered)
                break
            bound_s = min(head_timeout_s, left_s)
        if unsent is not None and ep is not None and plan.sr is not None and owner is plan.sr:
            _sent_instead(plan.sr, unsent, ep, request_id=obs.key, now=state.clock())
            unsent = None
        elif unsent is not None and plan.sr is not None and owner is not plan.sr:
            # the search moved on to another version's pool (after every pod of the drawn one): no
            # drawn pod takes the pick over, so it is given back now - not only after the last attempt,
            # which a routeTimeout, a client gone or a shutdown during this attempt never reaches
            plan.sr.scheduler.release_dispatch(unsent, now=state.clock(), request_id=obs.key)
            unsent = None
        result = None
        misnamed = False  # a retrieval's answer naming another stored response than the one asked for
        # the pool the attempt is charged to (its picks, its retries and search steps): another
        # version's pod's own pool (until session s49's follow-up its refusals' retries were counted
        # under the drawn pool's scheduler)
        charged = scheduler if owner is plan.sr or owner is None else owner.spec.name
        obs.attempt(attempt, key, scheduler=charged)
        if not isinstance(headers, bytes):
            obs.propagate(headers)  # tracing hook: traceparent of this attempt
        if ep is not None:
            ep.dispatched(est_tokens)
            if band is not None:
                state.flow.started(key, band)
        if version is not None:
            # that pool's scheduler counts it as its own pick among that pod alone (the dispatch
            # ledger, and since s49's follow-up its plugins: the prefix index places the prompt
            # there, the backlog counts it in flight), and the access log and the canary's series
            # name the version asked, the one that answered
            obs.version_asked(version.model, version.base_model, version.sr.spec.name)
            if ep is not None:
                views = version.sr.pool.views()
                log = state.decision_log
                version.sr.scheduler.pick_sent(
                    version.routing,
                    views,
                    key,
                    now=state.clock(),
                    on_decided=None
                    if log is None
                    else functools.partial(
                        _log_asked_alone, log, obs.request_id, version, key, candidates=len(views)
                    ),
                )
        connected = True
        try:
            exchanging = _exchange_with(
                request,
                state,
                obs,
                plan,
                settings,
                key,
                sent,
                headers,
                bound_s,  # a search's whole answer, its body too (since s47)
                idle_timeout_s=settings.stream_idle_timeout_s if body.stream else None,
                on_prepared=prepared.append,
                keepalive_s=settings.sse_keepalive_interval_s,
                on_first_token=None
                if owner is None or ep is None
                else _first_token_feedback(owner, ep, obs, clock=state.clock),
                strip_usage=strip_usage,
                relay_whole_above=WHOLE_ANSWER_BUFFER_BYTES,
            )
            # routeTimeout bounds the whole exchange; without one (the default) no timer is armed
            if deadline is None:
                result = await exchanging
            else:
                result = await _within(deadline - time.monotonic(), exchanging)
            if result.usage_unread is not None:  # each attempt's: a retried 502 was a pod's answer too
                obs.usage_unread(result.usage_unread)
            if result.redirect:  # each attempt's, as above
                obs.upstream_redirect()
            if result.not_an_answer is not None:  # each attempt's, as above
                obs.upstream_non_answer(result.not_an_answer)
            if result.response_id is not None:  # remembered (its pod) and a reservation's key
                misnamed = (
                    plan.settles is not None and result.status < 400 and result.response_id != plan.settles
                )
                result.response_id = believed(result.response_id, minted)
            elif proves and result.status < 400 and not prepared:
                misnamed = True  # no id (cut or id-less JSON, a large one's held start): no proof (s48)
        except ConnectFailed as exc:
            connected = False
            obs.connect_failed(key, str(exc))
        except TimeoutError:
            timeout = plan.timeout_s or 0
            obs.failed(f"routeTimeout {timeout:g}s exceeded", stream_broken=bool(prepared))
            if prepared:
                await _end_stream(
                    request, prepared[0], "route_timeout", f"routeTimeout of {timeout:g}s exceeded"
                )
                await _charge_relayed(state.tokens_per_event, guard, principal, obs, body, plan, prepared)
                return obs.finish(prepared[0])
            message = f"routeTimeout of {timeout:g}s exceeded waiting for {plan.what}"
            return obs.finish(gateway_error("route_timeout", message, request_id=obs.request_id))
        except ClientGone:
            _coded_usage_lost(obs, prepared)
            await _charge_relayed(state.tokens_per_event, guard, principal, obs, body, plan, prepared)
            obs.client_gone()
            return prepared[0] if prepared else web.Response(status=CLIENT_CLOSED)
        except asyncio.CancelledError:
            if not state.inflight.cutting:
                _coded_usage_lost(obs, prepared)
                await _charge_relayed(state.tokens_per_event, guard, principal, obs, body, plan, prepared)
                obs.client_gone()
                raise
            # The shutdown grace ran out: answer the way a broken upstream would, retryable.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            message = "the gateway is shutting down; retry the request"
            obs.failed("ended by shutdown after the stream grace", stream_broken=bool(prepared))
            if prepared:
                await _end_stream(request, prepared[0], "shutting_down", message)
                await _charge_relayed(state.tokens_per_event, guard, principal, obs, body, plan, prepared)
                return obs.finish(prepared[0])
            return obs.finish(gateway_error("shutting_down", message, request_id=obs.request_id))
        finally:
            if budgeted is not None:
                state.retry_budget.give_back(budgeted)
                budgeted = None
            refused = refused_status(result)
            if ep is not None:
                ep.completed(est_tokens)
                if refused is not None:
                    ep.refused()  # the pod's own error answer: its page did not move (frozen pages)
                if band is not None:
                    state.flow.finished(key, band)
                if version is not None and (not connected or refused is not None):
                    # not taken there (not stored, refused, not reached): nothing prefilled, its
                    # pick taken back (the prefix index, the backlog), as the drawn pool's is
                    version.sr.scheduler.release_dispatch(key, now=state.clock(), request_id=obs.key)
            # Told only while the endpoint is still the pool's: one that left while the request ran
            # (a rolling update drains a pod after discovery dropped it) was forgotten by the
            # scheduler, and its outcome told now would make its state again, kept for good since
            # no removal comes for it any more; another pod now at its address would be charged
            # with the old one's failure.
            if owner is not None and owner.pool.states.get(key) is ep:
                if connected:
                    # A 404 for the pool's own model: the pod does not serve what it was selected for
                    # (a served-model-name mismatch), its fault; for an adapter: it lacks that adapter.
                    # Not for a continuation: its 404 says the previous response is not stored there.
                    lacks = refused == 404 and body.previous_response_id is None
                    own_model_missing = lacks and plan.adapter is None
                    _feedback(
                        owner,
                        key,
                        obs,
                        result,
                        now=state.clock(),
                        fault=own_model_missing,
                        body=plan.routed_body,
                    )
                    if lacks and plan.adapter is not None:
                        owner.scheduler.on_model_missing(key, plan.adapter, now=state.clock())
                else:  # outlier detection counts it; settles a forced choice's scores (access log)
                    owner.scheduler.on_connect_failed(key, now=state.clock())
                    if owner is plan.sr:
                        unsent = key  # the pod never got the request: its pick moves on (_sent_instead)
        # Retried here, not in the handler: mypyc cannot compile a `continue` inside try/finally
        # (igw.compiled). A plain answer - a success, most errors - costs the status test alone.
        searching_on = plan.search_for is not None and not prepared and attempt < len(candidates)
        holding = key == plan.holder  # a remembered holder: its answer in time is the client's
        if holding:
            searching_on = False
        if misnamed and (plan.search_for is None or holding) and plan.settles is not None:
            # the pod remembered as its holder named another: forgotten, the next poll searches
            # (until session s45 every poll went back to it)
            for sr in state.runtime.schedulers.values():
                sr.scheduler.disown_response(plan.settles, key, now=state.clock())
        if misnamed and plan.search_for is not None:
            # no proof the asked id is stored there: a miss, as a 404 (until session s45 a search
            # every pod answered so was not listed as found nowhere, and re-asked every pod each poll)
            missed += 1
        if misnamed and prepared:
            # a replay released at its first event that went on with another response: cut there
            # (upstream._cut_replay), counted as a withheld answer is (since session s46)
            _withheld(state, key)
        if misnamed and not prepared and result is not None:
            # A retrieval or cancel answered with another response (a pod's lie or mix-up): no proof
            # the asked one is stored there, and never the client's (another tenant's, maybe). Not
            # kept as the refusal either: until session s45 the last such answer was relayed.
            # Each is counted as it is withheld (until session s46 only the one a request ended on).
            withheld = key
            _withheld(state, key)
            if searching_on:  # the search moves on as from a 404 (tier 2's rule; stopped here until s44)
                searched += 1
                obs.retrying(plan.search_pools.get(key, ""), RESPONSE_SEARCH, status=result.status)
                continue
            result = None
            break
        if polling and result is not None and result.gave_up and not prepared:
            # no answer head within the search's bound (a frozen pod): not a miss - it may store the
            # response - but the next pod is asked (until session s46 the search ended on this 504,
            # after responseTimeout, 600 s by default)
            if bound_s is not None and head_timeout_s is not None and bound_s < head_timeout_s:
                # given up at the search's deadline, before its own timeout: the deadline named, not
                # the rest of it this pod had; not asked last for it (since session s47)
                result = _stalled_at_deadline(plan, obs, state.response_searches.search_deadline_s, result)
            else:
                state.response_searches.slow(key, now=state.clock())  # asked last for a while
            stalled = result
            if holding and attempt < len(candidates):
                # a silent remembered holder: the others searched in a place of the caller's scope,
                # given back when the forward ends or at the search's deadline (none free: its 504).
                # Never asked again (since s48): a deletion it applied late would answer 404.
                place = state.response_searches.take(
                    _search_scope(principal), release_after_s=state.response_searches.search_deadline_s
                )
                if place is None:
                    break
            if attempt < len(candidates):
                searched += 1
                obs.retrying(plan.search_pools.get(key, ""), SEARCH_TIMEOUT, status=result.status)
                continue
            break
        if polling and connected and result is not None:
            state.response_searches.answered(key)  # in time: no longer asked last
        if holding or (connected and (result is None or prepared or result.status < 400)):
            break
        if plan.search_for is not None and connected and result is not None and result.status == 404:
            missed += 1
        if attempt >= len(candidates):
            break
        if plan.search_for is not None and result is not None and result.status == 404:
            # Not stored on that pod: the next one is asked, no retry (a 404 costs the pod no work).
            searched += 1
            refusal = result
            obs.retrying(charged or plan.search_pools.get(key, ""), RESPONSE_SEARCH, status=404)
            if plan.sr is not None and owner is plan.sr and plan.sr.pool.states.get(key) is ep:
                unsent = key  # a continuation's pick goes on with it: that pod prefilled nothing
            continue
        if scheduler is None:
            if plan.search_for is not None and not connected:
                continue  # a retrieval's search: a pod that is gone took its stored responses along
            break
        if attempt - searched >= state.runtime.settings.retry.attempts:
            break  # the retry policy's attempts (a search's candidates run past them)
        refusing_pool = charged or scheduler
        if not _retrying(state, obs, refusing_pool, result):
            break
        if result is not None:
            refusal = result
            budgeted = refusing_pool  # _retrying took a place in its retry budget
            if plan.sr is not None and owner is plan.sr and plan.sr.pool.states.get(key) is ep:
                unsent = key  # refused, so never prefilled there: its pick moves on (_sent_instead)
    if place is not None:
        place.release()
    if budgeted is not None:  # the retry's endpoint was gone before its attempt started
        state.retry_budget.give_back(budgeted)
    if unsent is not None and plan.sr is not None:  # no attempt took it after that: nobody got it
        plan.sr.scheduler.release_dispatch(unsent, now=state.clock(), request_id=obs.key)
    if stalled is not None and (result is None or (result.status == 404 and not prepared)):
        result = stalled  # the others answered 404 (or not at all): the pod not heard may store it
    if cut_short and stalled is None and (result is None or (result.status == 404 and not prepared)):
        # the deadline passed with pods never asked, none silent: they may store it, never a 404
        result = _out_of_search_time(plan, obs, state.response_searches.search_deadline_s)
    if plan.search_for is not None:  # a holder remembered is never listed as storing nothing
        every_pod_missed = missed == len(plan.candidates) and plan.holder is None
        _searched(state, plan, result, every_pod_missed=every_pod_missed)
    if result is None and withheld is not None and refusal is None:
        # no later answer, no pod's 404 before it (else that 404 is the client's): as for a response
        # stored nowhere
        message = f"no model server this gateway asked stores response {plan.settles!r}"
        return obs.finish(gateway_error("response_not_found", message, request_id=obs.request_id))
    if result is None:
        result = refusal  # the last attempt could not connect: the client gets the refusal before it
    if result is None:
        message = f"could not connect to a model server for {plan.what} after {obs.record.attempts} attempts"
        if plan.sr is None:  # the default backend, a stored response's pod: named, not by address
            message = f"could not connect to {plan.what}"
        return obs.finish(gateway_error("upstream_connect_failed", message, request_id=obs.request_id))
    if not plan.generates:
        # A stored response's retrieval repeats that response's usage: counted once, when generated,
        # or for one generated in the background by the first retrieval that shows it (below).
        shown = result.usage
        result.usage = None
        result.events = 0
        plan.carried = plan.settles is not None and result.response_id == plan.settles
        if plan.settles is not None and shown is not None and result.status < 400:
            if result.response_id == plan.settles:
                await _settle(guard, plan.settles, shown)
            else:  # another response's usage (a pod's lie or mix-up): no proof of this one's
                state.metrics.usage_misnamed.inc()
                misnamed_log.warning(
                    "pod %s answered a poll of one response with the usage of another (or none "
                    "named): not settled by it",
                    obs.record.endpoint,
                )
    usage = result.usage or {}
    # nothing generated (a token count, a stored response's retrieval): no tokens to count
    prompt_tokens = usage.get("prompt_tokens", body.prompt_tokens if plan.generates else 0)
    completion_tokens = usage.get("completion_tokens")
    if result.streamed and plan.sr is not None and plan.generates:
        # each stream that reported its usage teaches its pool's tokens per event, what a stream
        # without one is counted (igw.gateway.event_tokens)
        per_event = _tokens_per_event(state.tokens_per_event, plan.sr)
        if completion_tokens is None:
            completion_tokens = per_event.tokens(result.events)
        else:
            per_event.learn(completion_tokens, result.events)
    elif completion_tokens is None:
        completion_tokens = result.events
    obs.exchanged(result, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    reserved = 0
    reservation = None
    if body.background and result.usage is None and result.status < 400:
        reserved = _background_bound(body, plan)
        reservation = result.response_id  # what its retrievals name: the settlement's key
    try:  # noqa: SIM105 - not contextlib.suppress: an object and two calls per request
        await guard.account(
            principal,
            model=obs.record.model or "",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved,
            reservation=reservation,
        )
    except GuardDenied:
        pass
    return _finish_after_write(request, obs, result.answer)


def _answer_headers(request: web.Request, request_id: str, added: dict[str, str]) -> dict[str, str]:
    """The headers the gateway sets on a model server's relayed answer: the request id (on the
    Anthropic routes also as ``request-id``, the field the Anthropic SDK reads:
    :data:`~igw.gateway.errors.ANTHROPIC_REQUEST_ID_HEADER`), then the plan's ``added``."""
    if anthropic_path(request.path):
        return {"X-Request-Id": request_id, ANTHROPIC_REQUEST_ID_HEADER: request_id, **added}
    return {"X-Request-Id": request_id, **added}


def _exchange_with(
    request: web.Request,
    state: GatewayState,
    obs: RequestObserver,
    plan: _Forward,
    settings: RoutingSettings,
    key: str,
    body: InferenceBody,
    headers: CIMultiDict[str] | bytes,
    bound_s: float | None,
    *,
    idle_timeout_s: float | None,
    on_prepared: Callable[[web.StreamResponse], None],
    keepalive_s: float = 0.0,
    on_first_token: Callable[[float], None] | None = None,
    strip_usage: bool = False,
    relay_whole_above: int | None = None,
    hold_bytes: int | None = None,
) -> Awaitable[ExchangeResult]:
    """One attempt's :func:`exchange` with ``key`` (not awaited): the arguments every attempt shares -
    the plan's method and expected id (a retrieval's: checked before it is relayed; ``None`` while
    generating), the request's id - in one place for :func:`_forward`'s attempts and a hedged
    search's (:meth:`_HedgedSearch.asker`). ``bound_s`` bounds the answer's head and the whole
    answer (a search's attempt; ``None``: no such bound); the rest is how the answer is relayed or
    held."""
    return exchange(
        request,
        session=state.upstream if state.upstream is not None else request.app[SESSION_KEY],
        endpoint=key,
        body=body.raw,
        headers=headers,
        started=obs.started,
        connect_timeout_s=settings.connect_timeout_s,
        idle_timeout_s=idle_timeout_s,
        response_headers=_answer_headers(request, obs.request_id, plan.response_headers),
        on_prepared=on_prepared,
        keepalive_s=keepalive_s,
        on_first_token=on_first_token,
        method=plan.method,
        strip_usage=strip_usage,
        relay_whole_above=relay_whole_above,
        expect_id=plan.settles,
        head_timeout_s=bound_s,
        hold_bytes=hold_bytes,
        answer_timeout_s=bound_s,
        # a stored response's (a search's, a remembered holder's) large error: its status alone, a
        # miss to move on from; an answer below 400 that does not show the response asked for: a
        # miss too (since session s48, as the global router's search; relayed before, the search
        # ended there)
        discard_large_errors=plan.search_for is not None and not plan.generates,
        require_id=_proves(request, plan),
        # an inference path's answer is a JSON object or an event stream: anything else the pod's fault
        json_answer=request.path in INFERENCE_PATHS,
    )


def _proves(request: web.Request, plan: _Forward) -> bool:
    """Whether an answer below 400 to ``plan``'s request must carry the stored response asked for to
    be taken (:func:`~igw.gateway.upstream.names_itself`: a retrieval not streamed, a cancel): one
    that does not (cut JSON, no ``id``, another's) is withheld, a miss; a remembered holder's too,
    forgotten as one naming another is (since session s48)."""
    return plan.settles is not None and not plan.generates and names_itself(request)


class _HedgedSearch:
    """One hedged retrieval's search (:mod:`igw.gateway.hedged_search`): each pod's outcome judged as
    it comes (:meth:`decide`), then the request's as the sequential search would have left it
    (:meth:`settled`). Its attempts hold their answers (``hold_bytes``): none reaches the client
    before one wins."""

    def __init__(
        self, state: GatewayState, plan: _Forward, obs: RequestObserver, *, missed: int, proves: bool = False
    ) -> None:
        self.state = state
        self.plan = plan
        self.obs = obs
        self.missed = missed
        self.proves = proves
        """An answer below 400 carries the response asked for to win (:func:`_proves`): one naming
        none is withheld as one naming another is."""
        self.won: ExchangeResult | None = None
        """The first answer below 400 that carries the response asked for."""
        self.failed: ExchangeResult | None = None
        """The first error answer other than a 404 (it ends the search, as a sequential one's does)."""
        self.refusal: ExchangeResult | None = None
        """The last 404."""
        self.stalled: ExchangeResult | None = None
        """The last pod's 504 the search stopped waiting for."""
        self.withheld: str | None = None
        """The last pod whose answer named another response (never relayed)."""
        self.unheld: str | None = None
        """A pod whose answer the attempt could not hold: asked again, relaying."""
        self.heard: list[tuple[str, ExchangeResult | None, str]] = []
        """Each outcome in the order it came: pod, its result (``None``: no connection), the cause
        its move to the next pod is counted under (``""``: none)."""
        self.asked: list[str] = []
        """Each pod asked, in order: those never heard (cancelled when the search ended) count among
        the request's attempts too."""
        self.shortened: dict[str, bool] = {}
        """Pod -> whether its latest attempt's bound was what was left of the search's deadline, less
        than the search timeout (given up then, it is not asked last for it)."""
        self.searched = False
        """A remembered holder's retrieval (``plan.holder``) searched the other pods too."""
        self.relayed: list[web.StreamResponse] = []
        """The response a relaying attempt (``relay_to`` of :meth:`asker`) prepared: its outcome,
        whatever it is, is the client's."""

    def asker(
        self,
        request: web.Request,
        headers: CIMultiDict[str] | bytes,
        body: InferenceBody,
        settings: RoutingSettings,
        head_timeout_s: float | None,
        deadline: float | None = None,
        *,
        relay_to: list[web.StreamResponse] | None = None,
    ) -> Callable[[str], Awaitable[ExchangeResult]]:
        """One attempt of the search: the pod asked, its answer held (never written here), bounded
        by ``head_timeout_s`` or what is left until ``deadline`` (:func:`time.monotonic`), the
        shorter. ``relay_to`` (a remembered holder's attempt, the only one in flight: since session
        s49): its answer relayed as the sequential search's attempt's is, a large one (past
        :data:`WHOLE_ANSWER_BUFFER_BYTES`) once its held start shows the response asked for, the
        response prepared appended to it; held, such an answer was closed and the holder asked a
        second time."""
        state, plan, obs = self.state, self.plan, self.obs
        self.relayed = relay_to if relay_to is not None else self.relayed

        def ask(key: str) -> Awaitable[ExchangeResult]:
            self.asked.append(key)
            bound_s = head_timeout_s
            if deadline is not None and bound_s is not None:
                bound_s = max(0.0, min(bound_s, deadline - time.monotonic()))
                self.shortened[key] = head_timeout_s is not None and bound_s < head_timeout_s
            # its body bounded too: a pod stalling mid-answer is given up
            return _exchange_with(
                request,
                state,
                obs,
                plan,
                settings,
                key,
                body,
                headers,
                bound_s,
                idle_timeout_s=None,
                on_prepared=_never_prepared if relay_to is None else relay_to.append,
                hold_bytes=WHOLE_ANSWER_BUFFER_BYTES if relay_to is None else None,
                relay_whole_above=None if relay_to is None else WHOLE_ANSWER_BUFFER_BYTES,
            )

        return ask

    def decide(self, key: str, outcome: ExchangeResult | BaseException) -> str:
        """Judge one pod's outcome: :data:`WIN` ends the search, :data:`NEXT` asks on, :data:`LAST`
        asks no further pod (the attempts in flight may still win)."""
        if isinstance(outcome, ConnectFailed):  # a pod that is gone took its stored responses along
            self.heard.append((key, None, str(outcome)))
            return NEXT
        if isinstance(outcome, BaseException):
            raise outcome
        result = outcome
        searches = self.state.response_searches
        if result.usage_unread is not None:
            self.obs.usage_unread(result.usage_unread)
        if result.redirect:
            self.obs.upstream_redirect()
        if result.not_an_answer is not None:
            self.obs.upstream_non_answer(result.not_an_answer)
        if self.relayed:  # written to the client: its answer, whatever it is (since session s49)
            named = result.response_id
            result.response_id = believed(named, self.plan.minted)
            if named is not None and named != self.plan.settles and result.status < 400:
                # a replay naming another, cut there (upstream._cut_replay), as the sequential path
                self.withheld = key
                _withheld(self.state, key)
            self.won = result
            self.heard.append((key, result, ""))
            return WIN
        if result.gave_up:  # not a miss - it may store the response - but asked last for a while
            if self.shortened.get(key, False):  # ... unless the deadline, not its timeout, ended it
                result = _stalled_at_deadline(self.plan, self.obs, searches.search_deadline_s, result)
            else:
                searches.slow(key, now=self.state.clock())
            self.stalled = result
            self.heard.append((key, result, SEARCH_TIMEOUT))
            return NEXT
        searches.answered(key)
        if result.unheld:
            self.unheld = key
            return WIN
        named = result.response_id
        result.response_id = believed(named, self.plan.minted)
        unproven = (
            named != self.plan.settles if self.proves else named is not None and named != self.plan.settles
        )
        if unproven and result.status < 400:
            self.missed += 1  # no proof the asked id is stored there, and never the client's
            self.withheld = key
            _withheld(self.state, key)
            self.heard.append((key, result, RESPONSE_SEARCH))
            return NEXT
        if result.status < 400:
            self.won = result
            self.heard.append((key, result, ""))
            return WIN
        if result.status == 404:
            self.missed += 1
            self.refusal = result
            self.heard.append((key, result, RESPONSE_SEARCH))
            return NEXT
        if self.failed is None:
            self.failed = result
        self.heard.append((key, result, ""))
        return LAST

    def cut_short(self, candidates: int) -> bool:
        """Whether the search ended at its deadline with some of its ``candidates`` never asked (no
        answer won, none ended it, none is to be asked again)."""
        ended = self.won is not None or self.failed is not None or self.unheld is not None
        return not ended and len(self.asked) < candidates

    def settled(
        self, *, gone: bool = False
    ) -> tuple[ExchangeResult | None, ExchangeResult | None, ExchangeResult | None, str | None, int]:
        """The search's outcome as the sequential search leaves it - the answer (the winner, else
        the first other error), the last 404, the last stalled pod's 504, the last pod withheld, the
        misses - with each attempt recorded (the access log's attempts, the retries counted, the
        one that ends it last; the pods asked and never heard, cancelled when it ended - by its
        client leaving too - before that one). ``gone``: the client left, no answer is its: each
        recorded in the order asked, the last pod asked the access log's endpoint."""
        result = self.won if self.won is not None else self.failed
        final = result if result is not None else self.stalled if self.stalled is not None else self.refusal
        heard = self.heard
        # pods asked and never heard: attempts (cause "": no retry counted), before the final one (a
        # remembered holder may be asked twice: counted per pod)
        answers = Counter(item[0] for item in heard)
        unheard: list[tuple[str, ExchangeResult | None, str]] = []
        for key in self.asked:
            if answers[key] > 0:
                answers[key] -= 1
            else:
                unheard.append((key, None, ""))
        if gone:
            order = {key: index for index, key in enumerate(self.asked)}
            heard = sorted([*heard, *unheard], key=lambda item: order.get(item[0], -1))
        elif final is not None:  # the client's answer recorded last (the access log's endpoint)
            heard = [
                *(item for item in heard if item[1] is not final),
                *unheard,
                *(item for item in heard if item[1] is final),
            ]
        else:
            heard = [*heard, *unheard]
        obs = self.obs
        for number, (key, answer, cause) in enumerate(heard, start=1):
            obs.attempt(number, key, scheduler=None)
            if answer is None and cause:
                obs.connect_failed(key, cause)
            elif answer is not None and number < len(heard) and cause:  # the last one's the client's
                obs.retrying(self.plan.search_pools.get(key, ""), cause, status=answer.status)
        return result, self.refusal, self.stalled, self.withheld, self.missed


async def _holder_first(
    state: GatewayState,
    plan: _Forward,
    principal: Principal,
    search: _HedgedSearch,
    askers: tuple[Callable[[str], Awaitable[ExchangeResult]], Callable[[str], Awaitable[ExchangeResult]]],
    delay_s: float,
    ask_until: float | None,
) -> list[str]:
    """A retrieval of a response whose pod is remembered (``plan.holder``, since session s47): that
    pod asked alone, its answer bounded as a search's attempt (a stored response is small JSON sent
    at once). Its answer in time, whatever it is (a 404 too), is the client's, as before. Given up,
    the other pods are searched, hedged (the holder a slow pod now), within what is left of the
    search's deadline and in a search place of the caller's scope (none free: the holder's 504); the
    holder is not asked again (since session s48: a pod silent the whole search timeout rarely
    answers in the time left, and asking it again cost the client a second timeout, 4.0 s). Until
    s47 a frozen holder held the client until ``responseTimeout`` (600 s by default). ``askers``: the
    holder's (its answer relayed, a large one too: asked once, since session s49) and the others'
    (held, several in flight). Returns the pods silent when the search ended (:func:`hedged`'s)."""
    relay, ask = askers
    first, rest = plan.candidates[:1], plan.candidates[1:]
    silent_s = state.response_searches.search_timeout_s
    silent = await hedged(
        first, relay, search.decide, delay_s=delay_s, ask_until=ask_until, silent_s=silent_s
    )
    if search.withheld == plan.holder and plan.settles is not None and plan.holder is not None:
        # it named another response: forgotten, the next poll searches (as the sequential path)
        for sr in state.runtime.schedulers.values():
            sr.scheduler.disown_response(plan.settles, plan.holder, now=state.clock())
    if search.stalled is None or not rest or search.relayed:
        return silent
    searches = state.response_searches
    scope = _search_scope(principal)
    if not searches.begin(scope):
        return silent
    search.searched = True
    try:
        return silent + await hedged(
            rest, ask, search.decide, delay_s=delay_s, ask_until=ask_until, silent_s=silent_s
        )
    finally:
        searches.end(scope)


def _stalled_at_deadline(
    plan: _Forward, obs: RequestObserver, deadline_s: float, stalled: ExchangeResult
) -> ExchangeResult:
    """The 504 of a pod a search gave up at its deadline, before the pod's own search timeout: the
    search's deadline named (until session s47 the message named the rest of it the pod had, "within
    0.5s", as if that were a bound of its own). The access log's ``error`` keeps the pod's."""
    message = (
        f"the search for response {plan.search_for!r} did not end within {deadline_s:g}s: "
        "a model server did not answer in time; retry the request"
    )
    headers = {"X-Request-Id": obs.request_id, **plan.response_headers, SHOULD_RETRY_HEADER: "true"}
    answer = gateway_error("upstream_timeout", message, request_id=obs.request_id, headers=headers)
    return ExchangeResult(answer=answer, status=504, ok=False, error=stalled.error, gave_up=True)


def _out_of_search_time(plan: _Forward, obs: RequestObserver, deadline_s: float) -> ExchangeResult:
    """A search whose deadline passed before it asked every pod, none of those asked silent (they
    answered 404, or another response): a 504 ``upstream_timeout``, never the 404 of those asked -
    a pod not asked may store the response."""
    said = f"did not end within {deadline_s:g}s: some model servers were not asked"
    message = f"the search for response {plan.search_for!r} {said}; retry the request"
    headers = {"X-Request-Id": obs.request_id, **plan.response_headers, SHOULD_RETRY_HEADER: "true"}
    answer = gateway_error("upstream_timeout", message, request_id=obs.request_id, headers=headers)
    # the caller's message names the id it sent; the access line's error and the span's status
    # name its reference (logged_id): until session s50 they held the id
    logged = f"the search for response {logged_id(plan.search_for or '')} {said}"
    return ExchangeResult(answer=answer, status=504, ok=False, error=logged, gave_up=True)


def _shut_down_search(obs: RequestObserver) -> web.Response:
    """A hedged search the shutdown grace ended (nothing of it relayed): answered as the sequential
    search's attempt is, retryable."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    message = "the gateway is shutting down; retry the request"
    obs.failed("ended by shutdown after the stream grace")
    return gateway_error("shutting_down", message, request_id=obs.request_id)


def _never_prepared(response: web.StreamResponse) -> None:
    """A held attempt's ``on_prepared``: it writes nothing to the client (:func:`exchange`'s
    ``hold_bytes``), so this is never called."""
    raise AssertionError("a held exchange wrote to the client")


def _withheld(state: GatewayState, key: str) -> None:
    """``key``'s answer to a retrieval or cancel named another response than the one asked for and
    was withheld (since session s45): counted (``igw_usage_misnamed_total``), each such answer once
    whatever answer the request ends on (until session s46 only the last, and only when no later
    pod's answer was relayed), and logged once a minute per pod, without the answer's content."""
    state.metrics.usage_misnamed.inc()
    misnamed_log.warning(
        "pod %s answered a retrieval of one response with another response: not relayed", key
    )


def _sent_instead(
    sr: SchedulerRuntime, failed: EndpointKey, target: EndpointState, *, request_id: str, now: float
) -> None:
    """The request ``failed`` did not take - its connection failed, or it refused the request with
    an answer that was retried (a 503 from a full queue, a 429, a 404 for a missing adapter: nothing
    was prefilled there) - goes to ``target`` instead (the next attempt): its pick moves there, in the
    dispatch ledger and in the plugins that take a pick not sent where it was picked
    (``on_not_sent``: the prefix index places the prompt on the pod that got it). Until session s41
    the ledger counted the dispatch on the pod that refused the connection or the request and none on
    the one serving it, and the prefix index sent the next requests with that prompt to the pod that
    never prefilled it (62 blocks there, none on the pod that served, in the tests' probe)."""
    sr.scheduler.move_dispatch(failed, target.key, now=now, request_id=request_id, sent_to=target.view())


def _tokens_per_event(learnt: dict[str, TokensPerEvent], sr: SchedulerRuntime) -> TokensPerEvent:
    """The output tokens per stream event learnt of ``sr``'s pool (:mod:`igw.gateway.event_tokens`),
    from ``learnt`` (:attr:`GatewayState.tokens_per_event`)."""
    name = sr.spec.name
    found = learnt.get(name)
    if found is None:
        found = learnt[name] = TokensPerEvent()
    return found


def _coded_usage_lost(obs: RequestObserver, prepared: Sequence[web.StreamResponse]) -> None:
    """A compressed answer (:attr:`~igw.gateway.upstream.ExchangeResult.coded`) whose client left
    before its usage was read: counted in ``igw_answer_usage_unread_total{reason="client_gone"}``
    (:data:`~igw.gateway.emf_metrics.USAGE_UNREAD_CLIENT_GONE`; no alert on it)
    (before session s45 it was not: the relay's record never reached the count). It is charged by
    the bytes relayed (:func:`_charge_relayed`), as an uncompressed answer cut short is."""
    relayed = getattr(prepared[0], "relayed", None) if prepared else None
    if relayed is not None and relayed.coded and relayed.usage is None and relayed.usage_unread is None:
        obs.usage_unread(USAGE_UNREAD_CLIENT_GONE)


async def _charge_relayed(
    learnt: dict[str, TokensPerEvent],
    guard: RequestGuard,
    principal: Principal,
    obs: RequestObserver,
    body: InferenceBody,
    plan: _Forward,
    prepared: Sequence[web.StreamResponse],
) -> None:
    """A stream ended before its last event (its client left, ``routeTimeout`` or a shutdown cut
    it): what had been relayed by then is charged to the tenant as a finished answer's tokens are
    (the usage its events carried, else the prompt's estimate and the events times the pool's
    tokens per event, :mod:`igw.gateway.event_tokens`), and shown in
    the access-log line. Before session s35 nothing was: a client that read a long stream and
    closed the connection before its last event, or asked for more than ``routeTimeout`` lets
    through, was never charged (``tokensPerMinute`` did not bound it). A large whole answer relayed
    as it arrived (:data:`~igw.gateway.upstream.WHOLE_ANSWER_BUFFER_BYTES`), whose usage comes at its
    end, is charged by the bytes relayed (:func:`~igw.gateway.request_body.relayed_tokens`): until
    session s42 it was charged its prompt alone, so asking for huge answers and hanging up once
    their first megabytes arrived got past every token limit. A model server's large error answer
    cut short is counted in ``igw_upstream_large_error_answers_total`` here, as one relayed to its
    end is by :meth:`~igw.gateway.observer.RequestObserver.exchanged`. Nothing relayed: nothing
    charged, nor a stored response's replay (``GET .../{id}?stream=true``: generated, and counted,
    once)."""
    relayed = getattr(prepared[0], "relayed", None) if prepared else None
    if relayed is not None:
        prepared[0].relayed = None  # type: ignore[attr-defined]  # read once: no cycle left behind
        if relayed.large_error:  # counted however its relay ended (not counted cut short until s42)
            obs.large_error_answer()
    if relayed is None or not plan.generates:
        return
    usage = relayed.usage or {}
    prompt_tokens = usage.get("prompt_tokens", body.prompt_tokens)
    completion_tokens = usage.get("completion_tokens")
    if completion_tokens is None and not relayed.streamed:
        completion_tokens = relayed_tokens(relayed.relayed_bytes, body)
    if completion_tokens is None:
        per_event = None if plan.sr is None else _tokens_per_event(learnt, plan.sr)
        completion_tokens = relayed.events if per_event is None else per_event.tokens(relayed.events)
    obs.record.prompt_tokens, obs.record.completion_tokens = prompt_tokens, completion_tokens
    with contextlib.suppress(GuardDenied):
        await guard.account(
            principal,
            model=obs.record.model or "",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )


async def _settle(guard: RequestGuard, response_id: str, shown: Mapping[str, int]) -> None:
    """A retrieval (or cancel) of ``response_id`` showed its usage: the output bound charged when it
    was accepted in the background is settled by the output tokens it shows (the tenant is credited
    the rest, once, however many retrievals follow; :mod:`igw.security.ratelimit.limiter`). Before
    session s37 the bound stayed charged: a background request without ``max_output_tokens`` on a
    large-context pool left its tenant owing the whole window."""
    output = shown.get("completion_tokens")
    if output is None:  # a response still queued or in progress shows no usage
        return
    with contextlib.suppress(GuardDenied):
        await guard.settle(reservation=response_id, completion_tokens=output)


def _background_bound(body: InferenceBody, plan: _Forward) -> int:
    """What a background response accepted may still generate, charged to its tenant's token limit
    now: its usage comes only with a later poll, so before session s35 such responses escaped
    ``tokensPerMinute``. Its ``max_output_tokens``, else the pool's context window less the prompt
    (the engines' default), else nothing known (no pool, no window scraped). The first poll that
    shows the usage settles the charge (:func:`_settle`)."""
    if body.max_tokens is not None:
        return body.max_tokens
    window = None if plan.sr is None else plan.sr.pool.largest_context()
    return 0 if window is None else max(0, window - body.prompt_tokens)


def _searched(
    state: GatewayState, plan: _Forward, result: ExchangeResult | None, *, every_pod_missed: bool
) -> None:
    """A search for ``plan.search_for`` ended: found nowhere (every candidate answered 404, or a
    retrieval with another response), the id is answered 404 without a search for a while to the
    searches within ``plan.search_within`` (the caller's scope, those pools); found, it leaves that list
    (:mod:`igw.gateway.response_search`)."""
    if plan.search_for is None:
        return
    if every_pod_missed:
        state.response_searches.unfound(plan.search_for, now=state.clock(), within=plan.search_within)
    elif result is not None and result.status < 400:
        state.response_searches.found(plan.search_for)


async def _within(timeout_s: float, exchanging: Awaitable[ExchangeResult]) -> ExchangeResult:
    """``exchanging``'s result, cancelled with TimeoutError after ``timeout_s`` (in the calling task)."""
    async with asyncio.timeout(timeout_s):
        return await exchanging


def _finish_after_write(
    request: web.Request, obs: RequestObserver, response: web.StreamResponse | ForwardedAnswer
) -> web.StreamResponse | ForwardedAnswer:
    """Record a forwarded response (access log, request metrics, the trace's end) - after its bytes
    went out where the server can run work after the write (the lean server's ``after_response``), so
    a client waiting for the answer does not wait for its bookkeeping; else now."""
    after_response: Callable[[Callable[[], object]], None] | None = getattr(request, "after_response", None)
    if after_response is None:
        return obs.finish(response)
    after_response(lambda: obs.finish(response))
    return response


async def _end_stream(request: web.Request, response: web.StreamResponse, code: str, message: str) -> None:
    """Finish a started SSE response with an error event and ``[DONE]`` (the client may be gone). A
    large whole answer being relayed (:data:`~igw.gateway.upstream.WHOLE_ANSWER_BUFFER_BYTES`) has no
    place for an event: its client's connection is closed before the body's end
    (:func:`~igw.gateway.upstream.end_unfinished`), never a JSON body with an SSE event inside it."""
    if response.content_type != "text/event-stream":
        end_unfinished(request)
        return
    with contextlib.suppress(
        ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError
    ):
        await response.write(sse_error_event(code, message, anthropic=anthropic_path(request.path)))
        await response.write_eof()


def _first_token_feedback(
    sr: SchedulerRuntime, ep: EndpointState, obs: RequestObserver, *, clock: Callable[[], float]
) -> Callable[[float], None]:
    """Tell the scheduler a streamed request's TTFT as soon as its first token is relayed (the
    backlog scorer learns a pod's speed from it in one TTFT, not one whole response); not once
    ``ep`` has left the pool (see :func:`_forward`'s outcome)."""
    key = ep.key

    def heard(ttft_s: float) -> None:
        if sr.pool.states.get(key) is not ep:
            return
        sr.scheduler.on_first_token(
            RequestOutcome(
                request_id=obs.key,
                endpoint=key,
                ok=True,
                ttft_s=ttft_s,
                prompt_tokens=obs.record.prompt_tokens or 0,
                output_tokens=1,
            ),
            now=clock(),
        )

    return heard


def _log_asked_alone(
    log: DecisionLog,
    request_id: str,
    version: _Version,
    key: str,
    decision: RoutingDecision,
    *,
    candidates: int,
) -> None:
    """Record in the decision log the pick among ``key`` alone that another canary version's pool
    made for a continuation's search sending the request there (``asked_alone`` marks it; the
    decision log's ``record``). Not timed: no decision was waited for, the pod was already chosen."""
    log.record(
        request_id=request_id,
        scheduler=version.sr.spec.name,
        model=version.model,
        candidates=candidates,
        decision=decision,
        elapsed_s=None,
        asked_alone=key,
    )


def _retrying(
    state: GatewayState, obs: RequestObserver, scheduler: str, result: ExchangeResult | None
) -> bool:
    """Whether a failed attempt (``result``: the refusal it was answered, ``None`` when no connection
    could be made) goes on to the next-best endpoint under ``spec.extensions.routing.retry``; a retry
    of an answered attempt takes a place in the retry budget (given back when its attempt ends).
    ``scheduler``: the pool of the endpoint that refused, the label the retry (or the budget's
    overflow) is counted under - another canary version's in a continuation's search - and the pool
    whose budget it takes: a share of the requests in flight at that pool's pods (the refused one
    included, its attempt having ended). The policy is the gateway's; the budget is per pool (since
    session s50, :mod:`igw.gateway.retries`)."""
    policy = state.runtime.settings.retry
    condition = RetryCondition.CONNECT_FAILURE if result is None else retry_condition(result)
    if condition is None or not retried_for(condition, policy.retry_on):
        return False
    if result is not None:
        sr = state.runtime.schedulers.get(scheduler)
        # summed on a refusal only: the request path keeps no per-pool count for it
        in_flight = 1 + (sum(ep.inflight for ep in sr.pool.states.values()) if sr is not None else 0)
        if not state.retry_budget.take(policy, scheduler, requests_in_flight=in_flight):
            obs.retry_overflowed(scheduler)
            return False
    obs.retrying(scheduler, condition.value, status=None if result is None else result.status)
    return True


def _feedback(
    sr: SchedulerRuntime,
    key: str,
    obs: RequestObserver,
    result: ExchangeResult | None,
    *,
    now: float,
    fault: bool = False,
    body: bytes = b"",
) -> None:
    """Tell the scheduler how the request went (drain rate, measured speed, and for outlier detection
    whether the model server failed it: ``result.ok`` is false only for a 5xx answer or a stream it
    broke or left silent; no result - the client left, routeTimeout - is nobody's fault here;
    ``fault``: the caller found the pod at fault otherwise, a 404 for the pool's own model;
    ``body``: the request as routed, whose digest a failure may carry, :func:`request_digest`)."""
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
            itl = (time.perf_counter() - obs.started) / out_tokens
    sr.scheduler.on_complete(
        RequestOutcome(
            request_id=obs.key,
            endpoint=key,
            # A 4xx is an answer but no served request (the DES says the same): nothing ran.
            ok=result is not None and result.ok and result.status < 400,
            ttft_s=ttft,
            itl_s=itl,
            prompt_tokens=obs.record.prompt_tokens or 0,
            output_tokens=out_tokens,
            pod_fault=fault or (result is not None and not result.ok),
            response_id=None if result is None else result.response_id,
            request_digest=request_digest(result, body),
        ),
        now=now,
    )


def _retry_after(state: GatewayState, wait_s: int) -> str:
    """The ``Retry-After`` of a 429 whose computed wait is ``wait_s``: spread over the next seconds
    within ``routing.retryAfter.maxSeconds`` (:mod:`igw.scheduling.retry_spread`), so that a burst
    refused at once does not come back at once."""
    return str(spread_retry_after(wait_s, rng=state.rng, max_s=state.runtime.settings.retry_after_max_s))
