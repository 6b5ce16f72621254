"""The alert table: expression parsing, the SLO bucket, the generated file and the chart's PrometheusRule."""

from __future__ import annotations

import yaml

from igw.addon import chart, pins
from igw.addon.alert_rules import (
    ALERT_RULES_FILE,
    ALERTS,
    TTFT_SLO_SECONDS,
    render_alert_rules,
    rule_groups,
)
from igw.addon.promql_names import metric_names
from igw.config import paths
from igw.gateway.telemetry import TTFT_BUCKETS
from igw.gateway.trace_export import ExportStats


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
