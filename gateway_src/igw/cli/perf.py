"""``igw perf NAME``: component micro-benchmarks (each prints ratios against a baseline from the same run).

Routing-policy benchmarks on the simulated fleet are ``igw bench``; these measure our own
components' cost. The registry below is explicit: one entry per benchmark, naming its module under
:mod:`igw.perf` (which defines ``HELP`` and ``run(args) -> int``) and its command-line options, which
live here with every other command's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from igw.cli.arg_types import (
    CHECKS_PODS,
    COUNT,
    COUNTS,
    DES_LOAD,
    DES_PODS,
    DES_TARGET_S,
    DURATION_SCALE,
    FLEET_TIME_SCALE,
    FRACTION,
    GATEWAY_WORKERS,
    NON_NEGATIVE_INT,
    NOTE_INTERVAL,
    PERF_SCRAPE_SECONDS,
    SCRAPE_INTERVAL,
    SEED,
    SEEDS,
    SIM_REQUESTS,
    SOAK_CALIBRATE_SECONDS,
    SOAK_CONCURRENCY,
    SOAK_MINUTES,
    SOAK_PODS,
    SOAK_SETTLE_SECONDS,
    STALE_THRESHOLD,
    NumberList,
    create_parent,
    output_directory,
    output_file,
    policy_name,
    preset_name,
    scenario_names,
    split_names,
    worker_policy_name,
    workload_policy_name,
)
from igw.cli.option_scope import refuse_given
from igw.compiled import COMPILED_MODULES

HELP = (
    "Component benchmarks of the gateway's own parts, one per NAME (each listed with a line below; "
    "igw perf NAME -h for its options)."
)

SOAK_SETTLE_S: Final = 65.0
"""Default idle wait of ``igw perf soak`` before counting descriptors (see :data:`igw.perf.soak.SETTLE_S`)."""


def _gateway_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests", type=COUNT, default=2000, help="requests per phase at concurrency 1 (default 2000)"
    )
    parser.add_argument(
        "--rounds", type=COUNT, default=3, help="alternating direct/gateway rounds (default 3)"
    )
    parser.add_argument(
        "--stream-requests", type=COUNT, default=200, help="streaming requests per phase (default 200)"
    )
    parser.add_argument("--json", type=output_file, metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--skip-load", action="store_true", help="only the in-process decision and parse benchmarks"
    )
    parser.add_argument(
        "--workers",
        type=GATEWAY_WORKERS,
        default=1,
        help="igw serve --workers N for the gateway (default 1): on a machine with cores to spare the "
        "Rust peers serve on a thread per core, so compare them with a gateway of as many workers; "
        "its CPU per request is the whole group's",
    )
    parser.add_argument(
        "--gateway-tree",
        type=_igw_tree,
        default=None,
        metavar="DIR",
        help="directory holding the igw package the gateway runs (its PYTHONPATH), e.g. a compiled "
        "tree's gateway_src; the load, the backend and the peers stay the harness's (default: the "
        "harness's own igw)",
    )
    parser.add_argument(
        "--gateway-python",
        type=_python_executable,
        default=None,
        metavar="PYTHON",
        help="interpreter the gateway runs under, e.g. another virtual environment's bin/python, to "
        "compare CPython versions with everything else unchanged (default: the harness's)",
    )
    parser.add_argument(
        "--auth",
        choices=("jwt", "none"),
        default="jwt",
        help="jwt (default): the gateway checks a real RS256 JWT on every request (a loopback HTTPS JWKS), "
        "as issue 16's targets say; none: anonymous, as before 2026-12-03's session s14",
    )


def _auth_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--iterations", type=COUNT, default=3000, help="tokens verified per row (default 3000)"
    )
    parser.add_argument(
        "--repeats", type=COUNT, default=3, help="runs per row; the fastest is reported (default 3)"
    )


def _des_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests",
        type=SIM_REQUESTS,
        default=100_000,
        help="requests simulated, at most 1000000 (default 100000)",
    )
    parser.add_argument("--pods", type=DES_PODS, default=64, help="simulated pods, 1 to 10000 (default 64)")
    parser.add_argument(
        "--preset",
        type=preset_name,
        default="llama-3.1-8b/h100",
        help="GPU/model preset (default llama-3.1-8b/h100)",
    )
    parser.add_argument(
        "--load",
        type=DES_LOAD,
        default=0.6,
        help="offered load per pod as a fraction of ~12.5 req/s, ShareGPT on H100, 0.001 to 1000 "
        "(default 0.6)",
    )
    parser.add_argument(
        "--policy",
        type=workload_policy_name,
        default="round-robin",
        help="policy from the benchmark registry (default round-robin)",
    )
    parser.add_argument(
        "--lengths",
        default="sharegpt",
        help="length profile: sharegpt, azure-conv, azure-code (default sharegpt)",
    )
    parser.add_argument("--seed", type=SEED, default=0, help="random seed of the workload (default 0)")
    parser.add_argument(
        "--target-s",
        type=DES_TARGET_S,
        default=60.0,
        help="wall seconds the simulation should stay under, 0.1 to 86400; the ratio to it is printed "
        "(default 60)",
    )
    parser.add_argument(
        "--no-fast-forward", action="store_true", help="step every decode one by one (same records, slower)"
    )
    parser.add_argument(
        "--metrics-page",
        action="store_true",
        help="instead: cost of rendering a live pod's vLLM /metrics page (cold vs cached vs busy)",
    )


def _checks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pods", type=CHECKS_PODS, default=1000, help="model-server pods, 1 to 100000 (default 1000)"
    )
    parser.add_argument("--configs", type=COUNT, default=50, help="InferenceGatewayConfigs (default 50)")
    parser.add_argument("--schedulers", type=COUNT, default=2, help="schedulers per config (default 2)")
    parser.add_argument(
        "--repeat", type=COUNT, default=3, help="runs per measurement; the best is reported (default 3)"
    )


def _soak_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--minutes",
        type=SOAK_MINUTES,
        default=30.0,
        help="length of the 80 %% phase, 0.1 to 1440 (default 30)",
    )
    parser.add_argument(
        "--overload-minutes",
        type=SOAK_MINUTES,
        help="length of the 150 %% phase, 0.1 to 1440 (default: --minutes)",
    )
    parser.add_argument(
        "--pods", type=SOAK_PODS, default=2, help="simulated H100 pods, 1 to 1000 (default 2)"
    )
    parser.add_argument(
        "--time-scale",
        type=FLEET_TIME_SCALE,
        default=4.0,
        help="wall seconds per simulated second (default 4: the simulated GPUs, not this machine's CPU, "
        "must be the bottleneck, or the overload phase measures the load generator)",
    )
    parser.add_argument("--log", type=output_file, help="keep igw serve's log and access log in this file")
    parser.add_argument(
        "--settle-seconds",
        type=SOAK_SETTLE_SECONDS,
        default=SOAK_SETTLE_S,
        help=f"idle wait before counting descriptors, 0 to 3600 s (default {SOAK_SETTLE_S:g})",
    )
    parser.add_argument(
        "--calibrate-seconds",
        type=SOAK_CALIBRATE_SECONDS,
        default=20.0,
        help="capacity measurement length, 1 to 3600 s (default 20)",
    )
    parser.add_argument(
        "--concurrency",
        type=SOAK_CONCURRENCY,
        default=96,
        help="closed-loop clients when calibrating, 1 to 10000 (default 96)",
    )
    parser.add_argument("--seed", type=SEED, default=1, help="random seed of the load (default 1)")


def _scrape_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pods",
        type=COUNTS,
        default=[16, 64, 256, 1000],
        help="comma-separated fleet sizes, each measured in turn (default 16,64,256,1000)",
    )
    parser.add_argument(
        "--seconds",
        type=PERF_SCRAPE_SECONDS,
        default=10.0,
        help="measured wall time per fleet size, 0.1 to 3600 s (default 10)",
    )
    parser.add_argument(
        "--interval",
        type=SCRAPE_INTERVAL,
        default=0.05,
        help="scrape interval in seconds, 0.001 to 600 (default 0.05)",
    )
    parser.add_argument(
        "--stale-threshold",
        type=STALE_THRESHOLD,
        default=1.0,
        help="staleness bound in seconds, 0.001 to 3600 (default 1.0)",
    )
    parser.add_argument(
        "--parse-iterations", type=COUNT, default=2000, help="pages parsed for the parse row (default 2000)"
    )
    parser.add_argument(
        "--page-variants",
        type=COUNT,
        default=8,
        help="distinct pages each simulated pod cycles through (default 8: every scrape sees a changed "
        "page; 1: idle pods whose page never changes)",
    )
    parser.add_argument(
        "--busy-share",
        type=FRACTION,
        default=1.0,
        help="share of the pods whose pages change every scrape (default 1.0); the others are idle pods "
        "whose page never changes",
    )
    parser.add_argument(
        "--clients",
        type=_scrape_clients,
        default=["filtered", "fixed", "lean"],
        help="comma-separated ways to scrape, each measured per fleet size: filtered (the gateway's: "
        "its client asking for the routing families with name[], idle pods less often), fixed (the "
        "same, every pod every interval), lean (its client, whole pages, every interval), aiohttp "
        "(aiohttp's client, whole pages), bare (its client alone fetching filtered pages, no scraper: "
        "the floor); default filtered,fixed,lean",
    )
    parser.add_argument(
        "--groups",
        type=COUNTS,
        default=[],
        metavar="W,...",
        help="instead of the in-process rows: a real igw serve --workers W per worker count and fleet "
        "size, idle before the fleet, with the CPU of each of its processes (worker 0 scrapes, the "
        "others apply its snapshots) and every worker's scrape ages; e.g. 1,2,3",
    )


def _scrape_clients(text: str) -> list[str]:
    # deferred: start-up cost: igw builds every parser; the benchmark module loads aiohttp
    from igw.perf.scrape import CLIENTS

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown client(s) {unknown}; choose from {', '.join(CLIENTS)}")
    return names


def _workers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=NumberList(GATEWAY_WORKERS),
        default=[1, 2],
        help="comma-separated worker counts; the first is the baseline (default 1,2)",
    )
    parser.add_argument("--requests", type=COUNT, default=3000, help="requests per phase (default 3000)")
    parser.add_argument("--concurrency", type=COUNT, default=32, help="closed-loop clients (default 32)")
    parser.add_argument("--rounds", type=COUNT, default=3, help="alternating rounds (default 3)")
    parser.add_argument(
        "--load",
        choices=("raw", "aiohttp", "wrk"),
        default="raw",
        help="load generator and backend: raw (minimal asyncio protocols, so that they leave the cores "
        "to the gateway; default), aiohttp (the igw perf gateway ones) or wrk (the wrk binary, C, "
        "several times cheaper per request than raw; `apt-get install wrk`; the raw backend)",
    )
    parser.add_argument(
        "--seconds",
        type=COUNT,
        default=3,
        help="length of a phase with --load wrk, which runs for a time, not a count (default 3)",
    )

    parser.add_argument(
        "--gateway-cpus",
        type=_cpus,
        default=[],
        help="pin the gateway's serving processes, one per CPU in this comma-separated list "
        "(default: not pinned)",
    )
    parser.add_argument(
        "--load-cpus",
        type=_cpus,
        default=[],
        help="pin the load generator and the backend to these CPUs (default: not pinned)",
    )
    parser.add_argument(
        "--gateway-tree",
        type=_igw_tree,
        default=None,
        help="directory holding the igw package the gateway groups run (their PYTHONPATH), e.g. "
        "another checkout's gateway_src, to compare gateway trees under this harness (default: "
        "the harness's own)",
    )
    parser.add_argument(
        "--load-policy",
        choices=("batch", "normal"),
        default=None,
        help="kernel scheduling policy of the load generator and the backend: batch (SCHED_BATCH: "
        "they take their share of the cores without preempting a gateway worker mid-request) or "
        "normal (SCHED_OTHER). Default: batch when they may share a core with the workers (either "
        "side unpinned, or --gateway-cpus and --load-cpus overlap), else normal",
    )


def _igw_tree(text: str) -> Path:
    """``--gateway-tree``: a directory holding an ``igw`` package. A path with none (a typo) was put
    on the gateway's PYTHONPATH, where Python skipped it: the run measured the harness's own igw and
    reported it as the other tree's."""
    path = Path(text)
    if not (path / "igw" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} holds no igw package (expected {text}/igw/__init__.py)")
    return path


