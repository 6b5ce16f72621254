"""The global router's (tier 2) alert rules: every metric and label they read is on a running
``igw global serve`` page, the expressions parse, the generated file is fresh.

Until session s45 the router had no Prometheus alert at all (CloudWatch alarms only)."""

from __future__ import annotations

import asyncio
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
from igw.launch import guard_factory
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import global_doc
from tests.observability.promql_values import Given, Key, fired, reach

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
Element = tuple[Key, frozenset[str]]
"""A series an expression returns: its labels, and the targets (``instance``) it was computed from."""


def _page_series(page: str, instance: str) -> list[Series]:
    """Every sample of a ``/metrics`` page as Prometheus stores it from target ``instance``."""
    return [
        {"__name__": s.name, **s.labels, "instance": instance}
        for family in text_string_to_metric_families(page)
        for s in family.samples
    ]


def _fired(alert: Alert, series: list[Series]) -> set[Element]:
    """The most ``alert`` can fire for over ``series`` (:func:`reach`), each with its targets."""
    found = reach(alert.expr, series)
    return {(labels, frozenset(series[i]["instance"] for i in inputs)) for labels, inputs in found.items()}


_UNREACHABLE_JWKS = "https://127.0.0.1:1/jwks"
"""A JWKS address nothing listens on: each tier's first fetch fails at once, so its page has every
JWKS and auth series (``igw_jwks_fetch_total{result="failure"}`` included) a failing issuer gives."""

_UNREACHABLE_REDIS = {"backend": "redis", "redis": {"url": "redis://127.0.0.1:1/0"}}


def _auth(issuer: str) -> dict[str, Any]:
    return {
        "jwt": {
            "provider": {
                "name": "idp",
                "issuer": issuer,
                "remoteJWKS": {"uri": _UNREACHABLE_JWKS},
                "audiences": ["a"],
            }
        }
    }


async def _page_once(app: web.Application, has: str) -> str:
    """``app``'s ``/metrics`` page once it has a sample line starting ``has`` (a background fetch's
    outcome), read on a loopback port."""
    async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            async with http.get(url + "/metrics") as resp:
                assert resp.status == 200
                page = await resp.text()
            if any(line.startswith(has) for line in page.splitlines()):
                return page
            assert asyncio.get_running_loop().time() < deadline, f"no {has} on the page"
            await asyncio.sleep(0.05)


async def _both_tiers_with_auth() -> tuple[list[Series], list[Series]]:
    """A gateway's and a router's series, both with JWT auth (a failing issuer) and Redis rate limits:
    the configuration under which the two pages share the most families."""
    doc = config_doc([scheduler("m", "m")])
    doc["spec"]["auth"] = _auth("https://idp.example")
    doc["spec"]["extensions"]["rateLimits"] = {
        **_UNREACHABLE_REDIS,
        "default": {"requestsPerSecond": 1, "burst": 2},
    }
    failed = 'igw_jwks_fetch_total{result="failure"'
    registry = CollectorRegistry()
    security = guard_factory(registry)  # as igw serve wires it: the guard's series on the gateway's page
    gateway = create_app(
        build_gateway_config(doc),
        guard_factory=security.factory,
        holds_refused=security.holds_refused,
        registry=registry,
    )
    gateway_page = await _page_once(gateway, failed)
    router_doc = global_doc(
        auth=_auth("https://idp.example"),
        rateLimits={**_UNREACHABLE_REDIS, "default": {"requestsPerSecond": 1, "burst": 2}},
    )
    router = create_global_app(parse_global_config(router_doc), rng=random.Random(1), read_heartbeats=False)
    router_page = await _page_once(router, failed)
    return _page_series(gateway_page, "gw:9090"), _page_series(router_page, "router:9090")


async def test_every_alert_of_each_tier_fires_for_its_own_tiers_targets_only() -> None:
    """Both tiers export some families (the request guard's ``igw_auth_*``, ``igw_jwks_*``,
    ``igw_ratelimit_*``; ``igw_log_lines_dropped_total``). Every alert, evaluated over a gateway's
    and a router's live pages as one Prometheus scraping both holds them (every counter moved,
    every threshold crossed), returns exactly what it returns over its own tier's page alone: no
    series computed from the other tier's target, and none of its own tier's lost to the scoping.
    Each alert on a shared family with samples fires on its own tier.

    Until session s46 the chart's ``IgwLogLinesDropped`` fired for the router too, and until this
    change ``IgwJwksRefreshFailing`` and ``IgwJwksNotReady`` did (a router with auth exports their
    series)."""
    gateway, router = await _both_tiers_with_auth()
    assert ROUTER_MARKER in {s["__name__"] for s in router} - {s["__name__"] for s in gateway}
    shared = {s["__name__"] for s in gateway} & {s["__name__"] for s in router}
    assert {
        "igw_jwks_fetch_total",
        "igw_jwks_ready",
        "igw_auth_enabled",
        "igw_log_lines_dropped_total",
    } <= shared
    both = gateway + router
    foreign: dict[str, set[Element]] = {}
    silent: list[str] = []
    for alerts, own, other in ((ALERTS, gateway, "router:9090"), (GLOBAL_ALERTS, router, "gw:9090")):
        for alert in alerts:
            got = _fired(alert, both)
            if got != _fired(alert, own) or any(other in targets for _, targets in got):
                foreign[alert.name] = got
            if metric_names(alert.expr) & shared - {ROUTER_MARKER} and not got:
                silent.append(alert.name)
    assert foreign == {}
    assert silent == []


