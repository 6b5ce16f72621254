"""``igw bench``: routing policies side by side on the simulated fleet (DES or live mode).

Examples::

    igw bench --list
    igw bench mixed-fleet-8b                       # DES, every policy, seeds 1 2 3
    igw bench all --seeds 1,2,3,4,5 --out bench-results
    igw bench homogeneous-steady --policies round-robin,gateway-default,oracle --quick
    igw bench --trace trace.jsonl --fleet fleet.yaml
    igw bench --tune                               # weight search (default candidates and scenarios)
    igw bench random --count 20 --seed 1           # a random scenario family (fleets, workloads, loads)
    igw bench mixed-fleet-8b --mode live --peers   # real HTTP: gateway, round-robin proxy, peer routers
    igw bench global                               # tier 2: failover, ramp-up, regional failover, cost
    igw bench global-des                           # tier 2 in virtual time: 10 regions x 20 clusters
    igw bench overload-priority                    # flow control at 150 % load, DES (bands, tenants)
    igw bench canary-rollout                       # live: 10 % -> 50 % -> 100 % by hot reload
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from igw.cli.arg_types import (
    AGREEMENT_DES_SEEDS,
    COUNT,
    DURATION_SCALE,
    LIVE_DRAIN,
    LIVE_RATE,
    SCRAPE_INTERVAL,
    SEED,
    SEEDS,
    TRACE_SPEEDUP,
    existing_directory,
    existing_file,
    existing_file_or_stdin,
    name_list,
    output_directory,
    output_file,
)
from igw.cli.option_scope import given, refuse_unused

DEFAULT_LIVE_RATE = 20.0
GLOBAL_LIVE_RATE = 10.0
"""``igw bench global``'s offered rate when ``--live-rate`` is not given."""

DES_USES = frozenset(
    {"mode", "policies", "seeds", "quick", "duration_scale", "weights", "scrape_interval", "admission",
     "decisions_out", "allow_failures", "out"}
)  # fmt: skip
"""The options a DES run of named scenarios uses."""
TRACE_USES = DES_USES | {"trace", "fleet", "trace_speedup"}
RANDOM_USES = DES_USES | {"count", "seed", "draws"}
LIVE_USES = frozenset(
    {"mode", "policies", "seeds", "quick", "weights", "peers", "live_requests", "live_rate", "drain",
     "check_agreement", "agreement_des_seeds", "allow_failures", "allow_long_run", "out"}
)  # fmt: skip
"""The options ``--mode live`` uses (no ``--duration-scale``: ``--live-requests`` sets the scale)."""
RUN_ALONE_USES: dict[str, frozenset[str]] = {
    "global": frozenset({"quick", "live_rate", "allow_failures", "out"}),
    "global-des": frozenset({"quick", "seeds", "out"}),
    "overload-priority": frozenset({"mode", "quick", "seeds", "out"}),
    "canary-rollout": frozenset({"quick", "out"}),
}
"""The options each run-alone benchmark uses (besides ``--mode`` naming the mode it runs in)."""
NATIVE_MODE = {"global": "live", "global-des": "des", "canary-rollout": "live"}
"""The one mode of a run-alone benchmark that has one: ``--mode`` naming it is accepted, as a no-op."""
ONE_SEED = ("global-des", "overload-priority")
"""Run-alone benchmarks of a single seed: more than one in ``--seeds`` is refused, not cut to the first."""

