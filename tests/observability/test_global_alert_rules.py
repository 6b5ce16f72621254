"""The global router's (tier 2) alert rules: every metric and label they read is on a running
``igw global serve`` page, the expressions parse, the generated file is fresh.

Until session s45 the router had no Prometheus alert at all (CloudWatch alarms only)."""

from __future__ import annotations

import random
from typing import Any

import aiohttp
import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import (
    ALERTS,
    GLOBAL_ALERT_RULES_FILE,
    GLOBAL_ALERTS,
    Alert,
    render_global_alert_rules,
    rule_groups,
)
from igw.addon.promql_names import grouping_labels, matcher_labels, metric_names, template_labels
from igw.config import paths
from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.global_router.support import global_doc

SCRAPE_LABELS = frozenset({"instance", "job"})
"""The labels Prometheus gives every scraped series (the router writes neither)."""

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


async def _router_page_and_labels() -> tuple[set[str], dict[str, frozenset[str]]]:
    """The sample names a running router's ``/metrics`` page declares (a labelled family without
    samples yet keeps its names) and, from its registry, the labels each sample carries."""
    registry = CollectorRegistry(auto_describe=True)
    app = create_global_app(
        parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False, registry=registry
    )
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
        http.get(url + "/metrics") as resp,
    ):
        assert resp.status == 200
        page = await resp.text()
    exported: set[str] = set()
    for family in text_string_to_metric_families(page):
        exported |= {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
        exported |= {s.name for s in family.samples}
    labels: dict[str, frozenset[str]] = {}
    for collector in list(registry._collector_to_names):  # the families, samples or not
        if isinstance(collector, MetricWrapperBase):
            for suffix in _SUFFIXES.get(collector._type or "", ("",)):
                labels[collector._name + suffix] = frozenset(collector._labelnames)
    return exported, labels


def test_the_rule_file_is_fresh_and_a_prometheus_rule_file() -> None:
    text = (paths.REPO_ROOT / GLOBAL_ALERT_RULES_FILE).read_text(encoding="utf-8")
    assert text == render_global_alert_rules(paths.REPO_ROOT), "run igw generate"
    (group,) = yaml.safe_load(text)["groups"]
    assert [r["alert"] for r in group["rules"]] == [a.name for a in GLOBAL_ALERTS]
    assert (
        group == yaml.safe_load(yaml.safe_dump(rule_groups(GLOBAL_ALERTS, "igw-global-router")))["groups"][0]
    )
    assert len({a.name for a in GLOBAL_ALERTS}) == len(GLOBAL_ALERTS)
    assert {a.severity for a in GLOBAL_ALERTS} <= {"warning", "critical"}


def test_the_counters_the_routers_cloudwatch_alarms_watch_have_an_alert_too() -> None:
    read = {name for a in GLOBAL_ALERTS for name in metric_names(a.expr)}
    assert {
        "igw_global_heartbeat_source_outages_total",
        "igw_global_answer_usage_unread_total",
        "igw_global_usage_misnamed_total",
        "igw_global_requests_total",
        "igw_global_cluster_available",
        "igw_ratelimit_backend_up",
    } <= read


async def test_every_alert_reads_only_series_and_labels_the_router_exports() -> None:
    exported, labels = await _router_page_and_labels()
    dead = {a.name: sorted(metric_names(a.expr) - exported) for a in GLOBAL_ALERTS}
    assert {name: missing for name, missing in dead.items() if missing} == {}
    wrong: dict[str, list[str]] = {}
    for alert in GLOBAL_ALERTS:
        read = metric_names(alert.expr)
        carried = set(SCRAPE_LABELS).union(*(labels.get(name, frozenset()) for name in read))
        used = set().union(*matcher_labels(alert.expr).values()) | grouping_labels(alert.expr)
        used |= template_labels(alert.summary + alert.description)
        if used - carried:
            wrong[alert.name] = sorted(used - carried)
    assert wrong == {}


def _selector_names(node: Any) -> set[str]:
    """The metric names of every vector selector in a ``promql_parser`` tree (its node classes told
    apart by name: the module is imported only where it is installed)."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        return {node.name} if node.name else set()
    if kind == "MatrixSelector":
        return _selector_names(node.vector_selector)
    found: set[str] = set()
    for attr in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attr, None)
        if child is not None:
            found |= _selector_names(child)
    for arg in getattr(node, "args", None) or ():
        found |= _selector_names(arg)
    return found


@pytest.mark.parametrize("alerts", [ALERTS, GLOBAL_ALERTS], ids=["gateway", "global-router"])
def test_every_expression_parses_with_a_real_promql_parser(alerts: tuple[Alert, ...]) -> None:
    """Every alert of both tiers parses with ``promql-parser`` (a binding of GreptimeDB's Rust PromQL
    parser), and the metric names it finds are those :func:`metric_names` reads (what the name checks
    above and tier 1's rely on)."""
    for alert in alerts:
        tree = promql_parser.parse(alert.expr)
        assert _selector_names(tree) == metric_names(alert.expr), alert.name
