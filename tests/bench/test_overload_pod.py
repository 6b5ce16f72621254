"""The one-pod overload model: the gateway's real flow control in front of a pod with its own batch
and first-come queue, in virtual time."""

from __future__ import annotations

import dataclasses

import pytest

from igw.bench.overload_pod import (
    LIVE_POD,
    LIVE_STEP_S,
    POD_ARMS,
    STEER_ARMS,
    PodScenario,
    arm_settings,
    kept_slots_markdown,
    pod_arrivals,
    pod_markdown,
    pod_rows,
    simulate_pod,
    slot_wait_markdown,
    with_kept_slots,
    with_slot_wait,
)
from igw.scheduling.flow_control import CRITICAL, SHEDDABLE, STANDARD

SCENARIO = PodScenario(duration_s=30.0)


@pytest.mark.parametrize("arm", POD_ARMS)
def test_every_request_is_served_or_shed_exactly_once_and_the_batch_is_never_exceeded(arm: str) -> None:
    requests = pod_arrivals(SCENARIO, seed=1)
    outcome = simulate_pod(SCENARIO, requests, arm_settings(arm))
    assert not outcome.shed & outcome.ttft_s.keys()
    assert outcome.shed | outcome.ttft_s.keys() == {r.index for r in requests}
    assert outcome.most_running == SCENARIO.batch


def test_kept_slots_cut_the_critical_tail_at_a_cost_in_lower_band_throughput() -> None:
    rows, calm_p99 = pod_rows(SCENARIO, seed=1)
    by_arm = {r.arm: r for r in rows}
    p99 = [p for a in ("slot-wait", "fixed-slot", "no-places") if (p := by_arm[a].critical_p99_s) is not None]
    started = [by_arm[a].started_per_capacity for a in ("slot-wait", "fixed-slot", "no-places")]
    assert len(p99) == 3
    assert calm_p99 is not None
    assert p99 == sorted(p99)  # more kept slots: a shorter Critical tail
    assert started == sorted(started)  # and fewer requests started per second
    assert all(r.served["Critical"] == 1.0 for r in rows)
    assert by_arm["slot-wait"].served["Standard"] < by_arm["no-places"].served["Standard"]


def test_arms_differ_only_in_their_per_endpoint_places() -> None:
    assert arm_settings("slot-wait").bands[STANDARD].slot_wait_s is not None
    assert arm_settings("fixed-slot").bands[STANDARD].slot_wait_s is None
    assert arm_settings("fixed-slot").bands[STANDARD].keep_slots == 1
    no_places = arm_settings("no-places").bands[STANDARD]
    assert (no_places.keep_slots, no_places.max_endpoint_queue) == (0, None)
    with pytest.raises(ValueError, match="slot-wait, fixed-slot, no-places, no-steer"):
        arm_settings("other")


def test_markdown_has_one_row_per_arm() -> None:
    text = pod_markdown(PodScenario(duration_s=10.0), seed=2)
    assert all(f"| {arm} |" in text for arm in POD_ARMS)
    assert "Unloaded (50%) Critical P99 TTFT" in text


TWO_PODS = PodScenario(duration_s=30.0, pods=2)


@pytest.mark.parametrize("steer", [True, False])
def test_two_pods_serve_or_shed_every_request_once_within_each_batch(steer: bool) -> None:
    requests = pod_arrivals(TWO_PODS, seed=2)
    outcome = simulate_pod(TWO_PODS, requests, arm_settings("slot-wait"), steer=steer, seed=2)
    assert not outcome.shed & outcome.ttft_s.keys()
    assert outcome.shed | outcome.ttft_s.keys() == {r.index for r in requests}
    assert outcome.most_running == TWO_PODS.batch


def test_critical_sent_to_the_pod_with_the_shortest_predicted_wait_has_the_shorter_tail() -> None:
    # Seed 3: with half of each batch kept, on seeds 1, 2 and 4 both arms' tails are the unloaded one.
    rows, calm_p99 = pod_rows(TWO_PODS, seed=3, arms=STEER_ARMS)
    by_arm = {r.arm: r for r in rows}
    steered, ranked = by_arm["slot-wait"].critical_p99_s, by_arm["no-steer"].critical_p99_s
    assert steered is not None
    assert ranked is not None
    assert calm_p99 is not None
    assert steered < ranked  # the scheduler's pick, blind to free slots, lands on full pods
    assert steered <= 2 * calm_p99


def test_two_pod_markdown_names_the_pods_and_the_steering_arms() -> None:
    text = pod_markdown(dataclasses.replace(TWO_PODS, duration_s=10.0), seed=2, arms=STEER_ARMS)
    assert "## 2 pods, each with its own batch and queue (seed 2)" in text
    assert all(f"| {arm} |" in text for arm in STEER_ARMS)


def test_the_slot_wait_sweep_marks_the_default_and_a_longer_wait_keeps_fewer_slots() -> None:
    text = slot_wait_markdown(PodScenario(duration_s=20.0), seed=1, waits=(0.005, 0.015, 0.100))
    assert "| 15 ms (default) |" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and " ms" in line]
    started = [float(row[-1].rstrip(" |%")) for row in rows]
    assert len(started) == 3
    assert started[0] <= started[2]  # tolerating a longer wait keeps fewer slots: more of the pod used
    assert with_slot_wait(0.1).bands[STANDARD].slot_wait_s == 0.1


def test_the_live_pod_takes_one_to_two_engine_steps_to_a_first_token_and_thirty_two_in_all() -> None:
    assert LIVE_POD.prefill_s == (LIVE_STEP_S, 2 * LIVE_STEP_S)
    assert LIVE_POD.decode_s + LIVE_POD.prefill_s[0] == pytest.approx(32 * LIVE_STEP_S)
    assert 35.0 < LIVE_POD.capacity_rps < 40.0  # the live pod measures 37-38 completions/s


def test_kept_slots_settings_fix_the_lower_bands_places_and_leave_critical_alone() -> None:
    settings = with_kept_slots(5)
    for band in (STANDARD, SHEDDABLE):
        assert settings.bands[band].keep_slots == 5
        assert settings.bands[band].slot_wait_s is None
    assert settings.bands[CRITICAL] == with_kept_slots(0).bands[CRITICAL]


def test_more_kept_slots_trade_the_pods_use_for_a_shorter_critical_tail() -> None:
    scenario = dataclasses.replace(LIVE_POD, duration_s=30.0)
    requests = pod_arrivals(scenario, seed=1)
    rows: list[tuple[float, int]] = []
    for kept in (0, 2, 4, 6):
        outcome = simulate_pod(scenario, requests, with_kept_slots(kept))
        started_count = sum(1 for r in requests if r.index in outcome.ttft_s)
        critical = sorted(outcome.ttft_s[r.index] for r in requests if r.priority == CRITICAL)
        rows.append((critical[int(0.99 * (len(critical) - 1))], started_count))
    p99s, started = zip(*rows, strict=True)
    assert list(p99s) == sorted(p99s, reverse=True)
    assert p99s[0] > 2 * p99s[-1]
    assert list(started) == sorted(started, reverse=True)


def test_the_trade_off_table_has_a_row_per_kept_count_below_the_batch_and_the_default() -> None:
    text = kept_slots_markdown(dataclasses.replace(LIVE_POD, duration_s=10.0), seed=2, kept=(0, 3, 9))
    assert "| 0 |" in text
    assert "| 3 |" in text
    assert "| 9 |" not in text  # not below the batch of 8
    assert "| slotWait 15 ms (default) |" in text
    assert "first token 6.6-13.2 ms after a slot" in text
