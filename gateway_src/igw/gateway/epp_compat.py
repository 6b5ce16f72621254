"""The gateway's metrics again under the reference endpoint picker's names, so its dashboards work.

Operators of the Gateway API Inference Extension already chart ``inference_objective_*`` and
``inference_pool_*`` series. Where one of ours means the same thing, :data:`EPP_ALIASES` (the one
table) names the reference family, the ``igw_*`` family it is derived from, how the labels map and
which samples count. :class:`EppCompatCollector` re-emits those at scrape time from the live
``igw_*`` families, so the two can never disagree and nothing is counted twice on the request path.

Pool gauges (``inference_pool_*``, labelled ``name`` = the scheduler) are computed from the
endpoint state like the reference: averages exclude endpoints that are not ready (never scraped,
latest scrape failed, or ``/metrics`` frozen).

Families of the reference that have no equivalent here (request/response sizes, token histograms,
TPOT, running requests per objective, plugin timings) are not exported under its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from igw.gateway.endpoints import EndpointState
from igw.gateway.metric_batch import collect_unfolded
from igw.scheduling.values import EngineMetrics

SampleFilter = Callable[[Mapping[str, str]], bool]


def _always(_labels: Mapping[str, str]) -> bool:
    return True


def _is_error(labels: Mapping[str, str]) -> bool:
    return not labels.get("code", "").startswith(("1", "2", "3"))


@dataclass(frozen=True, slots=True)
class EppAlias:
    """One reference family derived from one of ours.

    ``labels`` maps each reference label to the ``igw_*`` label whose value it takes; source labels
    not named are summed away (valid for counters and histogram buckets alike).
    """

    name: str
    source: str
    kind: str
    """``counter`` or ``histogram`` (the same as the source family's type)."""
    labels: Mapping[str, str]
    documentation: str
    keep: SampleFilter = _always


_OBJECTIVE_LABELS: Final = {"model_name": "requested_model", "target_model_name": "model"}
"""The reference's ``model_name`` is the name the client asked for, ``target_model_name`` the model
it was sent to after a canary rewrite (the same name when no rewrite applied)."""

EPP_ALIASES: Final[tuple[EppAlias, ...]] = (
    EppAlias(
        "inference_objective_request",
        "igw_requests",
        "counter",
        _OBJECTIVE_LABELS,
        "Inference requests by model (same as igw_requests_total summed over code).",
    ),
    EppAlias(
        "inference_objective_request_error",
        "igw_requests",
        "counter",
        {**_OBJECTIVE_LABELS, "error_code": "code"},
        "Inference requests answered with an error status (4xx, 5xx, 499 client closed).",
        keep=_is_error,
    ),
    EppAlias(
        "inference_objective_request_duration_seconds",
        "igw_request_duration_seconds",
        "histogram",
        _OBJECTIVE_LABELS,
        "Time from request received to response complete (same as igw_request_duration_seconds).",
    ),
    EppAlias(
        "inference_objective_request_ttft_seconds",
        "igw_time_to_first_token_seconds",
        "histogram",
        _OBJECTIVE_LABELS,
        "Time to the first streamed event (same as igw_time_to_first_token_seconds).",
    ),
)
"""Every reference family this gateway also exports, and where its samples come from."""

POOL_FAMILIES: Final = (
    "inference_pool_average_kv_cache_utilization",
    "inference_pool_average_queue_size",
    "inference_pool_per_pod_queue_size",
    "inference_pool_ready_pods",
)
"""The reference pool gauges, computed from the endpoint state."""


def _ready(st: EndpointState) -> bool:
    return st.scraped_at is not None and not st.scrape_failing and not st.page.frozen


class EppCompatCollector(Collector):
    """Yields :data:`EPP_ALIASES` from the ``sources`` families and the pool gauges from ``lister``.

    The sources are passed as metric objects, not a registry: this collector is registered on the
    same registry, and collecting that from here would recurse.
    """

    def __init__(
        self,
        *,
        sources: Iterable[MetricWrapperBase],
        lister: Callable[[], Iterable[tuple[str, EndpointState]]],
        pool_gauges: bool = True,
    ) -> None:
        """``pool_gauges``: whether to yield the pool gauges (read from scrapes: in a worker group
        worker 0 alone yields them, see :mod:`igw.gateway.telemetry`)."""
        self._sources = tuple(sources)
        self._lister = lister
        self._pool_gauges_on = pool_gauges

    def collect(self) -> Iterator[Metric]:
        return self.snapshot(folded=False).collect()

    def snapshot(self, *, folded: bool = True) -> EppFamilies:
        """The pool gauges' inputs read now (one pass over the endpoints): cheap on the event loop,
        and safe to collect on another thread (:mod:`igw.gateway.metrics_render`). ``folded``: the
        caller folded the sources' pending updates already (on the event loop, where the batch
        lives), so the snapshot's collection reads them without folding; else it folds, as a
        collection on the loop does."""
        rows = (
            [(sched, st.key, _ready(st), st.metrics) for sched, st in self._lister()]
            if self._pool_gauges_on
            else []
        )
        return EppFamilies(
            sources=self._sources, pools=rows, pool_gauges=self._pool_gauges_on, fold=not folded
        )


PoolRow = tuple[str, str, bool, EngineMetrics | None]
"""``(scheduler, endpoint, ready, metrics)`` of one endpoint, as read for the pool gauges."""


class EppFamilies(Collector):
    """What :class:`EppCompatCollector` yields, from endpoint rows read earlier (see its snapshot)."""

    def __init__(
        self, *, sources: tuple[MetricWrapperBase, ...], pools: list[PoolRow], pool_gauges: bool, fold: bool
    ) -> None:
        self._sources = sources
        self._pools = pools
        self._pool_gauges_on = pool_gauges
        self._fold = fold

    def collect(self) -> Iterator[Metric]:
        collect = _collect if self._fold else collect_unfolded
        by_name = {m.name: m for source in self._sources for m in collect(source)}
        for alias in EPP_ALIASES:
            found = by_name.get(alias.source)
            if found is not None:
                yield _derive(alias, found)
        if self._pool_gauges_on:
            yield from self._pool_gauges()

    def _pool_gauges(self) -> Iterator[Metric]:
        kv = GaugeMetricFamily(
            POOL_FAMILIES[0], "Average KV-cache utilisation of the pool's ready pods.", labels=["name"]
        )
        queue = GaugeMetricFamily(
            POOL_FAMILIES[1], "Average queue size of the pool's ready pods.", labels=["name"]
        )
        per_pod = GaugeMetricFamily(
            POOL_FAMILIES[2], "Queue size of each ready pod.", labels=["model_server_pod", "name"]
        )
        ready = GaugeMetricFamily(
            POOL_FAMILIES[3], "Pods of the pool whose metrics are current.", labels=["name"]
        )
        pools: dict[str, list[tuple[str, EngineMetrics]]] = {}
        for sched, key, is_ready, metrics in self._pools:
            live = pools.setdefault(sched, [])
            if is_ready and metrics is not None:
                live.append((key, metrics))
        for pool, live in sorted(pools.items()):
            ready.add_metric([pool], float(len(live)))
            kvs = [m.kv_usage for _, m in live if m.kv_usage is not None]
            waits = [(key, m.waiting) for key, m in live if m.waiting is not None]
            if kvs:
                kv.add_metric([pool], sum(kvs) / len(kvs))
            if waits:
                queue.add_metric([pool], sum(w for _, w in waits) / len(waits))
            for key, waiting in waits:
                per_pod.add_metric([key, pool], float(waiting))
        yield from (kv, queue, per_pod, ready)


def _collect(source: MetricWrapperBase) -> Iterable[Metric]:
    return source.collect()


def _derive(alias: EppAlias, source: Metric) -> Metric:
    out = Metric(alias.name, alias.documentation, alias.kind)
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in source.samples:
        suffix = sample.name[len(source.name) :]
        if suffix == "_created" or not alias.keep(sample.labels):
            continue
        labels = {ref: sample.labels.get(ours, "") for ref, ours in alias.labels.items()}
        if "le" in sample.labels:
            labels["le"] = sample.labels["le"]
        key = (suffix, tuple(sorted(labels.items())))
        sums[key] = sums.get(key, 0.0) + sample.value
    for (suffix, pairs), value in sums.items():
        out.add_sample(alias.name + suffix, dict(pairs), value)
    return out