def _python_executable(text: str) -> Path:
    """``--gateway-python``: an executable file. A missing one ended the run in a FileNotFoundError
    traceback when the gateway started, a directory in an error quoting the script it was given."""
    path = Path(text)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file (e.g. .venv/bin/python)")
    return path


def _cpus(text: str) -> list[int]:
    """CPU numbers, as taskset takes them, each one this process may run on: ``--gateway-cpus 999``
    ended the run in an OSError traceback ("Invalid argument") when it pinned the first process."""
    cpus = NumberList(NON_NEGATIVE_INT)(text)
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    unusable = [cpu for cpu in cpus if usable is not None and cpu not in usable]
    if usable is not None and unusable:
        raise argparse.ArgumentTypeError(
            f"CPU {', '.join(map(str, unusable))} not available to this process "
            f"(available: {', '.join(map(str, sorted(usable)))})"
        )
    return cpus


def _workers_des_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        type=scenario_names,
        default=["mixed-fleet-8b", "shared-prefix-8b-high-cache"],
        help="comma-separated DES scenarios (default mixed-fleet-8b,shared-prefix-8b-high-cache)",
    )
    parser.add_argument(
        "--workers",
        type=COUNTS,
        default=[1, 2, 4, 8],
        help="worker counts, 1 among them: the baseline of the 'p99 vs 1' column (default 1,2,4,8)",
    )
    parser.add_argument("--seeds", type=SEEDS, default=[1, 2], help="comma-separated seeds (default 1,2)")
    parser.add_argument(
        "--policy",
        type=worker_policy_name,
        default="gateway-default",
        help="policy each worker runs (default gateway-default)",
    )
    parser.add_argument(
        "--shares",
        type=_shares,
        default=["inflight", "dispatches", "picks"],
        help="mitigations measured for N > 1: inflight, dispatches, picks (default all three)",
    )
    parser.add_argument(
        "--duration-scale",
        type=DURATION_SCALE,
        default=0.5,
        help="multiply scenario durations, at most 1000 (default 0.5)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=SCRAPE_INTERVAL,
        default=0.05,
        help="scrape interval in seconds, 0.001 to 600 (default 0.05)",
    )
    parser.add_argument(
        "--note-interval",
        type=NOTE_INTERVAL,
        default=None,
        help="seconds between exchanges of pick notes, 0.001 to 600 (default: igw serve's, 5 ms or the "
        "scrape interval when shorter)",
    )