HELP = "Benchmark routing policies (gateway, round-robin, peers, oracle) on the simulated fleet."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help="scenario or group names (see --list)"
    )
    parser.add_argument("--list", action="store_true", help="list scenarios and policies, then exit")
    parser.add_argument(
        "--summarize",
        type=existing_directory,
        metavar="DIR",
        help="rebuild DIR/summary.md from a run's JSON reports",
    )
    parser.add_argument(
        "--tune",
        action="store_true",
        help="rank gateway weight candidates by TTFT p99 / oracle's over the scenarios (DES, quick scale)",
    )
    parser.add_argument(
        "--trace", type=existing_file, metavar="FILE", help="replay a JSONL/CSV trace instead of a scenario"
    )
    parser.add_argument(
        "--fleet",
        type=existing_file_or_stdin,
        metavar="FLEET.yaml",
        help="fleet for --trace (default: mixed-fleet-8b's)",
    )
    parser.add_argument(
        "--trace-speedup",
        type=TRACE_SPEEDUP,
        default=1.0,
        help="divide trace arrival times by this, 0.001 to 1e6 (default 1)",
    )
    parser.add_argument(
        "--mode",
        choices=("des", "live"),
        default="des",
        help="des: the discrete-event simulator; live: simulated pods on loopback (default des)",
    )
    parser.add_argument(
        "--policies",
        type=name_list,
        default=None,
        help="comma-separated policy names (see --list; default: every one but oracle-slo); round-robin, "
        "the baseline, is always added",
    )
    parser.add_argument(
        "--seeds",
        type=SEEDS,
        default=None,
        help="comma-separated seeds (default 1,2,3; 1 with --quick, --tune and random)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="one seed, a quarter of each duration (smoke run)"
    )
    parser.add_argument(
        "--duration-scale",
        type=DURATION_SCALE,
        default=1.0,
        help="multiply scenario durations, at most 1000 (default 1)",
    )
    parser.add_argument(
        "--weights", default=None, help='gateway weights as JSON, e.g. \'{"queue":3,"prefix":2}\''
    )
    parser.add_argument(
        "--scrape-interval",
        type=SCRAPE_INTERVAL,
        default=0.05,
        help="DES: seconds between metric scrapes, 0.001 to 600 (default 0.05)",
    )
    parser.add_argument(
        "--admission", action="store_true", help="keep the gateway's 429 admission on (off by default)"
    )
    parser.add_argument(
        "--peers", action="store_true", help="live mode: install and run sglang-router/vllm-router"
    )
    parser.add_argument(
        "--live-requests", type=COUNT, default=400, help="live mode: requests per router (default 400)"
    )
    parser.add_argument(
        "--live-rate",
        type=LIVE_RATE,
        default=None,
        help=f"live mode: offered requests per wall s (default {DEFAULT_LIVE_RATE:g}; "
        f"{GLOBAL_LIVE_RATE:g} for `igw bench global`)",
    )
    parser.add_argument(
        "--allow-long-run",
        action="store_true",
        help="live mode: start a run planned to take over a day (refused otherwise, exit 2)",
    )
    parser.add_argument(
        "--drain",
        type=LIVE_DRAIN,
        default=30.0,
        help="live mode: wall s to wait after the last send, 0 to 3600 (default 30)",
    )
    parser.add_argument(
        "--check-agreement",
        action="store_true",
        help="live mode: also run the DES at the same scale, compare rankings (use 3+ live seeds)",
    )
    parser.add_argument(
        "--agreement-des-seeds",
        type=AGREEMENT_DES_SEEDS,
        default=10,
        help="--check-agreement: DES seeds at the same scale, 2 to 100 (cheap; default 10)",
    )
    parser.add_argument(
        "--decisions-out",
        type=output_file,
        metavar="FILE",
        help="DES: append each request's routing decision (JSON lines) to FILE, to diff two runs",
    )
    parser.add_argument(
        "--count", type=COUNT, default=20, help="igw bench random: how many scenarios to draw (default 20)"
    )
    parser.add_argument(
        "--seed", type=SEED, default=1, help="igw bench random: which family to draw (default 1)"
    )
    parser.add_argument(
        "--draws",
        type=SEEDS,
        default=None,
        help="igw bench random: only these draws of the family, comma-separated numbers (random-1-16: 16)",
    )
    parser.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when requests failed (they still count as infinite latency and against goodput)",
    )
    parser.add_argument(
        "--out",
        type=output_directory,
        default="bench-results",
        help="report directory: Markdown, JSON, PNG (default bench-results)",
    )


def offered_rate(args: argparse.Namespace, *, default: float) -> float:
    """``--live-rate`` as given, else ``default`` (which differs by benchmark). The option defaults
    to ``None`` so that a rate given on the command line is told apart from no rate: compared with
    the general default, ``igw bench global --live-rate 20`` ran at 10 requests/s."""
    rate: float | None = args.live_rate
    return default if rate is None else rate


def scenario_name_problem(names: list[str], known: list[str], run_alone: list[str]) -> str | None:
    """Why ``names`` cannot run together, or ``None``. A run-alone benchmark beside another name
    was reported as an unknown scenario, and neither ``--list`` nor that message named the
    run-alone benchmarks, so ``igw bench overload-priorty`` led nowhere."""
    alone = [n for n in names if n in run_alone]
    if alone and len(names) > 1:
        return f"{alone[0]} runs alone: name no other scenario with it"
    unknown = [n for n in names if n not in known and n not in run_alone]
    if unknown:
        return (
            f"unknown scenario {unknown[0]!r} (known: {', '.join(known)}; "
            f"each run alone: {', '.join(run_alone)}; see --list)"
        )
    return None


