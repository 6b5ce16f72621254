"""``igw perf NAME``: component micro-benchmarks (each prints ratios against a baseline from the same run).

Routing-policy benchmarks on the simulated fleet are ``igw bench``; these measure our own
components' cost. The registry below is explicit: one entry per benchmark module, each module
defining ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Final

HELP = "Component benchmarks: gateway overhead, auth cost, simulator speed, check throughput, soak."

BENCHMARKS: Final[tuple[tuple[str, str], ...]] = (
    ("gateway", "igw.gateway.perf"),
    ("auth", "igw.security.perf"),
    ("des", "igw.sim.perf"),
    ("checks", "igw.checks.perf"),
    ("soak", "igw.perf.soak"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for name, module_name in BENCHMARKS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_perf_run=module.run)


def run(args: argparse.Namespace) -> int:
    result: int = args._perf_run(args)
    return result
