"""The records of the routing interface (:mod:`igw.scheduling.types`): what a policy sees of an
endpoint and a request, what it decides, and what it learns when a request completes.

Re-exported by :mod:`igw.scheduling.types`, which also defines the policy protocols. They live in a
module of their own so that the mypyc build can compile them (``types`` stays interpreted: its
``@runtime_checkable`` protocols fail to import when compiled, :mod:`igw.compiled`): every pick makes
a request, a decision and an outcome record and reads the views' fields many times over, and with
these as native classes the compiled scheduler and gateway make and read them directly instead of
through the interpreter's generic attribute look-ups and a Python ``__init__`` per record.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

EndpointKey = str
"""``host:port`` of one model-server endpoint (a pod IP and its target port)."""


@dataclass(slots=True, init=False, unsafe_hash=True)
class EngineMetrics:
    """Signals extracted from one scrape of an endpoint's ``/metrics`` page.

    ``None`` means the page did not carry the signal (for example vLLM < 0.9.2 has no
    ``vllm:kv_cache_usage_perc`` only when the old name is also absent; SGLang without
    ``--enable-metrics`` has no page at all).

    Read-only and hashable by value, as the frozen dataclass it was, with the ``__init__`` written out
    as :class:`RoutingRequest`'s: the scraper makes one per scrape of every pod and every other
    worker of a group one per snapshot it takes (:mod:`igw.gateway.scrape_share`), and the frozen
    dataclass's generated ``__init__`` ran in the interpreter in the compiled build, one
    ``object.__setattr__`` call per field.
    """

    waiting: Final[int | None]
    """Requests queued, not yet scheduled (``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``)."""
    running: Final[int | None]
    """Requests in the running batch (``vllm:num_requests_running``, ``sglang:num_running_reqs``)."""
    kv_usage: Final[float | None]
    """KV-cache utilisation, fraction 0..1 (``vllm:kv_cache_usage_perc`` or the old
    ``vllm:gpu_cache_usage_perc``; ``sglang:token_usage``)."""
    active_adapters: Final[frozenset[str] | None]
    """LoRA adapters in the running batch (``vllm:lora_requests_info{running_lora_adapters}``)."""
    waiting_adapters: Final[frozenset[str] | None]
    """LoRA adapters of waiting requests (``vllm:lora_requests_info{waiting_lora_adapters}``)."""
    max_lora: Final[int | None]
    """GPU LoRA slots (``vllm:lora_requests_info{max_lora}``)."""
    block_size: Final[int | None]
    """KV block size in tokens (``vllm:cache_config_info{block_size}``)."""
    num_gpu_blocks: Final[int | None]
    """KV blocks on the GPU (``vllm:cache_config_info{num_gpu_blocks}``)."""

    def __init__(
        self,
        waiting: int | None = None,
        running: int | None = None,
        kv_usage: float | None = None,
        active_adapters: frozenset[str] | None = None,
        waiting_adapters: frozenset[str] | None = None,
        max_lora: int | None = None,
        block_size: int | None = None,
        num_gpu_blocks: int | None = None,
    ) -> None:
        self.waiting = waiting
        self.running = running
        self.kv_usage = kv_usage
        self.active_adapters = active_adapters
        self.waiting_adapters = waiting_adapters
        self.max_lora = max_lora
        self.block_size = block_size
        self.num_gpu_blocks = num_gpu_blocks


@dataclass(slots=True, init=False, unsafe_hash=True)
class EndpointView:
    """Everything a routing policy may look at for one candidate endpoint.

    Read-only and compared and hashed by value, as the frozen dataclass it was; the ``__init__`` is
    written out, as :class:`RoutingRequest`'s (and for the same reason: the gateway and the dispatch
    ledger make views on every pick, and a generated ``__init__`` stays interpreted in the compiled
    build). ``labels`` defaults to a fresh empty dict."""

    key: Final[EndpointKey]
    metrics: Final[EngineMetrics | None]
    """Latest successful scrape, or ``None`` if the endpoint has never been scraped successfully."""
    scraped_at: Final[float | None]
    """Clock time (same clock as ``now`` in :meth:`RoutingPolicy.pick`) of that scrape."""
    scrape_failing: Final[bool]
    """True while the most recent scrape attempts fail (timeout, connection refused, bad page)."""
    inflight: Final[int]
    """Requests this router dispatched to the endpoint that have not completed yet."""
    inflight_tokens: Final[int]
    """Estimated prompt + max output tokens of those in-flight requests."""
    labels: Final[Mapping[str, str]]
    """Pod labels (engine type, GPU generation, role...)."""
    max_model_len: Final[int | None]
    """The longest prompt + output the endpoint accepts (from its ``/v1/models``); ``None``: unknown."""
    unreflected_dispatches: Final[int]
    """Requests this router dispatched to the endpoint after ``scraped_at`` that are probably still
    waiting there (see :mod:`igw.scheduling.dispatch_ledger`). Filled in by the scheduler itself from
    its own dispatch record; callers leave it 0."""

    def __init__(
        self,
        key: EndpointKey,
        metrics: EngineMetrics | None,
        scraped_at: float | None,
        scrape_failing: bool = False,
        inflight: int = 0,
        inflight_tokens: int = 0,
        labels: Mapping[str, str] | None = None,
        max_model_len: int | None = None,
        unreflected_dispatches: int = 0,
    ) -> None:
        self.key = key
        self.metrics = metrics
        self.scraped_at = scraped_at
        self.scrape_failing = scrape_failing
        self.inflight = inflight
        self.inflight_tokens = inflight_tokens
        self.labels = {} if labels is None else labels
        self.max_model_len = max_model_len
        self.unreflected_dispatches = unreflected_dispatches

    def metrics_age(self, now: float) -> float | None:
        """Seconds since the last successful scrape, or ``None`` if there never was one."""
        return None if self.scraped_at is None else max(0.0, now - self.scraped_at)


@dataclass(slots=True, init=False, unsafe_hash=True)
class RoutingRequest:
    """The parts of an inference request that routing depends on.

    Read-only (``Final``: mypy rejects an assignment; the compiled build's native class has no
    setter) and hashable by value as a frozen dataclass was; the ``__init__`` is written out, not
    generated, so that the mypyc build compiles it to native code (a generated one is ``exec``-made
    Python that every construction would run, :mod:`igw.compiled`). Its parameters are the fields,
    in order, with their defaults (``tests/scheduling/test_record_init.py`` checks that)."""

    request_id: Final[str]
    model: Final[str]
    """The model the client asked for after body-based routing (a base model or a LoRA adapter)."""
    base_model: Final[str]
    """The base model whose scheduler handles the request."""
    prefix_text: Final[str]
    """Text used for prefix-affinity hashing: the ``prompt`` of a completion, or the serialised
    ``messages`` of a chat completion (roles included), as the GIE approximate scorer does."""
    prompt_tokens: Final[int]
    """Estimated prompt length in tokens (about 4 characters per token when not tokenised)."""
    max_tokens: Final[int | None]
    adapter: Final[str | None]
    """LoRA adapter name when ``model`` is an adapter, else ``None``."""
    priority: Final[int]
    tenant: Final[str | None]
    stream: Final[bool]
    """Whether the answer is streamed: only then does the gateway hear the first token before the
    whole answer (a non-streamed request's first token is never reported, only its completion)."""
    previous_response_id: Final[str | None]
    """The stored response a Responses API request continues (its ``previous_response_id``): only
    the endpoint that stored it can answer (:mod:`igw.scheduling.response_affinity`)."""
    avoid: Final[frozenset[EndpointKey] | None]
    """Endpoints this very request (the same body) failed on moments ago, which its new try avoids
    while another endpoint can take it (:mod:`igw.scheduling.outliers`, "request's fault");
    ``None``: none (a default the compiled build's signature can state, unlike ``frozenset()``)."""
    cache_salt: Final[str | None]
    """The salt the model server caches this prompt's blocks under: the one the gateway writes per
    tenant, or a digest of the client's own (:func:`igw.gateway.cache_salt.request_salt`). Blocks of
    different salts are not shared, so prefix affinity hashes them apart. ``None``: unsalted."""

    def __init__(
        self,
        request_id: str,
        model: str,
        base_model: str,
        prefix_text: str,
        prompt_tokens: int,
        max_tokens: int | None = None,
        adapter: str | None = None,
        priority: int = 0,
        tenant: str | None = None,
        stream: bool = True,
        previous_response_id: str | None = None,
        avoid: frozenset[EndpointKey] | None = None,
        cache_salt: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.base_model = base_model
        self.prefix_text = prefix_text
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.adapter = adapter
        self.priority = priority
        self.tenant = tenant
        self.stream = stream
        self.previous_response_id = previous_response_id
        self.avoid = avoid
        self.cache_salt = cache_salt


class DecisionKind(enum.Enum):
    PICKED = "picked"
    SATURATED = "saturated"
    """Every eligible endpoint is over the saturation thresholds: answer 429 with Retry-After."""
    NO_ENDPOINTS = "no_endpoints"
    """No endpoint is eligible at all: answer 503."""


@dataclass(slots=True, init=False, unsafe_hash=True)
class RoutingDecision:
    """A policy's answer for one request. Read-only, hashable, with a written-out ``__init__``, as
    :class:`RoutingRequest` (and for the same reason); ``scores`` and ``removed`` default to a fresh
    empty dict each."""

    kind: Final[DecisionKind]
    endpoint: Final[EndpointKey | None]
    fallbacks: Final[tuple[EndpointKey, ...]]
    """Next-best endpoints, in order, for a retry when connecting to ``endpoint`` fails."""
    scores: Final[Mapping[EndpointKey, Mapping[str, float]]]
    """Per-endpoint, per-scorer weighted scores (for the access log and for debugging)."""
    retry_after_s: Final[float | None]
    """For ``SATURATED``: how long the client should wait, computed from the observed drain rate."""
    reason: Final[str]
    removed: Final[Mapping[EndpointKey, str]]
    """Endpoints excluded before scoring, each with what excluded it (a filter's name, stale metrics,
    the context window); for the "why this pod" debug log."""

    def __init__(
        self,
        kind: DecisionKind,
        endpoint: EndpointKey | None = None,
        fallbacks: tuple[EndpointKey, ...] = (),
        scores: Mapping[EndpointKey, Mapping[str, float]] | None = None,
        retry_after_s: float | None = None,
        reason: str = "",
        removed: Mapping[EndpointKey, str] | None = None,
    ) -> None:
        self.kind = kind
        self.endpoint = endpoint
        self.fallbacks = fallbacks
        self.scores = {} if scores is None else scores
        self.retry_after_s = retry_after_s
        self.reason = reason
        self.removed = {} if removed is None else removed


@dataclass(slots=True, init=False, unsafe_hash=True)
class RequestOutcome:
    """What the router learns when a request it dispatched completes (or fails). Read-only, hashable,
    with a written-out ``__init__``, as :class:`RoutingRequest` (and for the same reason)."""

    request_id: Final[str]
    endpoint: Final[EndpointKey]
    ok: Final[bool]
    """The endpoint served the request (a 2xx/3xx answer, the stream complete); a 4xx, a 5xx, a broken
    stream or no answer are not ok."""
    ttft_s: Final[float | None]
    itl_s: Final[float | None]
    """Mean inter-token latency of the response (seconds per output token after the first)."""
    prompt_tokens: Final[int]
    output_tokens: Final[int]
    cached_tokens: Final[int]
    pod_fault: Final[bool]
    """The request failed by the endpoint's fault (a 5xx answer, a stream it broke or left silent, a
    response timeout), not the client's (4xx, a disconnect) nor the route's timeout: what outlier
    detection counts (:mod:`igw.scheduling.outliers`)."""
    response_id: Final[str | None]
    """The id of the response the endpoint stored (a Responses API answer): a later request
    continuing it goes there (:mod:`igw.scheduling.response_affinity`)."""
    request_digest: Final[int | None]
    """A digest of the request's body, given with a pod fault: the same request failing on another
    pod too is the request's fault, not counted against either (:mod:`igw.scheduling.outliers`)."""

    def __init__(
        self,
        request_id: str,
        endpoint: EndpointKey,
        ok: bool,
        ttft_s: float | None = None,
        itl_s: float | None = None,
        prompt_tokens: int = 0,
        output_tokens: int = 0,
        cached_tokens: int = 0,
        pod_fault: bool = False,
        response_id: str | None = None,
        request_digest: int | None = None,
    ) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.ok = ok
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.cached_tokens = cached_tokens
        self.pod_fault = pod_fault
        self.response_id = response_id
        self.request_digest = request_digest
