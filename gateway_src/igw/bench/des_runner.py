"""DES mode: every policy on the same simulated fleet and the same requests, for several seeds.

Per seed, every policy replays the *identical* request list (common random numbers), so differences
between policies are routing, not workload luck; seeds vary the workload and the engines' jitter.
The gateway policies run the gateway's real scheduler code against metric snapshots scraped every
``scrape_interval_s`` (as the live gateway does); only the oracle reads exact state.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from igw.bench.capacity import CAPACITY_SEED, FleetCapacity, fleet_capacity
from igw.bench.policies.registry import POLICIES, PolicyContext, build_policy
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.scenarios import SCENARIOS, LoraShape, Scenario
from igw.bench.stats import RequestSample, summarize
from igw.bench.trace_fleet import check_servable, check_sizes, trace_capacity
from igw.bench.workload import fleet_pods, mean_fraction, model_name, planned_requests, scenario_requests
from igw.sim import workloads
from igw.sim.des import SimulationResult, simulate
from igw.sim.request import SimRequest
from igw.sim.spec import FleetSpec, PodSpec

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class DesOptions:
    policies: Sequence[str]
    seeds: Sequence[int]
    scrape_interval_s: float = 0.05
    duration_scale: float = 1.0
    """Multiply the scenario's duration (``--quick`` uses a fraction for smoke runs)."""
    weights: dict[str, float] | None = None
    saturation_off: bool = True
    decisions_out: Path | None = None
    """Append every request's routing decision (JSON lines: scenario, policy, seed, request id, pod,
    status, attempts, arrival, prompt tokens, TTFT) to this file, so a change meant to keep routing
    identical can be checked by diffing two runs."""


def samples_of(result: SimulationResult) -> list[RequestSample]:
    return [
        RequestSample(
            endpoint=r.pod or "-",
            ok=r.ok,
            arrival_s=r.arrival,
            ttft_s=r.ttft,
            e2e_s=r.e2e,
            itl_s=r.itl,
            prompt_tokens=r.prompt_tokens,
            output_tokens=r.output_tokens,
            cached_tokens=r.cached_tokens,
        )
        for r in result.records
    ]


def queue_series(result: SimulationResult, *, names: dict[str, str]) -> dict[str, list[tuple[float, int]]]:
    """Waiting + running per pod, keyed by pod name."""
    return {
        names.get(key, key): [(t, w + r) for t, w, r in zip(s.times, s.waiting, s.running, strict=True)]
        for key, s in result.series.items()
    }


