"""``igw global serve``: the OpenAI-compatible front of tier 2.

Same surface as ``igw serve`` (the inference routes of
:data:`~igw.gateway.inference_apis.INFERENCE_PATHS`, ``/v1/models``,
``/healthz``, ``/readyz``, ``/metrics``), same request parsing (:mod:`igw.gateway.request_body`),
the same request guard (:mod:`igw.security`: JWT, per-model authorization, tenant rate limits) and
the same OpenAI-shaped errors (:mod:`igw.gateway.errors`). Per request:

1. authenticate (before the body is read), read and parse the body, authorize, admit (tenant
   limits, then ``modelRateLimits``);
2. ask the fleet for the clusters to try (:mod:`igw.global_router.policy`);
3. forward to the first with the tier-1 exchange (:func:`igw.gateway.upstream.exchange`); a
   connect failure, a 429 or a 5xx *before anything reached the client* moves on to the next
   cluster - so a dying cluster costs no failed non-streaming request. ``routing.maxAttempts``
   bounds the clusters that *answered*; connect failures cost one round trip and no model work,
   so they move on without counting (a dead region's clusters cannot exhaust the attempts before
   the healthy region is reached);
4. once a stream has started it is never retried: an upstream that dies mid-stream ends the
   client's stream with an OpenAI-style SSE error event and ``[DONE]``;
5. ``spec.upstream.maxRequestSeconds`` bounds the whole request (every attempt, a stream to its
   end): past it a stream ends the same way (``route_timeout``), an unanswered request is a 504.

Responses carry ``x-igw-cluster`` and ``x-igw-region`` (where the request was served).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Final

import orjson
from aiohttp import ClientConnectionResetError, web
from multidict import CIMultiDict
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from igw.config.redis_password import redis_password
from igw.gateway.app import MODEL_ROUTE, healthz, model_answer, openai_errors
from igw.gateway.body_budget import RETRY_AFTER_S as BODY_RETRY_AFTER_S
from igw.gateway.body_budget import BodyBudget, BodyBudgetCollector, BodyHold, HeapTrim
from igw.gateway.emf import emf_context
from igw.gateway.errors import (
    BUSY_CODES,
    ERROR_CODE_HEADER,
    STOPPED_WAITING_CODES,
    anthropic_shaped,
    denial_response,
    gateway_error,
    sse_error_event,
)
from igw.gateway.event_tokens import TokensPerEvent
from igw.gateway.flow_gate import FAIRNESS_HEADER
from igw.gateway.forwarded_answer import ORIGIN_FIELDS
from igw.gateway.guards import GuardDenied, Principal, RequestGuard, caller_scope
from igw.gateway.inference import REQUEST_ID_HEADER, REQUEST_ID_KEY, request_id_for
from igw.gateway.inference_apis import (
    ANTHROPIC_APIS,
    INFERENCE_PATHS,
    STORED_RESPONSE_ROUTES,
    InferenceApi,
    anthropic_path,
)
from igw.gateway.log_throttle import RepeatThrottle
from igw.gateway.model_router import NO_MATCH_MESSAGE
from igw.gateway.request_body import (
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
    relayed_tokens,
)
from igw.gateway.response_ids import logged_path
from igw.gateway.response_search import SEARCHES_PER_SCOPE, ResponseSearches, SearchPlace
from igw.gateway.retries import request_digest
from igw.gateway.server_identity import name_every_answer
from igw.gateway.serving import (
    BODY_LIMIT_SETTING_KEY,
    INFLIGHT_KEY,
    LIMITS_KEY,
    ServerLimits,
    refuse_rest_of_body,
)
from igw.gateway.shutdown import InflightRequests
from igw.gateway.stream_usage import RELAY_USAGE, RELAY_USAGE_HEADER, StreamUsage
from igw.gateway.telemetry import UNKNOWN_MODEL
from igw.gateway.tenant_labels import TenantLabels
from igw.gateway.tracing import Tracing
from igw.gateway.upstream import (
    UNPROVABLE_REQUEST_HEADERS,
    ClientGone,
    ConnectFailed,
    ExchangeResult,
    end_unfinished,
    exchange,
    names_itself,
    proxy_session,
    sent_body_bytes,
    upstream_headers,
)
from igw.gateway.upstream_client import UpstreamPool
from igw.global_router.access_log import (
    ANOTHER_RESPONSE,
    CANCELLED,
    CLIENT_DISCONNECTED,
    CLIENT_GONE,
    CONNECT_FAILED,
    PAST_MAX_REQUEST,
    POOL_FULL,
    SHUT_DOWN,
    RouterAccessRecord,
)
from igw.global_router.config import ClusterSpec, GlobalRouterConfig
from igw.global_router.emf import FleetEmfReporter
from igw.global_router.fleet import Fleet
from igw.global_router.heartbeats import HeartbeatReader
from igw.global_router.limits import TIER2_RESERVATIONS, WILDCARD, ModelRateLimits
from igw.global_router.metrics import FleetMetrics
from igw.global_router.retry_after import soonest_retry_after
from igw.global_router.stored_ids import believed
from igw.global_router.tracing import RouterSpan, RouterTracing
from igw.scheduling.response_affinity import RESPONSE_SEARCH, ResponseAffinity
from igw.scheduling.retry_policy import UNAVAILABLE_STATUSES
from igw.scheduling.retry_spread import spread_retry_after
from igw.security.clock import SYSTEM_CLOCK, Clock
from igw.security.factory import build_guard
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.limiter import BackendOutage, RateLimiter
from igw.security.settings import RateLimitSettings

log = logging.getLogger("igw.global_router")
misnamed_log = logging.getLogger("igw.global_router.misnamed_usage")
"""The warning for a poll answer that shows usage under another response's id (not settled,
:func:`_forward_stored`): the first per cluster, then one a minute at most with the count held
(:class:`~igw.gateway.log_throttle.RepeatThrottle` keyed by the cluster)."""
misnamed_log.addFilter(RepeatThrottle(keyed_args=1))
auth_log = logging.getLogger("igw.global_router.upstream_auth")
"""The warning for a cluster's 401 or 407 to a caller this router verified and whose token it does not
forward (:func:`_auth_misconfigured`): the first per cluster, then one a minute at most with the count
held (:class:`~igw.gateway.log_throttle.RepeatThrottle` keyed by the cluster)."""
auth_log.addFilter(RepeatThrottle(keyed_args=1))

_DEFAULT_LIMITS: Final = ServerLimits()  # an app run without serve_app (tests): the defaults
RETRY_STATUSES: Final = UNAVAILABLE_STATUSES | {429}
"""A cluster's answers retried on the next cluster: those a tier-1 gateway retries on its next pod by
default (``unavailable``, ``rate-limited``), less ``model-missing`` (clusters are planned by the
models their heartbeats list)."""
AUTH_REFUSALS: Final = frozenset({401, 407})
"""A cluster's answers that say it did not know who the caller is (:func:`_auth_misconfigured`). A 403
is not among them: a cluster's gateway refuses so only a caller it knows (an authorization refusal,
``modelAccess``), and that refusal is relayed as it came."""
CLUSTER_HEADER: Final = "x-igw-cluster"
REGION_HEADER: Final = "x-igw-region"
MODEL_HEADER: Final = "x-gateway-model-name"
BODY_LIMIT: Final = "spec.routing.maxRequestBodyBytes"
"""The setting the router's 413s name (every one: its handler's and the connection handler's)."""
WHOLE_ANSWER_BUFFER_BYTES: Final = 1024 * 1024
"""A cluster's whole (non-streamed) answer below status 400 - never retried here - is relayed as it
arrives once it is larger than this (:func:`igw.gateway.upstream._relay_whole`): a router relaying
large answers (logprobs, embeddings of many inputs) holds at most this much of each, not all of it
twice (until session s40: 2.2 GB resident for twenty concurrent 50 MB answers)."""
SEARCH_TIMEOUT: Final = "search-timeout"
"""The ``reason`` of ``igw_global_retries_total`` for a cluster a search stopped waiting for."""
SEARCH_TIMEOUT_S: Final = 5.0
"""Seconds a search for a stored response waits for one cluster (``requestTimeoutSeconds`` when
smaller; since session s46). A retrieval's search stops waiting for the cluster's answer head and asks
the next cluster (a stored response's answer starts at once; a frozen cluster held the search's place
for ``requestTimeoutSeconds``, 600 s by default); a continuation's search gives its place back (a
cluster that has not answered 404 by then is generating the answer, no longer searched)."""


class ClusterPools:
    """One upstream connection pool per cluster, each with its own connection limit
    (:data:`~igw.gateway.upstream.UPSTREAM_POOL_LIMIT`): a cluster that takes connections and holds
    them (frozen, or answering slowly) fills its own pool only. Until session s38 the router had one
    pool for every cluster, so such a cluster's requests took every slot and the requests planned on
    healthy clusters waited for a free one (up to ``requestTimeoutSeconds``)."""

    def __init__(self, clusters: Sequence[str]) -> None:
        """Call with the event loop running (the pools take it)."""
        # its failures' messages name "the cluster", not "the model server" (since session s48)
        # their answers never set state on the router's origin (ORIGIN_FIELDS)
        self._pools = {
            name: proxy_session(peer="the cluster", dropped_fields=ORIGIN_FIELDS) for name in clusters
        }
        self._retired: dict[str, tuple[UpstreamPool, asyncio.Task[None]]] = {}
        """A removed cluster's pool, until the requests in flight at its removal have ended (or
        ``spec.upstream.maxRequestSeconds`` has passed): then closed and dropped."""

    def __len__(self) -> int:
        """The pools open: the configured clusters' and the removed ones' not yet closed."""
        return len(self._pools) + len(self._retired)

    def of(self, cluster: str) -> UpstreamPool:
        """``cluster``'s pool (a configured cluster's name, or a removed one's while requests that
        started before its removal may still use it)."""
        pool = self._pools.get(cluster)
        return pool if pool is not None else self._retired[cluster][0]

    def reconcile(
        self, clusters: Sequence[str], *, in_flight: Collection[asyncio.Task[object]], within_s: float
    ) -> None:
        """A pool for each of ``clusters`` (a reload's): a new cluster gets one, a cluster brought
        back takes its pool back if it is not closed yet, and a removed cluster's pool is closed once
        each request of ``in_flight`` (those running at the reload: only they can have planned the
        removed cluster) has ended, or after ``within_s`` (``maxRequestSeconds``: no request runs
        longer) at most. Closing ends the idle connections at once and each connection in use when its
        answer ends. Until session s50 a removed cluster's pool stayed until the router stopped, so
        edits adding and removing clusters (renamed, say) left one pool per name ever configured."""
        wanted = set(clusters)
        for name in clusters:
            if name in self._pools:
                continue
            back = self._retired.pop(name, None)
            if back is not None:
                back[1].cancel()
                self._pools[name] = back[0]
            else:
                self._pools[name] = proxy_session(peer="the cluster", dropped_fields=ORIGIN_FIELDS)
        pending = frozenset(task for task in in_flight if not task.done())
        for name in [n for n in self._pools if n not in wanted]:
            pool = self._pools.pop(name)
            closer = asyncio.create_task(self._close_retired(name, pool, pending, within_s))
            self._retired[name] = (pool, closer)

    async def _close_retired(
        self, name: str, pool: UpstreamPool, pending: frozenset[asyncio.Task[object]], within_s: float
    ) -> None:
        if pending:
            await asyncio.wait(pending, timeout=within_s)
        if (held := self._retired.get(name)) is not None and held[0] is pool:
            del self._retired[name]
        await pool.close()

    async def close(self) -> None:
        for pool, closer in self._retired.values():
            closer.cancel()
            await pool.close()
        self._retired.clear()
        for pool in self._pools.values():
            await pool.close()


