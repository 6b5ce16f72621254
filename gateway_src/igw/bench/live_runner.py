"""Live mode: the same requests over real HTTP through each router process, in front of a fresh fleet.

For every router a fresh simulated fleet is started (so no router inherits another's warm prefix
caches), the router process is started in front of it, the scenario's requests are replayed open-loop
at their scheduled times, and per-pod queue depth is sampled from the pods while it runs.

Time: the fleet runs at ``time_scale`` wall seconds per simulated GPU second, chosen so the offered
wall-clock rate fits this machine. Every latency is reported in *simulated GPU time* (wall time divided
by the time scale) so live numbers are comparable with DES numbers; the time scale is stated in the
report. Requests still unanswered ``drain_s`` (wall) after the last arrival are cancelled and counted
as errors: a real client would have given up too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from rich.markup import escape

from igw.bench.agreement import compare
from igw.bench.capacity import FleetCapacity, fleet_capacity
from igw.bench.console import failure_exit_status, scenario_table, share_table, thin_sample_warnings
from igw.bench.des_runner import DesOptions, run_des
from igw.bench.interrupt import run_interruptible
from igw.bench.loadgen import LiveRequest, drive
from igw.bench.peers import install
from igw.bench.processes import RouterStartError
from igw.bench.report import write_report
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.router_context import RouterContext
from igw.bench.routers import ROUTERS
from igw.bench.rr_proxy import BACKEND_HEADER
from igw.bench.scenarios import Scenario, resolve
from igw.bench.stats import RequestSample, load_share, summarize
from igw.bench.workload import adapter_names, fleet_pods, mean_fraction, model_name, scenario_requests
from igw.sim.live import RunningFleet, run_fleet
from igw.sim.spec import FleetSpec


class _PeerProbeNoise(logging.Filter):
    """Drop the simulated pods' tracebacks for the HTTP/2 preface that sglang-router and vllm-router send
    as a gRPC probe before falling back to HTTP (harmless and expected)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and "PRI/Upgrade" in str(exc))


logging.getLogger("aiohttp.server").addFilter(_PeerProbeNoise())

Say = Callable[[str], None]
OnSample = Callable[[RequestSample], None]


@dataclass(frozen=True, slots=True)
class LiveOptions:
    routers: Sequence[str]
    seeds: Sequence[int]
    workdir: Path
    duration_scale: float = 1.0
    target_wall_rps: float = 20.0
    """Offered requests per wall-clock second; sets the fleet's time scale."""
    drain_s: float = 30.0
    weights: dict[str, float] | None = None
    sample_interval_s: float = 0.25


def time_scale_for(virtual_rps: float, target_wall_rps: float) -> float:
    """Wall seconds per simulated second so that ``virtual_rps`` arrives at ``target_wall_rps``."""
    return max(0.05, virtual_rps / target_wall_rps)


async def _sample_queues(
    fleet: RunningFleet,
    *,
    names: dict[str, str],
    every_s: float,
    scale: float,
    into: dict[str, list[tuple[float, int]]],
) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    while True:
        t = (loop.time() - t0) / scale
        for info in fleet.pods:
            engine = fleet.pod(info.key).engine
            into.setdefault(names[info.key], []).append((t, engine.num_waiting + engine.num_running))
        await asyncio.sleep(every_s)


def _to_gpu_time(s: RequestSample, scale: float) -> RequestSample:
    def conv(v: float | None) -> float | None:
        return None if v is None else v / scale

    return replace(
        s, arrival_s=s.arrival_s / scale, ttft_s=conv(s.ttft_s), e2e_s=conv(s.e2e_s), itl_s=conv(s.itl_s)
    )