def write_decisions(
    path: Path, result: SimulationResult, *, scenario: str, policy: str, names: dict[str, str]
) -> None:
    """Append one JSON line per request: which pod the policy sent it to and how it ended (with its
    arrival, prompt length and TTFT, so the slowest requests can be traced to their pods). The file's
    folder is created if missing (a fresh checkout has no ``bench-results/`` yet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for r in result.records:
            row = {
                "scenario": scenario,
                "policy": policy,
                "seed": result.seed,
                "request_id": r.request_id,
                "pod": names.get(r.pod, r.pod) if r.pod is not None else None,
                "status": r.status,
                "attempts": r.attempts,
                "retried": r.retried,
                "arrival_s": r.arrival,
                "prompt_tokens": r.prompt_tokens,
                "ttft_s": r.ttft,
            }
            out.write(json.dumps(row, sort_keys=True) + "\n")


def run_policy_once(
    scenario: Scenario,
    *,
    policy_name: str,
    requests: Sequence[SimRequest],
    seed: int,
    options: DesOptions,
) -> SimulationResult:
    ctx = PolicyContext(
        rng=random.Random(seed * 7919 + 17),
        lora=isinstance(scenario.workload, LoraShape),
        weights=options.weights,
        saturation_off=options.saturation_off,
        slo=(scenario.ttft_slo_s, scenario.tpot_slo_s),
    )
    policy = build_policy(policy_name, ctx)
    return simulate(
        pods=fleet_pods(scenario),
        requests=requests,
        policy=policy,
        seed=seed,
        scrape_interval_s=options.scrape_interval_s,
        base_model=model_name(scenario),
    )


def check_duration_scale(
    scenarios: Sequence[Scenario], *, duration_scale: float, progress: Progress | None = None
) -> None:
    """Raise :class:`~igw.bench.workload.TooManyRequests` (a ``ValueError``) when one seed of any of
    ``scenarios`` at ``duration_scale`` would hold more requests than a run holds, before any of them
    runs. The count rests on each fleet's measured capacity, which :func:`run_des` then reuses (it is
    memoised); checked only inside ``run_des``, ``igw bench all --duration-scale 60`` ran scenarios for
    minutes before the largest one was refused (before session s49)."""
    for scenario in scenarios:
        cap = fleet_capacity(scenario, on_progress=progress)
        planned_requests(scenario, capacity_rps=cap.requests_per_s,
                         duration_s=scenario.duration_s * duration_scale)  # fmt: skip


def run_des(
    scenario: Scenario,
    *,
    options: DesOptions,
    capacity: FleetCapacity | None = None,
    progress: Progress | None = None,
    command: str = "",
) -> ScenarioRun:
    say = progress or (lambda _msg: None)
    cap = capacity or fleet_capacity(scenario, on_progress=say)
    if not cap.requests_per_s > 0:
        raise ValueError(f"{scenario.name}: measured capacity is {cap.describe()}; no load level can be set")
    duration = scenario.duration_s * options.duration_scale
    pods = fleet_pods(scenario)
    params = {
        **scenario.describe(),
        "duration_s": duration,
        "seeds": list(options.seeds),
        "capacity": cap.describe(),
        "capacity_sweep": "; ".join(cap.sweep_lines()) or "not run",
        "offered_rate_rps": round(mean_fraction(scenario) * cap.requests_per_s, 3),
        "scrape_interval_s": options.scrape_interval_s,
        "gateway_admission": "off (no 429s; every policy serves every request)"
        if options.saturation_off
        else "on (429s count as failures)",
        "gateway_weights_override": options.weights,
        "command": command,
    }
    run = ScenarioRun(
        scenario=scenario.name,
        mode="des",
        parameters=params,
        oracle="oracle" if "oracle" in options.policies else None,
    )
    for name in options.policies:
        run.policies[name] = PolicyRun(policy=name, description=POLICIES[name].description)
    for seed in options.seeds:
        requests = scenario_requests(
            scenario, capacity_rps=cap.requests_per_s, seed=seed, duration_s=duration
        )
        for name in options.policies:
            say(f"seed {seed}: {name} ({len(requests)} requests)")
            result = run_policy_once(
                scenario, policy_name=name, requests=requests, seed=seed, options=options
            )
            record_result(run, name, result, pods=pods, slo=(scenario.ttft_slo_s, scenario.tpot_slo_s),
                          options=options)  # fmt: skip
    return run


def record_result(
    run: ScenarioRun,
    policy: str,
    result: SimulationResult,
    *,
    pods: Sequence[PodSpec],
    slo: tuple[float, float],
    options: DesOptions,
) -> None:
    """Add one simulated run (one policy, one seed) to ``run``: its summary, and for the first seed its
    samples and queue series; append its decisions to ``options.decisions_out`` when set."""
    names = {key: spec.name for key, spec in result.pods.items()}
    if options.decisions_out is not None:
        write_decisions(options.decisions_out, result, scenario=run.scenario, policy=policy, names=names)
    samples = [replace(s, endpoint=names.get(s.endpoint, s.endpoint)) for s in samples_of(result)]
    pol = run.policies[policy]
    pol.seeds.append(result.seed)
    ttft_slo_s, tpot_slo_s = slo
    pol.summaries.append(
        summarize(
            samples,
            endpoints=[p.name for p in pods],
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
            duration_s=max(result.end_time, 1e-9),
        )
    )
    if len(pol.seeds) == 1:
        pol.samples = samples
        pol.queue_series = queue_series(result, names=names)


def run_trace(
    path: Path,
    *,
    fleet_yaml: str | None,
    speedup: float,
    options: DesOptions,
    progress: Progress | None = None,
    command: str = "",
) -> ScenarioRun:
    """Replay a trace file on a fleet (a FLEET.yaml, or mixed-fleet-8b's fleet) under every policy.

    Before any policy runs, the trace is checked against the fleet (every adapter and model must be
    served by some pod, :func:`check_servable`) and the fleet's capacity on the trace's own requests is
    measured, so the report states the offered load as a share of it."""

    say = progress or (lambda _msg: None)
    pods = (
        list(FleetSpec.from_yaml(fleet_yaml).pods) if fleet_yaml else fleet_pods(SCENARIOS["mixed-fleet-8b"])
    )
    model = pods[0].model_name
    requests = list(workloads.replay(path, model=model, rng=random.Random(TRACE_TEXT_SEED), speedup=speedup))
    if not requests:
        raise ValueError(f"{path}: the trace holds no requests")
    check_servable(pods, requests, source=str(path))
    check_sizes(pods, requests, source=str(path))
    say("capacity: flood probe per pod type on the trace's requests")
    cap = trace_capacity(pods, requests, seed=CAPACITY_SEED)
    span = requests[-1].arrival - requests[0].arrival
    offered = len(requests) / span if span > 0 else float("inf")
    run = ScenarioRun(
        scenario=f"trace-{path.stem}",
        mode="des",
        parameters={
            "trace": str(path),
            "requests": len(requests),
            "speedup": speedup,
            "fleet": ", ".join(f"{p.name} ({p.preset})" for p in pods),
            "seeds": list(options.seeds),
            "capacity": cap.describe(),
            "offered_rate_rps": round(offered, 3),
            "load": f"{100 * offered / cap.requests_per_s:.0f}% of measured capacity (mean over the trace)",
            "ttft_slo_s": TRACE_SLO_S,
            "tpot_slo_s": TRACE_TPOT_SLO_S,
            "command": command,
        },
        oracle="oracle" if "oracle" in options.policies else None,
    )
    lora = any(r.adapter for r in requests)
    for name in options.policies:
        run.policies[name] = PolicyRun(policy=name, description=POLICIES[name].description)
        for seed in options.seeds:
            say(f"trace, seed {seed}: {name} ({len(requests)} requests)")
            ctx = PolicyContext(rng=random.Random(seed * 7919 + 17), weights=options.weights,
                                saturation_off=options.saturation_off, lora=lora,
                                slo=(TRACE_SLO_S, TRACE_TPOT_SLO_S))  # fmt: skip
            result = simulate(pods=pods, requests=requests, policy=build_policy(name, ctx), seed=seed,
                              scrape_interval_s=options.scrape_interval_s, base_model=model)  # fmt: skip
            record_result(run, name, result, pods=pods, slo=(TRACE_SLO_S, TRACE_TPOT_SLO_S), options=options)
    return run


TRACE_TEXT_SEED = 1
"""Seed of the filler text of trace rows without a ``prompt`` (and of shared prefixes' text): the
trace is the workload, the same for every seed of a run (seeds vary engine jitter and policies'
random choices), so it must not follow the run's first seed."""
TRACE_SLO_S = 1.0
"""TTFT SLO used for goodput when replaying a trace (scenarios state their own)."""
TRACE_TPOT_SLO_S = 0.1
"""Time-per-output-token SLO used for goodput when replaying a trace."""
