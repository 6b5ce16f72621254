"""``igw perf gateway``'s load phases: the direct path and every target alternate round by round (the
order rotated each round), each round's added p50 is taken against that round's direct phase, and
the concurrency-32 ratio to the better peer is printed per round with its median and spread."""

from __future__ import annotations

import asyncio
from typing import Any

from igw.perf.gateway import (
    DIRECT,
    STRETCH_TARGET,
    _cpu_rows,
    _drive_rounds,
    _Target,
    missed_summary,
    phase_order,
)
from igw.perf.gateway_load import LoadResult
from igw.perf.gateway_targets import LoadFigures, round_ratios, target_rows

SGL = "sglang-router (round_robin)"
VLLM = "vllm-router (round_robin)"
TARGETS = [_Target("gateway", "gw:1", 11), _Target(VLLM, "vllm:2", 22), _Target(SGL, "sgl:3", 33)]


def test_each_round_rotates_the_order_so_every_phase_leads_once() -> None:
    labels = [DIRECT, "gateway", VLLM, SGL]
    orders = [phase_order(labels, r) for r in range(5)]
    assert orders[0] == labels
    assert orders[1] == ["gateway", VLLM, SGL, DIRECT]
    assert orders[3] == [SGL, DIRECT, "gateway", VLLM]
    assert orders[4] == orders[0]
    assert sorted(order[0] for order in orders[:4]) == sorted(labels)
    assert all(sorted(order) == sorted(labels) for order in orders)


class _FakeMachine:
    """A closed loop whose latency is a base per address plus a drift that grows with every phase
    run (the shared machine getting busier), and per-process CPU clocks that advance only while their
    own process is driven - plus a background tick every process gets during every phase."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cpu = {11: 0.0, 22: 0.0, 33: 0.0}
        self.pids = {"gw:1": 11, "vllm:2": 22, "sgl:3": 33}
        self.base_ms = {"backend:9": 5.0, "gw:1": 9.0, "vllm:2": 7.0, "sgl:3": 8.0}

    async def drive(self, base: str, **kw: Any) -> LoadResult:
        self.calls.append(base)
        drift = len(self.calls) * 0.01
        for pid in self.cpu:  # background: other processes' idle work during any phase
            self.cpu[pid] += 0.5
        if base in self.pids:
            self.cpu[self.pids[base]] += 0.002 * kw["requests"]
        value = self.base_ms[base] + drift
        return LoadResult(latencies_ms=[value] * kw["requests"], wall_s=1.0)

    def cpu_seconds(self, pid: int) -> float:
        return self.cpu[pid]


def test_the_targets_alternate_and_each_round_is_judged_against_its_own_direct_phase() -> None:
    machine = _FakeMachine()
    phases = asyncio.run(
        _drive_rounds(
            TARGETS,
            backend="backend:9",
            concurrency=32,
            per_round=10,
            rounds=3,
            headers=None,
            drive=machine.drive,
            cpu_seconds=machine.cpu_seconds,
        )
    )
    assert machine.calls == [
        "backend:9", "gw:1", "vllm:2", "sgl:3",
        "gw:1", "vllm:2", "sgl:3", "backend:9",
        "vllm:2", "sgl:3", "backend:9", "gw:1",
    ]  # fmt: skip
    # round 1 (calls 5-8): gateway at call 5, direct at call 8: 9.05 - 5.08
    assert [round(r["gateway"], 6) for r in phases.added_p50_ms] == [4.01, 3.97, 4.01]
    assert [round(r[VLLM], 6) for r in phases.added_p50_ms] == [2.02, 1.98, 1.98]
    assert len(phases.latencies_ms[DIRECT]) == 30
    assert len(phases.latencies_ms["gateway"]) == 30
    # CPU: each target's own phases only (2 ms a request + one background tick per phase of its own)
    assert {k: round(v, 6) for k, v in phases.cpu_us.items()} == {
        "gateway": 2000.0 + 0.5 / 10 * 1e6,
        VLLM: 2000.0 + 0.5 / 10 * 1e6,
        SGL: 2000.0 + 0.5 / 10 * 1e6,
    }


def _rounds(*gateway: float, peer: float = 2.0) -> LoadFigures:
    return LoadFigures(
        added_p50_ms={("gateway", 32): gateway[0], (VLLM, 32): peer},
        cpu_us={("gateway", 32): 100.0, (VLLM, 32): 80.0},
        added_p50_rounds={32: [{"gateway": g, VLLM: peer, SGL: peer + 1.0} for g in gateway]},
    )


def test_the_per_round_ratio_row_reports_median_and_spread_and_counts_rounds_over_the_bound() -> None:
    rows = target_rows(_rounds(4.2, 5.0, 4.6))
    per_round = rows[-1]
    assert per_round["metric"] == "added latency p50 / the better peer's, concurrency 32, per round"
    assert per_round["value"] == "2.10, 2.50, 2.30; median 2.30x (spread 2.10-2.50x)"
    assert per_round["baseline"] == "0 of 3 rounds within 2x"
    assert rows[3]["verdict"] == "MISSED"  # pooled 4.2 ms over 2 x 2.0 ms
    under = target_rows(_rounds(3.0, 4.0, 4.4))
    assert under[-1]["baseline"] == "2 of 3 rounds within 2x"
    assert under[3]["verdict"] == "met"


def test_a_round_whose_better_peer_is_noise_is_shown_and_left_out_of_the_median() -> None:
    assert round_ratios([{"gateway": 3.0, VLLM: 1.5}, {"gateway": 3.0, VLLM: -0.1}, {VLLM: 1.0}]) == [
        2.0,
        None,
        None,
    ]
    f = _rounds(3.0, 5.0)
    f.added_p50_rounds[32][1][VLLM] = 0.0
    assert target_rows(f)[-1]["value"] == "1.50, noise; median 1.50x (spread 1.50-1.50x)"
    assert len(target_rows(LoadFigures())) == 4  # no rounds measured: no per-round row


def test_the_cpu_rows_target_is_the_stretch_parity_and_can_miss() -> None:
    rows = _cpu_rows({"gateway": 201.0, SGL: 200.0, VLLM: 100.0}, concurrency=32, failed={})
    assert rows[0]["target"] == STRETCH_TARGET == "stretch, parity: <= sglang-router's (c=32)"
    assert rows[0]["verdict"] == "MISSED"
    assert _cpu_rows({"gateway": 200.0, SGL: 200.0}, concurrency=32, failed={})[0]["verdict"] == "met"


def test_the_closing_summary_keeps_a_missed_stretch_apart_from_the_missed_bounds() -> None:
    rows = [
        *_cpu_rows({"gateway": 201.0, "sglang-router": 200.0}, concurrency=32, failed={}),
        {"metric": "target: added streaming TTFT p50", "target": "p50 <= 0.5 ms", "verdict": "MISSED"},
        {"metric": "target: CPU per request, concurrency 32", "target": "<= 2x", "verdict": "met"},
    ]
    assert missed_summary(rows) == [
        "\nmissed targets: target: added streaming TTFT p50",
        "missed stretch targets (not bounds): gateway CPU per request, concurrency 32",
    ]
    assert missed_summary(rows[:1]) == [
        "missed stretch targets (not bounds): gateway CPU per request, concurrency 32"
    ]
    assert missed_summary(rows[1:2] + rows[3:]) == []  # the peer's report row and a met bound
