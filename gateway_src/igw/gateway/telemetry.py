"""The gateway's own Prometheus metrics (served at ``/metrics``), in a registry per gateway instance.

Request-level series are labelled by ``model`` only for configured models and adapters (an unknown
model is counted as ``model="(unknown)"``), so clients cannot create label cardinality. Requests,
duration and TTFT also carry ``requested_model``: the name the client sent when a canary rewrite
(``spec.extensions.modelRewrites``, configured names only: a name only a fallback rule caught is
``(unknown)``) sent it to ``model``, else ``model``. Per-endpoint
series (scrape age, queue and KV as seen, in-flight) are produced by a collector that reads the live
endpoint state at scrape time, so a removed endpoint's series disappear with it; the per-endpoint
counters (picks, ejections) of an endpoint that left every pool are dropped after a grace period
(:mod:`igw.gateway.departed_series`), so pod churn does not grow the page or the process.

In a worker group (``igw serve --workers N``) only the process that scrapes (worker 0) exports the
series read from the scrapes - ages, failures, frozen pages, queue, running, KV, adapters, missing
signals, the reference picker's pool gauges: the others hold relayed copies of the same scrapes, and
exporting them again multiplied the host's series by N (16 workers at 1,000 pods: 128,000 lines,
12 MB per ``/metrics``). Every process exports what is its own - requests in flight per endpoint,
picks, request series - and a per-pool summary of its copy (stale endpoints, oldest scrape), which
shows a worker whose relayed copy fell behind.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from http import HTTPStatus
from typing import Any, Final

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from igw.gateway.departed_series import DEPARTED_GRACE_S, DepartedEndpoints, EndpointLabels
from igw.gateway.endpoints import EndpointState
from igw.gateway.epp_compat import EppCompatCollector
from igw.gateway.log_metrics import LogDropStats
from igw.gateway.metric_batch import FoldingCounter, FoldingHistogram, MetricBatch
from igw.gateway.metrics_render import MetricsPage
from igw.gateway.response_search import SEARCH_REFUSAL_REASONS
from igw.gateway.tenant_labels import ESCAPE
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.values import EngineMetrics

UNKNOWN_MODEL: Final = "(unknown)"
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20)
ITL_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)
DECISION_BUCKETS: Final = (1e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2)

SCRAPED_ENDPOINT_FAMILIES: Final = (
    "igw_endpoint_scrape_age_seconds",
    "igw_endpoint_scrape_failing",
    "igw_endpoint_metrics_frozen",
    "igw_endpoint_queue_depth",
    "igw_endpoint_running_requests",
    "igw_endpoint_kv_cache_usage",
    "igw_endpoint_lora_adapter",
    "igw_endpoint_max_lora",
    "igw_endpoint_signal_missing",
)
"""The per-endpoint families read from scrapes: one state of the pod, which every gateway process
that scrapes it (or follows a scrape of it) reports alike, so views over several processes take
their maximum, never their sum; in a worker group only worker 0 exports them."""

CLIENT_CLOSED: Final = 499
"""Status recorded (metrics, access log) for requests the client abandoned (nginx's convention)."""
REGISTERED_STATUSES: Final = frozenset(int(status) for status in HTTPStatus) | {CLIENT_CLOSED}
"""The ``code`` label's own values (about 60): the HTTP statuses with a registered name, and the
gateway's own :data:`CLIENT_CLOSED` (not registered, but recorded for every abandoned request)."""


def status_label(status: int) -> str:
    """The ``code`` label of a request's final ``status``: the status itself when it is registered
    (:data:`REGISTERED_STATUSES`), else its class (``4xx``, ``5xx``, ...). The status a model server
    answers is relayed as it is, and a pod answering every number from 400 to 599 made 200 series of
    ``igw_requests_total`` (and of ``inference_objective_request_error_total``) per model; ``5xx``
    still matches the alerts' ``code=~"5.."``."""
    return str(status) if status in REGISTERED_STATUSES else f"{status // 100}xx"


OTHER_ADAPTER: Final = "other"
"""The ``adapter`` label of ``igw_endpoint_lora_adapter`` that sums every adapter without a label of
its own (:class:`AdapterLabels`), and of no real adapter: one named ``other``, or starting with
:data:`~igw.gateway.tenant_labels.ESCAPE`, is labelled with the escape prepended (``other`` ->
``~other``, ``~x`` -> ``~~x``), as tenants are. Until session s49 an adapter named ``other`` was
summed into the overflow."""
UNCONFIGURED_ADAPTER_LABELS: Final = 8
"""Per scheduler: how many adapters it does not route to (a pod's own, loaded outside the gateway's
configuration) keep their name in ``igw_endpoint_lora_adapter`` at a time."""
ADAPTER_SLOT_GRACE_S: Final = DEPARTED_GRACE_S
"""Seconds an adapter holding one of the :data:`UNCONFIGURED_ADAPTER_LABELS` slots may go unreported
by every endpoint of its scheduler before the slot is freed for another name."""


def adapter_label(name: str) -> str:
    """The ``adapter`` label of an adapter with a label of its own: its name, escaped when it would
    read as the overflow (:data:`OTHER_ADAPTER`) or as an escaped name."""
    return name if name != OTHER_ADAPTER and not name.startswith(ESCAPE) else ESCAPE + name


class AdapterLabels:
    """The bounded ``adapter`` label of ``igw_endpoint_lora_adapter``. A pod's page names the adapters
    (up to :data:`~igw.gateway.metrics_parser.MAX_LISTED_ADAPTERS` per state, rebuilt per scrape), so
    a hostile or broken pod listing new names every scrape made up to 2,048 new series per scrape
    until session s48. The adapters a scheduler routes to (``ModelRouter.adapters``) keep their name,
    then up to :data:`UNCONFIGURED_ADAPTER_LABELS` others per scheduler; the rest are summed into
    :data:`OTHER_ADAPTER`. Only the exported label is bounded: routing reads every name the page lists.

    A slot is held while some endpoint of the scheduler reports the name, and freed once none has for
    :data:`ADAPTER_SLOT_GRACE_S` (its series is already gone: the family is rebuilt per collection
    from what the endpoints report). Free slots go to the names reported by the most endpoints
    first (then by name), so an adapter several pods serve beats a single pod's list. Until session
    s49 the first names seen kept their slot for the life of the process: a pod listing 8 names once
    left every adapter that came later summed as ``other``."""

    def __init__(
        self, unconfigured: int = UNCONFIGURED_ADAPTER_LABELS, grace_s: float = ADAPTER_SLOT_GRACE_S
    ) -> None:
        self._unconfigured = unconfigured
        self._grace_s = grace_s
        self._given: dict[str, dict[str, float]] = {}
        """Per scheduler: each slot's adapter and when an endpoint last reported it."""
        self._lock = threading.Lock()
        """Families are collected on the page-render thread and by any ``generate_latest`` caller."""

    def observe(
        self, reported: Mapping[str, Mapping[str, int]], known: Mapping[str, frozenset[str]], now: float
    ) -> dict[str, frozenset[str]]:
        """Record one collection: ``reported`` is, per scheduler, each adapter its endpoints report
        (either state) and by how many endpoints; ``known``, the adapters each routes to. Frees the
        slots unreported for the grace period, hands free slots to new names, and returns per
        scheduler the names holding a slot."""
        out: dict[str, frozenset[str]] = {}
        with self._lock:
            for sched in set(reported) | set(self._given):
                names = reported.get(sched, {})
                given = self._given.setdefault(sched, {})
                routed = known.get(sched, frozenset())
                for name in given.keys() & names.keys():
                    given[name] = max(given[name], now)
                # a name routed since it took its slot keeps its label as a routed one: the slot
                # is for another (before session s50 it stayed held while the name was reported)
                for name in [n for n, at in given.items() if now - at >= self._grace_s or n in routed]:
                    del given[name]
                free = self._unconfigured - len(given)
                if free > 0:
                    new = [n for n in names if n not in given and n not in routed]
                    for name in heapq.nsmallest(free, new, key=lambda n: (-names[n], n)):
                        given[name] = now
                if given:
                    out[sched] = frozenset(given)
                else:
                    del self._given[sched]
        return out

    @staticmethod
    def counts(names: Iterable[str], known: frozenset[str], given: frozenset[str]) -> dict[str, int]:
        """How many of ``names`` (one endpoint's adapters of one state) each label value counts:
        ``known`` (routed) and ``given`` (holding a slot, :meth:`observe`) by name, the rest as
        :data:`OTHER_ADAPTER`."""
        out: dict[str, int] = {}
        for name in names:
            label = adapter_label(name) if name in known or name in given else OTHER_ADAPTER
            out[label] = out.get(label, 0) + 1
        return out


def _no_adapters() -> Mapping[str, frozenset[str]]:
    return {}


EndpointLister = Callable[[], Iterable[tuple[str, EndpointState]]]
"""Yields ``(scheduler name, endpoint state)`` for every endpoint currently known."""
EjectionLister = Callable[[], Iterable[tuple[str, str, float]]]
"""Yields ``(scheduler name, endpoint, seconds left)`` for every endpoint this process's outlier
detection has ejected (:mod:`igw.scheduling.outliers`)."""


def _no_ejections() -> Iterable[tuple[str, str, float]]:
    return ()


EndpointRow = tuple[str, str, float | None, bool, bool, int, EngineMetrics | None, frozenset[str]]
"""What the per-endpoint families show of one endpoint: ``(scheduler, endpoint, scraped_at,
scrape_failing, page frozen, inflight, metrics, missing)``, read from its state in one pass. Every
field is immutable (a scrape replaces the endpoint's ``EngineMetrics`` and ``missing``, never
mutates them), so the rows can be formatted on another thread than the one that updates the state."""


def endpoint_rows(lister: EndpointLister) -> list[EndpointRow]:
    """Every endpoint's :data:`EndpointRow`, in the lister's order."""
    return [
        (sched, st.key, st.scraped_at, st.scrape_failing, st.page.frozen, st.inflight, st.metrics, st.missing)
        for sched, st in lister()
    ]


@mypyc_attr(native_class=False)  # mypyc: it subclasses prometheus_client's, so it stays a Python class
class _EndpointCollector(Collector):
    """The per-endpoint gauges (``scrapes``: the ones read from scrapes too, see the module's
    docstring) and every pool's staleness summary as this process holds it."""

    def __init__(
        self,
        *,
        lister: EndpointLister,
        clock: Callable[[], float],
        stale_threshold_s: Callable[[], float],
        scrapes: bool,
        ejections: EjectionLister,
        known_adapters: Callable[[], Mapping[str, frozenset[str]]] = _no_adapters,
    ) -> None:
        self._lister = lister
        self._clock = clock
        self._stale_threshold_s = stale_threshold_s
        self._scrapes = scrapes
        self._ejections = ejections
        self._known_adapters = known_adapters
        self._adapter_labels = AdapterLabels()

    def collect(self) -> Iterator[Metric]:
        return self.snapshot().collect()

    def snapshot(self) -> EndpointFamilies:
        """The families' inputs read now (one pass over the endpoints, no family built): cheap on
        the event loop, and safe to collect on another thread (:mod:`igw.gateway.metrics_render`)."""
        return EndpointFamilies(
            rows=endpoint_rows(self._lister),
            now=self._clock(),
            stale_threshold_s=self._stale_threshold_s(),
            scrapes=self._scrapes,
            ejected=list(self._ejections()),
            known_adapters=self._known_adapters(),
            adapter_labels=self._adapter_labels,
        )


@mypyc_attr(native_class=False)  # mypyc: it subclasses prometheus_client's, so it stays a Python class
class EndpointFamilies(Collector):
    """The families of :class:`_EndpointCollector` built from rows read earlier (a snapshot): holds
    no reference to live state, so any thread may collect it."""

    def __init__(
        self,
        *,
        rows: list[EndpointRow],
        now: float,
        stale_threshold_s: float,
        scrapes: bool,
        ejected: list[tuple[str, str, float]],
        known_adapters: Mapping[str, frozenset[str]] | None = None,
        adapter_labels: AdapterLabels | None = None,
    ) -> None:
        self._rows = rows
        self._now = now
        self._stale_threshold_s = stale_threshold_s
        self._scrapes = scrapes
        self._ejected_rows = ejected
        self._known_adapters = known_adapters if known_adapters is not None else {}
        self._adapter_labels = adapter_labels if adapter_labels is not None else AdapterLabels()

    def collect(self) -> Iterator[Metric]:
        if self._scrapes:
            yield from self._scraped()
        else:
            yield from self._own()
        yield from self._summary()
        yield self._ejected()

    def _ejected(self) -> Metric:
        """Endpoints this process's outlier detection leaves out (every worker its own)."""
        family = GaugeMetricFamily(
            "igw_endpoint_ejected_seconds",
            "Seconds left of the endpoint's ejection by outlier detection (it failed "
            "outlierDetection.consecutiveFailures requests in a row); only ejected endpoints are listed.",
            labels=["scheduler", "endpoint"],
        )
        for sched, key, seconds in self._ejected_rows:
            family.add_metric([sched, key], seconds)
        return family

    def _own(self) -> Iterator[Metric]:
        """What a follower exports per endpoint: its own requests in flight."""
        inflight = _inflight_family()
        for sched, key, _, _, _, in_flight, _, _ in self._rows:
            inflight.add_metric([sched, key], float(in_flight))
        yield inflight

    def _summary(self) -> Iterator[Metric]:
        """Per pool: endpoints routed around as stale (the scheduler's rule: never scraped, latest
        scrape failed, or older than ``staleThreshold``) and the oldest scrape held."""
        stale = GaugeMetricFamily(
            "igw_pool_stale_endpoints",
            "Endpoints this process routes around: never scraped, latest scrape failed, or older than "
            "staleThreshold (with --workers each worker's own copy of the scrapes).",
            labels=["scheduler"],
        )
        oldest = GaugeMetricFamily(
            "igw_pool_oldest_scrape_age_seconds",
            "Seconds since the least recent successful scrape among the pool's endpoints, as this "
            "process holds them (with --workers each worker's own copy).",
            labels=["scheduler"],
        )
        now, threshold = self._now, self._stale_threshold_s
        counts: dict[str, int] = {}
        ages: dict[str, float] = {}
        for sched, _, scraped_at, scrape_failing, _, _, metrics, _ in self._rows:
            if scraped_at is None:
                counts[sched] = counts.get(sched, 0) + 1
                continue
            age = max(0.0, now - scraped_at)
            routed_around = metrics is None or scrape_failing or age > threshold
            counts[sched] = counts.get(sched, 0) + (1 if routed_around else 0)
            if age > ages.get(sched, -1.0):
                ages[sched] = age
        for sched in sorted(counts):
            stale.add_metric([sched], float(counts[sched]))
            if sched in ages:
                oldest.add_metric([sched], ages[sched])
        yield from (stale, oldest)

    def _reported_adapters(self) -> dict[str, dict[str, int]]:
        """Per scheduler: each adapter its endpoints report (running or waiting), by how many."""
        reported: dict[str, dict[str, int]] = {}
        for sched, _, _, _, _, _, m, _ in self._rows:
            if m is None or not (m.active_adapters or m.waiting_adapters):
                continue
            per = reported.setdefault(sched, {})
            for name in (m.active_adapters or frozenset()) | (m.waiting_adapters or frozenset()):
                per[name] = per.get(name, 0) + 1
        return reported

    def _scraped(self) -> Iterator[Metric]:
        labels = ["scheduler", "endpoint"]
        age = GaugeMetricFamily(
            "igw_endpoint_scrape_age_seconds",
            "Seconds since the endpoint's last successful scrape.",
            labels=labels,
        )
        failing = GaugeMetricFamily(
            "igw_endpoint_scrape_failing", "1 while the endpoint's latest scrape failed.", labels=labels
        )
        queue = GaugeMetricFamily(
            "igw_endpoint_queue_depth", "Waiting requests as last scraped from the endpoint.", labels=labels
        )
        running = GaugeMetricFamily(
            "igw_endpoint_running_requests",
            "Running requests as last scraped from the endpoint.",
            labels=labels,
        )
        kv = GaugeMetricFamily(
            "igw_endpoint_kv_cache_usage", "KV-cache utilisation (0..1) as last scraped.", labels=labels
        )
        inflight = _inflight_family()
        frozen = GaugeMetricFamily(
            "igw_endpoint_metrics_frozen",
            "1 while the endpoint's /metrics page no longer changes although requests were sent to it.",
            labels=labels,
        )
        adapters = GaugeMetricFamily(
            "igw_endpoint_lora_adapter",
            "1 per LoRA adapter the endpoint reports in its running batch or waiting queue (as scraped); "
            "adapters the scheduler does not route to beyond a few are summed as adapter=other.",
            labels=["scheduler", "endpoint", "adapter", "state"],
        )
        max_lora = GaugeMetricFamily(
            "igw_endpoint_max_lora",
            "GPU LoRA adapter slots the endpoint reports (as scraped).",
            labels=labels,
        )
        missing = GaugeMetricFamily(
            "igw_endpoint_signal_missing",
            "1 when the endpoint does not publish a signal routing uses (the value names the metric family).",
            labels=["scheduler", "endpoint", "signal"],
        )
        now = self._now
        known_adapters = self._known_adapters
        given = self._adapter_labels.observe(self._reported_adapters(), known_adapters, now)
        for sched, key, scraped_at, scrape_failing, page_frozen, in_flight, m, absent in self._rows:
            lv = [sched, key]
            if scraped_at is not None:
                age.add_metric(lv, max(0.0, now - scraped_at))
            failing.add_metric(lv, 1.0 if scrape_failing else 0.0)
            frozen.add_metric(lv, 1.0 if page_frozen else 0.0)
            inflight.add_metric(lv, float(in_flight))
            if m is not None:
                if m.waiting is not None:
                    queue.add_metric(lv, float(m.waiting))
                if m.running is not None:
                    running.add_metric(lv, float(m.running))
                if m.kv_usage is not None:
                    kv.add_metric(lv, m.kv_usage)
                if m.max_lora is not None:
                    max_lora.add_metric(lv, float(m.max_lora))
                known = known_adapters.get(sched, frozenset())
                held = given.get(sched, frozenset())
                for state, names in (("running", m.active_adapters), ("waiting", m.waiting_adapters)):
                    if names:
                        counts = AdapterLabels.counts(names, known, held)
                        for adapter in sorted(counts):
                            adapters.add_metric([sched, key, adapter, state], float(counts[adapter]))
            for signal in sorted(absent):
                missing.add_metric([sched, key, signal], 1.0)
        yield from (age, failing, frozen, queue, running, kv, inflight, adapters, max_lora, missing)


def _inflight_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "igw_endpoint_inflight_requests",
        "Requests this gateway has in flight to the endpoint.",
        labels=["scheduler", "endpoint"],
    )


