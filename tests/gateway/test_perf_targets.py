"""``igw perf gateway``'s data-path targets: ratios against the better peer or a fixed bound, and
verdicts that flip exactly at the target."""

from __future__ import annotations

from igw.perf.gateway_targets import LoadFigures, added_text, target_rows

SGL = "sglang-router (round_robin)"
VLLM = "vllm-router (round_robin)"


def figures(*, cpu: float, c1: float, ttft: float, c32: float) -> LoadFigures:
    return LoadFigures(
        added_p50_ms={("gateway", 1): c1, ("gateway", 32): c32, (SGL, 32): 3.0, (VLLM, 32): 2.0},
        cpu_us={("gateway", 32): cpu, (SGL, 32): 90.0, (VLLM, 32): 80.0, ("gateway", 1): 999.0},
        added_ttft_p50_ms=ttft,
    )


def test_targets_met_at_their_limits_and_judged_against_the_better_peer() -> None:
    rows = target_rows(figures(cpu=160.0, c1=0.5, ttft=0.5, c32=4.0))
    assert [r["verdict"] for r in rows] == ["met", "met", "met", "met"]
    assert rows[0]["value"] == f"160 µs = 2.00x {VLLM}'s 80 µs"
    assert rows[1]["value"] == "+0.500 ms = 1.00x the bound"
    assert rows[3]["value"] == f"+4.000 ms = 2.00x {VLLM}'s +2.000 ms"


def test_targets_missed_just_past_their_limits() -> None:
    rows = target_rows(figures(cpu=161.0, c1=0.501, ttft=0.75, c32=4.01))
    assert [r["verdict"] for r in rows] == ["MISSED"] * 4
    assert rows[2]["value"] == "+0.750 ms = 1.50x the bound"


def test_peer_targets_without_peers_are_not_judged_and_say_why() -> None:
    f = LoadFigures(
        added_p50_ms={("gateway", 1): 0.4, ("gateway", 32): 9.0},
        cpu_us={("gateway", 32): 300.0},
        added_ttft_p50_ms=None,
        unmeasured_peers={SGL: "exited with 1"},
    )
    rows = target_rows(f)
    assert [r["verdict"] for r in rows] == ["n/a", "met", "n/a", "n/a"]
    assert "exited with 1" in rows[0]["baseline"]
    assert rows[2]["value"] == "not measured"


def test_a_better_peer_at_or_below_zero_is_noise_and_not_judged() -> None:
    f = figures(cpu=100.0, c1=0.1, ttft=0.1, c32=1.0)
    f.added_p50_ms[(VLLM, 32)] = -0.5  # measurement noise: the peer looked faster than direct
    rows = target_rows(f)
    assert rows[3]["verdict"] == "n/a"
    assert "noise" in rows[3]["baseline"]
    assert rows[3]["value"] == f"+1.000 ms; {VLLM}'s below the direct baseline by 0.500 ms"


def test_the_ttft_target_stays_judged_against_its_bound_with_the_better_peer_beside_it() -> None:
    f = figures(cpu=100.0, c1=0.1, ttft=0.8, c32=1.0)
    f.peer_ttft_p50_ms = {SGL: 44.2, VLLM: 0.7}
    ttft = target_rows(f)[2]
    assert ttft["verdict"] == "MISSED"  # the peer's figure never moves the bound
    assert ttft["value"] == "+0.800 ms = 1.60x the bound"
    assert ttft["baseline"] == f"bound 0.5 ms; better peer: {VLLM} +0.700 ms (report)"
    assert target_rows(figures(cpu=100.0, c1=0.1, ttft=0.8, c32=1.0))[2]["baseline"] == "bound 0.5 ms"


def test_a_path_measured_faster_than_the_direct_one_is_marked_below_the_baseline_not_negative() -> None:
    """A peer's p99 once printed as ``+-0.052 ms``: a router cannot make the backend answer sooner, so
    that is the run's noise; the row now shows both measured values instead of a negative cost."""
    assert added_text(1.3, 1.0) == "+0.300 ms"
    assert added_text(1.0, 1.0) == "+0.000 ms"
    assert added_text(0.948, 1.0) == "below the direct baseline (0.948 vs 1.000 ms)"


def test_targets_measured_below_the_direct_baseline_are_met_and_never_printed_negative() -> None:
    f = figures(cpu=100.0, c1=-0.02, ttft=-0.01, c32=-0.3)
    f.peer_ttft_p50_ms = {VLLM: -0.04}
    rows = target_rows(f)
    assert [r["verdict"] for r in rows] == ["met"] * 4
    assert rows[1]["value"] == "below the direct baseline by 0.020 ms (noise: no added latency measured)"
    assert (
        rows[2]["baseline"]
        == f"bound 0.5 ms; better peer: {VLLM} below the direct baseline by 0.040 ms (report)"
    )
    assert rows[3]["value"] == f"below the direct baseline by 0.300 ms; {VLLM}'s +2.000 ms"
    assert not any("-0." in str(r["value"]) + str(r["baseline"]) for r in rows)
