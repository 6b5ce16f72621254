"""``igw top URL``: a live terminal view of a running gateway (pools, pods, models).

Reads the gateway's ``/metrics`` and ``/readyz`` every ``--interval`` seconds: ``igw serve`` on this
machine (``igw top http://127.0.0.1:8080``) or a gateway in a cluster through
``kubectl port-forward deploy/<name>-gateway 8080:8080`` (the pod's plain-HTTP port).
``--token-env NAME`` sends the token held in that environment variable as a bearer token (for pages
behind an authenticating proxy; never on the command line). ``--screenshot FILE`` runs without a
terminal, waits for ``--screenshot-after`` refreshes and saves the screen as SVG (the picture in
docs/observability.md). Exit codes: 0 quit or screenshot saved, 1 no data for the screenshot, 2 bad
usage (including a missing token variable or an unusable URL).
"""

from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlsplit

HELP = "Live terminal view of a running gateway: pools, pods (KV, queue, picks, scrape age), models."

EXIT_OK = 0
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between refreshes (default 1; minimum 0.1)"
    )
    parser.add_argument(
        "--token-env",
        metavar="NAME",
        help="environment variable holding a bearer token to send with every request",
    )
    parser.add_argument("--screenshot", metavar="FILE", help="run headless and save the screen as SVG")
    parser.add_argument(
        "--screenshot-after",
        type=int,
        default=3,
        metavar="N",
        help="with --screenshot: refreshes to wait for before saving (default 3)",
    )


def run(args: argparse.Namespace) -> int:
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        print(f"igw top: URL must be http(s)://host:port, got {args.url!r}", file=sys.stderr)
        return EXIT_USAGE
    if args.interval < 0.1:
        print(f"igw top: --interval must be at least 0.1, got {args.interval}", file=sys.stderr)
        return EXIT_USAGE
    if args.screenshot_after < 1:
        print("igw top: --screenshot-after must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            print(f"igw top: --token-env: environment variable {args.token_env} is not set", file=sys.stderr)
            return EXIT_USAGE
    # deferred: start-up cost: textual and aiohttp load only when this command runs (igw builds every parser)
    from igw.top.app import TopApp
    from igw.top.screenshot import save_screenshot
    from igw.top.source import GatewaySource

    app = TopApp(GatewaySource(args.url, token=token), interval_s=args.interval)
    if args.screenshot:
        return save_screenshot(app, args.screenshot, refreshes=args.screenshot_after)
    app.run()
    return EXIT_OK
