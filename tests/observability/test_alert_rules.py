"""The alert table: expression parsing, the SLO bucket, the generated file and the chart's PrometheusRule."""

from __future__ import annotations

import re
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from igw.addon import chart, pins
from igw.addon.alert_rules import (
    ALERT_RULES_FILE,
    ALERTS,
    TTFT_SLO_SECONDS,
    render_alert_rules,
    rule_groups,
)
from igw.addon.dashboards import DASHBOARDS
from igw.addon.promql_names import matcher_labels, metric_names
from igw.config import paths
from igw.gateway.emf_metrics import USAGE_UNREAD_CLIENT_GONE
from igw.gateway.telemetry import TTFT_BUCKETS
from igw.gateway.trace_export import ExportStats
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


def test_metric_names_skips_functions_labels_grouping_and_durations() -> None:
    expr = (
        'sum by (model, le) (rate(igw_a_bucket{le="1.0", code=~"5.."}[5m])) / ignoring(x) '
        "igw_b offset 1h > 0.5 and on(instance) max(igw_c:ratio) unless time() - 14 * 86400 "
        '/ ignoring(endpoint) group_left sum(igw_d{x="$pool"}[$__rate_interval])'
    )
    assert metric_names(expr) == {"igw_a_bucket", "igw_b", "igw_c:ratio", "igw_d"}


def test_every_alert_reads_at_least_one_metric_and_names_are_unique() -> None:
    assert all(metric_names(a.expr) for a in ALERTS)
    assert len({a.name for a in ALERTS}) == len(ALERTS)
    assert {a.severity for a in ALERTS} <= {"warning", "critical"}


def test_the_counters_the_cloudwatch_alarms_watch_have_an_alert_too() -> None:
    """The CDK app alarms on ``AnswerUsageUnread`` and ``UsageMisnamed`` (since session s45); a
    cluster watched by Prometheus alone had no alert on the misnamed usage until then."""
    read = {name for a in ALERTS for name in metric_names(a.expr)}
    assert {"igw_answer_usage_unread_total", "igw_usage_misnamed_total"} <= read


def test_unread_usage_alerts_on_pods_not_on_clients_leaving() -> None:
    """A client leaving a compressed answer before its usage (reason ``client_gone``, counted since
    session s45) is no pod compressing: the unread-usage alert reads every other reason only."""
    (alert,) = [a for a in ALERTS if a.name == "IgwAnswerUsageUnread"]
    assert f'igw_answer_usage_unread_total{{reason!="{USAGE_UNREAD_CLIENT_GONE}"}}' in alert.expr
    assert matcher_labels(alert.expr) == {"igw_answer_usage_unread_total": {"reason"}}


def test_ttft_objective_is_a_histogram_boundary() -> None:
    assert TTFT_SLO_SECONDS in TTFT_BUCKETS


def test_dropped_spans_alert_apart_from_failed_batches() -> None:
    """Spans turned away with the export queue full are ``igw_trace_export_spans_total
    {result="dropped"}``: a collector slow enough to fill the queue but failing no batch left
    IgwTraceExportFailing (failed batches only) silent before session s39. The label value is one
    the gateway's counter writes, and the alert stays quiet while batches fail (that alert says so)."""
    by_name = {a.name: a for a in ALERTS}
    dropped = by_name["IgwTraceSpansDropped"]
    assert 'igw_trace_export_spans_total{result="dropped"}[5m])) > 0' in dropped.expr
    assert dropped.expr.split("\n")[1] == "unless sum(rate(igw_trace_export_failed_batches_total[5m])) > 0"
    assert (dropped.for_, dropped.severity) == (by_name["IgwTraceExportFailing"].for_, "warning")
    results = {s.labels.get("result") for family in ExportStats().collect() for s in family.samples}
    assert "dropped" in results


def test_generated_rules_file_is_fresh() -> None:
    root = paths.REPO_ROOT
    assert (root / ALERT_RULES_FILE).read_text(encoding="utf-8") == render_alert_rules(root), (
        "run igw generate"
    )


