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
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import (
    ALERTS,
    GLOBAL_ALERT_RULES_FILE,
    GLOBAL_ALERTS,
    ROUTER_MARKER,
    Alert,
    render_global_alert_rules,
    rule_groups,
)
from igw.addon.promql_names import grouping_labels, matcher_labels, metric_names, template_labels
from igw.config import paths
from igw.config.build import build_gateway_config
from igw.gateway.app import create_app
from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import global_doc

SCRAPE_LABELS = frozenset({"instance", "job"})
"""The labels Prometheus gives every scraped series (the router writes neither)."""

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


async def _metrics_page(app: web.Application) -> str:
    """``app``'s ``/metrics`` page, served on a loopback port for the one request."""
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
        http.get(url + "/metrics") as resp,
    ):
        assert resp.status == 200
        return await resp.text()


def _router_app(registry: CollectorRegistry | None = None) -> web.Application:
    return create_global_app(
        parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False, registry=registry
    )


async def _router_page_and_labels() -> tuple[set[str], dict[str, frozenset[str]]]:
    """The sample names a running router's ``/metrics`` page declares (a labelled family without
    samples yet keeps its names) and, from its registry, the labels each sample carries (a
    collector's own families, ``igw_log_lines_dropped``'s, from their samples on the page)."""
    registry = CollectorRegistry(auto_describe=True)
    page = await _metrics_page(_router_app(registry))
    exported: set[str] = set()
    labels: dict[str, frozenset[str]] = {}
    for family in text_string_to_metric_families(page):
        exported |= {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
        exported |= {s.name for s in family.samples}
        for sample in family.samples:
            labels[sample.name] = labels.get(sample.name, frozenset()) | set(sample.labels)
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


Series = dict[str, str]


def _page_series(page: str, instance: str) -> list[Series]:
    """Every sample of a ``/metrics`` page as Prometheus stores it from target ``instance``."""
    return [
        {"__name__": s.name, **s.labels, "instance": instance}
        for family in text_string_to_metric_families(page)
        for s in family.samples
    ]


def _firing(node: Any, series: list[Series]) -> list[Series]:
    """The series an alert expression returns over ``series``, every counter taken to have moved
    (a comparison with a number keeps all): only what these alerts use - selectors with equality
    matchers, ``increase``/``rate``, a threshold, and ``and``/``unless`` ``on(...)``. Anything else
    fails rather than be guessed."""
    kind = type(node).__name__
    if kind == "MatrixSelector":
        return _firing(node.vector_selector, series)
    if kind == "VectorSelector":
        matchers = [(m.name, str(m.op), m.value) for m in node.matchers.matchers]
        assert all(op in ("MatchOp.Equal", "MatchOp.NotEqual") for _, op, _ in matchers), matchers
        return [
            s
            for s in series
            if s["__name__"] == node.name
            and all((s.get(k, "") == v) == (op == "MatchOp.Equal") for k, op, v in matchers)
        ]
    if kind == "Call":
        assert node.func.name in ("increase", "rate"), node.func.name
        return [{k: v for k, v in s.items() if k != "__name__"} for s in _firing(node.args[0], series)]
    assert kind == "BinaryExpr", kind
    if type(node.rhs).__name__ == "NumberLiteral":
        return _firing(node.lhs, series)
    op, matching = str(node.op), node.modifier.matching
    assert op in ("and", "unless"), op
    assert str(matching.type) == "LabelModifierType.Include", matching  # on(...), not ignoring(...)
    on = list(matching.labels)
    right = {tuple(s.get(label, "") for label in on) for s in _firing(node.rhs, series)}
    return [
        s
        for s in _firing(node.lhs, series)
        if (tuple(s.get(label, "") for label in on) in right) == (op == "and")
    ]


async def test_each_tiers_log_drop_alert_reads_only_its_own_tiers_targets() -> None:
    """Both tiers export ``igw_log_lines_dropped_total{stream}``. Evaluated over a gateway's and a
    router's pages as one Prometheus scraping both holds them, with every stream dropping, the
    chart's ``IgwLogLinesDropped`` returns the gateway's series only and the router's
    ``IgwGlobalLogLinesDropped`` the router's only. Until session s46 the chart's alert returned the
    router's too (its expression without ``unless on(instance) ...``, evaluated below, still does)."""
    gateway_page = await _metrics_page(create_app(build_gateway_config(config_doc([scheduler("m", "m")]))))
    router_page = await _metrics_page(_router_app())
    gateway, router = _page_series(gateway_page, "gw:9090"), _page_series(router_page, "router:9090")
    assert ROUTER_MARKER in {s["__name__"] for s in router} - {s["__name__"] for s in gateway}
    both = gateway + router
    tier1: Any = promql_parser.parse({a.name: a for a in ALERTS}["IgwLogLinesDropped"].expr)
    tier2 = promql_parser.parse({a.name: a for a in GLOBAL_ALERTS}["IgwGlobalLogLinesDropped"].expr)
    unscoped = {(s["instance"], s["stream"]) for s in _firing(tier1.lhs, both)}
    assert unscoped == {(i, st) for i in ("gw:9090", "router:9090") for st in ("stdout", "stderr")}
    assert {(s["instance"], s["stream"]) for s in _firing(tier1, both)} == {
        ("gw:9090", "stdout"),
        ("gw:9090", "stderr"),
    }
    assert {(s["instance"], s["stream"]) for s in _firing(tier2, both)} == {
        ("router:9090", "stdout"),
        ("router:9090", "stderr"),
    }