def test_a_gateway_failing_its_jwks_fetches_fires_although_another_succeeds() -> None:
    """Since session s46 tier 1's ``IgwJwksRefreshFailing`` is per gateway (``instance``), as the
    router's ``IgwGlobalJwksRefreshFailing`` is: until then one ``sum`` over every gateway, so one
    replica's successful fetches hid another's failures (that replica's keys aging towards 401 for
    every request it takes) and the alert stayed quiet. Evaluated on the values of two gateways' and
    a router's series as one Prometheus holds them."""
    (alert,) = [a for a in ALERTS if a.name == "IgwJwksRefreshFailing"]
    fetched = [
        ({"__name__": "igw_jwks_fetch_total", "result": "failure", "instance": "gw-a:9090"}, 4.0),
        ({"__name__": "igw_jwks_fetch_total", "result": "success", "instance": "gw-a:9090"}, 0.0),
        ({"__name__": "igw_jwks_fetch_total", "result": "success", "instance": "gw-b:9090"}, 3.0),
        ({"__name__": "igw_jwks_fetch_total", "result": "failure", "instance": "router:9090"}, 2.0),
        ({"__name__": ROUTER_MARKER, "instance": "router:9090"}, 1.0),
    ]
    assert fired(alert.expr, fetched) == {(("instance", "gw-a:9090"),): 4.0}
    healthy = [(s, 0.0 if s.get("result") == "failure" else v) for s, v in fetched]
    assert fired(alert.expr, healthy) == {}
    assert "{{ $labels.instance }}" in alert.summary


def test_redirects_and_search_timeouts_have_an_alert_on_each_tier() -> None:
    """Since session s46: the redirect counters (a 3xx refused with a 502) and the searches that
    stopped waiting for a frozen pod or cluster (each tier's retry counter, cause ``search-timeout``,
    the cause both tiers' code writes) were on ``/metrics`` only."""
    from igw.addon.alert_rules import SEARCH_TIMEOUT_CAUSE
    from igw.gateway.response_search import SEARCH_TIMEOUT
    from igw.global_router.server import SEARCH_TIMEOUT as GLOBAL_SEARCH_TIMEOUT

    assert SEARCH_TIMEOUT_CAUSE == SEARCH_TIMEOUT == GLOBAL_SEARCH_TIMEOUT
    for alerts, redirects, retries in (
        (ALERTS, "igw_upstream_redirects_total", "igw_upstream_retries_total"),
        (GLOBAL_ALERTS, "igw_global_upstream_redirects_total", "igw_global_upstream_retries_total"),
    ):
        read = {name for a in alerts for name in metric_names(a.expr)}
        assert redirects in read
        (timeouts,) = [a for a in alerts if retries in metric_names(a.expr)]
        assert f'{retries}{{cause="{SEARCH_TIMEOUT_CAUSE}"}}' in timeouts.expr
        assert matcher_labels(timeouts.expr) == {retries: {"cause"}}


def test_a_cluster_timing_out_searches_fires_though_the_replicas_share_the_timeouts() -> None:
    """Since session s48 ``IgwGlobalSearchTimeouts`` sums a cluster's search timeouts over every router
    replica: per replica (``by (instance, cluster)``, s46 to s47) a cluster frozen for retrievals -
    while it serves inference, never drained for it - fired nothing when the load balancer spread the
    searches (four replicas, two timeouts each in 15 minutes). Evaluated on the values of four
    replicas' series as one Prometheus holds them; the other cause is not counted."""
    (alert,) = [a for a in GLOBAL_ALERTS if a.name == "IgwGlobalSearchTimeouts"]
    retries = "igw_global_upstream_retries_total"
    spread = [
        ({"__name__": retries, "cluster": "east-1", "cause": "search-timeout", "instance": f"r{i}:9090"}, 2.0)
        for i in range(4)
    ] + [({"__name__": retries, "cluster": "west-1", "cause": "connect", "instance": "r0:9090"}, 9.0)]
    assert fired(alert.expr, spread) == {(("cluster", "east-1"),): 8.0}
    one = [
        (s, 2.0 if s["instance"] == "r0:9090" and s["cause"] == "search-timeout" else 0.0) for s, _ in spread
    ]
    assert fired(alert.expr, one) == {}
    assert "{{ $labels.cluster }}" in alert.summary
    assert "{{ $labels.instance }}" not in alert.summary + alert.description


