"""``igw bench overload-priority``: run the overload scenario's policies and report per band and tenant.

For each policy the report gives, per band, the share of offered requests served and shed and the
TTFT percentiles of the served ones; for flow control, each tenant's served count against its
max-min fair share of what its band was served (a tenant asking for less than an equal split keeps
all it asked for; the rest is split equally among the others). The reference for the Critical band
is the same scenario at half the pool's capacity (unloaded), replayed under flow control.

Writes ``overload-priority.md`` (tables), ``overload-priority.json`` and two plots: queue depth per
band over time under flow control, and the TTFT CDF per band and policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from igw.bench.console import stderr_progress
from igw.bench.overload_des import (
    BAND_NAMES,
    Admission,
    Arrival,
    Outcome,
    OverloadScenario,
    arrivals,
    simulate,
)
from igw.bench.overload_engine import engine_priority_markdown
from igw.bench.overload_live import ARMS, MAX_NUM_SEQS, LiveArm, run_live_overload
from igw.bench.overload_pod import (
    LIVE_POD,
    STEER_ARMS,
    PodScenario,
    kept_slots_markdown,
    pod_markdown,
    slot_wait_markdown,
)
from igw.bench.overload_tail import TailRow, request_id, slowest, split, tail_markdown
from igw.bench.stats import max_min_fair, percentile
from igw.errors import IgwToolingError
from igw.scheduling.flow_control import FlowControlSettings

UNLOADED_LOAD: Final = 0.5
CRITICAL_P99_BOUND: Final = 2.0
"""Critical P99 TTFT under overload must stay within this multiple of its unloaded P99."""


@dataclass(frozen=True, slots=True)
class BandRow:
    policy: str
    band: str
    offered: int
    served: int
    shed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None


@dataclass(frozen=True, slots=True)
class TenantRow:
    band: str
    tenant: str
    offered: int
    served: int
    fair_share: float

    @property
    def ratio(self) -> float | None:
        return self.served / self.fair_share if self.fair_share > 0 else None


@dataclass(frozen=True, slots=True)
class Served:
    """One offered request as the tables see it: band, tenant, and its TTFT when it was served."""

    priority: int
    tenant: str
    ttft_s: float | None


def rows_for(policy: str, items: Sequence[Served]) -> list[BandRow]:
    """Per band: offered, served, not served (shed or failed) and TTFT percentiles of the served."""
    rows = []
    for priority, band in BAND_NAMES.items():
        mine = [i for i in items if i.priority == priority]
        ttft = sorted(i.ttft_s for i in mine if i.ttft_s is not None)
        rows.append(
            BandRow(
                policy=policy,
                band=band,
                offered=len(mine),
                served=len(ttft),
                shed=len(mine) - len(ttft),
                ttft_p50_s=percentile(ttft, 50) if ttft else None,
                ttft_p99_s=percentile(ttft, 99) if ttft else None,
            )
        )
    return rows


def tenants_for(items: Sequence[Served]) -> list[TenantRow]:
    rows: list[TenantRow] = []
    for priority, band in BAND_NAMES.items():
        offered = Counter(i.tenant for i in items if i.priority == priority)
        served = Counter(i.tenant for i in items if i.priority == priority and i.ttft_s is not None)
        fair = max_min_fair(offered, sum(served.values()))
        rows.extend(
            TenantRow(band, tenant, offered[tenant], served[tenant], fair[tenant])
            for tenant in sorted(offered)
        )
    return rows


def des_items(outcome: Outcome, requests: Sequence[Arrival]) -> list[Served]:
    return [Served(r.priority, r.tenant, outcome.ttft_s.get(r.index)) for r in requests]


def band_rows(outcome: Outcome, requests: Sequence[Arrival]) -> list[BandRow]:
    return rows_for(outcome.admission.value, des_items(outcome, requests))


def tenant_rows(outcome: Outcome, requests: Sequence[Arrival]) -> list[TenantRow]:
    return tenants_for(des_items(outcome, requests))


@dataclass(frozen=True, slots=True)
class OverloadReport:
    scenario: OverloadScenario
    seed: int
    bands: list[BandRow]
    tenants: list[TenantRow]
    unloaded_critical_p99_s: float
    outcomes: dict[str, Outcome]
    requests: list[Arrival]

    def critical_p99(self, policy: Admission) -> float | None:
        return next(r.ttft_p99_s for r in self.bands if r.policy == policy.value and r.band == "Critical")

    @property
    def critical_within_bound(self) -> bool:
        p99 = self.critical_p99(Admission.FLOW_CONTROL)
        return p99 is not None and p99 <= CRITICAL_P99_BOUND * self.unloaded_critical_p99_s

    def served_rps(self, policy: str) -> float:
        """Requests that got a slot per second while traffic was offered (the pool's goodput).

        Starts after the offered period (a queue draining once arrivals stop) do not count, so a
        policy that only defers work is not credited with it.
        """
        outcome = self.outcomes[policy]
        window = self.scenario.duration_s
        started = sum(
            1 for r in self.requests if r.index in outcome.wait_s and r.at + outcome.wait_s[r.index] < window
        )
        return started / window

    def critical_wait_p99(self, policy: str) -> float | None:
        """P99 of the Critical band's wait for a slot (TTFT minus prefill): the gateway's share."""
        outcome = self.outcomes[policy]
        waits = sorted(
            outcome.wait_s[r.index]
            for r in self.requests
            if BAND_NAMES.get(r.priority) == "Critical" and r.index in outcome.wait_s
        )
        return percentile(waits, 99) if waits else None


def run_overload(
    scenario: OverloadScenario, *, seed: int, settings: FlowControlSettings | None = None
) -> OverloadReport:
    """Every policy on one request list; flow control with ``settings`` (default: the defaults)."""
    requests = arrivals(scenario, seed)
    outcomes = {a.value: simulate(scenario, requests, a, settings) for a in Admission}
    unloaded = dataclasses.replace(scenario, load=UNLOADED_LOAD)
    calm_requests = arrivals(unloaded, seed)
    calm = simulate(unloaded, calm_requests, Admission.FLOW_CONTROL, settings)
    calm_critical = band_rows(calm, calm_requests)[0]
    bands = [row for outcome in outcomes.values() for row in band_rows(outcome, requests)]
    return OverloadReport(
        scenario=scenario,
        seed=seed,
        bands=bands,
        tenants=tenant_rows(outcomes[Admission.FLOW_CONTROL.value], requests),
        unloaded_critical_p99_s=calm_critical.ttft_p99_s or 0.0,
        outcomes=outcomes,
        requests=requests,
    )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(report: OverloadReport, command: str) -> str:
    sc = report.scenario
    lines = [
        "# overload-priority (DES)",
        "",
        f"Command: `{command}` (seed {report.seed}). Pool: {sc.slots} slots, capacity "
        f"{sc.capacity_rps:.1f} req/s, offered {sc.load:.0%} of it for {sc.duration_s:g} s.",
        "",
        "| policy | band | offered | served | shed | TTFT p50 s | TTFT p99 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.bands:
        lines.append(
            f"| {r.policy} | {r.band} | {r.offered} | {r.served / r.offered:.1%} | {r.shed / r.offered:.1%} "
            f"| {_s(r.ttft_p50_s)} | {_s(r.ttft_p99_s)} |"
            if r.offered
            else f"| {r.policy} | {r.band} | 0 | - | - | - | - |"
        )
    p99 = report.critical_p99(Admission.FLOW_CONTROL)
    ratio = (
        "-"
        if p99 is None or not report.unloaded_critical_p99_s
        else f"{p99 / report.unloaded_critical_p99_s:.2f}"
    )
    verdict = "met" if report.critical_within_bound else "missed"
    lines += [
        "",
        f"Critical P99 TTFT unloaded ({UNLOADED_LOAD:.0%} load, flow control): "
        f"{report.unloaded_critical_p99_s:.3f} s; under overload with flow control: {_s(p99)} s; "
        f"ratio {ratio} (bound {CRITICAL_P99_BOUND:g}x: {verdict}).",
        "",
        "Where the Critical P99 goes, and what each policy costs in served requests:",
        "",
        "| policy | Critical P99 wait for a slot s | started req/s | started / capacity |",
        "|---|---|---|---|",
        *(
            f"| {policy} | {_s(report.critical_wait_p99(policy))} | {report.served_rps(policy):.2f} "
            f"| {report.served_rps(policy) / sc.capacity_rps:.1%} |"
            for policy in report.outcomes
        ),
        "",
        "Tenants under flow control (served vs max-min fair share of the band's served requests):",
        "",
        "| band | tenant | offered | served | fair share | served / fair |",
        "|---|---|---|---|---|---|",
    ]
    for t in report.tenants:
        ratio_text = "-" if t.ratio is None else f"{t.ratio:.2f}"
        lines.append(
            f"| {t.band} | {t.tenant} | {t.offered} | {t.served} | {t.fair_share:.1f} | {ratio_text} |"
        )
    return "\n".join(lines) + "\n"


def _pyplot() -> Any:
    # deferred: matplotlib (sim extra) loads only when plotting, its Agg backend chosen before pyplot
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib (sim extra) loads only when plotting, its Agg backend chosen before pyplot
    import matplotlib.pyplot as plt

    return plt


def plot(report: OverloadReport, out: Path) -> list[Path]:
    plt = _pyplot()
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4))
    samples = report.outcomes[Admission.FLOW_CONTROL.value].depth_samples
    for priority, band in BAND_NAMES.items():
        ax.plot([t for t, _ in samples], [d.get(priority, 0) for _, d in samples], label=band)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("queued requests")
    ax.set_title("overload-priority: flow-control queue depth per band")
    ax.legend()
    paths.append(out / "overload-priority-queue-depth.png")
    fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
    for ax, (priority, band) in zip(axes, BAND_NAMES.items(), strict=True):
        mine = [r for r in report.requests if r.priority == priority]
        for policy, outcome in report.outcomes.items():
            ttft = sorted(max(outcome.ttft_s[r.index], 1e-3) for r in mine if r.index in outcome.ttft_s)
            ax.step(ttft, [(i + 1) / len(mine) for i in range(len(ttft))], where="post", label=policy)
        ax.set_xscale("log")
        ax.set_title(band)
        ax.set_xlabel("TTFT (s), share of offered requests")
    axes[0].set_ylabel("cumulative share (shed never reach 1)")
    axes[0].legend()
    paths.append(out / "overload-priority-ttft-cdf.png")
    fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)
    return paths


def run_overload_command(*, out: Path, quick: bool, seed: int, command: str) -> int:
    """The CLI body: run, write the report files, print the Markdown; exit 0 (results, not a gate)."""
    scenario = OverloadScenario(duration_s=60.0 if quick else 300.0)
    report = run_overload(scenario, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    pod = PodScenario(duration_s=15.0 if quick else 60.0)
    two_pods = dataclasses.replace(pod, pods=2)
    text = markdown(report, command) + pod_markdown(pod, seed) + slot_wait_markdown(pod, seed)
    text += pod_markdown(two_pods, seed, STEER_ARMS)
    live_pod = dataclasses.replace(LIVE_POD, duration_s=pod.duration_s)
    text += pod_markdown(live_pod, seed, title="The live benchmark's pod")
    text += kept_slots_markdown(pod, seed)
    text += kept_slots_markdown(live_pod, seed, title="The live benchmark's pod")
    text += engine_priority_markdown(pod, seed)
    text += engine_priority_markdown(live_pod, seed, title="The live benchmark's pod")
    (out / "overload-priority.md").write_text(text, encoding="utf-8")
    data = {
        "seed": seed,
        "scenario": dataclasses.asdict(scenario),
        "bands": [dataclasses.asdict(r) for r in report.bands],
        "tenants": [{**dataclasses.asdict(t), "ratio": t.ratio} for t in report.tenants],
        "unloaded_critical_p99_s": report.unloaded_critical_p99_s,
        "critical_within_bound": report.critical_within_bound,
        "served_rps": {policy: report.served_rps(policy) for policy in report.outcomes},
        "critical_wait_p99_s": {policy: report.critical_wait_p99(policy) for policy in report.outcomes},
    }
    (out / "overload-priority.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for path in plot(report, out):
        text += f"\nplot: {path}"
    print(text)
    return 0


def live_items(arm: LiveArm) -> list[Served]:
    return [
        Served(arm.band_of(r), dict(r.headers)["x-gateway-inference-fairness-id"], s.ttft_s if s.ok else None)
        for r, s in zip(arm.requests, arm.samples, strict=True)
    ]


def completed_rps(arm: LiveArm, duration_s: float) -> float:
    """Requests answered in full while traffic was offered, per second (a queue draining after the
    offered period is not credited)."""
    done = sum(1 for s in arm.samples if s.ok and s.e2e_s is not None and s.arrival_s + s.e2e_s <= duration_s)
    return done / duration_s


def _completed(arms: Sequence[LiveArm], duration_s: float) -> list[tuple[LiveArm, float]]:
    return [(arm, completed_rps(arm, duration_s)) for arm in arms]


def critical_tail(arm: LiveArm) -> tuple[list[TailRow], list[TailRow]]:
    """The slowest Critical requests of ``arm`` split by where their time went, and every served
    Critical request split the same way (:mod:`igw.bench.overload_tail`)."""
    top = max(BAND_NAMES)
    rows: dict[int, TailRow] = {}
    for i, (r, s) in enumerate(zip(arm.requests, arm.samples, strict=True)):
        if arm.band_of(r) != top or not s.ok or s.ttft_s is None:
            continue
        rid = request_id(i)
        rows[i] = split(i, r.at_s, s.ttft_s, arm.access.get(rid), arm.arrivals.get(rid))
    tail = slowest({i: row.client_s for i, row in rows.items()})
    return [rows[i] for i in tail], list(rows.values())


def live_markdown(
    rate: float,
    arms: Sequence[LiveArm],
    command: str,
    duration_s: float,
    load_average: tuple[float, float] | None = None,
) -> str:
    """The live tables; ``load_average``: the machine's 1-minute load average at the start and end."""
    loaded = [a for a in arms if a.load > UNLOADED_LOAD]
    calms = [a for a in arms if a.load == UNLOADED_LOAD]
    calm = next((a for a in calms if a.name == "flow-control"), calms[0])
    rows = [row for arm in loaded for row in rows_for(arm.name, live_items(arm))]
    headline = next((a.name for a in loaded if a.name == "flow-control"), loaded[0].name)
    fc_p99 = next(r.ttft_p99_s for r in rows if r.policy == headline and r.band == "Critical")
    own = next((a for a in calms if a.name == headline), calm)  # the same arm at half load, if run
    calm_p99 = rows_for(own.name, live_items(own))[0].ttft_p99_s
    ratio = "-" if not calm_p99 or fc_p99 is None else f"{fc_p99 / calm_p99:.2f}"
    lines = [
        "# overload-priority (live)",
        "",
        f"Command: `{command}`. One simulated pod measured at {rate:.1f} completions/s (closed loop), "
        f"offered {loaded[0].load:.0%} of it for {duration_s:g} s through each router.",
        *(
            []
            if load_average is None
            else [
                "",
                f"1-minute load average at the start / end: {load_average[0]:.2f} / {load_average[1]:.2f}.",
            ]
        ),
        "",
        "| router | band | offered | served | not served | TTFT p50 s | TTFT p99 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.policy} | {r.band} | {r.offered} | {r.served / max(r.offered, 1):.1%} "
            f"| {r.shed / max(r.offered, 1):.1%} | {_s(r.ttft_p50_s)} | {_s(r.ttft_p99_s)} |"
        )
    lines += [
        "",
        "| router | completed req/s | completed / pod rate |",
        "|---|---|---|",
        *(f"| {a.name} | {rps:.2f} | {rps / rate:.1%} |" for a, rps in _completed(loaded, duration_s)),
        "",
        f"Critical P99 TTFT unloaded ({UNLOADED_LOAD:.0%}, {own.name}): {_s(calm_p99)} s; "
        f"under overload with {headline}: {_s(fc_p99)} s; ratio {ratio} (bound {CRITICAL_P99_BOUND:g}x).",
        "",
        "| band | tenant | offered | served | fair share | served / fair |",
        "|---|---|---|---|---|---|",
    ]
    flow = next(a for a in loaded if a.name == headline)
    for t in tenants_for(live_items(flow)):
        ratio_text = "-" if t.ratio is None else f"{t.ratio:.2f}"
        lines.append(
            f"| {t.band} | {t.tenant} | {t.offered} | {t.served} | {t.fair_share:.1f} | {ratio_text} |"
        )
    lines += ["", *arms_markdown(loaded, calms, rate, duration_s)]
    for arm in (*(a for a in loaded if a.name.startswith("flow-control")), *calms):
        tail, every = critical_tail(arm)
        label = arm.name if arm not in calms else f"{arm.name} at {arm.load:.0%} (unloaded)"
        lines += ["", *tail_markdown(label, tail, every, batch=MAX_NUM_SEQS)]
    late = ", ".join(f"{a.name} at {a.load:.0%} {a.pod_late_steps}" for a in arms)
    lines += ["", f"Pod steps started late (its host too busy), per arm: {late}."]
    return "\n".join(lines) + "\n"


def arms_markdown(
    loaded: Sequence[LiveArm], calms: Sequence[LiveArm], rate: float, duration_s: float
) -> list[str]:
    """Each flow-control arm against its own unloaded reference (the same arm at half load where it
    was run, else ``flow-control``'s): Critical's ratio, what the lower bands got, the pod used,
    the engine's preemptions and what Standard paid for them (TTFT, inter-token latency)."""
    fallback = next((a for a in calms if a.name == "flow-control"), calms[0])
    lines = [
        "| router | Critical P99 s | unloaded P99 s (arm) | / unloaded | Standard served | Sheddable served "
        "| completed / pod rate | preemptions | Standard TTFT p50 / p99 s | Standard ITL mean ms "
        "| Standard tenants served / fair |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in loaded:
        if not arm.name.startswith("flow-control"):
            continue
        calm = next((a for a in calms if a.name == arm.name), fallback)
        by_band = {r.band: r for r in rows_for(arm.name, live_items(arm))}
        calm_p99 = rows_for(calm.name, live_items(calm))[0].ttft_p99_s
        p99 = by_band["Critical"].ttft_p99_s
        ratio = "-" if not calm_p99 or p99 is None else f"{p99 / calm_p99:.2f}x"
        standard = by_band["Standard"]
        itl = [
            s.itl_s
            for r, s in zip(arm.requests, arm.samples, strict=True)
            if arm.band_of(r) == 0 and s.ok and s.itl_s is not None
        ]
        itl_text = f"{sum(itl) / len(itl) * 1000:.1f}" if itl else "-"
        tenants = " / ".join(
            f"{t.tenant} {t.ratio:.2f}"
            for t in tenants_for(live_items(arm))
            if t.band == "Standard" and t.ratio
        )
        served = {band: r.served / max(r.offered, 1) for band, r in by_band.items()}
        lines.append(
            f"| {arm.name} | {_s(p99)} | {_s(calm_p99)} ({calm.name}) | {ratio} | {served['Standard']:.1%} "
            f"| {served['Sheddable']:.1%} | {completed_rps(arm, duration_s) / rate:.1%} | {arm.preemptions} "
            f"| {_s(standard.ttft_p50_s)} / {_s(standard.ttft_p99_s)} | {itl_text} | {tenants} |"
        )
    return lines


def run_live_overload_command(
    *, out: Path, quick: bool, seed: int, command: str, routers: Sequence[str] | None = None
) -> int:
    """The live CLI body: run the routers (``routers``, default every arm) in turn, write
    ``overload-priority-live.md``, print it."""
    unknown = [name for name in routers or () if name not in ARMS]
    if unknown:
        raise IgwToolingError(
            f"--policies: unknown overload-priority arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}"
        )
    duration_s = 15.0 if quick else 60.0
    (out / "overload-live-work").mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    rate, arms = asyncio.run(
        run_live_overload(
            out / "overload-live-work",
            duration_s=duration_s,
            seed=seed,
            routers=tuple(routers or ARMS),
            progress=stderr_progress(),
        )
    )
    text = live_markdown(rate, arms, command, duration_s, (load_before, os.getloadavg()[0]))
    (out / "overload-priority-live.md").write_text(text, encoding="utf-8")
    print(text)
    return 0
