"""Fleet capacity, measured before any scenario run so that load levels are relative, not tuned.

Capacity of one pod type = its *saturation throughput* on the scenario's own workload: one pod of
that type is flooded (every request queued at t=0, so the engine is never idle and its batch is as
large as ``max_num_seqs`` and the KV cache allow), and the steady completion rate is read between
the 20th and 80th percentile of finish times (skipping the ramp-up and the drain). Fleet capacity is
the sum over pods. No routing policy is involved, so no policy is favoured by the choice of rate.

This is a saturation probe, not a sweep of offered rates: a first try at a Poisson sweep around the
probed figure needed windows much longer than the scenarios' to show the knee reliably, so it was
left out rather than reported half-measured (docs/benchmark.md, "Not done yet").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from igw.bench.policies.baselines import RoundRobinPolicy
from igw.bench.scenarios import PodGroup, Scenario
from igw.bench.stats import percentile
from igw.bench.workload import fleet_pods, flood_requests
from igw.sim.des import simulate
from igw.sim.presets import get_preset

MIN_FLOOD = 300
MAX_FLOOD = 3000


@dataclass(frozen=True, slots=True)
class PodCapacity:
    preset: str
    engine: str
    requests_per_s: float
    output_tokens_per_s: float
    flood_requests: int


@dataclass(frozen=True, slots=True)
class FleetCapacity:
    per_type: tuple[PodCapacity, ...]
    requests_per_s: float

    def describe(self) -> str:
        parts = ", ".join(f"{c.preset} {c.requests_per_s:.2f} req/s" for c in self.per_type)
        return f"{self.requests_per_s:.2f} req/s ({parts}; one pod of each type flooded)"


def _flood_size(scenario: Scenario, group: PodGroup, *, seed: int) -> int:
    preset = get_preset(group.preset)
    sample = flood_requests(scenario, count=200, seed=seed)
    mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in sample) / len(sample)
    concurrency = min(preset.max_num_seqs, preset.kv_capacity_tokens / mean_tokens)
    return int(min(MAX_FLOOD, max(MIN_FLOOD, 4 * concurrency)))


def pod_capacity(scenario: Scenario, group: PodGroup, *, seed: int) -> PodCapacity:
    pod = next(p for p in fleet_pods(scenario) if p.preset == group.preset and p.engine.value == group.engine)
    n = _flood_size(scenario, group, seed=seed)
    result = simulate(
        pods=[pod],
        requests=flood_requests(scenario, count=n, seed=seed),
        policy=RoundRobinPolicy(),
        seed=seed,
    )
    finished = sorted(r.e2e for r in result.records if r.ok and r.e2e is not None)
    if len(finished) < 10:
        raise RuntimeError(f"capacity probe of {group.preset}: only {len(finished)} of {n} requests finished")
    t20, t80 = percentile(finished, 20), percentile(finished, 80)
    assert t20 is not None
    assert t80 is not None
    window = max(t80 - t20, 1e-9)
    served = [r for r in result.records if r.ok and r.e2e is not None and t20 <= r.e2e <= t80]
    return PodCapacity(
        preset=group.preset,
        engine=group.engine,
        requests_per_s=len(served) / window,
        output_tokens_per_s=sum(r.output_tokens for r in served) / window,
        flood_requests=n,
    )


def fleet_capacity(
    scenario: Scenario, *, seed: int, on_progress: Callable[[str], None] | None = None
) -> FleetCapacity:
    per_type: list[PodCapacity] = []
    total = 0.0
    for group in scenario.fleet:
        if on_progress is not None:
            on_progress(f"capacity probe: {group.preset}")
        cap = pod_capacity(scenario, group, seed=seed)
        per_type.append(cap)
        total += cap.requests_per_s * group.count
    return FleetCapacity(per_type=tuple(per_type), requests_per_s=total)
