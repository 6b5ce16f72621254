"""The one-pod overload DES with the engine preempting by priority (``enginePriority``): every
request accounted for once, preemption only of lower bands, the batch never exceeded, and the
comparison against kept slots (deterministic virtual time, no wall clock)."""

from __future__ import annotations

import dataclasses

import pytest

from igw.bench.overload_engine import ENGINE_ARMS, engine_arm, engine_priority_markdown, engine_row
from igw.bench.overload_pod import LIVE_POD, PodScenario, pod_arrivals, simulate_pod
from igw.scheduling.engine_priority import EnginePriority
from igw.scheduling.flow_control import CRITICAL, FlowControlSettings

SCENARIO = dataclasses.replace(LIVE_POD, duration_s=20.0)


def test_with_engine_preemption_every_request_is_served_or_shed_once_and_finishes_its_decode() -> None:
    requests = pod_arrivals(SCENARIO, seed=1)
    outcome = simulate_pod(SCENARIO, requests, FlowControlSettings(), engine=EnginePriority.sglang())
    assert outcome.preemptions > 0
    assert not outcome.shed & outcome.ttft_s.keys()
    assert outcome.shed | outcome.ttft_s.keys() == {r.index for r in requests}
    assert outcome.decode_s.keys() == outcome.ttft_s.keys()  # a preempted request still finishes
    assert outcome.most_running == SCENARIO.batch  # preemption frees a slot, never adds one
    assert min(outcome.decode_s.values()) == pytest.approx(SCENARIO.decode_s)  # undisturbed ones
    assert max(outcome.decode_s.values()) > SCENARIO.decode_s  # a preempted one paused


def test_no_preemption_without_the_engine_setting_or_when_it_does_not_preempt() -> None:
    requests = pod_arrivals(SCENARIO, seed=1)
    for engine in (None, EnginePriority.sglang(preemption=False), EnginePriority.vllm()):
        assert simulate_pod(SCENARIO, requests, FlowControlSettings(), engine=engine).preemptions == 0


@pytest.mark.parametrize("scenario", [SCENARIO, PodScenario(duration_s=20.0)])
def test_engine_preemption_keeps_criticals_tail_and_lets_the_lower_bands_use_the_pod(
    scenario: PodScenario,
) -> None:
    rows = {arm: engine_row(arm, scenario, seed=1) for arm in ENGINE_ARMS}
    engine, default, kept = rows["engine-priority"], rows["slot-wait"], rows["max-kept"]
    assert engine.ratio is not None
    assert kept.ratio is not None
    assert engine.ratio <= kept.ratio + 0.01  # Critical's tail as with most slots kept
    assert engine.started_per_capacity > default.started_per_capacity > kept.started_per_capacity
    assert engine.served["Standard"] > default.served["Standard"] > kept.served["Standard"]
    assert engine.served["Standard"] >= 0.99
    assert engine.served["Critical"] == 1.0
    assert engine.preemptions > 0
    assert default.preemptions == kept.preemptions == 0
    assert set(engine.tenants) == {"team-a", "team-b", "team-c"}


def test_the_unloaded_reference_of_each_arm_is_that_arm_at_half_load() -> None:
    row = engine_row("engine-priority", SCENARIO, seed=2)
    assert row.calm_p99_s is not None
    assert row.critical_p99_s is not None
    settings, engine = engine_arm("engine-priority")
    assert engine == EnginePriority.sglang()
    assert settings == FlowControlSettings()
    with pytest.raises(ValueError, match="slot-wait, max-kept, engine-priority"):
        engine_arm("other")


def test_the_table_names_every_arm() -> None:
    text = engine_priority_markdown(dataclasses.replace(SCENARIO, duration_s=5.0), seed=1)
    for arm in ENGINE_ARMS:
        assert f"| {arm} |" in text
    assert CRITICAL == 1