async def run_router_once(
    scenario: Scenario,
    *,
    router: str,
    requests: Sequence[LiveRequest],
    spec: FleetSpec,
    options: LiveOptions,
    on_sample: OnSample | None = None,
) -> tuple[list[RequestSample], dict[str, float], dict[str, list[tuple[float, int]]], float]:
    """One router, one fresh fleet: (samples in GPU time, per-pod share, queue series, wall duration)."""
    scale = spec.time_scale
    series: dict[str, list[tuple[float, int]]] = {}
    async with run_fleet(spec, admin=False) as fleet:
        names = {p.key: p.name for p in fleet.pods}
        ctx = RouterContext(
            pod_urls=tuple(p.url for p in fleet.pods),
            pod_labels=tuple(p.labels for p in fleet.pods),
            model=model_name(scenario),
            workdir=options.workdir,
            weights=options.weights,
            lora_adapters=adapter_names(scenario),
        )
        async with ROUTERS[router].start(ctx) as url:
            sampler = asyncio.create_task(
                _sample_queues(
                    fleet, names=names, every_s=options.sample_interval_s, scale=scale, into=series
                )
            )
            loop = asyncio.get_running_loop()
            started = loop.time()
            last = max((r.at_s for r in requests), default=0.0)
            try:
                samples = await drive(
                    base_url=url,
                    requests=requests,
                    endpoint_headers=[BACKEND_HEADER],
                    on_done=on_sample,
                    deadline_s=last + options.drain_s,
                )
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            wall = loop.time() - started
        finished = {
            names[p.key]: sum(fleet.pod(p.key).engine.counters.finished_by_reason.values())
            for p in fleet.pods
        }
    total = sum(finished.values())
    share = {k: (v / total if total else 0.0) for k, v in sorted(finished.items())}
    return [_to_gpu_time(s, scale) for s in samples], share, series, wall


def live_requests(
    scenario: Scenario, *, capacity_rps: float, seed: int, duration_s: float, scale: float
) -> list[LiveRequest]:
    sims = scenario_requests(scenario, capacity_rps=capacity_rps, seed=seed, duration_s=duration_s)
    return [
        LiveRequest(at_s=r.arrival * scale, model=r.model, prompt=r.prompt_text, max_tokens=r.output_tokens,
                    prompt_tokens=r.prompt_tokens)
        for r in sims
    ]  # fmt: skip


async def run_live(
    scenario: Scenario,
    *,
    options: LiveOptions,
    capacity: FleetCapacity | None = None,
    say: Say | None = None,
    on_sample: OnSample | None = None,
    on_router: Callable[[str, int], None] | None = None,
    command: str = "",
) -> ScenarioRun:
    """Every router in ``options.routers`` for every seed; routers that cannot start are reported."""
    tell = say or (lambda _m: None)
    cap = capacity or fleet_capacity(scenario, on_progress=tell)
    duration = scenario.duration_s * options.duration_scale
    virtual_rps = mean_fraction(scenario) * cap.requests_per_s
    scale = time_scale_for(virtual_rps, options.target_wall_rps)
    pods = fleet_pods(scenario)
    run = ScenarioRun(
        scenario=scenario.name,
        mode="live",
        parameters={
            **scenario.describe(),
            "duration_s": duration,
            "seeds": list(options.seeds),
            "capacity": cap.describe(),
            "capacity_sweep": "; ".join(cap.sweep_lines()) or "not run",
            "offered_rate_rps": round(virtual_rps, 3),
            "time_scale": f"{scale:.3f} wall s per simulated GPU s (latencies are GPU time = wall / scale)",
            "offered_wall_rps": round(virtual_rps / scale, 2),
            "drain_s": f"{options.drain_s:g} wall s after the last arrival; later answers count as errors",
            "routers": {r: ROUTERS[r].description for r in options.routers},
            "gateway_admission": "off (no 429s)",
            "command": command,
        },
        oracle=None,
    )
    for name in options.routers:
        run.policies[name] = PolicyRun(policy=name, description=ROUTERS[name].description)
    for seed in options.seeds:
        requests = live_requests(
            scenario, capacity_rps=cap.requests_per_s, seed=seed, duration_s=duration, scale=scale
        )
        spec = FleetSpec(pods=tuple(pods), time_scale=scale, seed=seed)
        for name in options.routers:
            pol = run.policies[name]
            if pol.unavailable is not None:
                continue
            tell(f"seed {seed}: {name} ({len(requests)} requests over ~{requests[-1].at_s:.0f}s wall)")
            if on_router is not None:
                on_router(name, len(requests))
            try:
                samples, share, series, wall = await run_router_once(
                    scenario, router=name, requests=requests, spec=spec, options=options, on_sample=on_sample
                )
            except RouterStartError as exc:
                pol.unavailable = str(exc).splitlines()[0]
                tell(f"{name}: not run ({pol.unavailable})")
                continue
            summary = summarize(samples, endpoints=[p.name for p in pods], ttft_slo_s=scenario.ttft_slo_s,
                                tpot_slo_s=scenario.tpot_slo_s,
                                duration_s=max(wall / scale, 1e-9))  # fmt: skip
            pol.seeds.append(seed)
            pol.summaries.append(replace(summary, load_share=share or load_share(samples, endpoints=[])))
            if len(pol.seeds) == 1:
                pol.samples = samples
                pol.queue_series = series
    return run