def options_used(args: argparse.Namespace) -> tuple[str, frozenset[str], str | None]:
    """The mode the command line chose (as the message names it), the options that mode uses, and
    why the positional scenarios cannot go with it (``None`` when they can). Each mode once ignored
    the options it does not use: ``igw bench global --seeds 4`` and ``overload-priority --seeds
    1,2,3`` ran seed 1, ``--count`` outside ``random`` did nothing, ``--list`` after a run-alone
    name ran that benchmark."""
    names = list(args.scenarios)
    if args.list:
        return "--list", frozenset({"list"}), "--list lists every scenario: name none with it"
    if args.summarize:
        return "--summarize", frozenset({"summarize"}), "--summarize reads a run's folder: name no scenario"
    if args.tune:
        return "--tune", frozenset({"tune", "weights", "seeds", "duration_scale", "out", "mode"} - (
            {"mode"} if args.mode == "live" else set())), None  # fmt: skip
    if len(names) == 1 and names[0] in RUN_ALONE_USES:
        name = names[0]
        used = RUN_ALONE_USES[name]
        native = NATIVE_MODE.get(name)
        if native is None or args.mode == native:
            used = used | {"mode"}
        if name == "overload-priority" and args.mode == "live":
            used = used | {"policies"}
        return name, used, None
    if args.trace:
        return "--trace", TRACE_USES, "--trace replays the trace instead: name no scenario with it"
    if args.mode == "live":
        return (
            "--mode live",
            LIVE_USES - ({"agreement_des_seeds"} if not args.check_agreement else set()),
            None,
        )
    if names == ["random"]:
        return "random", RANDOM_USES, None
    return "a DES run of scenarios", DES_USES, None


def _refuse_options_the_mode_ignores(args: argparse.Namespace) -> bool:
    """Print a usage error and return ``True`` when an option given is one the chosen mode ignores."""
    mode, used, no_scenarios = options_used(args)
    if no_scenarios is not None and args.scenarios:
        print(f"igw bench: {no_scenarios}", file=sys.stderr)
        return True
    if refuse_unused(args, command="igw bench", mode=mode, used=used):
        return True
    if mode in ONE_SEED and "seeds" in given(args) and len(args.seeds) > 1:
        print(
            f"igw bench: {mode} runs one seed: give one to --seeds (e.g. --seeds {args.seeds[0]})",
            file=sys.stderr,
        )
        return True
    return False


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.bench.scenarios import GROUPS, RUN_ALONE, SCENARIOS

    problem = scenario_name_problem(list(args.scenarios), [*SCENARIOS, *GROUPS], list(RUN_ALONE))
    if problem is not None:
        print(f"igw bench: {problem}", file=sys.stderr)
        return 2
    if _refuse_options_the_mode_ignores(args):
        return 2
    if args.scenarios == ["global-des"]:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.bench.global_des import run_global_des_command

        seed = args.seeds[0] if args.seeds else 1
        command = "igw bench global-des" + (" --quick" if args.quick else "")
        return run_global_des_command(out=Path(args.out), quick=args.quick, seed=seed, command=command)
    if args.scenarios == ["overload-priority"]:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.bench.overload_report import run_live_overload_command, run_overload_command

        seed = args.seeds[0] if args.seeds else 1
        live = args.mode == "live"
        command = (
            "igw bench overload-priority"
            + (" --mode live" if live else "")
            + (" --quick" if args.quick else "")
        )
        if live:
            if args.policies:
                command += " --policies " + ",".join(args.policies)
            return run_live_overload_command(
                out=Path(args.out), quick=args.quick, seed=seed, command=command, routers=args.policies
            )
        return run_overload_command(out=Path(args.out), quick=args.quick, seed=seed, command=command)
    if args.scenarios == ["canary-rollout"]:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.bench.canary_rollout import run_canary_command

        command = "igw bench canary-rollout" + (" --quick" if args.quick else "")
        return run_canary_command(out=Path(args.out), quick=args.quick, command=command)
    if args.scenarios == ["global"]:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.bench.global_run import run_global_command

        rate = offered_rate(args, default=GLOBAL_LIVE_RATE)
        command = "igw bench global" + (" --quick" if args.quick else "")
        return run_global_command(
            out=Path(args.out),
            rate=rate,
            quick=args.quick,
            command=command,
            allow_failures=args.allow_failures,
        )
    args.live_rate = offered_rate(args, default=DEFAULT_LIVE_RATE)
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.cli.bench_run import run_bench

    try:
        return run_bench(args)
    except ValueError as exc:
        print(f"igw bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("igw bench: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