SESSION_KEY = web.AppKey("igw_global_session", ClusterPools)


class GlobalRouter:
    """Everything one router replica holds; built by :func:`create_global_app`."""

    def __init__(
        self,
        config: GlobalRouterConfig,
        *,
        region: str,
        guard: RequestGuard,
        model_limits: ModelRateLimits,
        metrics: FleetMetrics,
        fleet: Fleet,
        anonymous_tenant: str,
        tenant_label: Callable[[str], str] | None = None,
        wall_clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``tenant_label``: a tenant's ``tenant`` label in the router's own series (bounded, as
        every ``igw_tenant_*`` family of the page; default: the tenant's name)."""
        self.config = config
        self.tenant_label: Callable[[str], str] = tenant_label or str
        self.region = region
        self.guard = guard
        self.model_limits = model_limits
        self.metrics = metrics
        self.fleet = fleet
        self.anonymous_tenant = anonymous_tenant
        self.wall_clock = wall_clock
        """Seconds since the epoch: what an HTTP-date ``Retry-After`` is measured against."""
        self.tracing: RouterTracing | None = None
        """Starts each inference and stored-response request's span (``None``: tracing is off, and
        the client's ``traceparent`` goes to the clusters as it came)."""
        self.draining = False
        """Set on SIGTERM: /readyz answers 503 so the load balancer stops sending first."""
        self.config_error: str | None = None
        """Why the configuration file's last change was rejected (the running configuration stays);
        ``None`` while the router serves the file as it is. ``/readyz`` shows it, as tier 1's
        ``config_reload_error``; readiness does not depend on it."""
        self.responses = ResponseAffinity()
        """Which cluster stored which Responses API response (its ``id``): a continuation
        (``previous_response_id``) tries that cluster first and a stored response's retrieval goes
        there, since only its pod holds the response (:mod:`igw.scheduling.response_affinity`, keyed
        by cluster name here; per replica)."""
        self.searches = ResponseSearches(per_scope=SEARCHES_PER_SCOPE)
        """What bounds the searches of :func:`_forward_stored` and of a continuation (:func:`_route`),
        tier 1's rules (:mod:`igw.gateway.response_search`): the ids a caller's search found nowhere
        moments ago (listed within :func:`_search_context`), and the searches in flight (per replica), each
        caller scope's ``SEARCHES_PER_SCOPE`` at most (since session s46)."""
        self.search_timeout_s = min(SEARCH_TIMEOUT_S, config.request_timeout_s)
        """How long a search waits for one cluster's answer (:data:`SEARCH_TIMEOUT_S`)."""
        self.replay_keepalive_s = config.replay_keepalive_s
        """Seconds after its last write to the client that a stored response's replay (``GET
        /v1/responses/{id}?stream=true``) gets an SSE ``: ping`` comment from the router
        (``spec.upstream.replayKeepAliveSeconds``, 15 s by default: tier 1's default
        ``sseKeepAliveInterval``; since session s47, configurable since s48). A replay's events are
        held until its first event with data is checked (:func:`igw.gateway.upstream._relay_stream`),
        tier 1's own ``: ping`` lines with them: until session s47 a client of the router whose
        cluster held that first event past a proxy's idle timeout got nothing at all. Once a
        keep-alive has started the client's response, a first event naming another response ends the
        stream with an error event: the search moves on to the next cluster only while nothing was
        sent."""
        self.clock: Callable[[], float] = time.monotonic
        """Seconds, monotonic: when a search found an id nowhere (:attr:`searches`)."""
        self.body_budget = BodyBudget()
        """Request-body bytes held at once (``spec.serverLimits.maxBodyBytesHeld``; ``igw global
        serve`` sets the limit at start): a body is counted from its first byte until its request is
        answered, since the router holds it whole while it tries clusters (:func:`_route`)."""
        self.heap_trim = HeapTrim(self.body_budget)
        """Trims the C heap once the bodies of a burst are all given back (as tier 1's)."""
        self.tokens_per_event: dict[str, TokensPerEvent] = {}
        """Per model: the output tokens its streams' events carry, learnt from streams that reported
        their usage (what a stream without one is counted: :mod:`igw.gateway.event_tokens`)."""

    def per_event(self, model: str) -> TokensPerEvent:
        """:attr:`tokens_per_event` of ``model`` (a model some cluster serves: the names are bounded)."""
        found = self.tokens_per_event.get(model)
        if found is None:
            found = self.tokens_per_event[model] = TokensPerEvent()
        return found


ROUTER_KEY = web.AppKey("igw_global_router", GlobalRouter)


def apply_global_config(app: web.Application, config: GlobalRouterConfig) -> None:
    """Route ``app``'s requests by ``config`` from the next one on: a hot reload
    (:mod:`igw.global_router.reload`), which passes a configuration whose restart-only fields are
    the running ones. Its clusters (a new one gets a connection pool), ``spec.routing`` (the body
    bound included: the listener reads it from the app before any handler) and ``spec.upstream``;
    a request in flight finishes with the settings it started with where it read them already. A
    removed cluster's pool is closed once the requests in flight now have ended
    (:meth:`ClusterPools.reconcile`)."""
    router = app[ROUTER_KEY]
    router.config = config
    router.search_timeout_s = min(SEARCH_TIMEOUT_S, config.request_timeout_s)
    router.replay_keepalive_s = config.replay_keepalive_s
    app._client_max_size = config.routing.max_request_body_bytes
    if (pools := app.get(SESSION_KEY)) is not None:
        inflight = app.get(INFLIGHT_KEY)
        pools.reconcile(
            [c.name for c in config.clusters],
            in_flight=() if inflight is None else inflight.tasks(),
            within_s=config.max_request_s,
        )
    router.fleet.reconfigure(config)


def _no_cluster(router: GlobalRouter, message: str) -> web.Response:
    """503 when no cluster can take the request; clients retry after a second (failover is that
    fast), spread over two (:mod:`igw.scheduling.retry_spread`: a burst refused at once does not come
    back at once)."""
    retry = spread_retry_after(1, rng=router.fleet.rng)
    return gateway_error("no_healthy_cluster", message, headers={"Retry-After": str(retry)})


def _model_label(router: GlobalRouter, model: str | None) -> str:
    """The ``model`` label of a request's series: a model some cluster serves, else ``(unknown)``;
    never the client's text as sent (a header or body field, before or without a valid token), so
    clients cannot grow the registry by one series per name they make up, as at tier 1."""
    return model if model is not None and router.fleet.known_model(model) else UNKNOWN_MODEL


def _counted_unread(router: GlobalRouter, request: web.Request, refused: web.Response) -> web.Response:
    """``refused`` (a body that could not be read: 400, 408, 413, 415), counted in
    ``igw_global_requests_total`` by the header's model as the 401s are (the body's is unknown).
    Until session s42 these answers were counted nowhere: a flood of malformed or oversized bodies
    did not show in the router's request rate or error ratio, while tier 1 counts its own."""
    model = _model_label(router, request.headers.get(MODEL_HEADER))
    router.metrics.requests.labels(model, str(refused.status)).inc()
    return refused


_ROUTER_HEADERS: Final = frozenset({CLUSTER_HEADER, REGION_HEADER, RELAY_USAGE_HEADER})
"""The router's own headers, never forwarded as a client sent them."""
_FAIRNESS: Final = frozenset({FAIRNESS_HEADER})


def _forwarded_headers(
    router: GlobalRouter, request: web.Request, principal: Principal, *, proves: bool = False
) -> CIMultiDict[str]:
    """The client's headers as a cluster gets them: less hop-by-hop ones, the guard's stripped ones
    and the router's own answer headers, plus the principal's forwarded identity.

    ``proves``: a request whose answer must name the stored response asked for (a retrieval, a
    cancel): less :data:`~igw.gateway.upstream.UNPROVABLE_REQUEST_HEADERS` too, whose 304 or 206 no
    check can take (since session s50; tier 1 drops them too).

    For a caller the router verified, ``x-gateway-inference-fairness-id`` is its verified tenant (or
    absent: a token without one), never the client's. A cluster's gateway behind an authenticating
    router authenticates nobody (the router does not forward the token unless
    ``forwardAuthorization``), and such a gateway's flow control takes the tenant from that header
    (:func:`igw.gateway.flow_gate.flow_tenant`). Until session s46 the client's was forwarded: a
    verified caller named another tenant there, or a new name per request, and took fair-share turns
    and queue places that tier 1 refuses its own authenticated callers. A caller the router did not
    verify (no ``spec.auth``) sends its own, as tier 1 then reads it.

    ``X-Request-Id`` is the router's id of the request (the client's when
    :func:`~igw.gateway.inference.request_id_for` keeps it, else a fresh one), never the client's
    value as sent: tier 1 applies the same rule, keeps it, and answers, logs and forwards to the pod
    under it, so one id joins the client's answer (the router's own errors included) and both tiers'
    logs. Until session s48 the client's header went as it came: with none, or one refused (10 KiB,
    non-ASCII, quotes), tier 1 minted an id of its own, so the router's own errors and the relayed
    answers named a request by ids that no log of the other tier held, and a refused value reached
    tier 1.

    With tracing on, ``traceparent``/``tracestate`` are the router span's (:mod:`igw.global_router.tracing`),
    not the client's: a cluster's span is then the router span's child."""
    strip = router.guard.stripped_request_headers | _ROUTER_HEADERS
    if proves:
        strip |= UNPROVABLE_REQUEST_HEADERS
    add = {
        **principal.forward_headers,
        REQUEST_ID_HEADER: request.get(REQUEST_ID_KEY) or request_id_for(request.headers),
    }
    if principal.authenticated:
        strip |= _FAIRNESS
        if principal.tenant:
            add = {**add, FAIRNESS_HEADER: principal.tenant}
    headers = upstream_headers(request.headers, strip=strip, add=add)
    span = request.get(ROUTER_SPAN)
    if span is not None:
        span.inject(headers)
    return headers


def _withholds_token(router: GlobalRouter, principal: Principal) -> bool:
    """Whether the router verified ``principal`` itself and forwards no credential of its to the
    clusters (``spec.auth`` on, ``forwardAuthorization`` false: the guard strips ``Authorization``)."""
    return principal.authenticated and "authorization" in router.guard.stripped_request_headers


def _auth_misconfigured(router: GlobalRouter, cluster: ClusterSpec, result: ExchangeResult) -> ExchangeResult:
    """``result``, or for a cluster's 401 or 407 (:data:`AUTH_REFUSALS`) not relayed yet, a 502
    ``upstream_auth_misconfigured`` - call only for a request whose caller's token the router withheld
    (:func:`_withholds_token`). The cluster's gateway authenticates callers the router verified but
    cannot show it: the deployment's fault, not the caller's. Until session s47 its 401
    ``invalid_token`` was relayed, ``WWW-Authenticate`` and all, to every caller with a valid token:
    clients refreshed their token and retried for ever, and the operator saw only 401s. A 502 (an
    upstream error, tried at the next cluster and counted against this one as a 5xx is) that names the
    cause and the fix, never the token; counted in ``igw_global_upstream_auth_refused_total`` and
    logged (once a minute per cluster)."""
    if result.status not in AUTH_REFUSALS or result.response.prepared:
        return result
    router.metrics.upstream_auth_refused.labels(cluster.name).inc()
    auth_log.warning(
        "cluster %s answered HTTP %d to a caller this router verified (the router does not forward "
        "callers' tokens): refused with a 502; set spec.authorization.forwardAuthorization: true (the "
        "cluster's gateway verifying the same issuer) or turn off that gateway's spec.auth",
        cluster.name,
        result.status,
    )
    message = (
        f"cluster {cluster.name!r} refused this request (HTTP {result.status}) though this router "
        "authenticated the caller: the router does not forward callers' tokens and the cluster's "
        "gateway requires one (set spec.authorization.forwardAuthorization: true on the router, with "
        "the cluster's gateway verifying the same issuer, or turn off authentication at that gateway)"
    )
    return ExchangeResult(
        answer=gateway_error(
            "upstream_auth_misconfigured",
            message,
            headers={CLUSTER_HEADER: cluster.name, REGION_HEADER: cluster.region},
        ),
        status=502,
        ok=False,
    )


def _denied(denied: GuardDenied) -> web.Response:
    return denial_response(denied)


async def _route(
    request: web.Request,
    router: GlobalRouter,
    *,
    api: InferenceApi,
    started: float,
) -> web.StreamResponse:
    m = router.metrics
    try:
        # Before the body, as a tier-1 gateway does: a caller without a valid token cannot make the
        # router read (and hold) a body of up to spec.routing.maxRequestBodyBytes.
        principal = await router.guard.authenticate(request.headers)
    except GuardDenied as denied:
        m.requests.labels(_model_label(router, request.headers.get(MODEL_HEADER)), str(denied.status)).inc()
        return _denied(denied)
    record = _record_of(request)
    if record is not None and principal.authenticated:
        record.tenant = principal.tenant
    # The body's bytes are counted from here until the request is answered: the router holds the
    # body whole while it tries clusters (a retry on the next sends it again). A declared length
    # over the body limit is refused unread, so it takes nothing.
    length = request.content_length or 0
    max_bytes = router.config.routing.max_request_body_bytes
    hold = router.body_budget.take(length if length <= max_bytes else 0)
    if hold is None:
        return _counted_unread(router, request, _server_busy(router, request))
    try:
        return await _route_held(request, router, principal, api=api, started=started, hold=hold)
    finally:
        hold.release()


def _server_busy(router: GlobalRouter, request: web.Request) -> web.Response:
    """503 ``server_busy``: the replica holds as many request-body bytes as
    ``spec.serverLimits.maxBodyBytesHeld`` lets it (tier 1's answer, :mod:`igw.gateway.body_budget`);
    a body not read to its end is left unread, the connection closed once answered."""
    retry = spread_retry_after(BODY_RETRY_AFTER_S, rng=router.fleet.rng)
    message = (
        "the router is receiving and forwarding as many request bodies as it may hold at once "
        f"(spec.serverLimits.maxBodyBytesHeld); retry after {retry}s"
    )
    response = gateway_error("server_busy", message, headers={"Retry-After": str(retry)})
    if not request.content.is_eof():
        response.force_close()
        refuse_rest_of_body(request)
    return response


async def _route_held(
    request: web.Request,
    router: GlobalRouter,
    principal: Principal,
    *,
    api: InferenceApi,
    started: float,
    hold: BodyHold,
) -> web.StreamResponse:
    """:func:`_route` once the body's bytes are counted in ``hold`` (a chunked body grows it as it
    arrives: :class:`~igw.gateway.request_body.BodyBudgetFull` past the budget)."""
    m = router.metrics
    tenant = principal.tenant or router.anonymous_tenant
    body_timeout_s = request.app.get(LIMITS_KEY, _DEFAULT_LIMITS).body_timeout_s
    try:
        check_content_encoding(request.headers)  # 415 for a body coding it does not decode, as tier 1
        # A client that stalls mid-body would otherwise hold the connection (and its handler) forever:
        # the same bound as the gateway's (``serverLimits.bodyTimeout``, 60 s by default).
        async with asyncio.timeout(body_timeout_s):
            raw = await read_limited(request, limit=router.config.routing.max_request_body_bytes, hold=hold)
        body = parse_body(raw, api=api, header_model=request.headers.get(MODEL_HEADER))
    except BodyBudgetFull:
        return _counted_unread(router, request, _server_busy(router, request))
    except TimeoutError:
        message = f"request body not received within {body_timeout_s:g}s"
        refused = gateway_error("request_timeout", message, headers={"Connection": "close"})
        return _counted_unread(router, request, refused)
    except BodyTooLarge as exc:
        # A chunked body that declared more than the limit is refused unread (the connection
        # handler ends its reader with DeclaredBodyTooLarge): the rest may still come, so the
        # connection closes, as tier 1's does. Until session s45 this 413 kept the connection and
        # named neither the cause nor (on the Expect path) the router's own setting.
        message = str(type(exc)(exc.limit, setting=BODY_LIMIT))
        closing = {"Connection": "close"} if isinstance(exc, DeclaredBodyTooLarge) else None
        return _counted_unread(router, request, gateway_error("request_too_large", message, headers=closing))
    except UnsupportedContentEncoding as coded:
        accept = {"Accept-Encoding": coded.accepted()}
        refused = gateway_error(
            "unsupported_content_encoding", coded.message, param=coded.HEADER, headers=accept
        )
        return _counted_unread(router, request, refused)
    except BadRequestBody as exc:
        refused = gateway_error("invalid_request", exc.message, param=exc.param)
        return _counted_unread(router, request, refused)
    record = _record_of(request)
    if record is not None:
        record.bytes_in = len(raw)
        record.model = body.model
        record.stream = body.stream
    if body.model is None:
        # Tier 1's answer (the message AWS documents for its gateway), so a client sees the same
        # whichever tier it reaches; until session s40 a 400 "'model' is required" here.
        m.requests.labels(UNKNOWN_MODEL, "404").inc()
        return gateway_error("model_not_found", NO_MATCH_MESSAGE, param="model")
    model = body.model
    # What tier 1 asks of the token buckets (its prompt's estimate and max_tokens for each of its n
    # answers): admission takes nothing, the answer's usage is debited after it. Until session s39
    # the prompt's estimate alone: a tenant with a few tokens left was admitted a request that could
    # generate max_tokens x n more.
    est_tokens = estimated_tokens(body)
    try:
        router.guard.authorize(principal, model=model)
        known = router.fleet.known_model(model)
        if not known or not router.model_limits.decides_tenant_limits:
            await router.guard.admit(principal, model=model, est_tokens=est_tokens)
        # A model no cluster serves is refused before its (tenant, model) buckets exist: with a
        # wildcard entry every distinct name the client sends would make a bucket pair of its own
        # (in the local backend, kept for the process's life), so unknown names grew memory without
        # bound. The tenant-wide limits above still count such requests.
        if not known:
            m.requests.labels(UNKNOWN_MODEL, "404").inc()
            return gateway_error(
                "model_not_found",
                f"model {model!r} is not served by any cluster of this router",
                param="model",
            )
        if (span := request.get(ROUTER_SPAN)) is not None:
            span.model(model)
        # the tenant-wide limits too, in the same round trip, where the router built its guard
        await router.model_limits.admit(tenant=tenant, model=model, est_tokens=est_tokens)
    except GuardDenied as denied:
        label = _model_label(router, model)
        if denied.status == 429:
            limit = "tokens" if "(tokens)" in denied.message else "requests"
            m.ratelimit_hits.labels(router.tenant_label(tenant), label, limit).inc()
        m.requests.labels(label, str(denied.status)).inc()
        return _denied(denied)
    choices = router.fleet.plan(model)
    if not choices:
        m.requests.labels(model, "503").inc()
        return _no_cluster(
            router, f"no cluster serving model {model!r} is available (all drained or not reporting)"
        )
    searches = False  # a continuation no cluster is known to store: a 404 moves on to the next
    holder = None
    place: SearchPlace | None = None  # such a continuation's search place
    search_within = ""
    if body.previous_response_id is not None:
        holder = router.responses.endpoint_of(body.previous_response_id)
        searches = holder is None
    if searches:
        # Bounded as a retrieval's search (since session s46: until then every continuation of an id
        # no cluster stores asked every cluster, at any rate and concurrency)
        search_within = _search_context(principal, [c.cluster for c in choices])
        scope = _search_scope(principal)
        param = "previous_response_id"
        not_searched = _search_refusal(
            router, search_within, body.previous_response_id or "", scope, param=param
        )
        if not_searched is not None:
            m.requests.labels(model, str(not_searched.status)).inc()
            return not_searched
        # Taken (the check above, and no await since); given back when the exchanges end or
        # search_timeout_s after, whichever is first: a cluster that has not answered 404 by then
        # is generating the answer (a tier-1 gateway answers an unknown previous_response_id 404
        # before any generation), or frozen - neither is a search any more, and held for the whole
        # answer a tenant's long generations would take its share of the places for minutes.
        place = router.searches.take(scope, release_after_s=router.search_timeout_s)
    missed = 0  # clusters that answered the continuation's search 404
    found = False
    if holder is not None:  # the cluster that stored the response first, the plan's order after it
        choices = sorted(choices, key=lambda choice: choice.cluster.name != holder)
    else:  # the same body failing moments ago: another cluster first
        choices = router.fleet.away_from_failures(choices, raw)
    headers = _forwarded_headers(router, request, principal)
    span = request.get(ROUTER_SPAN)
    token_withheld = _withholds_token(router, principal)
    # A stream's usage asked of the cluster's gateway where the client did not ask, read and not
    # relayed (igw.gateway.stream_usage); one token per event where its pool's engine cannot say.
    reads_usage = body.stream_usage is StreamUsage.UNASKED or body.stream_usage is StreamUsage.OTHER_OPTIONS
    if reads_usage:
        headers[RELAY_USAGE_HEADER] = RELAY_USAGE
    pools = request.app[SESSION_KEY]
    last: ExchangeResult | None = None
    prepared: list[web.StreamResponse] = []

    def on_prepared(response: web.StreamResponse) -> None:
        prepared.append(response)
        if record is not None and record.ttfb_ms is None:  # the first byte to the client: its head
            record.ttfb_ms = (time.perf_counter() - started) * 1000.0
            record.started_answer = response  # its bytes counted even if the handler is cancelled

    def tried(cluster: ClusterSpec, outcome: str | int, error: str | None = None) -> None:
        """``cluster`` tried, with ``outcome`` (and ``error``, a failed exchange's cause): in the
        access log, and its attempt span ended."""
        if record is not None:
            record.attempt(cluster.name, outcome, error)
        if span is not None:
            span.attempt_done(outcome)

    answered = 0
    waits: list[str] = []  # the Retry-After of each refusal moved on from (_relayed_refusal)
    try:
        for index, choice in enumerate(choices):
            if answered >= router.config.routing.max_attempts:
                break
            cluster = choice.cluster
            later = choices[index + 1 :]
            if pools.of(cluster.name).full and any(not pools.of(c.cluster.name).full for c in later):
                # Every connection to it is held (a frozen or slow cluster): a request would wait for one,
                # up to requestTimeoutSeconds, while a later cluster has room. Not an attempt, no failure
                # (until session s39 the request waited: 9 of 20 past the client's 8 s in the probe).
                m.retries.labels(cluster.name, "pool-full").inc()
                tried(cluster, POOL_FULL)  # no attempt span: none started
                continue
            m.decisions.labels(cluster.name, cluster.region, choice.reason).inc()
            if span is not None:  # the cluster's parent span is this attempt's
                span.attempt(cluster.name, cluster.region)
                span.inject(headers)
            try:
                result = await _within(
                    router,
                    started,
                    exchange(
                        request,
                        session=pools.of(cluster.name),
                        endpoint=cluster.endpoint,
                        upstream_name=f"cluster {cluster.name!r}",  # never its endpoint (an internal address)
                        body=raw,
                        headers=headers,
                        started=started,
                        connect_timeout_s=router.config.connect_timeout_s,
                        idle_timeout_s=router.config.request_timeout_s,
                        response_headers={CLUSTER_HEADER: cluster.name, REGION_HEADER: cluster.region},
                        on_prepared=on_prepared,
                        strip_usage=reads_usage,
                        body_timeout_s=router.config.request_timeout_s,
                        relay_whole_above=WHOLE_ANSWER_BUFFER_BYTES,
                        # an inference API's answer is a JSON object or an event stream: a cluster's
                        # 204 or empty 200 is its fault, a 502 tried at the next cluster (since
                        # session s50; relayed as it came before)
                        json_answer=True,
                    ),
                )
            except ConnectFailed:
                router.fleet.record_outcome(cluster.name, ok=False, unreachable=True)
                m.retries.labels(cluster.name, "connect").inc()
                tried(cluster, CONNECT_FAILED)
                continue
            except (ClientGone, asyncio.CancelledError) as gone:
                # The client left mid-stream; the cluster did nothing wrong. Nothing more can be sent;
                # what was relayed is charged (before session s35, nothing: a stream left just before
                # its end escaped the token limits).
                _count_answer_faults(router, cluster.name, _relaying(prepared))
                await _charge_relayed(router, principal, tenant, model, body, prepared)
                inflight = request.app.get(INFLIGHT_KEY)
                if isinstance(gone, asyncio.CancelledError) and inflight is not None and inflight.cutting:
                    tried(cluster, SHUT_DOWN)
                    return await _shut_down(request, prepared, model=model, metrics=m)
                # the client left (or its handler was cancelled: it left): 499 in the log and the
                # span (until session s49 the span recorded the answer it left, 200)
                tried(cluster, CANCELLED if isinstance(gone, asyncio.CancelledError) else CLIENT_GONE)
                if record is not None:
                    record.status, record.error = 499, CLIENT_DISCONNECTED
                if isinstance(gone, asyncio.CancelledError):
                    raise
                m.requests.labels(model, "499").inc()
                return prepared[0] if prepared else web.Response(status=499)
            if result is None:  # spec.upstream.maxRequestSeconds passed: no other cluster is tried
                m.requests.labels(model, "504").inc()
                tried(cluster, PAST_MAX_REQUEST)
                if prepared:  # it was answering (a long stream): the bound is the request's, not a fault
                    _count_answer_faults(router, cluster.name, _relaying(prepared))
                    await _charge_relayed(router, principal, tenant, model, body, prepared)
                else:
                    # No answer within the whole request's bound: the cluster's failure, as the same wait
                    # ended by requestTimeoutSeconds is (until session s40 it counted nothing, so a
                    # cluster that took requests and never answered was never drained when
                    # maxRequestSeconds is the smaller bound: every request planned on it a 504).
                    router.fleet.record_outcome(cluster.name, ok=False)
                return await _past_max_request(request, router, prepared)
            if token_withheld:
                result = _auth_misconfigured(router, cluster, result)
            tried(cluster, result.status, result.error)  # its cause logged, as tier 1's `error`
            last = result
            _count_answer_faults(router, cluster.name, result)
            if searches and result.status == 404:
                missed += 1
            if (
                searches
                and result.status == 404
                and not result.response.prepared
                and choice is not choices[-1]
            ):
                # Not stored there: no attempt spent. A 404 already relayed (a JSON body over
                # ERROR_ANSWER_BUFFER_BYTES) is the answer: until session s42 the search went on, and
                # the next cluster's answer was written after it on the same connection, where the
                # client's next request on it read it as its own.
                m.retries.labels(cluster.name, RESPONSE_SEARCH).inc()
                continue
            answered += 1
            # A cluster's failed answer counts against it for this model only (the model's pods may be
            # the broken part); a failed exchange (the connection broke, no answer in time) against it
            # as a whole. Until session s39 every failure counted against the whole cluster.
            failed_for = model if result.error is None else None
            if (
                not result.response.prepared
                and result.status in RETRY_STATUSES
                and not _stopped_waiting(result)
            ):
                if not _busy(result):
                    router.fleet.record_outcome(
                        cluster.name, ok=False, model=failed_for, retry_after_s=_drain_hint(router, result)
                    )
                waits.extend(result.response.headers.getall("Retry-After", ()))
                m.retries.labels(
                    cluster.name, str(result.status) if result.status in (429, 503) else "5xx"
                ).inc()
                continue
            router.fleet.record_outcome(
                cluster.name,
                ok=result.ok,
                digest=request_digest(result, raw),
                model=failed_for,
                retry_after_s=_drain_hint(router, result),
            )
            found = result.status < 400
            stored = believed(result.response_id, principal) if result.ok else None
            if stored is not None and router.responses.endpoint_of(stored) is None:
                # Only an id minted for this caller, and never over a holder already known: a fresh id
                # is known nowhere, an id already known is another answer's, claimed
                # (igw.global_router.stored_ids)
                router.responses.remember(stored, cluster.name)
            _observe(router, result, model=model, region=cluster.region, started=started)
            usage = result.usage or {}
            # Without a usage, the prompt's estimate and, for a stream, its events times the model's
            # tokens per event, as tier 1 counts (before session s36, nothing: a stream without usage
            # went through the token limits free).
            prompt_tokens = int(usage.get("prompt_tokens", body.prompt_tokens))
            reported = usage.get("completion_tokens")
            if result.streamed:
                if reported is None:
                    completion_tokens = router.per_event(model).tokens(result.events)
                else:
                    completion_tokens = int(reported)
                    router.per_event(model).learn(completion_tokens, result.events)
            else:
                completion_tokens = int(reported or 0)
            reserved = 0
            reservation = None
            if body.background and result.usage is None and result.status < 400:
                # Generated after this answer, its usage only in polls: its prompt's estimate and output
                # bound, as tier 1 charges (no context window known here), settled by the first poll
                # that shows the usage (handle_stored_response).
                reserved = body.max_tokens or 0
                reservation = result.response_id  # held apart from tier 1's (TIER2_RESERVATIONS)
            tokens = prompt_tokens + completion_tokens
            if tokens + reserved:
                await _account(
                    router,
                    principal,
                    tenant,
                    model,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    reserved_tokens=reserved,
                    reservation=reservation,
                )
            return result.response
        if last is not None:
            m.requests.labels(model, str(last.status)).inc()
            return _relayed_refusal(last, waits, now=router.wall_clock())
        m.requests.labels(model, "503").inc()
        return _no_cluster(router, f"every cluster tried for model {model!r} failed to connect")
    finally:
        if place is not None:
            place.release()
            if missed == len(choices):  # every cluster asked answered 404: not stored for the caller
                router.searches.unfound(
                    body.previous_response_id or "", now=router.clock(), within=search_within
                )
            elif found:
                router.searches.found(body.previous_response_id or "")


def _relayed_refusal(last: ExchangeResult, waits: Sequence[str], *, now: float) -> web.StreamResponse:
    """The last answer of a request every cluster tried refused (429, or a 5xx moved on from), its
    ``Retry-After`` the soonest of those the clusters sent (:mod:`igw.global_router.retry_after`):
    the client may come back when any of them expects room, not when the last one does."""
    response = last.response
    if last.status in RETRY_STATUSES and not response.prepared:
        soonest = soonest_retry_after(waits, now=now)
        if soonest is not None:
            response.headers["Retry-After"] = str(soonest)
    return response


async def _shut_down(
    request: web.Request, prepared: Sequence[web.StreamResponse], *, model: str | None, metrics: FleetMetrics
) -> web.StreamResponse:
    """The answer of a request the shutdown ended (the stream grace over, :meth:`InflightRequests.cut`
    cancelled its handler): a started stream gets a terminal SSE error event ``shutting_down`` and
    ``[DONE]``, a request not answered yet a 503 ``shutting_down``; both retryable, as a tier-1
    gateway ends its own (:mod:`igw.gateway.shutdown`). Before session s38 the router kept no
    account of its requests in flight: the listener's 1 s shutdown timeout cut a stream short
    (a chunked response without its last chunk, which clients report as a broken transfer)."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    if model is not None:  # a stored response's request (no model) is counted by _stored_response
        metrics.requests.labels(model, "503").inc()
    message = "the router is shutting down; retry the request"
    if not prepared:
        return gateway_error("shutting_down", message)
    await _end_stream(request, prepared[0], "shutting_down", message)
    return prepared[0]


async def _within(
    router: GlobalRouter, started: float, exchanging: Awaitable[ExchangeResult]
) -> ExchangeResult | None:
    """``exchanging``'s result, or ``None`` (the exchange cancelled, its upstream connection closed)
    once ``spec.upstream.maxRequestSeconds`` have passed since the request arrived (``started``,
    :func:`time.perf_counter`). ``requestTimeoutSeconds`` bounds each wait only: until session s39 a
    cluster that streamed forever (a stuck generation's tokens, or keep-alive comments) held the
    client's connection and its own for ever."""
    bound = asyncio.timeout(router.config.max_request_s - (time.perf_counter() - started))
    try:
        async with bound:
            return await exchanging
    except TimeoutError:
        if bound.expired():
            return None
        raise


async def _past_max_request(
    request: web.Request, router: GlobalRouter, prepared: Sequence[web.StreamResponse]
) -> web.StreamResponse:
    """The answer of a request :func:`_within` ended: a started stream gets a terminal SSE error
    event ``route_timeout`` and ``[DONE]`` (as a tier-1 gateway ends one past its ``routeTimeout``),
    a request not answered yet a 504 ``route_timeout``."""
    limit = router.config.max_request_s
    if not prepared:
        message = f"spec.upstream.maxRequestSeconds ({limit:g}s) passed before a cluster answered"
        return gateway_error("route_timeout", message)
    message = f"spec.upstream.maxRequestSeconds ({limit:g}s) exceeded; the response is incomplete"
    await _end_stream(request, prepared[0], "route_timeout", message)
    return prepared[0]


async def _end_stream(request: web.Request, response: web.StreamResponse, code: str, message: str) -> None:
    """Finish a started SSE response with an error event and ``[DONE]`` (the client may be gone). A
    whole answer being relayed (:data:`WHOLE_ANSWER_BUFFER_BYTES`) has no place for an event: its
    client's connection is closed before the body's end (:func:`~igw.gateway.upstream.end_unfinished`)."""
    if response.content_type != "text/event-stream":
        end_unfinished(request)
        return
    with contextlib.suppress(ConnectionResetError, ClientConnectionResetError, asyncio.CancelledError):
        await response.write(sse_error_event(code, message, anthropic=anthropic_path(request.path)))
        await response.write_eof()


async def _charge_relayed(
    router: GlobalRouter,
    principal: Principal,
    tenant: str,
    model: str,
    body: InferenceBody,
    prepared: Sequence[web.StreamResponse],
) -> None:
    """Charge a stream its client left what had been relayed: the usage its events carried, else
    the prompt's estimate and its events times the model's tokens per event, or a large whole
    answer's bytes relayed (tier 1's rule, :func:`igw.gateway.inference._charge_relayed`)."""
    relayed = getattr(prepared[0], "relayed", None) if prepared else None
    if relayed is None:
        return
    usage = relayed.usage or {}
    prompt_tokens = int(usage.get("prompt_tokens", body.prompt_tokens))
    reported = usage.get("completion_tokens")
    if reported is not None:
        completion_tokens = int(reported)
    elif relayed.streamed:
        completion_tokens = router.per_event(model).tokens(relayed.events)
    else:  # a large whole answer relayed as it arrived: by its bytes relayed (since session s42)
        completion_tokens = relayed_tokens(relayed.relayed_bytes, body)
    with contextlib.suppress(GuardDenied):
        await _account(
            router, principal, tenant, model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )


async def _account(
    router: GlobalRouter,
    principal: Principal,
    tenant: str,
    model: str,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    reserved_tokens: int = 0,
    reservation: str | None = None,
) -> None:
    """Debit a response's tokens from the tenant-wide and the (tenant, model) limits: in one Redis
    round trip where the router built its guard (as :meth:`ModelRateLimits.admit` decides both).
    Until session s44 two, after every response."""
    if router.model_limits.decides_tenant_limits:
        await router.model_limits.account_both(
            tenant=tenant,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved_tokens,
            reservation=reservation,
        )
        return
    await router.guard.account(
        principal,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        reserved_tokens=reserved_tokens,
        reservation=reservation,
    )
    await router.model_limits.account(
        tenant=tenant,
        model=model,
        tokens=prompt_tokens + completion_tokens,
        reserved_tokens=reserved_tokens,
        reservation=reservation,
    )


async def _settle(router: GlobalRouter, response_id: str, completion_tokens: int) -> None:
    """Settle a background response's held charges, tenant-wide and per-model, by the tokens a poll
    shows it generated: releasing both in one Redis round trip and settling both in one more, where
    the router built its guard (as :func:`_account` holds them in one). Until session s44 four."""
    if router.model_limits.decides_tenant_limits:
        await router.model_limits.settle_both(reservation=response_id, completion_tokens=completion_tokens)
        return
    await router.guard.settle(reservation=response_id, completion_tokens=completion_tokens)
    await router.model_limits.settle(reservation=response_id, completion_tokens=completion_tokens)


def _relaying(prepared: Sequence[web.StreamResponse]) -> ExchangeResult | None:
    """The exchange whose answer was being relayed as it arrived when its relay was cut short (its
    client left, ``maxRequestSeconds`` or a shutdown ended it); ``None`` when none was."""
    relayed = getattr(prepared[0], "relayed", None) if prepared else None
    return relayed if isinstance(relayed, ExchangeResult) else None


def _count_answer_faults(router: GlobalRouter, cluster: str, result: ExchangeResult | None) -> None:
    """Count what was wrong with a cluster's answer, however its relay ended: an error answer over
    1 MiB, relayed as it arrived (so not retried), in ``igw_global_upstream_large_error_answers_total``
    (until session s42 tier 2 had only the throttled WARNING: no series showed how often, nor from
    which cluster), and a compressed answer whose usage went unread, refused (a 502, retried at the
    next cluster) or relayed uncharged, in ``igw_global_answer_usage_unread_total`` (until session
    s44 only a WARNING or the 502 said so, though the exchange set ``usage_unread`` at both tiers)."""
    if result is None:
        return
    if result.large_error:
        router.metrics.large_error_answers.labels(cluster).inc()
    if result.usage_unread is not None:
        router.metrics.answer_usage_unread.labels(cluster, result.usage_unread).inc()
    if result.redirect:  # refused with a 502 (since session s46: relayed, Location and all, before)
        router.metrics.upstream_redirects.labels(cluster).inc()
    if result.not_an_answer is not None:  # refused with a 502 (since session s50: relayed before)
        router.metrics.upstream_non_answers.labels(cluster, result.not_an_answer).inc()


def _stopped_waiting(result: ExchangeResult) -> bool:
    """Whether a cluster's answer is its gateway's 504 for a request it stopped waiting for
    (:data:`~igw.gateway.errors.STOPPED_WAITING_CODES`): its model server had the request that long,
    so it is not tried at the next cluster, as tier 1 tries it at no other pod. This router's own
    timeout on a cluster that sent no head (a frozen gateway) is retried as before."""
    return not result.gave_up and result.response.headers.get(ERROR_CODE_HEADER) in STOPPED_WAITING_CODES


def _drain_hint(router: GlobalRouter, result: ExchangeResult) -> int | None:
    """The ``Retry-After`` of a cluster's 503 in seconds (the soonest readable value, at least 1, at
    most 3600), ``None`` for any other answer or none readable: how long an ejection of the cluster
    for the request's model that this answer completes lasts, within the bounds of
    :func:`~igw.global_router.health.ejection_seconds`. Until session s50 it lasted
    ``ejectionSeconds`` whatever the cluster said."""
    if result.status != 503:
        return None
    return soonest_retry_after(result.response.headers.getall("Retry-After", ()), now=router.wall_clock())


def _busy(result: ExchangeResult) -> bool:
    """Whether a cluster's answer says its gateway is busy, not broken (a 429, or a 503 of
    :data:`~igw.gateway.errors.BUSY_CODES`): the next cluster is tried, no failure counted."""
    return result.status == 429 or result.response.headers.get(ERROR_CODE_HEADER) in BUSY_CODES


async def _stored_response(request: web.Request) -> web.StreamResponse:
    """The handler of :data:`STORED_RESPONSE_ROUTES` (:func:`_forward_stored`), counted in flight as
    an inference request is: a retrieval being relayed when the router stops (a large background
    response, a resumed event stream) gets the stream grace to finish, then ends as
    :func:`_shut_down` ends one. Until session s40 these requests were not counted: the listener's
    1 s shutdown timeout cut them short (a 4 MiB retrieval relayed over 3 s, SIGTERM after its first
    half MiB: the client's read failed 2.4 s in, the body incomplete, the stream grace 10 s)."""
    inflight = request.app.get(INFLIGHT_KEY)
    task = None if inflight is None else inflight.enter()
    router = request.app[ROUTER_KEY]
    # its access-log line as an inference request's (since session s49: until then none, so a
    # retrieval's search across the clusters showed in no log)
    record = _access_record(router, request)
    span = _start_span(router, request)
    response: web.StreamResponse | None = None
    try:
        response = await _forward_stored(request, router)
    finally:
        if inflight is not None:
            inflight.leave(task)
        if record is not None:
            if response is not None and record.model is None:
                # the model of the cluster that answered, where it serves one only (the metric's
                # label); until session s50 the line had none, the chat path's lines always one
                model = _stored_model_label(router, response)
                record.model = None if model == UNKNOWN_MODEL else model
            _log_access(record, response, started=record.began, span=span)
        if span is not None:
            _end_span(span, response)
    router.metrics.requests.labels(_stored_model_label(router, response), str(response.status)).inc()
    return response


def _stored_model_label(router: GlobalRouter, response: web.StreamResponse) -> str:
    """The ``model`` label of a stored-response request's answer in ``igw_global_requests_total``:
    the model of the cluster that answered when it serves one only (the request names none, as a
    tier-1 gateway labels its own), else ``(unknown)``. Until session s42 these answers were
    counted nowhere, though the series is documented as every answer: a router answering every
    retrieval 401, 404 or 5xx showed no error ratio at all."""
    cluster = router.fleet.clusters.get(response.headers.get(CLUSTER_HEADER, ""))
    return cluster.models[0] if cluster is not None and len(cluster.models) == 1 else UNKNOWN_MODEL


async def _forward_stored(request: web.Request, router: GlobalRouter) -> web.StreamResponse:
    """A stored response's retrieval, deletion, cancel or input items (:data:`STORED_RESPONSE_ROUTES`):
    forwarded to the cluster that stored it (whose gateway forwards it to its pod). One this replica
    does not know (made through another router replica, or before a restart) is asked of the
    available clusters serving a model the caller may use, this region's first, a 404 moving on to
    the next (each cluster's gateway searches its own pods); the cluster that has it is remembered.
    None has it: the last cluster's 404; no cluster to ask: 404 ``response_not_found``. An answer
    naming another response is never relayed (since session s45): the 404 of a cluster before it,
    else 404 ``response_not_found`` - a replay's stream and a large whole answer included, checked
    before their first bytes leave (``expect_id`` of :func:`~igw.gateway.upstream.exchange`) - and a
    remembered cluster answering so is forgotten, the next request searching. A search is bounded as
    tier 1's (since session s45, :func:`_search_refusal`): an id the caller's search found nowhere
    moments ago is answered 404 without one, and past the replica's searches in flight (or the
    caller scope's share of them, since s46) 429."""
    try:
        principal = await router.guard.authenticate(request.headers)
    except GuardDenied as denied:
        return _denied(denied)
    record = _record_of(request)
    if record is not None and principal.authenticated:
        record.tenant = principal.tenant
    response_id = request.match_info["response_id"]
    holder = router.responses.endpoint_of(response_id)
    known = None if holder is None else router.fleet.clusters.get(holder)
    clusters = (
        [known]
        if known is not None
        else router.fleet.searched(lambda m: router.guard.may_use(principal, model=m))
    )
    if not clusters:
        message = f"no cluster this router routes to for you is known to store response {response_id!r}"
        return gateway_error("response_not_found", message)
    if known is not None:
        return await _ask_stored(request, router, principal, response_id, clusters, known=known, missed=[])
    within = _search_context(principal, clusters)
    scope = _search_scope(principal)
    refused = _search_refusal(router, within, response_id, scope)
    if refused is not None:
        return refused
    searches = router.searches
    searches.begin(scope)  # free: the check above, and no await since
    missed: list[str] = []
    try:
        response = await _ask_stored(
            request, router, principal, response_id, clusters, known=None, missed=missed
        )
    finally:
        searches.end(scope)
    if len(missed) == len(clusters):  # every cluster asked answered 404 (or with another response)
        searches.unfound(response_id, now=router.clock(), within=within)
    elif response.status < 400:
        searches.found(response_id)  # in every context (since session s47: the finder's alone)
    return response


def _search_context(principal: Principal, clusters: Sequence[ClusterSpec]) -> str:
    """What a search for a stored response is listed within besides its id in
    :attr:`GlobalRouter.searches` (tier 1's :func:`~igw.gateway.response_search.search_context`): the
    caller's scope (:func:`~igw.gateway.guards.caller_scope`; one tenant's misses never answer
    another's request, whose clusters' gateways may well hold the id for it) and the clusters asked
    (a caller allowed other models asks other clusters, in whichever order), each part
    length-prefixed so that no two differ only in where one ends. The id is kept apart (until
    session s47 it was part of one key): a search that finds it takes it off the list in every
    context, as tier 1 does, where before the other scopes' searches went on answering 404 for up to
    ``UNFOUND_TTL_S`` a response that exists."""
    scope = caller_scope(principal)
    names = ",".join(f"{len(name)}:{name}" for name in sorted(c.name for c in clusters))
    return f"{len(scope)}:{scope}|{names}"


def _search_scope(principal: Principal) -> str | None:
    """The scope whose share of the search places a search of ``principal``'s takes: its caller
    scope, none for scope ``""`` (a router without ``spec.auth``: every caller one scope, nobody to
    share with; the replica's limit alone)."""
    return caller_scope(principal) or None


def _search_refusal(
    router: GlobalRouter, within: str, response_id: str, scope: str | None, *, param: str | None = None
) -> web.Response | None:
    """The answer to a search for stored response ``response_id`` that must not run, as tier 1's
    (:func:`igw.gateway.inference._search_refusal`): 404 ``response_not_found`` when the caller's
    search found it nowhere less than ``UNFOUND_TTL_S`` ago, 429 ``response_searches_busy`` with
    ``Retry-After`` (1 s, spread) when the replica runs as many searches as it may, or ``scope`` its
    share of them (``SEARCHES_PER_SCOPE``: until session s46 one tenant looping made-up ids took every
    place, every other tenant's search 429); else ``None``. ``param``: a continuation's field.
    Until session s45 every such request asked every eligible cluster, each of whose gateways
    searches its pods: ids made up in a loop cost the whole fleet a search each, at any rate and
    concurrency. 429 (tier 1 answers 503, retried elsewhere by the router): the router's 5xx say the
    fleet is down, and the OpenAI SDK retries a 429 as it does a 503."""
    searches = router.searches
    refused = router.metrics.searches_refused
    if searches.recently_unfound(response_id, now=router.clock(), within=within):
        refused.labels("unfound").inc()
        message = (
            f"no cluster this router routes to for you stores response {response_id!r} "
            f"(every one asked answered 404 less than {searches.ttl_s:g}s ago)"
        )
        return gateway_error("response_not_found", message, param=param)
    busy = searches.busy(scope)
    if busy is not None:
        refused.labels(busy).inc()
        retry = spread_retry_after(1, rng=router.fleet.rng)
        whose = (
            f"{searches.limit} others"
            if busy == "busy"
            else f"{searches.per_scope} others of yours (your share of its searches)"
        )
        message = (
            f"response {response_id!r} is not known to this router replica and it is already searching "
            f"the clusters for {whose}; retry after {retry}s"
        )
        return gateway_error(
            "response_searches_busy", message, param=param, headers={"Retry-After": str(retry)}
        )
    return None


async def _ask_stored(
    request: web.Request,
    router: GlobalRouter,
    principal: Principal,
    response_id: str,
    clusters: Sequence[ClusterSpec],
    *,
    known: ClusterSpec | None,
    missed: list[str],
) -> web.StreamResponse:
    """:func:`_forward_stored`'s exchanges with ``clusters`` in turn (``known``: the one remembered
    as the holder, the only one); ``missed`` gets the name of each cluster that answered 404 or with
    another response (the search goes on past it). A search waits ``search_timeout_s`` for a
    cluster's answer (its head; since session s47 its whole answer, not an event stream), then asks
    the next (since session s46): found there, its answer; else the
    timed-out cluster's 504 ``upstream_timeout``, never a 404 - it may store the response - and the id
    is not listed as found nowhere."""
    proves = names_itself(request)  # an answer below 400 must name the response asked for
    headers = _forwarded_headers(router, request, principal, proves=proves)
    token_withheld = _withholds_token(router, principal)
    prepared: list[web.StreamResponse] = []
    last: web.StreamResponse | None = None
    withheld: str | None = None  # the last cluster whose answer named another response (not relayed)
    stalled: web.StreamResponse | None = None  # the 504 of the last cluster a search stopped waiting for
    started = time.perf_counter()
    record = _record_of(request)

    def on_prepared(response: web.StreamResponse) -> None:
        prepared.append(response)
        if record is not None and record.ttfb_ms is None:  # the first byte to the client: its head
            record.ttfb_ms = (time.perf_counter() - record.began) * 1000.0
            record.started_answer = response  # its bytes counted even if the handler is cancelled

    span = request.get(ROUTER_SPAN)

    def tried(cluster: ClusterSpec, outcome: str | int, error: str | None = None) -> None:
        """``cluster`` asked, with ``outcome`` (and ``error``, a failed exchange's cause): in the
        access log, and its attempt span ended."""
        if record is not None:
            record.attempt(cluster.name, outcome, error)
        if span is not None:
            span.attempt_done(outcome)

    for cluster in clusters:
        if span is not None:  # the cluster's parent span is this attempt's
            span.attempt(cluster.name, cluster.region)
            span.inject(headers)
        try:
            result = await _within(
                router,
                started,
                exchange(
                    request,
                    session=request.app[SESSION_KEY].of(cluster.name),
                    endpoint=cluster.endpoint,
                    upstream_name=f"cluster {cluster.name!r}",  # never its endpoint (an internal address)
                    body=b"",
                    headers=headers,
                    started=started,
                    connect_timeout_s=router.config.connect_timeout_s,
                    idle_timeout_s=router.config.request_timeout_s,
                    response_headers={CLUSTER_HEADER: cluster.name, REGION_HEADER: cluster.region},
                    on_prepared=on_prepared,
                    method=request.method.encode("ascii"),
                    body_timeout_s=router.config.request_timeout_s,
                    relay_whole_above=WHOLE_ANSWER_BUFFER_BYTES,
                    expect_id=response_id,  # an answer naming another: returned unrelayed
                    keepalive_s=router.replay_keepalive_s,  # a held replay: pinged, then cut if misnamed
                    head_timeout_s=None if known is not None else router.search_timeout_s,
                    # a search's whole answer, not its head alone (since s47, as tier 1's: a cluster
                    # sending its head and then stalling or trickling the body held the search for
                    # requestTimeoutSeconds, or for ever)
                    answer_timeout_s=None if known is not None else router.search_timeout_s,
                    # a 404 (any error) over 1 MiB: answered with its status alone, so a search
                    # moves on (since s48; relayed before, the search ended there); the remembered
                    # cluster's too (since s48, tier 1's rule: relayed before)
                    discard_large_errors=True,
                    # a retrieval or cancel over 1 MiB whose held start does not show the response
                    # asked for: a miss, unrelayed (since s48; relayed before, the search ended
                    # there), as a smaller one is (``unproven`` below); the remembered cluster's too
                    require_id=proves,
                ),
            )
        except ConnectFailed:
            router.fleet.record_outcome(cluster.name, ok=False, unreachable=True)
            router.metrics.retries.labels(cluster.name, "connect").inc()
            tried(cluster, CONNECT_FAILED)
            continue
        except (ClientGone, asyncio.CancelledError) as gone:
            _count_answer_faults(router, cluster.name, _relaying(prepared))
            cancelled = isinstance(gone, asyncio.CancelledError)
            inflight = request.app.get(INFLIGHT_KEY)
            if cancelled and inflight is not None and inflight.cutting:
                tried(cluster, SHUT_DOWN)
                return await _shut_down(request, prepared, model=None, metrics=router.metrics)
            tried(cluster, CANCELLED if cancelled else CLIENT_GONE)
            if record is not None:
                record.status, record.error = 499, CLIENT_DISCONNECTED
            if cancelled:
                raise
            return prepared[0] if prepared else web.Response(status=499)
        _count_answer_faults(router, cluster.name, _relaying(prepared) if result is None else result)
        if result is None:  # spec.upstream.maxRequestSeconds passed (a replayed stream's too)
            tried(cluster, PAST_MAX_REQUEST)
            if not prepared:  # no answer within the request's bound: the cluster's failure, as in _route
                router.fleet.record_outcome(cluster.name, ok=False)
            return await _past_max_request(request, router, prepared)
        if token_withheld:
            result = _auth_misconfigured(router, cluster, result)
        if known is None and result.gave_up and not result.response.prepared:
            # No answer within the search's bound (a frozen cluster): the next one is asked. Counted
            # against the cluster only when the bound was requestTimeoutSeconds itself (a cluster
            # whose gateway waits on one frozen pod of its own is not drained for it).
            if router.search_timeout_s >= router.config.request_timeout_s:
                _record_stored_outcome(router, cluster, result)
            stalled = result.response
            router.metrics.retries.labels(cluster.name, SEARCH_TIMEOUT).inc()
            tried(cluster, SEARCH_TIMEOUT)  # the retries reason's word
            continue
        _record_stored_outcome(router, cluster, result)
        named = result.response_id  # the id of the response object the answer carries, if any
        # an answer about another response; a whole retrieval's naming none (not JSON, no id) too:
        # no proof it is stored there (until s48 relayed, and the search ended at it). The remembered
        # cluster's too, forgotten and a 404 (tier 1's rule for a remembered holder; until s48 an
        # id-less 200 of the remembered cluster was relayed and it stayed remembered)
        unproven = not result.response.prepared and proves
        other = named != response_id if unproven else named is not None and named != response_id
        if result.status == 404 or (other and result.status < 400 and not result.response.prepared):
            missed.append(cluster.name)
        searching_on = known is None and cluster is not clusters[-1] and not result.response.prepared
        if other and result.status < 400 and known is not None:
            # the remembered holder named another: forgotten, the next request searches (s45)
            router.responses.disown(response_id, cluster.name)
        if other and result.status < 400 and result.response.prepared:
            # a replay released at its first event that went on with another response: cut there
            # (igw.gateway.upstream._cut_replay), counted as a withheld answer is (since session s46)
            router.metrics.usage_misnamed.labels(cluster.name).inc()
            misnamed_log.warning(
                "cluster %s went on with another response in a replay of one: cut", cluster.name
            )
        if other and result.status < 400 and not result.response.prepared:
            # Never the client's (another tenant's response, maybe), nor kept as the last answer:
            # until session s45 a search every cluster answered so relayed the last one. Counted and
            # logged (once a minute per cluster, no answer's content) as each is withheld: until
            # session s46 only the last, and only when the request ended on it.
            withheld = cluster.name
            tried(cluster, ANOTHER_RESPONSE)
            router.metrics.usage_misnamed.labels(cluster.name).inc()
            misnamed_log.warning(
                "cluster %s answered a retrieval of one response with another response (or none named): "
                "not relayed",
                cluster.name,
            )
            if searching_on:
                router.metrics.retries.labels(cluster.name, RESPONSE_SEARCH).inc()  # the next one is asked
            continue
        tried(cluster, result.status, result.error)
        last = result.response
        if searching_on and result.status == 404:
            router.metrics.retries.labels(cluster.name, RESPONSE_SEARCH).inc()  # the next one is asked
            continue
        if stalled is not None and result.status == 404 and not result.response.prepared:
            continue  # the last cluster's 404: the one not heard may store it (the 504 below)
        if known is None and result.status < 400 and _found(request, response_id, named, principal):
            router.responses.remember(response_id, cluster.name)
        shown = None if result.usage is None else result.usage.get("completion_tokens")
        if shown is not None and result.status < 400:
            if named == response_id:
                # the usage of a response accepted in the background: its bound settled (once)
                with contextlib.suppress(GuardDenied):
                    await _settle(router, response_id, shown)
            else:  # another response's usage (or no id): no proof of this one's, its hold kept
                router.metrics.usage_misnamed.labels(cluster.name).inc()
                misnamed_log.warning(
                    "cluster %s answered a poll of one response with the usage of another (or none "
                    "named): not settled by it",
                    cluster.name,
                )
        return result.response
    if withheld is not None and last is None and stalled is None:
        # as for a response stored nowhere (a cluster's 404 before it, when one came); each withheld
        # answer was counted and logged as it was withheld
        message = f"no cluster this router asked stores response {response_id!r}"
        return gateway_error("response_not_found", message)
    if stalled is not None:  # the others answered 404 (or not at all): the one not heard may store it
        return stalled
    if last is not None:
        return last
    return gateway_error(
        "upstream_connect_failed", "could not connect to " + ", ".join(c.name for c in clusters)
    )


def _found(request: web.Request, response_id: str, named: str | None, principal: Principal) -> bool:
    """Whether a search's answer (below 400) to ``principal``'s request about ``response_id`` shows
    where the response is stored, for the router to remember: never a deletion's; a retrieval's or a
    cancel's only when it carries the response itself (an answer naming another id, or none, is no
    proof); input items (a list, no id) as they come; and only an id minted for the caller, else
    one tenant's search (a hostile cluster answering 200 to anything) chose where another tenant's
    retrievals of its own response went (:mod:`igw.global_router.stored_ids`)."""
    if request.method == "DELETE" or believed(response_id, principal) is None:
        return False
    return named == response_id or request.path.endswith("/input_items")


def _record_stored_outcome(router: GlobalRouter, cluster: ClusterSpec, result: ExchangeResult) -> None:
    """A stored-response request's outcome at ``cluster``, counted as :func:`_route` counts an
    inference request's: a failed exchange (no answer within ``requestTimeoutSeconds``, a connection
    broken mid-answer) against the cluster; a failed answer (a 5xx, not a busy one) against the
    cluster for its model - when it serves one only: the request names no model, and counting one
    model's failing pods against every model a cluster serves drained them all (session s39's
    defect); that model's inference requests count them - and any other answer as a success.
    Until session s40 these requests counted connect failures only: a cluster answering every
    retrieval 5xx (or never answering one) was never drained by them, and a search asked it first
    for ever."""
    if _busy(result):
        return
    models = cluster.models
    model = models[0] if len(models) == 1 else None
    if result.ok:
        router.fleet.record_outcome(cluster.name, ok=True, model=model)
    elif result.error is not None:
        router.fleet.record_outcome(cluster.name, ok=False)
    elif model is not None:
        router.fleet.record_outcome(
            cluster.name, ok=False, model=model, retry_after_s=_drain_hint(router, result)
        )


def _observe(
    router: GlobalRouter, result: ExchangeResult, *, model: str, region: str, started: float
) -> None:
    m = router.metrics
    locality = "same-region" if region == router.region else "cross-region"
    m.requests.labels(model, str(result.status)).inc()
    m.duration.labels(model, region, locality).observe(time.perf_counter() - started)
    if result.ttft_s is not None:
        m.ttft.labels(model, region, locality).observe(result.ttft_s)


def _inference_route(api: InferenceApi) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of ``api``'s route: the same APIs as a tier-1 gateway serves."""

    anthropic = api in ANTHROPIC_APIS

    async def handle(request: web.Request) -> web.StreamResponse:
        # Counted in flight (serve_app gives such requests the stream grace on shutdown, then ends
        # them cleanly: _shut_down).
        inflight = request.app.get(INFLIGHT_KEY)
        task = None if inflight is None else inflight.enter()
        router = request.app[ROUTER_KEY]
        started = time.perf_counter()
        record = _access_record(router, request)
        span = _start_span(router, request)
        response: web.StreamResponse | None = None
        try:
            response = await _route(request, router, api=api, started=started)
            if anthropic:
                response = anthropic_shaped(response, request_id=request.get(REQUEST_ID_KEY))
            return response
        finally:
            if inflight is not None:
                inflight.leave(task)
            if record is not None:
                _log_access(record, response, started=started, span=span)
            if span is not None:
                _end_span(span, response)

    return handle


ACCESS_RECORD: Final = web.RequestKey("igw_global_access_record", RouterAccessRecord)
"""The request's key of its :class:`~igw.global_router.access_log.RouterAccessRecord` (absent with
``spec.accessLog.enabled: false``)."""


def _access_record(router: GlobalRouter, request: web.Request) -> RouterAccessRecord | None:
    """A new access-log record for ``request``, kept on it for :func:`_route` to fill in; ``None``
    when the router writes no access log."""
    if not router.config.access_log.enabled:
        return None
    request_id = request.get(REQUEST_ID_KEY) or request_id_for(request.headers)
    request[REQUEST_ID_KEY] = request_id  # the id forwarded to every cluster (_forwarded_headers)
    # a stored response's id left out (logged_path): it reads and deletes the response
    record = RouterAccessRecord(request_id, request.method, logged_path(request.path), client=request.remote)
    request[ACCESS_RECORD] = record
    return record


ROUTER_SPAN: Final = web.RequestKey("igw_global_router_span", RouterSpan)
"""The request's key of its :class:`~igw.global_router.tracing.RouterSpan` (absent with tracing off)."""


def _start_span(router: GlobalRouter, request: web.Request) -> RouterSpan | None:
    """The request's span, kept on it for :func:`_forwarded_headers` and the attempts to fill in;
    ``None`` with tracing off."""
    if router.tracing is None:
        return None
    route = request.match_info.route.resource
    span = router.tracing.start(
        request.headers,
        method=request.method,
        route=route.canonical if route is not None else request.path,
        path=logged_path(request.path),  # a stored response's id left out, as in the access line
    )
    request[ROUTER_SPAN] = span
    return span


def _end_span(span: RouterSpan, response: web.StreamResponse | None) -> None:
    """End ``span`` with the request's answer (``None``: its handler was cancelled, 499)."""
    if response is None:
        span.finish(499, cluster=None, region=None)
        return
    cluster = response.headers.get(CLUSTER_HEADER)
    region = response.headers.get(REGION_HEADER) if cluster is not None else None
    span.finish(response.status, cluster=cluster, region=region)


def _record_of(request: web.Request) -> RouterAccessRecord | None:
    """``request``'s access-log record (:func:`_access_record`), if it has one."""
    return request.get(ACCESS_RECORD)


def _bytes_out(response: web.StreamResponse) -> int:
    """The answer's body bytes written to the client (the head and any chunk framing not counted):
    a relayed answer's as written so far (what was written before a client left too), an answer
    still to be sent whole its body's length. Until session s49 a relayed answer counted its wire
    bytes (head and framing, read from aiohttp's private writer) and a whole one its body alone."""
    relayed = sent_body_bytes(response)
    if relayed is not None:
        return relayed
    body = response.body if isinstance(response, web.Response) and not response.prepared else None
    return len(body) if isinstance(body, bytes | bytearray) else 0


def _log_access(
    record: RouterAccessRecord,
    response: web.StreamResponse | None,
    *,
    started: float,
    span: RouterSpan | None = None,
) -> None:
    """Complete ``record`` from the request's answer (``None``: its handler was cancelled, the
    client gone or the router stopping) and write it, with ``span``'s trace id when it is recorded
    (since session s49, as tier 1's line: the line leads to its trace)."""
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    if span is not None:
        record.trace_id = span.recorded_trace_id
    record.duration_ms = elapsed_ms
    started_answer, record.started_answer = record.started_answer, None  # not held while queued
    if response is None:
        record.status = record.status or 499
        record.error = record.error or CLIENT_DISCONNECTED
        if isinstance(started_answer, web.StreamResponse):
            record.bytes_out = _bytes_out(started_answer)
    else:
        record.status = record.status or response.status
        record.error = record.error or response.headers.get(ERROR_CODE_HEADER)
        record.cluster = response.headers.get(CLUSTER_HEADER)
        record.region = response.headers.get(REGION_HEADER) if record.cluster is not None else None
        record.bytes_out = _bytes_out(response)
        if record.ttfb_ms is None:  # an answer sent whole: handed to the connection now
            record.ttfb_ms = elapsed_ms
    record.emit()


def _listed_models(router: GlobalRouter, principal: Principal) -> list[dict[str, object]]:
    """The models some cluster serves that ``principal`` may use, as at tier 1."""
    return [
        {"id": name, "object": "model", "created": 0, "owned_by": "igw"}
        for name in router.fleet.available_models()
        if router.guard.may_use(principal, model=name)
    ]


async def _models(request: web.Request) -> web.StreamResponse:
    router = request.app[ROUTER_KEY]
    try:
        principal = await router.guard.authenticate(request.headers)
    except GuardDenied as denied:
        return _denied(denied)
    data = _listed_models(router, principal)
    return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")


async def _model(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models/{model}`` (the OpenAI SDK's ``models.retrieve``), as at tier 1
    (:func:`igw.gateway.app.model_answer`)."""
    router = request.app[ROUTER_KEY]
    try:
        principal = await router.guard.authenticate(request.headers)
    except GuardDenied as denied:
        return _denied(denied)
    return model_answer(_listed_models(router, principal), request.match_info["model"])


def _readiness(router: GlobalRouter) -> tuple[bool, dict[str, object]]:
    ready, detail = router.fleet.readiness()
    guard = router.guard.readiness()
    detail["guard"] = guard.as_detail()
    ready = ready and guard.ready and not router.draining
    if router.draining:
        detail["draining"] = True
    if router.config_error is not None:
        detail["config_reload_error"] = router.config_error
    return ready, detail


async def _readyz(request: web.Request) -> web.StreamResponse:
    """Readiness with every cluster's state (endpoints, heartbeat ages, drain reasons): the single
    port's ``/readyz``, or the management listener's."""
    ready, detail = _readiness(request.app[ROUTER_KEY])
    body = orjson.dumps({"ready": ready, **detail}, option=orjson.OPT_INDENT_2)
    return web.Response(status=200 if ready else 503, body=body, content_type="application/json")


async def _plain_readyz(request: web.Request) -> web.StreamResponse:
    """The traffic port's ``/readyz`` when a management listener holds the detail: 200/503 only (the
    load balancer's health check and the drain need nothing more; no cluster endpoint is shown)."""
    ready, _ = _readiness(request.app[ROUTER_KEY])
    body = b'{"ready":true}' if ready else b'{"ready":false}'
    return web.Response(status=200 if ready else 503, body=body, content_type="application/json")


async def _metrics(request: web.Request) -> web.StreamResponse:
    """The page, formatted off the event loop (:attr:`FleetMetrics.page`); concurrent scrapes share
    one render."""
    payload = await request.app[ROUTER_KEY].metrics.page.render()
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _tenant_labels(
    config: GlobalRouterConfig, settings: RateLimitSettings, registry: CollectorRegistry
) -> Callable[[str], str]:
    """The ``tenant`` label of ``igw_global_ratelimit_hits_total``: the page's shared, bounded
    mapping (:mod:`igw.gateway.tenant_labels`), which names the tenants ``rateLimits`` and
    ``modelRateLimits`` name and the first ``rateLimits.metrics.maxTenantLabels`` others; the rest
    are ``other``. With ``tenantClaim: sub`` every user is a tenant: their raw names made one series
    per refused user for the replica's life (until session s40)."""
    labels = TenantLabels.of(registry)
    named = settings.labelled_tenants | {e.tenant for e in config.model_limits if e.tenant != WILDCARD}
    labels.name(named)
    return functools.partial(labels.label, named=named, limit=settings.max_tenant_labels)


def create_global_app(
    config: GlobalRouterConfig,
    *,
    region: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    token_clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    registry: CollectorRegistry | None = None,
    guard: RequestGuard | None = None,
    reader: HeartbeatReader | None = None,
    read_heartbeats: bool = True,
    emf_interval_s: float | None = None,
    management_listener: bool = False,
    tracing: Tracing | None = None,
) -> web.Application:
    """Build a router replica. ``clock``: the fleet's and ``modelRateLimits``' clock (intervals only,
    monotonic); ``token_clock``: the request guard's (wall clock: a token's ``exp``/``nbf``/``iat``
    are seconds since the epoch, so a monotonic clock would refuse every valid token as issued in
    the future). ``reader``: heartbeat source (default: Redis per ``spec.heartbeats``;
    ``read_heartbeats=False`` routes on configuration and request outcomes alone - tests).
    ``emf_interval_s``: log fleet metrics as CloudWatch EMF lines to ``igw.emf`` this often.
    ``management_listener``: ``/metrics`` and the detailed ``/readyz`` are served by
    :func:`global_management_app` on a port of its own; this app keeps ``/healthz`` and a ``/readyz``
    without detail (the traffic port is the one the load balancer exposes, as for a tier-1 gateway:
    :mod:`igw.gateway.management`). ``tracing``: a span per inference and stored-response request
    (:mod:`igw.global_router.tracing`), shut down (what is buffered exported) when the app stops."""
    metrics = FleetMetrics(registry)
    limit_settings = RateLimitSettings.from_mapping(config.rate_limits)
    if (config.authorization or {}).get("prefixCacheIsolation", "shared") != "shared":
        log.warning(
            "spec.authorization.prefixCacheIsolation has no effect at tier 2 (the router writes nothing "
            "into request bodies): set it in each cluster's InferenceGatewayConfig"
        )
    if (config.authorization or {}).get("allowedEngineFields"):
        log.warning(
            "spec.authorization.allowedEngineFields has no effect at tier 2 (each cluster's gateway "
            "decides which engine fields its tenants may send): set it in each cluster's "
            "InferenceGatewayConfig"
        )
    security_metrics: SecurityMetrics | None = None  # an injected guard (tests) keeps its own
    outage: BackendOutage | None = None
    tenant_limiter: RateLimiter | None = None
    if guard is None:
        security_metrics = SecurityMetrics(
            registry=metrics.registry, holds_refused=metrics.ratelimit_holds_refused
        )
        built = build_guard(
            config.auth,
            authorization=config.authorization,
            rate_limits=config.rate_limits,
            clock=token_clock,
            metrics=security_metrics,
            reservation_scope=TIER2_RESERVATIONS,
        )
        # one Redis, one outage: a request meets its timeout once, not once per limit (s43)
        outage = None if built.limiter is None else built.limiter.outage
        # and one decision per request: both limits in one round trip, a refusal taking from neither
        tenant_limiter = built.limiter
        guard = built
    if reader is None and read_heartbeats:
        reader = HeartbeatReader(
            url=config.heartbeats.redis_url,
            password=redis_password(
                config.heartbeats.redis_url,
                config.heartbeats.redis_password_env,
                path="spec.heartbeats.redis",
            ),
            password_env=config.heartbeats.redis_password_env,
            key_prefix=config.heartbeats.key_prefix,
            clusters=[c.name for c in config.clusters],
            staleness_s=config.failover.heartbeat_staleness_s,
            clock=clock,
        )
    fleet = Fleet(
        config,
        region=region or config.region,
        clock=clock,
        rng=rng if rng is not None else random.Random(),
        metrics=metrics,
        reader=reader,
    )
    router = GlobalRouter(
        config,
        region=region or config.region,
        guard=guard,
        model_limits=ModelRateLimits(
            config.model_limits,
            settings=limit_settings,
            clock=clock,
            metrics=security_metrics,
            outage=outage,
            tenant_limiter=tenant_limiter,
        ),
        metrics=metrics,
        fleet=fleet,
        anonymous_tenant=limit_settings.anonymous_tenant,
        tenant_label=_tenant_labels(config, limit_settings, metrics.registry),
        wall_clock=token_clock,
    )
    metrics.registry.register(BodyBudgetCollector(router.body_budget))
    if tracing is not None:
        router.tracing = RouterTracing(tracing)
        if tracing.export_stats is not None:
            metrics.registry.register(tracing.export_stats)
    app = name_every_answer(
        web.Application(client_max_size=config.routing.max_request_body_bytes, middlewares=[openai_errors])
    )
    app[ROUTER_KEY] = router
    app[INFLIGHT_KEY] = InflightRequests()
    app[BODY_LIMIT_SETTING_KEY] = BODY_LIMIT
    for path, api in INFERENCE_PATHS.items():
        app.router.add_post(path, _inference_route(api))
    for method, path in STORED_RESPONSE_ROUTES:
        app.router.add_route(method, path, _stored_response)
    app.router.add_get("/v1/models", _models)
    app.router.add_get(MODEL_ROUTE, _model)
    app.router.add_get("/healthz", healthz)
    if management_listener:
        app.router.add_get("/readyz", _plain_readyz)
    else:
        app.router.add_get("/readyz", _readyz)
        app.router.add_get("/metrics", _metrics)

    async def services(app: web.Application) -> AsyncIterator[None]:
        await guard.start()
        app[SESSION_KEY] = ClusterPools([c.name for c in config.clusters])
        await fleet.poll_once()
        fleet.start()
        try:
            yield
        finally:
            router.heap_trim.close()
            await fleet.stop()
            await app[SESSION_KEY].close()
            await router.model_limits.close()
            await guard.close()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # the exporter's final flush blocks

    app.cleanup_ctx.append(services)
    if emf_interval_s is not None:
        app.cleanup_ctx.append(emf_context(FleetEmfReporter(metrics), interval_s=emf_interval_s))
    return app


def global_management_app(router_app: web.Application) -> web.Application:
    """The management listener's app over ``router_app``'s router (build that one with
    ``management_listener=True`` and serve both): ``/metrics``, the detailed ``/readyz``,
    ``/healthz``; it starts no service of its own."""
    app = name_every_answer(web.Application(middlewares=[openai_errors]))
    app[ROUTER_KEY] = router_app[ROUTER_KEY]
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app