def test_chart_renders_the_rules_only_when_enabled() -> None:
    default = chart.render({"mode": "gateway"}, release="igw", namespace=pins.ADDON_NAMESPACE)
    assert "PrometheusRule" not in [o["kind"] for o in default]
    values = {"mode": "gateway", "prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}
    objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["metadata"]["namespace"] == pins.ADDON_NAMESPACE
    assert rule["spec"] == yaml.safe_load(yaml.safe_dump(rule_groups()))
    assert chart.addon_rule_violations() == []


_SELECTOR = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<matchers>[^}]*)\}")
_MATCHER = re.compile(r'(?P<label>\w+)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>(?:[^"\\]|\\.)*)"')


def _selects(expr: str, metric: str, labels: dict[str, str]) -> bool:
    """Whether a selector of ``metric`` in ``expr`` matches a series with ``labels``, as Prometheus
    applies label matchers (regular expressions anchored at both ends)."""
    for selector in _SELECTOR.finditer(expr):
        if selector["name"] != metric:
            continue
        ok = True
        for m in _MATCHER.finditer(selector["matchers"]):
            have = labels.get(m["label"], "")
            hit = re.fullmatch(m["value"], have) is not None if "~" in m["op"] else have == m["value"]
            ok &= hit if m["op"] in ("=", "=~") else not hit
        if ok:
            return True
    return False


async def _overload_reasons(gateway: Any, flow: dict[str, Any] | None) -> set[str]:
    """The ``reason`` labels of ``igw_rejections_total`` after one request to a pool whose only pod
    is saturated, answered 429 (with ``flow`` as ``spec.extensions.flowControl``, shed by its queue)."""
    doc = config_doc([scheduler("pool", "m1")])
    if flow is not None:
        doc["spec"]["extensions"]["flowControl"] = flow
    async with running(FakeModelServer("a", waiting=9)) as (a,), gateway(doc, {"pool": [a.key]}) as gw:
        resp = await gw.post("/v1/completions", {"model": "m1", "prompt": "hello", "max_tokens": 3})
        assert resp.status == 429, await resp.text()
        page = await (await gw.http.get(gw.url + "/metrics")).text()
    return {
        s.labels["reason"]
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "igw_rejections_total" and s.value > 0
    }


async def test_pool_saturated_alert_counts_the_429s_flow_control_sheds(gateway: Any) -> None:
    """A saturated pool answers 429 ``pool_saturated`` without flow control and 429 ``request_shed``
    when its queue sheds with flow control on: both are the pool out of capacity. Until session s39
    the alert read only ``reason="saturated"``, so a gateway with flow control (the overload feature)
    could shed for hours without IgwPoolSaturated firing."""
    alert = {a.name: a for a in ALERTS}["IgwPoolSaturated"]
    plain = await _overload_reasons(gateway, None)
    flow = {"pollInterval": "10ms", "bands": [{"priority": 0, "ttl": "100ms"}]}
    shed = await _overload_reasons(gateway, flow)
    assert plain == {"saturated"}
    assert shed == {"shed"}
    for reason in plain | shed:
        assert _selects(alert.expr, "igw_rejections_total", {"model": "m1", "reason": reason}), reason
    assert not _selects(alert.expr, "igw_rejections_total", {"model": "m1", "reason": "context_length"})


def test_operator_mode_ships_the_rules_and_dashboards_it_is_asked_for() -> None:
    """``mode: operator`` is the chart's default and what the CDK app installs: its gateways export
    the same series, so ``prometheusRule.enabled`` and ``grafanaDashboards.enabled`` must render
    there too. Until session s39 both were silently ignored outside ``mode: gateway``: a cluster
    installed as documented had no alert at all, whatever its values said."""
    values = {
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
        "grafanaDashboards": {"enabled": True},
    }
    objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load(yaml.safe_dump(rule_groups()))
    assert rule["metadata"]["labels"]["release"] == "kps"
    boards = [
        o for o in objects if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]
    ]
    assert len(boards) == len(DASHBOARDS)
    assert "PrometheusRule" not in [o["kind"] for o in chart.render({}, release="igw")]
    assert chart.addon_rule_violations() == []