def searches_refused_counter(name: str, documentation: str, registry: CollectorRegistry) -> Counter:
    """The counter of requests about a stored response answered without a search, by ``reason``
    (:data:`~igw.gateway.response_search.SEARCH_REFUSAL_REASONS`), for both tiers: each reason's
    series from 0, since a series born at its first refusal shows no ``increase()`` for it and the
    scope-busy alarms (``IgwSearchesScopeBusy``, ``IgwGlobalSearchesScopeBusy``) would miss the first
    burst (tier 2's series were born so until session s47)."""
    counter = Counter(name, documentation, ["reason"], registry=registry)
    for reason in SEARCH_REFUSAL_REASONS:
        counter.labels(reason)
    return counter


def _default_stale_threshold_s() -> float:
    return RoutingSettings().stale_threshold_s


class GatewayMetrics:
    """All series the data plane exports. One instance per gateway (tests run several at once).

    ``stale_threshold_s``: the routing's ``staleThreshold`` (read at each collection, so a reload
    counts); ``scrapes``: whether this process exports the series read from scrapes (``False`` for
    the workers of a group that follow worker 0's scrapes; see the module's docstring);
    ``known_adapters``: per scheduler, the adapters it routes to (``ModelRouter.adapters``, read at
    each collection), the ``adapter`` label values kept by name (:class:`AdapterLabels`)."""

    def __init__(
        self,
        *,
        lister: EndpointLister,
        clock: Callable[[], float],
        registry: CollectorRegistry | None = None,
        stale_threshold_s: Callable[[], float] = _default_stale_threshold_s,
        scrapes: bool = True,
        ejections: EjectionLister = _no_ejections,
        departed_grace_s: float = DEPARTED_GRACE_S,
        known_adapters: Callable[[], Mapping[str, frozenset[str]]] = _no_adapters,
    ) -> None:
        self._lister = lister
        self._clock = clock
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.ejected = ejections
        """Lists the endpoints outlier detection leaves out now (``igw_endpoint_ejected_seconds``, EMF)."""
        r = self.registry
        r.register(LogDropStats())  # igw_log_lines_dropped_total{stream}: a stalled log shipper's losses
        self._batch = MetricBatch()
        self.requests = FoldingCounter(
            "igw_requests",
            "Inference requests by model (after any canary rewrite), requested model and HTTP status.",
            ["model", "requested_model", "code"],
            registry=r,
        )
        self.duration = FoldingHistogram(
            "igw_request_duration_seconds",
            "Time from request received to response complete.",
            ["model", "requested_model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = FoldingHistogram(
            "igw_time_to_first_token_seconds",
            "Time from request received to the first streamed event sent to the client.",
            ["model", "requested_model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = FoldingHistogram(
            "igw_inter_token_latency_seconds",
            "Time between consecutive streamed events.",
            ["model"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.tokens = FoldingCounter(
            "igw_tokens",
            "Tokens from the response's usage, by direction (in/out).",
            ["model", "direction"],
            registry=r,
        )
        self.picks = FoldingCounter(
            "igw_endpoint_picks",
            "Scheduling decisions that chose the endpoint.",
            ["scheduler", "endpoint"],
            registry=r,
        )
        self.rejections = FoldingCounter(
            "igw_rejections",
            "Requests refused before reaching a model server, by reason (saturated: 429, no_endpoints: 503).",
            ["model", "reason"],
            registry=r,
        )
        self.decision = FoldingHistogram(
            "igw_scheduler_decision_seconds",
            "Time a request waited for the scheduler's decision (a forced choice - one candidate left by "
            "the filters - is scored after the answer starts, so only its wait counts).",
            ["scheduler"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.retries = FoldingCounter(
            "igw_upstream_retries",
            "Attempts retried on the next-best endpoint, by what the failed attempt met of "
            "spec.extensions.routing.retry.retryOn (connect-failure, unavailable, rate-limited, "
            "model-missing, 5xx), or response-search: a pod asked for a stored response (a "
            "continuation's or a retrieval's) it did not store, or search-timeout: a pod a "
            "retrieval's search stopped waiting for (neither a retry of retryOn).",
            ["scheduler", "cause"],
            registry=r,
        )
        self.retry_overflow = FoldingCounter(
            "igw_upstream_retry_overflow",
            "Refused attempts the retry condition covered but the retry budget did not allow "
            "(retry.budgetPercent / minRetryConcurrency): the client got the refusal.",
            ["scheduler"],
            registry=r,
        )
        self.stream_errors = FoldingCounter(
            "igw_partial_stream_errors",
            "Streams whose upstream failed after the response started (client got a terminal error event).",
            ["model"],
            registry=r,
        )
        self.large_error_answers = FoldingCounter(
            "igw_upstream_large_error_answers",
            "Model servers' JSON error answers over 1 MiB (ERROR_ANSWER_BUFFER_BYTES), relayed as they "
            "arrived and so not retried (their WARNING is logged at most once a minute).",
            ["model"],
            registry=r,
        )
        self.upstream_redirects = FoldingCounter(
            "igw_upstream_redirects",
            "Model servers' redirects (3xx but 304), refused with a 502 upstream_error, Location not "
            "relayed; each attempt's (a retried one's too).",
            ["model"],
            registry=r,
        )
        self.upstream_non_answers = FoldingCounter(
            "igw_upstream_non_answers",
            "Model servers' answers to an inference POST that cannot be one, refused with a 502 "
            "upstream_error, nothing relayed, by reason: bodiless_status (204, 205, 304), empty_body, "
            "not_json_object (a whole success); each attempt's (a retried one's too).",
            ["model", "reason"],
            registry=r,
        )
        self.answer_usage_unread = FoldingCounter(
            "igw_answer_usage_unread",
            "Answers a model server compressed though asked for none whose usage the gateway could not "
            "read (so the token limits did not charge it), by reason: unknown_coding, decode_error, "
            "truncated, bomb_bound (refused with 502, or relayed uncharged), coded_stream (a compressed "
            "event stream, refused), client_gone (its client left before the usage was relayed).",
            ["model", "reason"],
            registry=r,
        )
        self.upstream_stalled = FoldingCounter(
            "igw_upstream_stalled",
            "Requests in flight the gateway ended because their model server sent nothing for too long, by "
            "reason (unresponsive: its endpoint excluded for unresponsiveTimeout; response_timeout: no "
            "response head within responseTimeout).",
            ["reason"],
            registry=r,
        )
        self.client_disconnects = FoldingCounter(
            "igw_client_disconnects",
            "Requests abandoned by the client; the upstream request is cancelled.",
            ["model"],
            registry=r,
        )
        self.config_reloads = FoldingCounter(
            "igw_config_reloads",
            "Configuration reload attempts by result (applied, rejected).",
            ["result"],
            registry=r,
        )
        self.config_reload_ok = Gauge(
            "igw_config_last_reload_successful",
            "1 while this process serves the configuration file as it is (unchanged since start, or "
            "its last change applied); 0 from a rejected reload until a reload is applied.",
            registry=r,
        )
        """What the counter cannot say: whether the running configuration is the file's *now* (an
        alert on ``increase(igw_config_reloads_total{result="rejected"})`` forgets a rejection once
        the window passes, and one worker of a group may be behind the others)."""
        self.config_reload_ok.set(1)
        self.scrapes = FoldingCounter(
            "igw_endpoint_scrapes", "Metrics scrapes by result (ok, error).", ["result"], registry=r
        )
        self.ejections = FoldingCounter(
            "igw_endpoint_ejections",
            "Ejections of the endpoint by outlier detection (failed requests in a row).",
            ["scheduler", "endpoint"],
            registry=r,
        )
        self.heartbeat_writes = Counter(
            "igw_heartbeat_writes",
            "Heartbeat writes to the global router's store (spec.extensions.globalHeartbeat; worker 0 "
            "of a group), by result: ok; unreachable (no answer: a closed connection, a timeout); "
            "refused (the store answered with an error: full, read-only, the gateway's credentials "
            "or permissions). Counts the failures the log holds back while the store flaps.",
            ["result"],
            registry=r,
        )
        self.heartbeat_prunes = Counter(
            "igw_heartbeat_prunes",
            "Prunes of stopped replicas' heartbeat fields (once a TTL, after a write), by result as "
            "igw_heartbeat_writes: a failed prune is no failed write (the heartbeat was published).",
            ["result"],
            registry=r,
        )
        self.usage_misnamed = Counter(
            "igw_usage_misnamed",
            "Answers to a retrieval of a stored response (below 400, showing usage) that named another "
            "response's id, or none: not settled by them, the response's output bound kept (the "
            "WARNING igw.gateway.misnamed_usage is logged once a minute per pod).",
            registry=r,
        )
        self.searches_refused = searches_refused_counter(
            "igw_response_searches_refused",
            "Requests about a stored response whose pod this replica does not know answered without "
            "searching the pods, by reason: unfound (404: the caller's search of these pools found the "
            "id nowhere moments ago), busy (503 response_search_busy: the process's searches all in "
            "flight), scope_busy (503: the caller scope's share of them in flight). As tier 2's "
            "igw_global_response_searches_refused_total.",
            r,
        )
        self.request_faults = FoldingCounter(
            "igw_request_faults",
            "Requests the model servers answered 500 on two endpoints within a minute: taken for "
            "the request's fault, not counted against the endpoints by outlier detection.",
            ["scheduler"],
            registry=r,
        )
        for family in (
            self.requests, self.duration, self.ttft, self.itl, self.tokens, self.picks, self.rejections,
            self.decision, self.retries, self.retry_overflow, self.stream_errors, self.client_disconnects,
            self.config_reloads, self.scrapes, self.ejections, self.request_faults, self.large_error_answers,
            self.answer_usage_unread, self.upstream_redirects, self.upstream_non_answers,
        ):  # fmt: skip
            family.folds = self._batch.fold
        for per_endpoint in (self.picks, self.ejections):
            per_endpoint.folds = self._drop_departed_and_fold
        r.register(
            _EndpointCollector(
                lister=lister,
                clock=clock,
                stale_threshold_s=stale_threshold_s,
                scrapes=scrapes,
                ejections=ejections,
                known_adapters=known_adapters,
            )
        )
        self.epp = EppCompatCollector(
            sources=(self.requests, self.duration, self.ttft), lister=lister, pool_gauges=scrapes
        )
        """The reference endpoint picker's names (also read by the CloudWatch EMF reporter)."""
        r.register(self.epp)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._series: dict[tuple[str, str], ModelSeries] = {}
        self._decisions: dict[str, Any] = {}
        self._picks: dict[str, dict[str, Any]] = {}
        self._endpoint_series: set[EndpointLabels] = set()
        """``(scheduler, endpoint)`` of every endpoint with a child in a per-endpoint counter."""
        self._departed = DepartedEndpoints(departed_grace_s)
        self.page = MetricsPage(self.registry)
        """``/metrics``: rendered off the event loop from values read on it (:mod:`.metrics_render`)."""

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached, and batched for this instance's counters and histograms:
        the update is held as a plain number until the family is collected (see
        :mod:`igw.gateway.metric_batch`). Label values are bounded (configured models and discovered
        endpoints)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = self._batch.pending(metric, metric.labels(*labels))
            if metric is self.picks or metric is self.ejections:
                self._endpoint_series.add((labels[0], labels[1]))
        return found

    def decision_child(self, scheduler: str) -> Any:
        """``child(decision, scheduler)``, looked up by the scheduler's name alone: the request path
        updates it on every decision, and :meth:`child`'s key (the family's id and a tuple of the
        labels) costs more to build and hash than the update itself."""
        found = self._decisions.get(scheduler)
        if found is None:
            found = self._decisions[scheduler] = self.child(self.decision, scheduler)
        return found

    def picks_child(self, scheduler: str, endpoint: str) -> Any:
        """``child(picks, scheduler, endpoint)``, looked up by name per scheduler (as
        :meth:`decision_child`; bounded like :meth:`child`: configured schedulers, discovered
        endpoints)."""
        per_endpoint = self._picks.get(scheduler)
        if per_endpoint is None:
            per_endpoint = self._picks[scheduler] = {}
        found = per_endpoint.get(endpoint)
        if found is None:
            found = per_endpoint[endpoint] = self.child(self.picks, scheduler, endpoint)
        return found

    def model_series(self, model: str, requested_model: str) -> ModelSeries:
        """The per-request series of one ``(model, requested_model)`` pair, looked up once per request
        instead of once per update (cached; the labels are bounded as for :meth:`child`)."""
        key = (model, requested_model)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = ModelSeries(self, model, requested_model)
        return found

    def fold(self) -> None:
        """Hand every pending update to prometheus_client (also done by every collect)."""
        self._batch.fold()

    def drop_departed(self) -> None:
        """Drop the per-endpoint counters (picks, ejections) of every endpoint that has been out of
        all pools for the grace period (:mod:`igw.gateway.departed_series`): their series leave
        ``/metrics`` and their children this process. Run when those counters are collected and
        when discovery removes endpoints, so churn without a scrape is bounded too."""
        if not self._endpoint_series:
            return
        present = {(sched, st.key) for sched, st in self._lister()}
        for labels in self._departed.expired(self._endpoint_series, present, self._clock()):
            self._endpoint_series.discard(labels)
            sched, key = labels
            per_endpoint = self._picks.get(sched)
            if per_endpoint is not None:
                per_endpoint.pop(key, None)
            for family in (self.picks, self.ejections):
                child = self._children.pop((id(family), labels), None)
                if child is not None:
                    self._batch.discard(child)
                    family.remove(sched, key)

    def _drop_departed_and_fold(self) -> None:
        self.drop_departed()
        self._batch.fold()


class ModelSeries:
    """The series an inference request of one model updates as it finishes (the children of
    :class:`GatewayMetrics`' ``requests``, ``duration``, ``ttft``, ``itl`` and ``tokens``), each made
    on its first update, as :meth:`GatewayMetrics.child` makes them (a series nobody updated is not
    exposed)."""

    __slots__ = ("_codes", "_duration", "_itl", "_metrics", "_model", "_requested", "_tokens", "_ttft")

    def __init__(self, metrics: GatewayMetrics, model: str, requested_model: str) -> None:
        self._metrics = metrics
        self._model = model
        self._requested = requested_model
        self._codes: dict[int, Any] = {}
        self._tokens: dict[str, Any] = {}
        self._duration: Any = None
        self._ttft: Any = None
        self._itl: Any = None

    def requests(self, status: int) -> Any:
        """The ``requests`` child of this pair for ``status``."""
        found = self._codes.get(status)
        if found is None:
            m = self._metrics
            found = self._codes[status] = m.child(
                m.requests, self._model, self._requested, status_label(status)
            )
        return found

    def tokens(self, direction: str) -> Any:
        """The ``tokens`` child of this model for ``direction`` (``in`` or ``out``)."""
        found = self._tokens.get(direction)
        if found is None:
            m = self._metrics
            found = self._tokens[direction] = m.child(m.tokens, self._model, direction)
        return found

    @property
    def duration(self) -> Any:
        if self._duration is None:
            m = self._metrics
            self._duration = m.child(m.duration, self._model, self._requested)
        return self._duration

    @property
    def ttft(self) -> Any:
        if self._ttft is None:
            m = self._metrics
            self._ttft = m.child(m.ttft, self._model, self._requested)
        return self._ttft

    @property
    def itl(self) -> Any:
        if self._itl is None:
            m = self._metrics
            self._itl = m.child(m.itl, self._model)
        return self._itl