def _shares(text: str) -> list[str]:
    """Comma-separated mitigations of ``igw perf workers-des --shares``: an unknown one ended the run
    in a ValueError traceback once the single-worker baselines had been measured."""
    # deferred: start-up cost: igw builds every parser; the benchmark's policies load with the command
    from igw.bench.policies.workers import SHARING

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SHARING]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not one of {', '.join(SHARING)}: {', '.join(unknown) or text!r}")
    return names


def _scrape_des_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        type=scenario_names,
        default=["mixed-fleet-8b", "burst-70b"],
        help="comma-separated DES scenarios (default mixed-fleet-8b,burst-70b)",
    )
    parser.add_argument("--seeds", type=SEEDS, default=[1], help="seeds (default 1)")
    parser.add_argument(
        "--policy",
        type=policy_name,
        default="gateway-default",
        help="the policy routed (default gateway-default)",
    )
    parser.add_argument(
        "--duration-scale",
        type=DURATION_SCALE,
        default=0.25,
        help="multiply scenario durations, at most 1000 (default 0.25)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=SCRAPE_INTERVAL,
        default=0.05,
        help="scrape interval in seconds, 0.001 to 600 (default 0.05)",
    )
    parser.add_argument(
        "--stale-threshold",
        type=STALE_THRESHOLD,
        default=1.0,
        help="staleThreshold in seconds, 0.001 to 3600 (default 1.0)",
    )


