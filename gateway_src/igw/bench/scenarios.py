"""The scenario catalogue: the AWS claims' analogues plus the controls, each fully stated.

A scenario names its fleet (simulator presets and counts), its workload (length distribution,
shared-prefix shape or LoRA mix), its arrival process with the load level *relative to the fleet's
measured capacity* (:mod:`igw.bench.capacity`), its duration, TTFT SLO and seeds. Nothing here is a
request rate in requests/s: rates are derived from the capacity measured in the same run, so no
scenario can be tuned to flatter a policy by picking a convenient absolute rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal


@dataclass(frozen=True, slots=True)
class PodGroup:
    """``count`` replicas of one simulator preset (``igw.sim.presets.PRESETS`` key)."""

    preset: str
    count: int
    engine: Literal["vllm", "sglang"] = "vllm"
    max_loras: int | None = None
    """GPU LoRA slots of these pods (``None``: the scenario's ``max_loras``)."""


@dataclass(frozen=True, slots=True)
class LengthMix:
    """Independent prompts, prompt/output lengths from a fitted distribution (docs/simulator.md)."""

    kind: Literal["sharegpt", "azure-conv", "azure-code"]
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    """Optional clipping (the demo keeps responses short so a 2-core machine can stream them)."""


@dataclass(frozen=True, slots=True)
class SharedPrefixShape:
    """inference-perf ``shared_prefix`` data (tokens): ``num_groups`` system prompts, each followed by
    questions; group popularity uniform as in inference-perf."""

    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int


@dataclass(frozen=True, slots=True)
class LoraShape:
    """Requests spread over LoRA adapters of one base model with Zipf popularity."""

    adapters: int
    zipf_alpha: float
    lengths: LengthMix


Workload = LengthMix | SharedPrefixShape | LoraShape


@dataclass(frozen=True, slots=True)
class SteadyLoad:
    """Poisson arrivals at ``fraction`` of the fleet's capacity."""

    fraction: float


@dataclass(frozen=True, slots=True)
class BurstLoad:
    """On/off arrivals (Markov-modulated Poisson): ``calm_fraction`` of capacity, bursts at
    ``peak_fraction`` (above 1: the fleet is overloaded); burst and calm durations are exponential
    with means ``burst_s`` and ``period_s - burst_s``."""

    calm_fraction: float
    peak_fraction: float
    burst_s: float
    period_s: float

    def mean_fraction(self) -> float:
        duty = self.burst_s / self.period_s
        return self.calm_fraction * (1 - duty) + self.peak_fraction * duty


Load = SteadyLoad | BurstLoad


@dataclass(frozen=True, slots=True)
class AwsClaim:
    """AWS's published reduction versus round-robin (DESIGN.md, issue 5), in percent."""

    ttft_p95_pct: float | None = None
    ttft_p99_pct: float | None = None
    throughput_gain_pct: float | None = None
    parity: bool = False
    source: str = "AWS SageMaker HyperPod Inference Gateway announcement, 2026-09-18 (AWS's own tests)"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    fleet: tuple[PodGroup, ...]
    workload: Workload
    load: Load
    duration_s: float
    """Seconds of arrivals (the run continues until every admitted request finishes)."""
    ttft_slo_s: float
    """Goodput counts requests whose TTFT is at most this (and whose TPOT meets ``tpot_slo_s``)."""
    tpot_slo_s: float = 0.1
    """Time per output token (a request's mean inter-token latency) goodput allows, in seconds."""
    seeds: tuple[int, ...] = (1, 2, 3)
    max_loras: int | None = None
    claim: AwsClaim | None = None
    notes: str = ""

    @property
    def pod_count(self) -> int:
        return sum(g.count for g in self.fleet)

    def describe(self) -> dict[str, Any]:
        """The parameters every output states: fleet, workload, load level, duration, SLO, seeds."""
        return {
            "summary": self.summary,
            "fleet": ", ".join(_describe_group(g) for g in self.fleet),
            "workload": _describe_workload(self.workload),
            "load": _describe_load(self.load),
            "duration_s": self.duration_s,
            "ttft_slo_s": self.ttft_slo_s,
            "tpot_slo_s": self.tpot_slo_s,
            "seeds": list(self.seeds),
            "max_loras": self.max_loras,
            "aws_claim": None if self.claim is None else _describe_claim(self.claim),
        }


def _describe_group(g: PodGroup) -> str:
    slots = "" if g.max_loras is None else f", max-loras {g.max_loras}"
    return f"{g.count}× {g.preset} ({g.engine}{slots})"


def _describe_workload(w: Workload) -> str:
    if isinstance(w, LengthMix):
        clip = "".join(
            f", {what} clipped to {n} tok"
            for what, n in (("prompt", w.max_prompt_tokens), ("output", w.max_output_tokens))
            if n is not None
        )
        return f"independent prompts, {w.kind} length fit{clip}"
    if isinstance(w, SharedPrefixShape):
        return (
            f"inference-perf shared_prefix: {w.num_groups} groups × {w.prompts_per_group} prompts, "
            f"system {w.system_prompt_len} tok, question {w.question_len} tok, output {w.output_len} tok"
        )
    return f"{w.adapters} LoRA adapters, Zipf α={w.zipf_alpha}, {w.lengths.kind} lengths"


def _describe_load(load: Load) -> str:
    if isinstance(load, SteadyLoad):
        return f"Poisson at {load.fraction:.0%} of measured capacity"
    return (
        f"on/off (Markov-modulated Poisson): {load.calm_fraction:.0%} of capacity, bursts at "
        f"{load.peak_fraction:.0%} lasting {load.burst_s:g} s on average, calm periods "
        f"{load.period_s - load.burst_s:g} s on average (mean load {load.mean_fraction():.0%})"
    )


def _describe_claim(c: AwsClaim) -> str:
    if c.parity:
        return "parity with round-robin (TTFT p50 and throughput within ±5 %)"
    parts = []
    if c.ttft_p95_pct is not None:
        parts.append(f"TTFT p95 −{c.ttft_p95_pct:g} %")
    if c.ttft_p99_pct is not None:
        parts.append(f"TTFT p99 −{c.ttft_p99_pct:g} %")
    if c.throughput_gain_pct is not None:
        parts.append(f"throughput +{c.throughput_gain_pct:g} %")
    return ", ".join(parts)


_HIGH_CACHE = SharedPrefixShape(
    num_groups=256, prompts_per_group=16, system_prompt_len=2048, question_len=256, output_len=256
)
_LOW_CACHE = SharedPrefixShape(
    num_groups=256, prompts_per_group=16, system_prompt_len=256, question_len=2048, output_len=256
)

SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            name="mixed-fleet-8b",
            summary="Llama-3.1-8B on a mixed H100 + A10G fleet, steady traffic (AWS scenario a)",
            fleet=(PodGroup("llama-3.1-8b/h100", 4), PodGroup("llama-3.1-8b/a10g", 4)),
            workload=LengthMix("sharegpt"),
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=1.0,
            claim=AwsClaim(ttft_p95_pct=97, ttft_p99_pct=97, throughput_gain_pct=8),
        ),
        Scenario(
            name="mixed-fleet-32b",
            summary="Qwen3-32B on 2×H100 TP2 and 4×A10G TP4 replicas, steady traffic (AWS scenario a)",
            fleet=(PodGroup("qwen3-32b/2xh100", 4), PodGroup("qwen3-32b/4xa10g", 4)),
            workload=LengthMix("sharegpt"),
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=2.0,
            tpot_slo_s=0.15,
            claim=AwsClaim(ttft_p95_pct=98, ttft_p99_pct=97, throughput_gain_pct=50),
        ),
        Scenario(
            name="burst-70b",
            summary="Llama-3.1-70B TP8 on H100, bursty traffic with heavy-tailed lengths (AWS scenario b)",
            fleet=(PodGroup("llama-3.1-70b/8xh100", 8),),
            workload=LengthMix("azure-conv"),
            load=BurstLoad(calm_fraction=0.4, peak_fraction=1.5, burst_s=10.0, period_s=30.0),
            duration_s=90.0,
            ttft_slo_s=2.0,
            tpot_slo_s=0.25,
            claim=AwsClaim(ttft_p95_pct=94, ttft_p99_pct=98),
        ),
        Scenario(
            name="burst-235b",
            summary="Qwen3-235B-A22B FP8 TP8 (MoE), bursty code-like traffic (AWS scenario b)",
            fleet=(PodGroup("qwen3-235b-fp8/8xh100", 8),),
            workload=LengthMix("azure-code"),
            load=BurstLoad(calm_fraction=0.4, peak_fraction=1.5, burst_s=10.0, period_s=30.0),
            duration_s=90.0,
            ttft_slo_s=2.0,
            tpot_slo_s=0.25,
            claim=AwsClaim(ttft_p99_pct=89),
        ),
        Scenario(
            name="shared-prefix-8b-high-cache",
            summary="Llama-3.1-8B on H100, inference-perf high-cache shared-prefix shape (AWS scenario c)",
            fleet=(PodGroup("llama-3.1-8b/h100", 8),),
            workload=_HIGH_CACHE,
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=0.5,
            claim=AwsClaim(ttft_p95_pct=26, ttft_p99_pct=43),
        ),
        Scenario(
            name="shared-prefix-8b-low-cache",
            summary="Llama-3.1-8B on H100, inference-perf low-cache shared-prefix shape (control for c)",
            fleet=(PodGroup("llama-3.1-8b/h100", 8),),
            workload=_LOW_CACHE,
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=0.5,
        ),
        Scenario(
            name="lora-multi-adapter",
            summary="Llama-3.1-8B on H100 with 15 LoRA adapters, max-lora 3 (GIE regression-suite shape)",
            fleet=(PodGroup("llama-3.1-8b/h100", 8),),
            workload=LoraShape(adapters=15, zipf_alpha=1.1, lengths=LengthMix("sharegpt")),
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=0.5,
            max_loras=3,
        ),
        Scenario(
            name="homogeneous-steady",
            summary="Llama-3.1-8B on identical H100 pods, Poisson traffic (AWS scenario d: parity)",
            fleet=(PodGroup("llama-3.1-8b/h100", 8),),
            workload=LengthMix("sharegpt"),
            load=SteadyLoad(0.7),
            duration_s=60.0,
            ttft_slo_s=0.5,
            claim=AwsClaim(parity=True),
        ),
    )
}