DES_EQUIVALENT: Final[dict[str, str]] = {
    "sglang-router": "sglang-cache-aware",
    "vllm-router": "vllm-cache-aware",
}
"""The DES policy that models each peer process in the agreement check: both run cache_aware (vllm-router
on the token ids the simulated vLLM pods' ``/v1/completions/render`` returns), with their own defaults."""


def agreement_des_seeds(*, live_seeds: Sequence[int], count: int) -> list[int]:
    """Seeds for the DES side of the agreement check: the live seeds first, then the next integers
    until ``count`` (the DES at live scale takes seconds, so it can afford many more repeats)."""
    out = list(dict.fromkeys(live_seeds))
    candidate = 1
    while len(out) < count:
        if candidate not in out:
            out.append(candidate)
        candidate += 1
    return out


def _renamed_to_live(des: ScenarioRun) -> ScenarioRun:
    back = {v: k for k, v in DES_EQUIVALENT.items()}
    renamed = ScenarioRun(scenario=des.scenario, mode=des.mode, parameters=des.parameters, oracle=des.oracle)
    renamed.policies = {back.get(n, n): p for n, p in des.policies.items()}
    return renamed


MAX_PLANNED_S: Final = 24 * 3600.0
"""The longest live run ``igw bench --mode live`` starts without ``--allow-long-run``: a day."""


def planned_wall_s(*, runs: int, requests: int, rate: float, drain_s: float) -> float:
    """Wall seconds a live run is planned to take: each (scenario, seed, router) run sends
    ``requests`` at ``rate`` per second, then waits up to ``drain_s`` (start-ups not counted)."""
    return runs * (requests / rate + drain_s)


def plan_line(*, scenarios: int, seeds: int, routers: int, requests: int, rate: float, drain_s: float) -> str:
    """What ``igw bench --mode live`` and ``igw demo`` say before they start anything: the runs and
    their length (in minutes under an hour: ``make demo``'s plan read "about 0.0 h")."""
    runs = scenarios * seeds * routers
    total = planned_wall_s(runs=runs, requests=requests, rate=rate, drain_s=drain_s)
    if total >= 3600:
        length = f"{total / 3600:.1f} h ({total:,.0f} s)"
    elif total >= 60:
        length = f"{total / 60:.0f} min ({total:,.0f} s)"  # make demo's read "0.0 h"
    else:
        length = f"{total:.0f} s"
    return (
        f"plan: {runs} live run{'s' if runs != 1 else ''} ({scenarios} scenario(s) x {seeds} seed(s) x "
        f"{routers} router(s)), each {requests} requests at {rate:g}/s + up to {drain_s:g} s drain: "
        f"about {length} besides start-ups"
    )


def long_plan_problem(
    *, planned_s: float, requests: int, rate: float, drain_s: float, requests_option: str, rate_option: str
) -> str | None:
    """Why a live plan of ``planned_s`` wall seconds is refused (over :data:`MAX_PLANNED_S`), naming
    the command's own options for the requests and the rate; ``None`` when it is within the bound.
    Shared by ``igw bench --mode live`` and ``igw demo``, which name those options differently."""
    if planned_s <= MAX_PLANNED_S:
        return None
    return (
        f"{requests_option} {requests} at {rate_option} {rate:g} (--drain {drain_s:g}) "
        f"plans about {planned_s / 3600:,.0f} h of live runs, over the {MAX_PLANNED_S / 3600:.0f} h bound: "
        f"raise {rate_option}, lower {requests_option}, or pass --allow-long-run"
    )


