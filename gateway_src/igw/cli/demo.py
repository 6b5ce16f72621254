"""``igw demo``: the local end-to-end demo on the simulated fleet (delivered by the benchmark issue)."""

from __future__ import annotations

import argparse
import sys

HELP = "Run the local end-to-end demo: simulated GPU fleet, gateway vs round-robin, report."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="demo-out", help="directory for the report")


def run(args: argparse.Namespace) -> int:
    print("igw demo: not available yet (the routing benchmark is not implemented).", file=sys.stderr)
    return 1
