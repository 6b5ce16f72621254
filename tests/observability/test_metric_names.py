"""Names operators know, and alerts and dashboard panels that read only real series, checked on a live
``igw serve``."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.metrics_core import Metric

from igw.addon import chart, pins
from igw.addon.alert_rules import ALERTS, EXTERNAL_METRICS, ROUTER_MARKER
from igw.addon.dashboards import DASHBOARDS, POOL_VARIABLE_METRIC
from igw.addon.promql_names import metric_names
from igw.gateway.epp_compat import EPP_ALIASES, POOL_FAMILIES
from tests.observability.live_gateway import MODEL, metrics_after_traffic, serving_gateway
from tests.observability.otlp_receiver import otlp_receiver

SERVICE_MONITOR_TARGET_LABELS = frozenset(
    {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}
)
"""The labels the Prometheus Operator gives every target of a ServiceMonitor (its generated relabel
configs; ``endpoint`` is the port's name). A scraped series with a label of the same name keeps its
own value only with ``honorLabels: true``; otherwise Prometheus renames it ``exported_<name>``."""


def _value(family: Metric, sample: str, **labels: str) -> float:
    found = [s.value for s in family.samples if s.name == sample and s.labels == labels]
    assert len(found) == 1, (sample, labels, family.samples)
    return found[0]


async def test_reference_picker_names_carry_the_gateways_values(tmp_path: Path) -> None:
    async with serving_gateway(tmp_path) as url:
        families = await metrics_after_traffic(url)
    for name in [a.name for a in EPP_ALIASES] + list(POOL_FAMILIES):
        assert name in families, f"{name} not exported"
        assert families[name].samples, f"{name} has no samples"
    ours = sum(s.value for s in families["igw_requests"].samples if s.labels.get("model") == MODEL)
    objective = {"model_name": MODEL, "target_model_name": MODEL}
    assert ours == 3
    assert (
        _value(families["inference_objective_request"], "inference_objective_request_total", **objective) == 3
    )
    errors = families["inference_objective_request_error"].samples
    assert {s.labels["model_name"] for s in errors} == {"(unknown)"}  # the 200s are not errors
    assert all(s.labels["error_code"].startswith("4") for s in errors)
    ttft = families["inference_objective_request_ttft_seconds"]
    assert _value(ttft, "inference_objective_request_ttft_seconds_count", **objective) == 2  # two streams
    duration = families["inference_objective_request_duration_seconds"]
    assert _value(duration, "inference_objective_request_duration_seconds_count", **objective) == 3
    assert _value(families["inference_pool_ready_pods"], "inference_pool_ready_pods", name=MODEL) == 2
    per_pod = families["inference_pool_per_pod_queue_size"].samples
    assert len({s.labels["model_server_pod"] for s in per_pod}) == 2
    kv = _value(
        families["inference_pool_average_kv_cache_utilization"],
        "inference_pool_average_kv_cache_utilization",
        name=MODEL,
    )
    assert 0.0 <= kv <= 1.0


async def test_every_alert_and_panel_reads_only_series_the_gateway_exports(tmp_path: Path) -> None:
    # tracing on (nothing sampled): its export counters are read by an alert too
    tracing = ("--otel-sample-ratio", "0")
    async with (
        otlp_receiver() as receiver,
        serving_gateway(tmp_path, "--otel-endpoint", receiver.url, *tracing) as url,
    ):
        families = await metrics_after_traffic(url)
    exported = set(families) | {s.name for f in families.values() for s in f.samples}
    for prefix_family in families.values():  # a declared family without samples yet keeps its names
        if prefix_family.type == "counter":
            exported.add(prefix_family.name + "_total")
        if prefix_family.type == "histogram":
            exported |= {prefix_family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
    reads = {f"alert {alert.name}": metric_names(alert.expr) for alert in ALERTS}
    for board in DASHBOARDS:
        reads[f"{board.uid} variable pool"] = {POOL_VARIABLE_METRIC}
        for _, panels in board.rows:
            for panel in panels:
                reads[f"{board.uid} panel {panel.title}"] = set().union(
                    *(metric_names(q.expr) for q in panel.queries)
                )
    assert all(reads.values()), [where for where, names in reads.items() if not names]
    # ROUTER_MARKER: a global router's, read by a tier-1 alert to leave the routers out
    # (test_global_alert_rules.py checks that it is on a router's page and not on a gateway's)
    not_ours = set(EXTERNAL_METRICS) | {ROUTER_MARKER}
    dead = {where: sorted(names - exported - not_ours) for where, names in reads.items()}
    assert {where: missing for where, missing in dead.items() if missing} == {}


async def test_the_service_monitor_keeps_the_gateways_own_labels(tmp_path: Path) -> None:
    # The gateway's per-pod series are labelled ``endpoint``, a name the operator also gives its
    # targets: the chart's ServiceMonitor must let the page's label win, or every per-pod panel,
    # alert and ``by (endpoint)`` in the dashboards reads the port's name instead of the pod.
    async with serving_gateway(tmp_path) as url:
        families = await metrics_after_traffic(url)
    page_labels = {name for family in families.values() for s in family.samples for name in s.labels}
    colliding = page_labels & SERVICE_MONITOR_TARGET_LABELS
    assert "endpoint" in colliding  # the case this guards: dashboards group by it
    values = {"mode": "gateway", "serviceMonitor": {"enabled": True}}
    objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint.get("honorLabels") is True, sorted(colliding)
