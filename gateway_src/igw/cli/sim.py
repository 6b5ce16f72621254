"""``igw sim``: the simulated GPU fleet - live pods (``fleet``), a DES run (``run``), ``presets``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from igw.cli.arg_types import (
    FLEET_TIME_SCALE,
    NON_NEGATIVE_INT,
    POSITIVE,
    SCRAPE_INTERVAL,
    SEED,
    SIM_CV,
    SIM_RATE,
    SIM_REQUESTS,
    existing_file,
    existing_file_or_stdin,
    output_file,
    workload_policy_name,
)
from igw.cli.option_scope import refuse_given

TRACE_REPLACES = frozenset({"requests", "rate", "cv", "lengths"})
"""``igw sim run`` options that shape generated requests: a ``--trace`` replaces them (it brings its own
arrivals and lengths), so giving one with it is refused rather than ignored."""

HELP = (
    "Simulated GPU fleet: start live vLLM/SGLang-like pods, run the discrete-event simulator, list presets."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sim_command", metavar="VERB", required=True)

    text = "start the pods of a fleet spec on loopback until SIGINT/SIGTERM (or --duration)"
    fleet = sub.add_parser("fleet", help=text, description=text)
    fleet.add_argument(
        "--spec",
        required=True,
        type=existing_file_or_stdin,
        help="fleet spec YAML (see gateway_src/igw/sim/examples/)",
    )
    fleet.add_argument("--json", action="store_true", help="print endpoints as one JSON object (for scripts)")
    fleet.add_argument(
        "--time-scale",
        type=FLEET_TIME_SCALE,
        default=None,
        help="override the spec's time_scale, 0.001 to 1000 wall s per simulated GPU s",
    )
    fleet.add_argument(
        "--duration",
        type=POSITIVE,
        default=None,
        help="stop by itself after this many seconds (default: run until SIGINT/SIGTERM)",
    )

    text = "run a workload through a routing policy in the discrete-event simulator"
    run = sub.add_parser("run", help=text, description=text)
    run.add_argument(
        "--spec",
        required=True,
        type=existing_file_or_stdin,
        help="fleet spec YAML (faults: slow, error_rate, freeze_metrics, kill)",
    )
    run.add_argument(
        "--policy",
        type=workload_policy_name,
        default="round-robin",
        help="policy name from the benchmark registry (default round-robin)",
    )
    run.add_argument(
        "--requests",
        type=SIM_REQUESTS,
        default=1000,
        help="number of requests to generate, at most 1000000 (default 1000)",
    )
    run.add_argument(
        "--rate", type=SIM_RATE, default=10.0, help="mean arrival rate, requests/s, 0.001 to 1e6 (default 10)"
    )
    run.add_argument(
        "--cv",
        type=SIM_CV,
        default=1.0,
        help="inter-arrival coefficient of variation, 0.001 to 10 (default 1: Poisson)",
    )
    run.add_argument(
        "--lengths",
        default="sharegpt",
        help="length profile: sharegpt, azure-conv, azure-code (default sharegpt; not with --trace)",
    )
    run.add_argument(
        "--trace",
        type=existing_file,
        default=None,
        help="replay a JSONL/CSV trace instead of generating requests (then no --requests, --rate, --cv "
        "or --lengths: the trace sets them)",
    )
    run.add_argument(
        "--seed",
        type=SEED,
        default=None,
        help="random seed of the workload and the engines (default: the spec's seed, itself 0 by default)",
    )
    run.add_argument(
        "--scrape-interval",
        type=SCRAPE_INTERVAL,
        default=0.05,
        help="seconds between metric scrapes, 0.001 to 600 (default 0.05)",
    )
    run.add_argument(
        "--max-retries",
        type=NON_NEGATIVE_INT,
        default=0,
        help="retry 429/503 after Retry-After up to N times (default 0)",
    )
    run.add_argument(
        "--records", type=output_file, default=None, help="write per-request records to this JSONL file"
    )

    text = "list GPU/model presets with derived KV capacity and step times"
    presets = sub.add_parser("presets", help=text, description=text)
    presets.add_argument(
        "--json", action="store_true", help="one JSON array of the presets (an object each, with sources)"
    )


def run(args: argparse.Namespace) -> int:
    if args.sim_command == "fleet":
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.cli.sim_fleet import run_fleet_command

        return run_fleet_command(
            spec_path=args.spec, as_json=args.json, time_scale=args.time_scale, duration=args.duration
        )
    if args.sim_command == "run":
        if args.trace is not None and refuse_given(
            args, command="igw sim run", mode="--trace", ignored=TRACE_REPLACES
        ):
            return 2
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.cli.sim_run import run_des_command

        options: dict[str, Any] = {
            "spec_path": args.spec,
            "policy_name": args.policy,
            "count": args.requests,
            "rate": args.rate,
            "cv": args.cv,
            "lengths": args.lengths,
            "trace": args.trace,
            "seed": args.seed,
            "scrape_interval_s": args.scrape_interval,
            "max_retries": args.max_retries,
            "records_path": args.records,
        }
        return run_des_command(**options)
    if args.sim_command == "presets":
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.cli.sim_presets import print_presets

        print_presets(sys.stdout, as_json=args.json)
        return 0
    return 2