def run_live_cli(
    args: Any, *, console: Any, out: Path, seeds: Sequence[int], policies: Sequence[str], command: str
) -> int:
    """``igw bench --mode live``: every named scenario at reduced scale, optionally the agreement check."""

    if args.check_agreement and len(seeds) < 2:
        console.print(
            "[yellow]--check-agreement with one live seed: pairs are compared on a 10 % tolerance alone, "
            "without a significance test; use --seeds 1,2,3[/yellow]"
        )
    if args.check_agreement and args.agreement_des_seeds < 2:
        raise ValueError("--agreement-des-seeds: at least 2 (the tie rule needs seed-to-seed variation)")
    routers = [p for p in policies if p in ROUTERS]
    skipped = [p for p in policies if p not in ROUTERS]
    if skipped:
        console.print(f"live mode cannot run {', '.join(skipped)} (DES only: no process to start)")
    if args.peers:
        for name in ("sglang-router", "vllm-router"):
            if name not in routers:
                routers.append(name)
    scenarios = resolve(list(args.scenarios))
    plan = dict(scenarios=len(scenarios), seeds=len(seeds), routers=len(routers), requests=args.live_requests,
                rate=args.live_rate, drain_s=args.drain)  # fmt: skip
    console.print(plan_line(**plan))
    runs = len(scenarios) * len(seeds) * len(routers)
    planned = planned_wall_s(runs=runs, requests=args.live_requests, rate=args.live_rate, drain_s=args.drain)
    problem = long_plan_problem(planned_s=planned, requests=args.live_requests, rate=args.live_rate,
                                drain_s=args.drain, requests_option="--live-requests",
                                rate_option="--live-rate")  # fmt: skip
    if problem is not None and not args.allow_long_run:
        # --live-rate 0.001 with the default 400 requests planned 111 hours per run, unannounced
        raise ValueError(problem)
    if args.peers:
        failures = install(["sglang", "vllm"], say=console.print)
        for router, why in failures.items():
            console.print(f"[yellow]{router}: {escape(str(why))}[/yellow]")
    index: list[str] = []
    live_runs: list[ScenarioRun] = []
    for scenario in scenarios:
        cap = fleet_capacity(scenario)
        virtual_rps = mean_fraction(scenario) * cap.requests_per_s
        duration_scale = (args.live_requests / virtual_rps) / scenario.duration_s
        options = LiveOptions(
            routers=routers,
            seeds=seeds,
            workdir=out / "work" / scenario.name,
            duration_scale=duration_scale,
            target_wall_rps=args.live_rate,
            drain_s=args.drain,
            weights=args.parsed_weights,
        )
        with console.status(f"{scenario.name}: live") as status:
            live = run_interruptible(
                run_live(scenario, options=options, capacity=cap, say=status.update, command=command)
            )
        live.scenario = f"{scenario.name}-live"
        live_runs.append(live)
        console.print(scenario_table(live))
        console.print(share_table(live))
        if args.check_agreement:
            des_policies = [DES_EQUIVALENT.get(p, p) for p in routers]
            des_seeds = agreement_des_seeds(live_seeds=seeds, count=args.agreement_des_seeds)
            with console.status(f"{scenario.name}: DES at the same scale, {len(des_seeds)} seeds"):
                des = run_des(
                    scenario,
                    options=DesOptions(policies=des_policies, seeds=des_seeds, duration_scale=duration_scale,
                                       weights=args.parsed_weights),
                    capacity=cap,
                    command=command,
                )  # fmt: skip
            des.scenario = f"{scenario.name}-des-same-scale"
            console.print(scenario_table(des))
            agreements = compare(_renamed_to_live(des), live)
            for a in agreements:
                # not markup: "[one seed in a mode: ...]" was read as a rich tag and dropped
                console.print(a.describe(), markup=False)
            live.parameters["agreement_with_des"] = [a.describe() for a in agreements]
            live.parameters["des_equivalents"] = {k: v for k, v in DES_EQUIVALENT.items() if k in routers}
            index.append(write_report(des, out).name)
        index.append(write_report(live, out).name)
    (out / "index.md").write_text(
        "# igw bench (live) results\n\n"
        + f"Command: `{command}`\n\n"
        + "\n".join(f"- [{n}]({n})" for n in index)
        + "\n"
    )
    console.print(f"reports written to {escape(str(out))}/")
    for warning in thin_sample_warnings(live_runs, remedy="raise --live-requests"):
        print(warning, file=sys.stderr)
    return failure_exit_status(console, live_runs, allowed=args.allow_failures)
