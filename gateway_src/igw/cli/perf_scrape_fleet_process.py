"""``python -m igw.cli.perf_scrape_fleet_process --pods N``: the simulated fleet of ``igw perf scrape``.

The fleet itself is :mod:`igw.perf.scrape_fleet`; this is its command line. It prints
``PORTS p1,p2,...`` once every pod listens and stops when its standard input closes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from igw.cli.arg_types import COUNT, NON_NEGATIVE_INT
from igw.perf.scrape_fleet import VARIANTS, run_fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="igw.cli.perf_scrape_fleet_process", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--pods", type=COUNT, required=True, help="listening ports (pods) to serve")
    parser.add_argument(
        "--variants", type=COUNT, default=VARIANTS, help="distinct pages each pod cycles through (1: idle)"
    )
    parser.add_argument(
        "--busy",
        type=NON_NEGATIVE_INT,
        default=None,
        help="pods whose pages change (default all; the rest are idle)",
    )
    args = parser.parse_args(argv)
    try:
        # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run_fleet(args.pods, variants=args.variants, busy=args.busy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
