"""``igw demo``: the local end-to-end demo on the simulated fleet (what ``make demo`` runs).

Starts a simulated mixed-generation fleet (2 H100 + 2 A10G pods serving Llama-3.1-8B) on loopback,
then drives the same requests once through a round-robin proxy (the Kubernetes Service stand-in) and
once through the gateway (``igw serve``, default weights), each a real process on a fresh fleet;
prints a side-by-side table and writes a Markdown report with PNG plots. Everything it starts is
stopped on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

from igw.cli.arg_types import DEMO_DRAIN, LIVE_RATE, NumberRange, output_directory
from igw.cli.option_scope import given, refuse_unused

DEFAULT_RATE = 20.0
GLOBAL_RATE = 10.0

GLOBAL_USES = frozenset({"global_router", "out", "rate", "quick"})
"""The options ``igw demo --global`` uses: its phases, clusters and requests are fixed by the script."""
OPERATOR_USES = frozenset({"operator", "out"})
"""The options ``igw demo --operator`` uses: ``--out`` keeps its kubeconfig, manifest and gateway log."""

MIN_REQUESTS: Final = 10
"""The fewest requests per router a demo runs: ``--requests`` is refused below it while parsing (exit 2,
the option named). Until session s47 the parser took any count from 1 (``--requests 3`` passed
parsing, then the run refused it with "must be >= 10")."""
DEMO_REQUESTS: Final = NumberRange(int, MIN_REQUESTS)
"""``--requests``: a whole number of at least :data:`MIN_REQUESTS`."""

HELP = "Run the local end-to-end demo: simulated GPU fleet, gateway vs round-robin, report."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=output_directory, default="demo-out", help="report directory (default demo-out)"
    )
    parser.add_argument(
        "--requests",
        type=DEMO_REQUESTS,
        default=600,
        help=f"requests per router, at least {MIN_REQUESTS} (default 600)",
    )
    parser.add_argument(
        "--rate",
        type=LIVE_RATE,
        default=None,
        help=f"offered requests per wall second (default {DEFAULT_RATE:g}; {GLOBAL_RATE:g} with --global)",
    )
    parser.add_argument(
        "--drain",
        type=DEMO_DRAIN,
        default=45.0,
        help="wall s to wait after the last send, above 0, at most 3600 (default 45)",
    )
    parser.add_argument(
        "--allow-long-run",
        action="store_true",
        help="start a demo planned to take over a day (--requests / --rate; refused otherwise, exit 2)",
    )
    instead = parser.add_mutually_exclusive_group()  # --operator --global ran the operator demo alone
    instead.add_argument(
        "--operator",
        action="store_true",
        help="instead: the operator demo (fake API server, igw operator, kubectl, a request through the "
        "gateway it created); runs from a source checkout, see docs/operating.md; takes --out only "
        "(keeps its kubeconfig, manifest and gateway log in OUT/operator)",
    )
    parser.add_argument(
        "--routers",
        default="round-robin,gateway-default",
        help="comma-separated live routers (default round-robin,gateway-default; also: gateway-tuned, "
        "sglang-router, vllm-router)",
    )
    instead.add_argument(
        "--global",
        dest="global_router",
        action="store_true",
        help="the tier-2 demo instead: 3 clusters in 2 regions, 2 global router replicas, failover script; "
        "takes --out, --rate and --quick only",
    )
    parser.add_argument("--quick", action="store_true", help="with --global: shorter phases")


def offered_rate(args: argparse.Namespace) -> float:
    """``--rate`` as given, else the default of the demo chosen (``--global``: 10, else 20). The
    option defaults to ``None`` so that a rate given is told apart from none: compared with the
    plain demo's default, ``igw demo --global --rate 20`` ran at 10 requests/s."""
    rate: float | None = args.rate
    if rate is not None:
        return rate
    return GLOBAL_RATE if args.global_router else DEFAULT_RATE


def run(args: argparse.Namespace) -> int:
    if args.quick and not args.global_router:
        # it was ignored: `igw demo --quick` ran the whole demo, minutes, as if it had not been given
        print(
            "igw demo: --quick applies to --global only; shorten the demo with --requests and --drain",
            file=sys.stderr,
        )
        return 2
    if args.operator:
        if refuse_unused(args, command="igw demo", mode="--operator", used=OPERATOR_USES):
            return 2
        return _operator_demo(Path(args.out) / "operator" if "out" in given(args) else None)
    if args.global_router:
        if refuse_unused(args, command="igw demo", mode="--global", used=GLOBAL_USES):
            return 2
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.bench.global_run import run_global_command

        rate = offered_rate(args)
        command = "igw demo --global" + (" --quick" if args.quick else "")
        # every request goes through the global routers, the system the demo shows: one failed fails the
        # demo, as a gateway's failed request fails `igw demo` (exit 0 with them before session s44)
        return run_global_command(
            out=Path(args.out) / "global", rate=rate, quick=args.quick, command=command,
            failure_note="the demo expects the global routers to serve every request, failovers included",
        )  # fmt: skip
    args.rate = offered_rate(args)
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.cli.demo_run import run_demo

    return run_demo(args)


def _operator_demo(workdir: Path | None) -> int:
    """The operator demo needs the test suite's fake Kubernetes API server, so it lives in tests/.
    It keeps its files in ``workdir`` when given, else in a temporary folder it removes."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.paths import REPO_ROOT

    if (REPO_ROOT / "tests" / "operator" / "demo.py").is_file() and str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))  # a source checkout (editable install): tests/ is importable
    try:
        # deferred: optional dependency: tests/ exists only in a source checkout
        from tests.operator.demo import main as operator_demo
    except ImportError:
        print(
            "igw demo --operator: run it from a source checkout (it uses tests/fakes, the fake "
            "Kubernetes API server): cd to the repository and run `python -m tests.operator.demo`",
            file=sys.stderr,
        )
        return 2
    return operator_demo([] if workdir is None else ["--workdir", str(workdir)])
