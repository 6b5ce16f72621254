"""Every label an alert or a dashboard panel uses is one its series carry.

``test_metric_names.py`` checks the metric names; a label is as easy to get wrong and fails as
silently: a matcher on a label the series lack compares with ``""`` (``{reasons="shed"}`` selects
nothing, so the alert never fires), a ``by (pod)`` the series lack folds every pod into one line, a
legend or an annotation naming an absent label prints nothing. The labels each family declares are
read from the gateway's registries (every family, with or without samples yet) and checked against
a live ``igw serve``'s page.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from igw.addon.alert_rules import ALERTS, EXTERNAL_METRICS
from igw.addon.dashboards import DASHBOARDS
from igw.addon.promql_names import grouping_labels, matcher_labels, metric_names, template_labels
from igw.config.build import build_gateway_config
from igw.gateway.epp_compat import EPP_ALIASES
from igw.gateway.guards import OpenGuard
from igw.gateway.state import GatewayState
from igw.gateway.trace_export import ExportStats
from igw.gateway.worker_metrics import WORKER_LABEL
from igw.security.metrics import SecurityMetrics
from tests.gateway.support import config_doc, scheduler
from tests.observability.live_gateway import metrics_after_traffic, serving_gateway

SCRAPE_LABELS = frozenset({"instance", "job", "namespace", "pod", "service", "container", WORKER_LABEL})
"""Labels every gateway series has in Prometheus without the gateway writing them: the target's
(the Prometheus Operator's monitors; ``endpoint`` is left out, the gateway's own wins with
``honorLabels``) and ``worker`` (the merged page of ``igw serve --workers``)."""

_SUFFIXES = {
    "counter": (("_total", ()), ("_created", ())),
    "histogram": (("_bucket", ("le",)), ("_count", ()), ("_sum", ()), ("_created", ())),
    "gauge": (("", ()),),
}


def _samples(family: str, kind: str, labels: Iterable[str]) -> dict[str, frozenset[str]]:
    """The sample names of a family and the labels each carries."""
    return {family + suffix: frozenset(labels) | set(extra) for suffix, extra in _SUFFIXES[kind]}


def declared_labels() -> dict[str, frozenset[str]]:
    """Sample name -> labels, for every family a gateway registers (requests, endpoints, flow
    control, canary rewrites, security, trace export) and the reference picker's aliases."""
    doc = config_doc([scheduler("m", "m")])
    state = GatewayState(
        build_gateway_config(doc), guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0)
    )
    registry: CollectorRegistry = state.metrics.registry
    SecurityMetrics(registry=registry)
    registry.register(ExportStats())
    aliases = {alias.name for alias in EPP_ALIASES}
    found: dict[str, frozenset[str]] = {}
    for collector in list(registry._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            found |= _samples(collector._name, str(collector._type), collector._labelnames)
            continue
        for family in collector.collect():
            if family.name not in aliases:
                found |= _samples(family.name, family.type, family._labelnames)  # type: ignore[attr-defined]
    for alias in EPP_ALIASES:
        found |= _samples(alias.name, alias.kind, alias.labels)
    return found


def _problems(where: str, expr: str, texts: Iterable[str], labels: dict[str, frozenset[str]]) -> list[str]:
    """What ``expr`` (with its legend or annotations, ``texts``) uses that its series lack."""
    names = metric_names(expr)
    if names & set(EXTERNAL_METRICS):
        return []  # labels of other components' series are theirs to define
    carried = SCRAPE_LABELS.union(*(labels.get(name, frozenset()) for name in names))
    problems = [
        f"{where}: {name}{{{label}=...}} - {name} has {sorted(labels.get(name, ()))}"
        for name, used in matcher_labels(expr).items()
        for label in sorted(used - SCRAPE_LABELS - labels.get(name, frozenset()))
    ]
    grouped = grouping_labels(expr)
    problems += [
        f"{where}: by/on ({label}) - no series of {sorted(names)} has it" for label in grouped - carried
    ]
    # what a legend or an annotation can print: the grouping's labels when the result is grouped
    # (``by``: the others, the target's too, are gone), else the series' own
    printable = grouped if re.search(r"\bby\s*\(", expr) else carried
    for text in texts:
        problems += [
            f"{where}: {{{{{label}}}}} in {text!r} - not a label of the result"
            for label in template_labels(text) - printable
        ]
    return problems


def label_problems(labels: dict[str, frozenset[str]]) -> list[str]:
    problems: list[str] = []
    for alert in ALERTS:
        problems += _problems(f"alert {alert.name}", alert.expr, (alert.summary, alert.description), labels)
    for board in DASHBOARDS:
        for _, panels in board.rows:
            for panel in panels:
                for query in panel.queries:
                    where = f"{board.uid} panel {panel.title!r}"
                    problems += _problems(where, query.expr, (query.legend,), labels)
    return problems


async def test_every_alert_and_panel_uses_only_labels_its_series_carry(tmp_path: Path) -> None:
    async with serving_gateway(tmp_path) as url:
        families = await metrics_after_traffic(url)
    labels = declared_labels()
    for family in families.values():  # the declared labels are the live page's
        for s in family.samples:
            assert labels.setdefault(s.name, frozenset(s.labels)) == set(s.labels), (s.name, s.labels)
    assert label_problems(labels) == []


def test_a_label_the_series_lack_is_found() -> None:
    """The check itself: a misspelt matcher, a grouping and a legend over absent labels."""
    labels = declared_labels()
    assert _problems("x", 'sum(rate(igw_rejections_total{reasons="shed"}[5m]))', (), labels)
    assert _problems("x", "sum by (pod_name) (rate(igw_endpoint_picks_total[5m]))", (), labels)
    assert _problems("x", "sum by (model) (rate(igw_requests_total[5m]))", ("{{endpoint}}",), labels)
    assert _problems("x", "igw_endpoint_scrape_failing == 1", ("{{ $labels.model }}",), labels)
    assert not _problems("x", "igw_endpoint_scrape_failing == 1", ("{{ $labels.endpoint }}",), labels)
    assert not _problems(
        "x", "sum by (le, model) (rate(igw_request_duration_seconds_bucket[5m]))", ("{{model}}",), labels
    )
