"""The body of ``igw demo`` (see ``igw.cli.demo``): live mode on the demo scenario, with progress."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from igw.bench.capacity import fleet_capacity
from igw.bench.console import scenario_table, share_table, thin_sample_warnings
from igw.bench.interrupt import run_interruptible
from igw.bench.live_runner import LiveOptions, long_plan_problem, plan_line, planned_wall_s, run_live
from igw.bench.report import write_report
from igw.bench.results import ScenarioRun
from igw.bench.routers import ROUTERS
from igw.bench.scenarios import DEMO
from igw.bench.stats import RequestSample
from igw.bench.workload import mean_fraction

DEMONSTRATED: Final = frozenset({"gateway-default", "gateway-tuned"})
"""The routers a demo shows working: a request one of them fails, or one of them not run, fails the
demo (exit 1). The others (round-robin, the peers) are what it is compared with: round-robin leaves
about half of ``make demo``'s requests unanswered every run, which is the point of the comparison."""


def _routers(raw: str) -> list[str]:
    names = [r.strip() for r in raw.split(",") if r.strip()]
    unknown = [r for r in names if r not in ROUTERS]
    if unknown or not names:
        raise ValueError(
            f"--routers: unknown {', '.join(unknown) or '(none given)'} (known: {', '.join(ROUTERS)})"
        )
    return names


def demo_failures(run: ScenarioRun, *, drain_s: float) -> list[str]:
    """What failed the demo, one phrase each: a router that was not run (any router: the comparison
    is incomplete), and requests failed by a router of :data:`DEMONSTRATED`. Requests still
    unanswered when the ``--drain`` ran out are counted apart, with the remedy: a demo shortened with
    a small ``--drain`` failed every request, and the line blamed the gateway without saying why."""
    problems = []
    for name, pol in run.policies.items():
        if pol.unavailable is not None:
            problems.append(f"{name} not run ({pol.unavailable})")
            continue
        failed = sum(s.errors for s in pol.summaries)
        if failed and name in DEMONSTRATED:
            problem = f"{name} failed {failed} of {sum(s.requests for s in pol.summaries)} requests"
            unanswered = sum(1 for s in pol.samples if s.timed_out)  # the first seed's: the demo has one
            if unanswered:
                problem += (
                    f" ({unanswered} still unanswered {drain_s:g} s after the last send: raise --drain,"
                    " default 45)"
                )
            problems.append(problem)
    return problems


def run_demo(args: argparse.Namespace) -> int:

    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    try:  # --requests, --rate and --drain are range-checked while parsing (igw.cli.demo)
        routers = _routers(args.routers)
    except ValueError as exc:
        print(f"igw demo: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    out = Path(args.out)
    console.rule("[bold]igw demo[/bold]: GPU-aware gateway vs round-robin on a simulated mixed fleet")
    console.print(f"fleet: {DEMO.describe()['fleet']}; workload: {DEMO.describe()['workload']}")
    seeds, drain = len(DEMO.seeds), args.drain
    console.print(plan_line(scenarios=1, seeds=seeds, routers=len(routers), requests=args.requests,
                            rate=args.rate, drain_s=drain))  # fmt: skip
    planned = planned_wall_s(runs=seeds * len(routers), requests=args.requests, rate=args.rate, drain_s=drain)
    problem = long_plan_problem(planned_s=planned, requests=args.requests, rate=args.rate, drain_s=drain,
                                requests_option="--requests", rate_option="--rate")  # fmt: skip
    if problem is not None and not args.allow_long_run:
        # --rate 0.001 planned 600,000 s (167 h) per router and started it without a word
        print(f"igw demo: {problem}", file=sys.stderr)
        return 2
    with console.status(
        "measuring fleet capacity (a flood, then an offered-rate sweep per pod type, in the DES)"
    ):
        cap = fleet_capacity(DEMO)
    virtual_rps = mean_fraction(DEMO) * cap.requests_per_s
    duration_scale = (args.requests / virtual_rps) / DEMO.duration_s
    console.print(f"capacity: {cap.describe()}")
    for line in cap.sweep_lines():
        console.print(f"  sweep {line}")
    console.print(
        f"load: {DEMO.describe()['load']} = {virtual_rps:.0f} req/s of simulated GPU time, "
        f"{args.requests} requests per router at {args.rate:g} req/s wall"
    )
    options = LiveOptions(
        routers=routers,
        seeds=list(DEMO.seeds),
        workdir=out / "work",
        duration_scale=duration_scale,
        target_wall_rps=args.rate,
        drain_s=args.drain,
    )
    progress = Progress(
        TextColumn("{task.description:<18}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("errors {task.fields[errors]}"),
        TimeElapsedColumn(),
        console=console,
    )
    tasks: list[TaskID] = []
    errors = [0]

    def on_router(name: str, total: int) -> None:
        tasks.append(progress.add_task(name, total=total, errors=0))
        errors[0] = 0

    def on_sample(sample: RequestSample) -> None:
        if not sample.ok:
            errors[0] += 1
        progress.update(tasks[-1], advance=1, errors=errors[0])

    try:
        with progress:
            live = run_live(
                DEMO,
                options=options,
                capacity=cap,
                say=lambda m: progress.console.print(f"  {m}"),
                on_sample=on_sample,
                on_router=on_router,
                command="igw demo " + " ".join(sys.argv[2:]),
            )
            run = run_interruptible(live)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every process the demo started has been stopped[/yellow]")
        return 130
    console.print(scenario_table(run))
    console.print(share_table(run))
    md = write_report(run, out)
    console.print(
        f"latencies are simulated GPU time ({run.parameters['time_scale']});\n"
        f"err = requests unanswered {args.drain:g}s after the last one was sent (the client gave up); they\n"
        "count as failed (infinite latency) in the percentiles and against goodput: a percentile that\n"
        "reaches into them reads 'failed'. p99 vs RR: the change against round-robin, negative = lower =\n"
        "better (-100 % when round-robin's p99 is a failure).\n"
        # escaped, not markup: --out 'd[/b]' ended a finished demo in a MarkupError traceback
        + escape(f"report: {md} (+ JSON and PNG plots in {out}/)")
        + f"; finished in {time.monotonic() - started:.0f}s"
    )
    for warning in thin_sample_warnings([run], remedy="raise --requests"):
        print(warning, file=sys.stderr)
    problems = demo_failures(run, drain_s=args.drain)
    if problems:
        print(f"igw demo: the demo failed: {'; '.join(problems)}; exit status 1", file=sys.stderr)
        return 1
    return 0