DEMO: Final = Scenario(
    name="demo-mixed-8b",
    summary="igw demo: Llama-3.1-8B on 2 H100 + 2 A10G pods, steady traffic, short answers",
    fleet=(PodGroup("llama-3.1-8b/h100", 2), PodGroup("llama-3.1-8b/a10g", 2)),
    workload=LengthMix("sharegpt", max_prompt_tokens=1024, max_output_tokens=48),
    load=SteadyLoad(0.6),
    duration_s=30.0,
    ttft_slo_s=1.0,
    seeds=(1,),
    claim=AwsClaim(ttft_p95_pct=97, ttft_p99_pct=97),
)
"""The ``igw demo`` scenario, sized for the demo's two-minute budget; also the small scenario on which
DES and live mode are checked to rank policies alike (``igw bench demo-mixed-8b --mode live
--check-agreement``). Listed by ``--list`` but not part of ``all``."""

SCENARIOS[DEMO.name] = DEMO

GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "shared-prefix-8b": ("shared-prefix-8b-high-cache", "shared-prefix-8b-low-cache"),
    "all": tuple(n for n in SCENARIOS if n != DEMO.name),
}
"""Names that expand to several scenarios on the command line."""


RUN_ALONE: Final[dict[str, str]] = {
    "random": "a random family of --count scenarios drawn with --seed",
    "global": "tier 2, live: failover, ramp-up, regional failover, cost policy",
    "global-des": "tier 2 in virtual time: 10 regions x 20 clusters",
    "overload-priority": "flow control at 150 % load: priority bands, tenants (DES; --mode live)",
    "canary-rollout": "live: canary 10 % -> 50 % -> 100 % by hot reload",
}
"""``igw bench NAME`` benchmarks that are not scenarios: each runs alone, with options of its own
(``igw bench --list`` shows them; ``igw.cli.bench`` dispatches them)."""


def resolve(names: list[str]) -> list[Scenario]:
    """Scenario names (or group names) to scenarios, in order, without duplicates."""
    out: list[str] = []
    for name in names:
        expanded = GROUPS.get(name, (name,))
        for n in expanded:
            if n not in SCENARIOS:
                known = ", ".join([*SCENARIOS, *GROUPS])
                raise ValueError(f"unknown scenario {n!r} (known: {known})")
            if n not in out:
                out.append(n)
    return [SCENARIOS[n] for n in out]
