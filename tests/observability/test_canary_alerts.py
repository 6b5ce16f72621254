"""The canary alerts (since session s48), evaluated on synthetic rates of the per-target series as one
Prometheus holds them from two gateway replicas: each fires where it should page and stays quiet on
the near-misses (too little traffic, every target as bad, 429s, nothing to compare with); and
``IgwCanaryVersionErrors`` over a live gateway's ``/metrics`` page, in front of a simulated fleet
whose canary pod fails part of its requests."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from igw.addon.alert_rules import ALERTS, CANARY_MIN_RPS, Alert
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.support import config_doc, scheduler
from tests.observability.promql_values import Given, fired

REQUESTS = "igw_model_rewrite_requests_total"
FALLBACKS = "igw_model_rewrite_fallbacks_total"
CHAT = (("rule", "chat"), ("target", "m-v2"))


def _alert(name: str) -> Alert:
    (alert,) = [a for a in ALERTS if a.name == name]
    return alert


def _split(rule: str, per_target: dict[str, dict[str, float]]) -> Given:
    """The series of ``rule``: each target's requests a second by code, half on each replica."""
    return [
        ({"__name__": REQUESTS, "rule": rule, "target": t, "code": code, "instance": i}, rps / 2)
        for t, codes in per_target.items()
        for code, rps in codes.items()
        for i in ("gw-0:9090", "gw-1:9090")
    ]


def _canary(v2: dict[str, float], v1: dict[str, float] | None = None) -> Given:
    """Rule ``chat``: stable ``m-v1`` (2 rps, 0.5 % 5xx unless ``v1``) and canary ``m-v2``; a
    healthy rule ``other`` beside it."""
    stable = v1 if v1 is not None else {"200": 1.99, "500": 0.01}
    return _split("chat", {"m-v1": stable, "m-v2": v2}) + _split(
        "other", {"o-a": {"200": 1.0}, "o-b": {"200": 1.0}}
    )


def test_a_canary_failing_more_than_the_others_pages() -> None:
    alert = _alert("IgwCanaryVersionErrors")
    assert (alert.for_, alert.severity) == ("5m", "critical")
    got = fired(alert.expr, _canary({"200": 0.18, "503": 0.01, "502": 0.01}))
    assert list(got) == [CHAT]
    assert abs(got[CHAT] - 0.1) < 1e-9  # the alert's value: the target's 5xx share
    # a third target: compared with the rule's two others together
    three = _split("chat", {"a": {"200": 1.0}, "b": {"200": 0.9, "500": 0.1}, "c": {"200": 0.3, "500": 0.1}})
    assert list(fired(alert.expr, three)) == [(("rule", "chat"), ("target", "c"))]


def test_a_canary_with_too_little_traffic_does_not_page() -> None:
    alert = _alert("IgwCanaryVersionErrors")
    # half of its requests fail, but it took under CANARY_MIN_RPS (3 errors in 10 minutes)
    assert CANARY_MIN_RPS == 0.1
    assert fired(alert.expr, _canary({"200": 0.005, "500": 0.005})) == {}
    # just over the floor: pages
    assert list(fired(alert.expr, _canary({"200": 0.06, "500": 0.06}))) == [CHAT]


def test_every_version_as_bad_does_not_page() -> None:
    """A model failing everywhere is not the canary's doing (IgwHigh5xxRatio says so): a share over
    5 % but not twice the others', or twice the others' but under 5 %, stays quiet."""
    alert = _alert("IgwCanaryVersionErrors")
    bad_stable = {"200": 1.8, "500": 0.2}  # 10 %
    assert fired(alert.expr, _canary({"200": 0.45, "500": 0.05}, v1=bad_stable)) == {}
    assert fired(alert.expr, _canary({"200": 0.42, "500": 0.08}, v1=bad_stable)) == {}  # 16 % < 2 x 10 %
    assert fired(alert.expr, _canary({"200": 0.49, "500": 0.02})) == {}  # 4 %: over 2 x 0.5 %, under 5 %


def test_429s_and_a_target_alone_do_not_page() -> None:
    """5xx only: a canary pool sized for its share sheds 429s under load (IgwPoolSaturated). A rule
    whose other targets took nothing in the window has nothing to compare with (NaN)."""
    alert = _alert("IgwCanaryVersionErrors")
    assert fired(alert.expr, _canary({"200": 0.3, "429": 0.2})) == {}
    alone = _split("chat", {"m-v1": {}, "m-v2": {"200": 0.5, "500": 0.5}})
    assert fired(alert.expr, alone) == {}


