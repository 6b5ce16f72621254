"""What ``igw bench`` does once its arguments are parsed (kept out of ``igw.cli`` to keep imports lazy)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from igw.bench.console import (
    PlainProgress,
    failure_exit_status,
    scenario_table,
    share_table,
    thin_sample_warnings,
)
from igw.bench.des_runner import DesOptions, check_duration_scale, run_des, run_trace
from igw.bench.live_runner import run_live_cli
from igw.bench.policies.registry import DEFAULT_POLICIES, POLICIES, WEIGHTED_POLICIES
from igw.bench.random_family import family, family_verdict, is_family_member, verdict_markdown
from igw.bench.report import write_report
from igw.bench.scenarios import GROUPS, RUN_ALONE, SCENARIOS, resolve
from igw.bench.summary import write_summary
from igw.bench.tune import DEFAULT_CANDIDATES, DEFAULT_SCENARIOS, tune
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import profile_from_weights

RANDOM_FAMILY = "random"
"""``igw bench random``: the scenario name that draws a random family (``--count``, ``--seed``)."""


def _print_catalogue() -> None:
    print("scenarios:")
    for s in SCENARIOS.values():
        d = s.describe()
        print(f"  {s.name:30} {s.summary}")
        print(f"  {'':30} fleet: {d['fleet']}; load: {d['load']}; workload: {d['workload']}")
    for name, members in GROUPS.items():
        print(f"  {name:30} group: {', '.join(members)}")
    print("run alone (igw bench NAME):")
    for name, summary in RUN_ALONE.items():
        print(f"  {name:30} {summary}")
    print("policies:")
    for e in POLICIES.values():
        print(f"  {e.name:22} {e.description}")


def _parse_weights(raw: str | None) -> dict[str, float] | None:
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"--weights: not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        raise ValueError('--weights: expected a JSON object of numbers, e.g. {"queue": 3, "prefix": 2}')
    weights = {k: float(v) for k, v in value.items()}
    if not weights:
        # `{}` ran every policy on its own defaults (an empty map is falsy where the policies read
        # it) while the report stated the override `{}`
        raise ValueError("--weights: the map is empty; name at least one weight, or leave --weights out")
    try:
        # the scheduler is built from them only when a gateway policy's turn comes: checked now, an
        # unknown scorer or a negative weight failed after every earlier policy's run
        profile = profile_from_weights(weights)
    except SchedulerConfigError as exc:
        raise ValueError(f"--weights: {exc}") from None
    if not profile.scorers:
        # the weights replace the defaults, so with every one 0 no scorer ran: each pick was a tie of
        # all pods, and the report showed that random router as gateway-default (before session s43)
        raise ValueError(
            "--weights: every weight is 0, so no scorer would run and the gateway would pick among "
            "all pods alike; give at least one weight above 0"
        )
    return weights


def _policies(args: argparse.Namespace) -> list[str]:
    names = list(args.policies) if args.policies else list(DEFAULT_POLICIES)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ValueError(f"--policies: unknown {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    if "round-robin" not in names:
        names.insert(0, "round-robin")  # every reduction is relative to it
    return names


def run_bench(args: argparse.Namespace) -> int:

    if args.list:
        _print_catalogue()
        return 0
    if args.summarize:
        directory = Path(args.summarize)  # a folder that exists: arg_types.existing_directory
        _refuse_a_folder_without_reports(directory)
        print(write_summary(directory).read_text())
        _summarize_family(directory)
        return 0
    if args.tune:
        return _run_tune(args)
    if not args.scenarios and not args.trace:
        raise ValueError("name at least one scenario (see --list) or pass --trace FILE")
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)  # logs and pipes: keep the wide tables readable
    out = Path(args.out)
    command = "igw bench " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "igw bench"
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    scale = args.duration_scale * (0.25 if args.quick else 1.0)
    weights = _parse_weights(args.weights)
    policies = _policies(args)
    if weights is not None and not WEIGHTED_POLICIES.intersection(policies):
        raise ValueError(
            f"--weights: none of the policies run ({', '.join(policies)}) has weights; "
            f"add {' or '.join(sorted(WEIGHTED_POLICIES))} to --policies"
        )
    if args.mode == "live":
        if args.trace:
            raise ValueError("--trace runs in DES mode only")
        args.parsed_weights = weights
        return run_live_cli(args, console=console, out=out, seeds=seeds, policies=policies, command=command)

    random_family = list(args.scenarios) == [RANDOM_FAMILY]
    if random_family:
        scenarios = family(args.seed, args.count, args.draws)
        seeds = args.seeds or [1]
    elif args.trace:
        scenarios = []
    else:
        scenarios = resolve(list(args.scenarios))
    options = DesOptions(
        policies=policies,
        seeds=seeds,
        scrape_interval_s=args.scrape_interval,
        duration_scale=scale,
        weights=weights,
        saturation_off=not args.admission,
        decisions_out=Path(args.decisions_out) if args.decisions_out else None,
    )
    index: list[str] = []
    started = time.monotonic()
    plain = None if console.is_terminal else PlainProgress(sys.stderr)
    with console.status("starting") as status:

        def progress(msg: str) -> None:
            line = f"[{time.monotonic() - started:6.1f}s] {msg}"
            status.update(line)
            if plain is not None:
                plain(line)

        if args.trace:
            runs = [run_trace(Path(args.trace), fleet_yaml=args.fleet, speedup=args.trace_speedup,
                              options=options, progress=progress, command=command)]  # fmt: skip
        else:
            check_duration_scale(scenarios, duration_scale=scale, progress=progress)
            runs = []
            for scenario in scenarios:
                runs.append(run_des(scenario, options=options, progress=progress, command=command))
                console.print(scenario_table(runs[-1]))
                console.print(share_table(runs[-1]))
                md = write_report(runs[-1], out)
                index.append(md.name)
    if args.trace:
        console.print(scenario_table(runs[0]))
        index.append(write_report(runs[0], out).name)
    if not args.trace:
        index.append(write_summary(out).name)
    if random_family:
        text = verdict_markdown(family_verdict([r.to_json() for r in runs]), command=command)
        (out / "random-family.md").write_text(text)
        index.append("random-family.md")
        console.print(text)
    # Last, so that it links every report the run wrote (the summary and the family's verdict too),
    # and named in the list below: until session s50 it was written and left out of both.
    (out / "index.md").write_text(
        "# igw bench results\n\n"
        + f"Command: `{command}`\n\n"
        + "\n".join(f"- [{n}]({n})" for n in index)
        + "\n"
    )
    index.append("index.md")
    # escaped, not markup: --out 'o[/b]' ended a finished run in a MarkupError traceback
    written = escape(f"{out}/ ({', '.join(index)})")
    console.print(f"reports written to {written} in {time.monotonic() - started:.0f}s")
    remedy = "replay a longer trace" if args.trace else "raise --duration-scale (or drop --quick)"
    for warning in thin_sample_warnings(runs, remedy=remedy):
        print(warning, file=sys.stderr)
    return failure_exit_status(console, runs, allowed=args.allow_failures)


def _refuse_a_folder_without_reports(directory: Path) -> None:
    """``ValueError`` naming the file when a ``*.json`` of ``directory`` is not JSON (a report cut short
    by an interrupted run: the message named no file), and when none is a report ``--summarize``
    reads: the wrong folder got a summary.md of headers only written into it, and exit 0."""
    docs = []
    for path in sorted(p for p in directory.glob("*.json") if p.is_file()):
        try:
            docs.append(orjson.loads(path.read_bytes()))
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ValueError(f"--summarize: {path}: not a JSON report ({exc})") from None
    reports = [d for d in docs if isinstance(d, dict) and "policies" in d and d.get("mode") == "des"]
    members = [d for d in docs if isinstance(d, dict) and is_family_member(str(d.get("scenario", "")))]
    if not reports and not members:
        raise ValueError(
            f"--summarize: {directory} holds no DES report of igw bench (a <scenario>.json it wrote); "
            "pass the --out folder of a run"
        )


def _summarize_family(directory: Path) -> None:
    """``--summarize`` on a random-family run also rebuilds ``random-family.md`` (from what finished)."""
    docs = [orjson.loads(p.read_bytes()) for p in sorted(directory.glob("*.json")) if p.is_file()]
    members = [d for d in docs if isinstance(d, dict) and is_family_member(str(d.get("scenario", "")))]
    if members:
        command = f"igw bench --summarize {directory}"
        text = verdict_markdown(family_verdict(members), command=command)
        (directory / "random-family.md").write_text(text)
        print(text)


def _run_tune(args: argparse.Namespace) -> int:

    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    scenarios = resolve(list(args.scenarios) or list(DEFAULT_SCENARIOS))
    weights = _parse_weights(args.weights)
    candidates = [DEFAULT_CANDIDATES[0], weights] if weights is not None else list(DEFAULT_CANDIDATES)
    seeds = args.seeds or [1]
    scale = args.duration_scale * 0.25
    plain = None if console.is_terminal else PlainProgress(sys.stderr)
    with console.status("tuning") as status:

        def progress(msg: str) -> None:
            status.update(msg)
            if plain is not None:
                plain(msg)

        check_duration_scale(scenarios, duration_scale=scale, progress=progress)
        rows, baselines = tune(scenarios, candidates=candidates, seeds=seeds, duration_scale=scale,
                               progress=progress)  # fmt: skip
    table = Table(
        title="gateway weight candidates, best first (TTFT p99 in ms; objective = geomean p99 / oracle)"
    )
    table.add_column("weights", overflow="fold", max_width=44)
    for s in scenarios:
        b = baselines[s.name]
        table.add_column(
            f"{s.name}\n(RR {b['round-robin'] * 1000:.0f}, oracle {b['oracle'] * 1000:.0f})", justify="right"
        )
    table.add_column("objective", justify="right")
    for row in rows:
        table.add_row(
            orjson.dumps(row.weights).decode(),
            *(f"{row.p99_s[s.name] * 1000:.0f}" for s in scenarios),
            f"{row.objective:.2f}",
        )
    console.print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "igw bench " + shlex.join(sys.argv[2:]),
        "seeds": seeds,
        "duration_scale": scale,
        "baselines_p99_s": baselines,
        "candidates": [
            {
                "weights": r.weights,
                "p99_s": r.p99_s,
                "ratio_to_oracle": r.ratio_to_oracle,
                "objective": r.objective,
            }
            for r in rows
        ],
    }
    (out / "tune.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    console.print(f"written {escape(str(out / 'tune.json'))}; best: {orjson.dumps(rows[0].weights).decode()}")
    return 0