async def test_a_tenant_held_to_its_share_of_the_searches_fires_an_alert() -> None:
    """Since session s47 the refusals of a caller scope's searches past its share
    (``igw_global_response_searches_refused_total{reason="scope_busy"}``, since s46) have an alert, per
    replica; the series is on a fresh router's page at 0 (born at its first refusal, ``increase()``
    missed that first burst). Evaluated on the live page's series with the values a flood gives."""
    (alert,) = [a for a in GLOBAL_ALERTS if a.name == "IgwGlobalSearchesScopeBusy"]
    page = _page_series(await _metrics_page(_router_app()), "router:9090")
    _assert_fires_on_scope_busy_alone(
        alert, page, "igw_global_response_searches_refused_total", ("instance", "router:9090")
    )


async def test_a_tenant_held_to_its_share_of_a_gateways_searches_fires_an_alert() -> None:
    """Since session s47 tier 1 counts its refused searches for stored responses as tier 2 does
    (``igw_response_searches_refused_total{reason}``, before counted nowhere), each reason's series on
    a fresh gateway's page at 0, and the refusals of a caller scope past its share fire
    ``IgwSearchesScopeBusy`` per pod. Evaluated on the live page's series with the values a flood
    gives (the pod label is the scrape's)."""
    (alert,) = [a for a in ALERTS if a.name == "IgwSearchesScopeBusy"]
    config = build_gateway_config(config_doc([scheduler("m", "m")]))
    gateway = create_app(config, registry=CollectorRegistry())
    page = [{**s, "pod": "gw-0"} for s in _page_series(await _metrics_page(gateway), "gw:9090")]
    _assert_fires_on_scope_busy_alone(alert, page, "igw_response_searches_refused_total", ("pod", "gw-0"))


def _assert_fires_on_scope_busy_alone(
    alert: Alert, page: list[Series], refused_total: str, by: tuple[str, str]
) -> None:
    """``alert`` over the live ``page``: ``refused_total`` has a series per reason at 0; 25 refusals
    of reason ``scope_busy`` fire it once, labelled ``by`` (the replica); 25 of reason ``busy`` (the
    whole table full, no one tenant's doing) fire nothing."""
    refused = [s for s in page if s["__name__"] == refused_total]
    assert {s["reason"] for s in refused} == {"unfound", "busy", "scope_busy"}
    flood = [(s, 25.0 if s.get("reason") == "scope_busy" else 0.0) for s in page]
    assert fired(alert.expr, flood) == {(by,): 25.0}
    busy_only = [(s, 25.0 if s.get("reason") == "busy" else 0.0) for s in page]
    assert fired(alert.expr, busy_only) == {}


@pytest.mark.parametrize(
    ("alerts", "refusals", "near", "instance"),
    [
        (ALERTS, "IgwBodyBudgetRefusals", "IgwBodyBytesHeldNearLimit", "gw-a:9090"),
        (GLOBAL_ALERTS, "IgwGlobalBodyBudgetRefusals", "IgwGlobalBodyBytesHeldNearLimit", "router:9090"),
    ],
    ids=["gateway", "router"],
)
def test_body_budget_refusals_and_held_bytes_near_the_limit_alert_on_each_tier(
    alerts: tuple[Alert, ...], refusals: str, near: str, instance: str
) -> None:
    """Since session s48 (round 3): ``igw_body_budget_refusals_total`` (503 ``server_busy``) and the
    bytes held against ``igw_body_bytes_held_limit`` were on ``/metrics`` only, at both tiers. A
    refusal in 5 minutes fires on its own tier's target alone; held bytes fire past 80 % of the limit,
    not at it. Evaluated on a gateway's and a router's series as one Prometheus holds them."""
    (refused,) = [a for a in alerts if a.name == refusals]
    (held,) = [a for a in alerts if a.name == near]
    mib = 2.0**20

    def series(refused_gw: float, refused_router: float, held_gw: float, held_router: float) -> Given:
        out: Given = []
        for inst, r, h in (("gw-a:9090", refused_gw, held_gw), ("router:9090", refused_router, held_router)):
            out += [
                ({"__name__": "igw_body_budget_refusals_total", "instance": inst}, r),
                ({"__name__": "igw_body_bytes_held", "instance": inst}, h * mib),
                ({"__name__": "igw_body_bytes_held_limit", "instance": inst}, 100 * mib),
            ]
        return [*out, ({"__name__": ROUTER_MARKER, "instance": "router:9090"}, 1.0)]

    own_gw = instance == "gw-a:9090"
    busy = series(3.0 if own_gw else 0.0, 0.0 if own_gw else 3.0, 0.0, 0.0)
    assert list(fired(refused.expr, busy).values()) == [3.0]
    other = series(0.0 if own_gw else 3.0, 3.0 if own_gw else 0.0, 0.0, 0.0)
    assert fired(refused.expr, other) == {}
    assert fired(refused.expr, series(0.0, 0.0, 0.0, 0.0)) == {}
    full = series(0.0, 0.0, 85.0 if own_gw else 10.0, 10.0 if own_gw else 85.0)
    assert [dict(k)["instance"] for k in fired(held.expr, full)] == [instance]
    at_limit = series(0.0, 0.0, 80.0, 80.0)
    assert fired(held.expr, at_limit) == {}
    assert held.for_ == "10m"
    assert refused.for_ == "0m"
    assert "[5m]" in refused.expr
