"""The canary alerts (since session s48), evaluated on synthetic rates of the per-target series as one
Prometheus holds them from two gateway replicas: each fires where it should page and stays quiet on
the near-misses (too little traffic, every target as bad, 429s, nothing to compare with)."""

from __future__ import annotations

from igw.addon.alert_rules import ALERTS, CANARY_MIN_RPS, Alert
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