def _workers_notes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--picks", type=COUNT, default=3000, help="requests per round (default 3000)")
    parser.add_argument("--rounds", type=COUNT, default=3, help="rounds; medians printed (default 3)")
    parser.add_argument(
        "--batch",
        type=COUNT,
        default=18,
        help="picks whose notes are drained, encoded and learned together, as in one note interval "
        "(default 18: one of two workers at ~3,600 requests/s in 5 ms)",
    )


def _decide_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoints",
        type=COUNTS,
        default=[16, 1000],
        help="comma-separated pool sizes (default 16,1000: the two with targets)",
    )
    parser.add_argument(
        "--picks", type=NON_NEGATIVE_INT, default=0, help="picks per size (default: 48,000 / size, >= 300)"
    )
    parser.add_argument(
        "--runs",
        type=COUNT,
        default=1,
        help="timed runs per size; the verdict is on their median p50, the spread is printed (default 1)",
    )
    parser.add_argument(
        "--profile",
        type=NON_NEGATIVE_INT,
        default=0,
        metavar="N",
        help="one more run per size under cProfile: the N functions with most own time per pick (default 0)",
    )
    parser.add_argument(
        "--prompts",
        type=_prompt_lengths,
        default=["fixed-300"],
        help="comma-separated prompt-length workloads, each timed per size: fixed-300 (default, every "
        "prompt 300 tokens) or azure-conv (the Azure conversation trace's lengths, median 1,020 tokens)",
    )


