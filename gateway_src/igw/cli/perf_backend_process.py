"""``python -m igw.cli.perf_backend_process``: the near-free backend of ``igw perf gateway`` as a process.

The backend itself is :mod:`igw.perf.gateway_backend`; this is its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from igw.cli.arg_types import COUNT, NON_NEGATIVE
from igw.perf.gateway_backend import serve_forever, serve_forever_raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="igw.cli.perf_backend_process", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--chunks", type=COUNT, default=20, help="SSE events per streamed answer")
    parser.add_argument(
        "--chunk-interval", type=NON_NEGATIVE, default=0.005, help="seconds between SSE events"
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="serve with the minimal asyncio backend of igw.perf.raw_http (no streaming; far less CPU)",
    )
    args = parser.parse_args(argv)
    # sglang-router opens its worker connection with an HTTP/2 preface first and falls back to
    # HTTP/1.1; aiohttp logs each refused preface as an error traceback that would bury the report.
    # Real failures still surface: the load client raises on any non-200 answer.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    try:
        # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_forever_raw() if args.raw else serve_forever(args.chunks, args.chunk_interval))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
