"""``igw bench random``: a family of scenarios drawn at random, so routing is judged off its tuning set.

Each draw (deterministic per ``--seed`` and index) picks one model size and 2–4 of its simulated GPU
types (the preset catalogue holds four per model: H100, H200, A100 and A10G for 8B; 2×H100, H200,
2×A100 and 4×A10G for 32B), 4–16 pods split between them (at least one of each), then a workload
and a load:

* workload: independent prompts with the ShareGPT, Azure conversation (long outputs) or Azure code
  (long prompts) length fits; shared system prompts (inference-perf shape, 64–256 groups of 16–32
  prompts, 512–4096 shared tokens); or a LoRA mix (4–15 adapters, Zipf 0.8–1.4) where one GPU
  type has 1–2 adapter slots per pod and the others 4;
* load: Poisson at 50–110 % of the measured capacity, or bursts (on/off) whose mean lies in that range.

Capacities are measured per scenario as for the catalogue scenarios (:mod:`igw.bench.capacity`), so
load levels stay relative. :func:`family_verdict` states, per scenario, whether the gateway's default
TTFT p99 is within 15 % of the oracle's and whether it is worse than the best peer's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from igw.bench.scenarios import (
    BurstLoad,
    LengthMix,
    Load,
    LoraShape,
    PodGroup,
    Scenario,
    SharedPrefixShape,
    SteadyLoad,
    Workload,
)
from igw.bench.summary import BEST_PEER_POLICIES

FLEETS: Final[tuple[tuple[tuple[str, ...], float, float], ...]] = (
    (("llama-3.1-8b/h100", "llama-3.1-8b/h200", "llama-3.1-8b/a100", "llama-3.1-8b/a10g"), 1.0, 0.1),
    (("qwen3-32b/2xh100", "qwen3-32b/h200", "qwen3-32b/2xa100", "qwen3-32b/4xa10g"), 2.0, 0.15),
)
"""(the model's presets, TTFT SLO s, TPOT SLO s) per model size; a draw takes 2-4 of the presets."""
DURATION_S: Final = 40.0
MAX_COUNT: Final = 1000
"""The most draws ``igw bench random`` builds: ``--count``, or the draws ``--draws`` names (their
numbers are not bounded). Each draw is a full scenario (capacity sweep, every policy, every seed:
seconds to minutes), so 1,000 is days of runs already; the draws were all
built before the first ran, so ``--count 1000000`` spent its first minute and ~0.7 KiB per draw
(hundreds of MiB) building scenarios, silent, before session s44."""
ORACLE_TOLERANCE: Final = 0.15
"""Within 15 % of the oracle's TTFT p99 counts as close (issue 17's target)."""


_LENGTHS: Final[dict[str, LengthMix]] = {
    "sharegpt": LengthMix("sharegpt"),
    "azure-conv": LengthMix("azure-conv"),
    "azure-code": LengthMix("azure-code"),
}


def _workload(rng: random.Random) -> tuple[Workload, str]:
    kind = rng.choice(("sharegpt", "azure-conv", "azure-code", "shared-prefix", "lora"))
    if kind == "shared-prefix":
        # At least 1,024 distinct requests (the shape yields groups x prompts of them), so the capacity
        # sweep and the run have enough traffic; popularity stays uniform as in inference-perf.
        return SharedPrefixShape(
            num_groups=rng.choice((64, 128, 256)),
            prompts_per_group=rng.choice((16, 32)),
            system_prompt_len=rng.choice((512, 1024, 2048, 4096)),
            question_len=rng.choice((64, 128, 256)),
            output_len=rng.choice((64, 128, 256, 512)),
        ), kind
    if kind == "lora":
        return LoraShape(
            adapters=rng.randint(4, 15),
            zipf_alpha=round(rng.uniform(0.8, 1.4), 2),
            lengths=LengthMix(rng.choice(("sharegpt", "azure-conv"))),
        ), kind
    return _LENGTHS[kind], kind


def _load(rng: random.Random) -> Load:
    mean = round(rng.uniform(0.5, 1.1), 2)
    if rng.random() < 0.5:
        return SteadyLoad(mean)
    period, burst = 30.0, rng.choice((5.0, 10.0))
    peak = round(min(2.0, mean * rng.uniform(1.3, 1.8)), 2)
    duty = burst / period
    calm = round(max(0.05, (mean - peak * duty) / (1 - duty)), 2)
    return BurstLoad(calm_fraction=calm, peak_fraction=peak, burst_s=burst, period_s=period)


def _split(rng: random.Random, pods: int, groups: int) -> list[int]:
    """``pods`` split into ``groups`` counts of at least one each (uniform cut points)."""
    cuts = sorted(rng.sample(range(1, pods), groups - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, pods], strict=True)]