def _prompt_lengths(text: str) -> list[str]:
    """Comma-separated names, each one of :data:`igw.perf.gateway_micro.PROMPT_LENGTHS`."""
    known = ("fixed-300", "azure-conv")  # PROMPT_LENGTHS, not imported: the parser loads no benchmark code
    names, unknown = split_names(text, known)
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not one of {', '.join(known)}: {', '.join(unknown) or text!r}")
    return names


def _compiled_modules(text: str) -> list[str]:
    """Comma-separated modules, each one of :data:`igw.compiled.COMPILED_MODULES`."""
    names, unknown = split_names(text, COMPILED_MODULES)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"not in igw.compiled.COMPILED_MODULES: {', '.join(unknown) or text!r}"
        )
    return names


def _metrics_page_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoints",
        type=COUNTS,
        default=[16, 256, 1000],
        help="comma-separated fleet sizes (default 16,256,1000)",
    )
    parser.add_argument(
        "--pools", type=COUNT, default=20, help="pools the endpoints are spread over (default 20)"
    )
    parser.add_argument("--models", type=COUNT, default=40, help="models with request series (default 40)")
    parser.add_argument("--scrapes", type=COUNT, default=5, help="scrapes per way and size (default 5)")
    parser.add_argument(
        "--clusters",
        type=NON_NEGATIVE_INT,
        default=100,
        help="the global router's fleet for its /metrics measurement (default 100; 0: not measured)",
    )
    parser.add_argument("--regions", type=COUNT, default=10, help="the router fleet's regions (default 10)")
    parser.add_argument(
        "--router-models", type=COUNT, default=100, help="models the router serves (default 100)"
    )


