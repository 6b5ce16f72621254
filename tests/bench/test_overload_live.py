"""``igw bench overload-priority --mode live`` at a small scale: real routers in front of one simulated
pod offered more than its measured rate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from igw.bench.overload_live import (
    ARM_BANDS,
    ARM_SETTINGS,
    ENGINE_ARM,
    MAX_KEPT_SHARE,
    MAX_NUM_SEQS,
    LiveArm,
    gateway_config,
    live_requests,
    run_live_overload,
)
from igw.bench.overload_report import (
    completed_rps,
    live_items,
    live_markdown,
    rows_for,
    run_live_overload_command,
)
from igw.bench.stats import RequestSample
from igw.config.validate import validate_document
from igw.errors import IgwToolingError
from igw.scheduling.engine_priority import EnginePriority
from igw.scheduling.flow_control import FlowControlSettings


def test_requests_carry_band_and_tenant_headers() -> None:
    requests = live_requests(40.0, 10.0, seed=1)
    assert requests == sorted(requests, key=lambda r: r.at_s)
    objectives = {dict(r.headers)["x-gateway-inference-objective"] for r in requests}
    assert objectives == {"Critical", "Standard", "Sheddable"}
    critical = sum(dict(r.headers)["x-gateway-inference-objective"] == "Critical" for r in requests)
    assert 0.1 < critical / len(requests) < 0.3  # 20 % of the mix


async def test_small_live_run_accounts_for_every_request(tmp_path: Path) -> None:
    said: list[str] = []
    rate, arms = await run_live_overload(
        tmp_path,
        duration_s=5.0,
        seed=2,
        routers=("flow-control", "round-robin"),
        unloaded=False,
        progress=said.append,
    )
    assert rate > 0
    # `igw bench overload-priority --mode live` ran ten minutes and more without a line before its
    # table (session s43): each step is now told as it starts, stamped on stderr by the CLI.
    assert said == [
        "starting the simulated pod, probing its rate",
        f"pod rate {rate:.1f} req/s",
        "arm 1: flow-control at 150% load, 5 s",
        "arm 2: round-robin at 150% load, 5 s",
    ]
    assert [a.name for a in arms] == ["flow-control", "round-robin"]
    for arm in arms:
        assert len(arm.samples) == len(arm.requests) > 0
    flow = {r.band: r for r in rows_for("flow-control", live_items(arms[0]))}
    assert flow["Critical"].served == flow["Critical"].offered  # never shed: nothing ranks above it
    proxy = rows_for("round-robin", live_items(arms[1]))
    assert all(r.served == r.offered for r in proxy)  # no admission: the pod queues everything
    calm = arms[0].__class__(
        name="flow-control", load=0.5, requests=arms[0].requests, samples=arms[0].samples
    )
    text = live_markdown(rate, [*arms, calm], "igw bench", 5.0, (1.5, 2.25))
    assert "| flow-control | Critical |" in text
    assert "load average at the start / end: 1.50 / 2.25" in text
    assert "| round-robin | " in text.split("completed req/s")[1]


def _arm_settings(arm: str | None) -> FlowControlSettings:
    config = gateway_config(
        flow_control=True, bands=ARM_BANDS.get(arm or ""), settings=ARM_SETTINGS.get(arm or "")
    )
    return FlowControlSettings.from_extension(config["spec"]["extensions"]["flowControl"])


def test_the_max_kept_arm_differs_from_the_defaults_only_by_the_kept_share() -> None:
    defaults, most = _arm_settings(None), _arm_settings("flow-control-max-kept")
    assert most == dataclasses.replace(defaults, max_kept_share=MAX_KEPT_SHARE)
    assert most.most_kept(MAX_NUM_SEQS) == MAX_NUM_SEQS - 1


def test_the_no_places_arm_differs_from_the_defaults_only_by_the_per_endpoint_places() -> None:
    defaults, without = _arm_settings(None), _arm_settings("flow-control-no-places")
    assert defaults.bands.keys() == without.bands.keys()
    for priority, limits in defaults.bands.items():
        assert without.bands[priority] == dataclasses.replace(
            limits, max_endpoint_queue=None, keep_slots=0, slot_wait_s=None
        )
    assert any(limits.keep_slots for limits in defaults.bands.values())


def test_the_fixed_slot_arm_differs_from_the_defaults_only_by_the_slot_wait() -> None:
    defaults, fixed = _arm_settings(None), _arm_settings("flow-control-fixed-slot")
    assert defaults.bands.keys() == fixed.bands.keys()
    for priority, limits in defaults.bands.items():
        assert fixed.bands[priority] == dataclasses.replace(limits, slot_wait_s=None)
    assert any(limits.slot_wait_s for limits in defaults.bands.values())


def test_every_flow_control_arm_assumes_the_pods_configured_batch() -> None:
    # Without it no slot is kept before the gate has seen the pod full (the first seconds).
    for arm in (None, *ARM_BANDS, *ARM_SETTINGS):
        assert _arm_settings(arm).assumed_batch == MAX_NUM_SEQS


def test_completed_rate_credits_only_answers_within_the_offered_period() -> None:
    def sample(arrival: float, e2e: float | None, ok: bool = True) -> RequestSample:
        return RequestSample(endpoint="p", ok=ok, arrival_s=arrival, ttft_s=0.1, e2e_s=e2e, itl_s=None)

    samples = [
        sample(1.0, 2.0),
        sample(8.0, 1.9),
        sample(9.0, 2.0),
        sample(1.0, 0.5, ok=False),
        sample(2.0, None),
    ]
    arm = LiveArm(name="flow-control", load=1.5, requests=[], samples=samples)
    assert completed_rps(arm, 10.0) == 0.2  # two finished by t=10 s


def test_the_engine_priority_arms_configuration_is_valid_and_names_the_sglang_pool() -> None:
    config = gateway_config(flow_control=True, engine_priority=True)
    assert validate_document(config) == []
    assert config["spec"]["schedulers"][0]["engineType"] == "sglang"
    settings = FlowControlSettings.from_extension(
        config["spec"]["extensions"]["flowControl"], scheduler_engines={"main": "sglang"}
    )
    assert settings.engine_priority["main"] == EnginePriority.sglang()
    assert "enginePriority" not in gateway_config(flow_control=True)["spec"]["extensions"]["flowControl"]


async def test_a_small_live_run_of_the_engine_priority_arm_preempts_and_has_its_own_reference(
    tmp_path: Path,
) -> None:
    rate, arms = await run_live_overload(tmp_path, duration_s=5.0, seed=3, routers=(ENGINE_ARM,))
    assert [(a.name, a.load) for a in arms] == [(ENGINE_ARM, 1.5), ("flow-control", 0.5), (ENGINE_ARM, 0.5)]
    hot = arms[0]
    assert hot.preemptions > 0  # the SGLang pod preempted lower bands for Critical requests
    critical = {r.band: r for r in rows_for(ENGINE_ARM, live_items(hot))}["Critical"]
    assert critical.served == critical.offered
    text = live_markdown(rate, arms, "igw bench", 5.0)
    row = next(line for line in text.splitlines() if line.startswith(f"| {ENGINE_ARM} | ") and "x |" in line)
    assert f"({ENGINE_ARM})" in row  # measured against the same arm at half load


def test_an_unknown_live_arm_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(
        IgwToolingError, match=r"--policies: unknown overload-priority arm\(s\) nope; known: flow-control,"
    ):
        run_live_overload_command(out=tmp_path, quick=True, seed=1, command="igw bench", routers=["nope"])
