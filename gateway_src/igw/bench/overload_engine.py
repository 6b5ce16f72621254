"""``overload-priority`` on one pod whose engine preempts by priority (``enginePriority``), in the DES.

The kept slots of :mod:`igw.bench.overload_pod` buy Critical's tail with idle batch slots: on the
live benchmark's 8-sequence pod the bound needs 6-7 of 8 kept. An engine that empties a running
lower-band slot for a Critical arrival (SGLang's priority preemption) needs none kept, so lower
bands may fill the batch. This module compares, on the same request list, the defaults
(``slot-wait``), the kept-slot knob at its far end (``max-kept``: ``maxKeptShare`` 0.875) and the
gateway with ``enginePriority`` on an SGLang-shaped pod (``engine-priority``): Critical's P99 TTFT
against its unloaded P99 *with the same setting*, what each band was served, the share of the pod
used, the preemptions and what they cost Standard (its TTFT, and its decode stretched by pauses
and recomputes), and each Standard tenant's share against its max-min fair share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Final

from igw.bench.overload_des import BAND_NAMES, Arrival
from igw.bench.overload_pod import UNLOADED, PodScenario, pod_arrivals, simulate_pod
from igw.bench.stats import max_min_fair, percentile
from igw.scheduling.engine_priority import EnginePriority
from igw.scheduling.flow_control import CRITICAL, STANDARD, FlowControlSettings

ENGINE_ARMS: Final = ("slot-wait", "max-kept", "engine-priority")
MAX_KEPT_SHARE: Final = 0.875
"""``max-kept``'s ``maxKeptShare`` (the live benchmark's ``flow-control-max-kept``)."""


def engine_arm(arm: str) -> tuple[FlowControlSettings, EnginePriority | None]:
    """The flow-control settings and engine priority of one arm (the default bands in every arm)."""
    if arm == "slot-wait":
        return FlowControlSettings(), None
    if arm == "max-kept":
        return FlowControlSettings(max_kept_share=MAX_KEPT_SHARE), None
    if arm == "engine-priority":
        return FlowControlSettings(), EnginePriority.sglang()
    raise ValueError(f"unknown engine arm {arm!r}; expected one of {', '.join(ENGINE_ARMS)}")


@dataclass(frozen=True, slots=True)
class EngineRow:
    arm: str
    critical_p99_s: float | None
    calm_p99_s: float | None
    """Critical's P99 TTFT at half the pod's capacity with the same arm."""
    served: dict[str, float]
    started_per_capacity: float
    preemptions: int
    standard_ttft_p50_s: float | None
    standard_ttft_p99_s: float | None
    standard_decode_stretch: float | None
    """Standard's mean time from first to last token over the undisturbed decode time."""
    tenants: dict[str, float]
    """Standard tenant -> served over its max-min fair share of what Standard was served."""

    @property
    def ratio(self) -> float | None:
        if self.critical_p99_s is None or not self.calm_p99_s:
            return None
        return self.critical_p99_s / self.calm_p99_s


def _critical_p99(requests: Sequence[Arrival], ttft: dict[int, float]) -> float | None:
    values = sorted(ttft[r.index] for r in requests if r.priority == CRITICAL and r.index in ttft)
    return percentile(values, 99) if values else None


def engine_row(arm: str, scenario: PodScenario, seed: int) -> EngineRow:
    """One arm under overload, with its own unloaded reference."""
    settings, engine = engine_arm(arm)
    requests = pod_arrivals(scenario, seed)
    hot = simulate_pod(scenario, requests, settings, seed=seed, engine=engine)
    calm_scenario = dataclasses.replace(scenario, load=UNLOADED)
    calm_requests = pod_arrivals(calm_scenario, seed)
    calm = simulate_pod(calm_scenario, calm_requests, settings, seed=seed, engine=engine)
    served: dict[str, float] = {}
    for priority, band in BAND_NAMES.items():
        mine = [r for r in requests if r.priority == priority]
        served[band] = sum(r.index in hot.ttft_s for r in mine) / max(len(mine), 1)
    standard = [r for r in requests if r.priority == STANDARD]
    ttft = sorted(hot.ttft_s[r.index] for r in standard if r.index in hot.ttft_s)
    decodes = [hot.decode_s[r.index] for r in standard if r.index in hot.decode_s]
    offered: dict[str, int] = {}
    got: dict[str, int] = {}
    for r in standard:
        offered[r.tenant] = offered.get(r.tenant, 0) + 1
        got[r.tenant] = got.get(r.tenant, 0) + (r.index in hot.ttft_s)
    fair = max_min_fair(offered, sum(got.values()))
    return EngineRow(
        arm=arm,
        critical_p99_s=_critical_p99(requests, hot.ttft_s),
        calm_p99_s=_critical_p99(calm_requests, calm.ttft_s),
        served=served,
        started_per_capacity=hot.started_in_window / scenario.duration_s / scenario.capacity_rps,
        preemptions=hot.preemptions,
        standard_ttft_p50_s=percentile(ttft, 50) if ttft else None,
        standard_ttft_p99_s=percentile(ttft, 99) if ttft else None,
        standard_decode_stretch=fmean(decodes) / scenario.decode_s if decodes and scenario.decode_s else None,
        tenants={t: got[t] / fair[t] for t in sorted(offered) if fair.get(t)},
    )


def engine_priority_markdown(
    scenario: PodScenario, seed: int, arms: Sequence[str] = ENGINE_ARMS, *, title: str = "One pod"
) -> str:
    """The comparison table (see the module docstring)."""
    rows = [engine_row(arm, scenario, seed) for arm in arms]
    lines = [
        "",
        f"## Engine priority preemption against kept slots, {title.lower()} (seed {seed})",
        "",
        f"Batch {scenario.batch}, capacity {scenario.capacity_rps:.1f} req/s, offered {scenario.load:.0%} "
        f"for {scenario.duration_s:g} s; each arm's unloaded reference is the same arm at {UNLOADED:.0%}.",
        "",
        "| arm | Critical P99 s | unloaded s | / unloaded | Standard served | Sheddable served "
        "| started / capacity | preemptions | Standard TTFT p50 / p99 s | Standard decode stretch "
        "| Standard tenants served / fair |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        stretch = "-" if r.standard_decode_stretch is None else f"{r.standard_decode_stretch:.2f}x"
        tenants = " / ".join(f"{t} {v:.2f}" for t, v in r.tenants.items())
        lines.append(
            f"| {r.arm} | {_s(r.critical_p99_s)} | {_s(r.calm_p99_s)} | {ratio} | {r.served['Standard']:.1%} "
            f"| {r.served['Sheddable']:.1%} | {r.started_per_capacity:.1%} | {r.preemptions} "
            f"| {_s(r.standard_ttft_p50_s)} / {_s(r.standard_ttft_p99_s)} | {stretch} | {tenants} |"
        )
    return "\n".join(lines) + "\n"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