def _compiled_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pairs", type=COUNT, default=3, help="pairs of runs, the order swapped every pair (default 3)"
    )
    parser.add_argument(
        "--tree",
        type=output_directory,
        default="build/compiled-tree",
        help="where the compiled copy is built, and reused while its sources match "
        "(default build/compiled-tree)",
    )
    parser.add_argument(
        "--modules",
        type=_compiled_modules,
        default=None,
        help="compile only these modules of igw.compiled.COMPILED_MODULES (comma-separated; default all)",
    )
    parser.add_argument(
        "--requests", type=COUNT, default=1000, help="igw perf gateway --requests (default 1000)"
    )
    parser.add_argument("--rounds", type=COUNT, default=3, help="igw perf gateway --rounds (default 3)")
    parser.add_argument(
        "--stream-requests", type=COUNT, default=150, help="igw perf gateway --stream-requests (default 150)"
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="run the peer routers (IGW_PEERS_DIR) in every run too and print the gateway's CPU per request"
        " at c=32 as a ratio to the better peer's in the same run (issue 16's target)",
    )


OUTPUT_FILES: Final = ("json", "log")
"""Options of type :func:`~igw.cli.arg_types.output_file` (``perf gateway --json``, ``perf soak
--log``): a new folder in their path ended a finished run in a FileNotFoundError traceback."""

SUMMARY_WIDTH: Final = 55
"""The longest summary line: with the names' column, ``igw perf -h`` keeps each on one 80-column line."""

BENCHMARKS: Final[tuple[tuple[str, str, str, Callable[[argparse.ArgumentParser], None]], ...]] = (
    # (benchmark name, module under igw.perf defining HELP and run(args), the one-line summary
    # `igw perf -h` lists it with (the module's HELP is `igw perf NAME -h`'s description), its options)
    ("gateway", "igw.perf.gateway", "gateway overhead vs a direct connection", _gateway_arguments),
    ("auth", "igw.perf.auth", "JWT authentication cost per request", _auth_arguments),
    ("des", "igw.perf.des", "simulator speed (or live /metrics rendering)", _des_arguments),
    ("checks", "igw.perf.checks", "preflight + audit throughput on a simulated cluster", _checks_arguments),
    ("soak", "igw.perf.soak", "endurance at 80 %, 150 % load: lost requests, RSS, fds", _soak_arguments),
    ("scrape", "igw.perf.scrape", "CPU per /metrics scrape and staleness, N pods", _scrape_arguments),
    ("workers", "igw.perf.workers_throughput", "throughput of --workers N vs 1 worker", _workers_arguments),
    ("workers-des", "igw.perf.workers_des", "routing quality of --workers N (DES)", _workers_des_arguments),
    ("workers-notes", "igw.perf.workers_notes", "CPU per request of the workers' pick notes",
     _workers_notes_arguments),
    ("scrape-des", "igw.perf.scrape_des", "routing quality, idle pods scraped less often (DES)",
     _scrape_des_arguments),
    ("decide", "igw.perf.decide", "scheduler decision CPU per pick, by plugin", _decide_arguments),
    ("compiled", "igw.perf.compiled", "mypyc-compiled hot path vs pure Python", _compiled_arguments),
    ("metrics-page", "igw.perf.metrics_page", "event-loop stall and CPU per /metrics scrape, EMF",
     _metrics_page_arguments),
)  # fmt: skip
"""Until session s44 ``igw perf -h`` listed each benchmark with its module's whole ``HELP`` (one to
four wrapped lines), under a description naming eight of the thirteen."""


