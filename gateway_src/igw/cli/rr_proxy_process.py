"""``python -m igw.cli.rr_proxy_process URL [URL ...]``: the round-robin proxy as its own process.

Live-mode benchmarks start it (:mod:`igw.bench.routers`) in front of a running fleet; it prints its
URL after :data:`igw.bench.rr_proxy.LISTENING_PREFIX` and runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from igw.bench.rr_proxy import serve_until_signalled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="igw.cli.rr_proxy_process", description=__doc__, allow_abbrev=False)
    parser.add_argument("backends", nargs="+", help="backend base URLs, e.g. http://127.0.0.1:8001")
    args = parser.parse_args(argv)
    try:
        # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        pass
    asyncio.run(serve_until_signalled(args.backends))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