def draw(seed: int, index: int) -> Scenario:
    """The ``index``-th scenario of the family for ``seed`` (the same pair always gives the same one)."""
    rng = random.Random(seed * 1_000_003 + index)
    presets, ttft_slo, tpot_slo = rng.choice(FLEETS)
    types = rng.sample(presets, rng.randint(2, len(presets)))
    pods = rng.randint(max(4, len(types)), 16)
    counts = _split(rng, pods, len(types))
    workload, kind = _workload(rng)
    lora = isinstance(workload, LoraShape)
    few_slots_group = rng.randrange(len(types)) if lora else -1
    few_slots = rng.randint(1, 2) if lora else None
    fleet = tuple(
        PodGroup(
            preset,
            count,
            max_loras=(few_slots if i == few_slots_group else 4) if lora else None,
        )
        for i, (preset, count) in enumerate(zip(types, counts, strict=True))
    )
    load = _load(rng)
    return Scenario(
        name=f"random-{seed}-{index:02d}",
        summary=f"random draw {index} of seed {seed}: {kind} on {'+'.join(map(str, counts))} pods",
        fleet=fleet,
        workload=workload,
        load=load,
        duration_s=DURATION_S,
        ttft_slo_s=ttft_slo,
        tpot_slo_s=tpot_slo,
    )


def family(seed: int, count: int, draws: Sequence[int] | None = None) -> list[Scenario]:
    """The first ``count`` draws of family ``seed``, or only those numbered in ``draws`` (``--draws``:
    re-running the draws that missed without the rest; a draw is the same whatever else runs).

    :data:`MAX_COUNT` bounds the draws built, not their numbers: with ``draws`` only those are built,
    so a family of any size is run in parts (until session s44 ``--count`` was bounded with
    ``--draws`` too, and no draw numbered 1,000 or more could be run)."""
    if count < 1:
        raise ValueError(f"--count must be >= 1, got {count}")
    if draws is None:
        if count > MAX_COUNT:
            raise ValueError(
                f"--count: at most {MAX_COUNT:,} draws, got {count:,} (each draw is a whole scenario run; "
                "run a larger family in parts: --draws picks draws of it)"
            )
        return [draw(seed, i) for i in range(count)]
    wrong = [i for i in draws if not 0 <= i < count]
    if wrong:
        raise ValueError(f"--draws: {wrong} outside the family's draws 0..{count - 1} (--count {count})")
    picked = sorted(set(draws))
    if len(picked) > MAX_COUNT:
        raise ValueError(f"--draws: at most {MAX_COUNT:,} draws, got {len(picked):,}")
    return [draw(seed, i) for i in picked]


@dataclass(frozen=True, slots=True)
class Verdict:
    scenario: str
    gateway_p99_s: float | None
    oracle_p99_s: float | None
    best_peer: str | None
    best_peer_p99_s: float | None

    @property
    def gap(self) -> float | None:
        if self.gateway_p99_s is None or not self.oracle_p99_s:
            return None
        return self.gateway_p99_s / self.oracle_p99_s - 1.0

    @property
    def close_to_oracle(self) -> bool:
        gap = self.gap
        return gap is not None and gap <= ORACLE_TOLERANCE

    @property
    def worse_than_best_peer(self) -> bool:
        if self.gateway_p99_s is None or self.best_peer_p99_s is None:
            return False
        return self.gateway_p99_s > self.best_peer_p99_s


def _p99(doc: Mapping[str, Any], policy: str) -> float | None:
    """A policy's across-seed mean TTFT p99 from a run's JSON report (``null`` mean = failed)."""
    entry = doc["policies"].get(policy)
    est = None if entry is None or entry.get("unavailable") else entry["estimates"].get("ttft_p99_s")
    if est is None:
        return None
    return math.inf if est["mean"] is None else float(est["mean"])


def family_verdict(docs: Sequence[Mapping[str, Any]], *, gateway: str = "gateway-default") -> list[Verdict]:
    """One verdict per run report (``ScenarioRun.to_json()`` or a ``<scenario>.json`` file)."""
    out: list[Verdict] = []
    for doc in docs:
        peers = [(p, v) for p in BEST_PEER_POLICIES if (v := _p99(doc, p)) is not None]
        best = min(peers, key=lambda pv: pv[1]) if peers else (None, None)
        out.append(Verdict(doc["scenario"], _p99(doc, gateway), _p99(doc, "oracle"), best[0], best[1]))
    return out


def is_family_member(name: str) -> bool:
    return name.startswith("random-")


def verdict_markdown(verdicts: Sequence[Verdict], *, command: str) -> str:
    """The family's table plus the two counts the issue's target is stated in."""

    def ms(v: float | None) -> str:
        return "–" if v is None else ("failed" if v == float("inf") else f"{v * 1000:.0f}")

    lines = [
        "# Random scenario family",
        "",
        f"Command: `{command}`",
        "",
        "| scenario | gateway-default p99 ms | oracle p99 ms | gap | best peer (p99 ms) | within 15 % "
        "| worse than best peer |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for v in verdicts:
        gap = "–" if v.gap is None else f"{v.gap * 100:+.0f} %"
        lines.append(
            f"| {v.scenario} | {ms(v.gateway_p99_s)} | {ms(v.oracle_p99_s)} | {gap} | {v.best_peer or '–'} "
            f"({ms(v.best_peer_p99_s)}) | {'yes' if v.close_to_oracle else 'no'} "
            f"| {'YES' if v.worse_than_best_peer else 'no'} |"
        )
    close = sum(v.close_to_oracle for v in verdicts)
    worse = sum(v.worse_than_best_peer for v in verdicts)
    lines += [
        "",
        f"Within 15 % of the oracle: {close} of {len(verdicts)} (target: at least 80 %). "
        f"Worse than the best peer: {worse} of {len(verdicts)} (target: none).",
        "",
    ]
    return "\n".join(lines)