class _SummaryFormatter(argparse.HelpFormatter):
    """Counts the benchmark names' indent when placing the summaries' column. Python 3.11's argparse
    measures a sub-command's name without the indent it prints it at, so a name of 12 characters or
    more (``metrics-page``, ``workers-notes``) got its summary on the next line."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if not isinstance(action, argparse._SubParsersAction) or action.help is argparse.SUPPRESS:
            return
        indent = self._current_indent + 2 * self._indent_increment
        for sub in action._get_subactions():
            length = len(self._format_action_invocation(sub)) + indent
            self._action_max_length = max(self._action_max_length, length)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = _SummaryFormatter
    sub = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for name, module_name, summary, add_options in BENCHMARKS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        # argparse %-formats help strings (not descriptions): a literal % in HELP must be doubled
        cmd = sub.add_parser(name, help=summary.replace("%", "%%"), description=module.HELP)
        add_options(cmd)
        cmd.set_defaults(_perf_run=module.run)


def _refuse_ignored_options(args: argparse.Namespace) -> bool:
    """Refuse (print and return ``True``) an option the chosen load of ``igw perf workers`` ignores:
    a wrk phase runs for ``--seconds``, the others for ``--requests``, so ``--seconds 5`` with the
    default raw load ran 3,000-request phases and printed them as asked."""
    if args.benchmark != "workers":
        return False
    wrk = args.load == "wrk"
    ignored = ("requests",) if wrk else ("seconds",)
    mode = "--load wrk (a phase runs for --seconds)" if wrk else f"--load {args.load} (a phase is --requests)"
    return refuse_given(args, command="igw perf workers", mode=mode, ignored=ignored)


def _refuse_stale_before_a_scrape(args: argparse.Namespace) -> bool:
    """Refuse (print and return ``True``) a ``--stale-threshold`` of ``igw perf scrape/scrape-des`` not
    longer than the scrape interval, which the gateway refuses in a configuration (every pod would be
    stale between two scrapes): ``scrape`` ended in a ``SchedulerConfigError`` traceback, ``scrape-des
    --stale-threshold 1e-300`` ran and exited 0 (before session s49)."""
    if args.benchmark not in ("scrape", "scrape-des"):
        return False
    interval = args.interval if args.benchmark == "scrape" else args.scrape_interval
    option = "--interval" if args.benchmark == "scrape" else "--scrape-interval"
    if args.stale_threshold > interval:
        return False
    print(
        f"igw perf {args.benchmark}: --stale-threshold {args.stale_threshold:g} s must be longer than "
        f"{option} {interval:g} s, or every pod is stale between two scrapes (the gateway refuses it)",
        file=sys.stderr,
    )
    return True


def _refuse_a_measurement_shorter_than_a_scrape(args: argparse.Namespace) -> bool:
    """Refuse (print and return ``True``) an ``igw perf scrape --seconds`` shorter than its
    ``--interval``: no scrape falls in the measured window, so ``--seconds 0.5 --interval 2`` warmed
    every fleet up, then ended "no scrape of the 2-pod fleet succeeded" (exit 1, before session s50)."""
    if args.benchmark != "scrape" or args.seconds >= args.interval:
        return False
    print(
        f"igw perf scrape: --seconds {args.seconds:g} s must be at least --interval {args.interval:g} s, "
        "or no scrape falls in the measured time",
        file=sys.stderr,
    )
    return True


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: igw builds every parser; the error type loads with the command
    from igw.errors import IgwToolingError

    if _refuse_ignored_options(args):
        return 2
    if _refuse_stale_before_a_scrape(args) or _refuse_a_measurement_shorter_than_a_scrape(args):
        return 2
    if args.benchmark == "workers-des" and 1 not in args.workers:
        # each row's "p99 vs 1" divides by the one-worker run: a KeyError traceback (exit 1) after
        # every other count had been simulated (before session s50)
        print(
            "igw perf workers-des: --workers must include 1, the baseline every other count is compared "
            f"with (got {','.join(map(str, args.workers))})",
            file=sys.stderr,
        )
        return 2
    for dest in OUTPUT_FILES:  # checked while parsing; created now, before minutes of measuring
        path = getattr(args, dest, None)
        if isinstance(path, Path):
            create_parent(path)
    try:
        result: int = args._perf_run(args)
    except IgwToolingError as exc:
        # A benchmark that could not run (a process that did not start, a tree that failed): the
        # reason, not a traceback; the processes it started were stopped on the way out.
        print(f"igw perf {args.benchmark}: {exc}", file=sys.stderr)
        return 1
    return result