def test_a_target_handing_its_draw_away_warns() -> None:
    alert = _alert("IgwCanaryTargetFallingBack")
    assert (alert.for_, alert.severity) == ("5m", "warning")
    series: Given = [
        ({"__name__": FALLBACKS, "rule": "chat", "from": "m-v2", "to": "m-v1", "instance": "gw-0:9090"}, 0.1),
        ({"__name__": FALLBACKS, "rule": "chat", "from": "m-v2", "to": "m-v1", "instance": "gw-1:9090"}, 0.1),
        ({"__name__": FALLBACKS, "rule": "other", "from": "o-b", "to": "o-a", "instance": "gw-0:9090"}, 0.0),
    ]
    assert fired(alert.expr, series) == {(("from", "m-v2"), ("rule", "chat")): 0.2}
    assert fired(alert.expr, [(labels, 0.0) for labels, _ in series]) == {}
    assert "{{ $labels.from }}" in alert.summary
    assert "{{ $labels.rule }}" in alert.summary


def _counters(page: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of counter ``name`` on a ``/metrics`` page, by label set."""
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == name
    }


async def test_a_failing_version_pages_over_a_live_gateway_page(gateway: Any) -> None:
    """A 50/50 rule over two simulated pods, the canary's failing 30 % of its requests with a 500:
    the rates between two scrapes of the gateway's ``/metrics`` (labelled as Prometheus's scrape
    labels them) make ``IgwCanaryVersionErrors`` fire for the canary only, its value the 5xx share
    the clients saw from it. The synthetic tests above give the series as the alert expects them;
    this one takes the names, labels and codes the gateway actually exports."""
    alert = _alert("IgwCanaryVersionErrors")
    pods = [
        {"name": "stable", "preset": "llama-3.1-8b/h100", "served_model_name": "llama-v1"},
        {
            "name": "canary",
            "preset": "llama-3.1-8b/h100",
            "served_model_name": "llama-v2",
            "faults": [{"kind": "error_rate", "rate": 0.3, "status": 500}],
        },
    ]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 5, "pods": pods})
    doc = config_doc([scheduler("old", "llama-v1"), scheduler("new", "llama-v2")])
    targets = [{"model": "llama-v1", "weight": 50}, {"model": "llama-v2", "weight": 50}]
    rules = [{"name": "chat", "model": "llama", "targets": targets}]
    doc["spec"]["extensions"]["modelRewrites"] = {"rules": rules}
    async with run_fleet(spec, admin=False) as fleet:
        stable, canary = (p.key for p in fleet.pods)
        async with gateway(doc, {"old": [stable], "new": [canary]}) as gw:

            async def scrape() -> tuple[float, dict[frozenset[tuple[str, str]], float]]:
                page = await (await gw.http.get(gw.url + "/metrics")).text()
                return time.monotonic(), _counters(page, REQUESTS)

            async def one() -> int:
                body = {"model": "llama", "prompt": "hi", "max_tokens": 2}
                resp = await gw.post("/v1/completions", body)
                await resp.read()
                return int(resp.status)

            before_at, before = await scrape()
            seen: Counter[int] = Counter()
            for _ in range(10):
                seen.update(await asyncio.gather(*(one() for _ in range(20))))
            after_at, after = await scrape()
    # the canary's failures reach the clients as 5xx (and bursts of 20 on one simulated pod may be
    # shed 429, which the alert does not count)
    assert seen[500] > 0
    assert seen[200] > 0
    assert set(seen) <= {200, 429, 500}, seen
    elapsed = after_at - before_at
    scraped = {"instance": "gw-0:9090", "job": "igw"}  # the labels Prometheus's scrape adds
    series: Given = [
        ({"__name__": REQUESTS, **dict(labels), **scraped}, (value - before.get(labels, 0.0)) / elapsed)
        for labels, value in after.items()
    ]
    failed: dict[str, float] = dict.fromkeys(("llama-v1", "llama-v2"), 0.0)
    total: dict[str, float] = dict.fromkeys(("llama-v1", "llama-v2"), 0.0)
    for labels, value in after.items():
        row = dict(labels)
        assert row["rule"] == "chat"
        total[row["target"]] += value
        failed[row["target"]] += value if row["code"].startswith("5") else 0.0
    assert failed["llama-v1"] == 0
    assert total["llama-v1"] > 0
    assert failed["llama-v2"] > 0
    got = fired(alert.expr, series)
    assert list(got) == [(("rule", "chat"), ("target", "llama-v2"))]
    assert abs(got[("rule", "chat"), ("target", "llama-v2")] - failed["llama-v2"] / total["llama-v2"]) < 1e-9
