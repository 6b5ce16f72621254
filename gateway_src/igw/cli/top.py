"""``igw top URL``: a live terminal view of a running gateway (pools, pods, models).

Reads the gateway's ``/metrics`` and ``/readyz`` every ``--interval`` seconds: ``igw serve`` on this
machine (``igw top http://127.0.0.1:8080``) or a gateway in a cluster through
``kubectl port-forward deploy/<name>-gateway 8080:8080`` (the pod's plain-HTTP port).
``--token-env NAME`` sends the token held in that environment variable as a bearer token (the
gateway's debug token for ``--decisions``, or pages behind an authenticating proxy; never on the
command line). ``--decisions N`` adds the last N scheduling decisions (``igw serve
--debug-decisions``). ``--screenshot FILE`` runs without a terminal, waits for
``--screenshot-after`` refreshes and saves the screen as SVG (the picture in docs/observability.md);
a gateway that does not answer at all ends it at once unless ``--screenshot-wait S`` gives it time
to start. Exit codes: 0 quit or screenshot saved, 1 no data for the screenshot, 2 bad usage (including a
missing token variable, an unusable URL, or a live view without a terminal).
"""

from __future__ import annotations

import argparse
import os
import sys

from igw.cli.arg_types import (
    COUNT,
    TOP_DECISIONS,
    TOP_INTERVAL,
    TOP_SCREENSHOT_WAIT,
    create_parent,
    http_url,
    output_file,
)
from igw.cli.option_scope import given
from igw.redaction import redact

HELP = "Live terminal view of a running gateway: pools, pods (KV, queue, picks, scrape age), models."

EXIT_OK = 0
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        metavar="URL",
        help="the gateway's base URL, e.g. http://127.0.0.1:8080 (its management port's, when it runs "
        "with --management-port: /metrics, /readyz and /debug/decisions are served there)",
    )
    parser.add_argument(
        "--interval",
        type=TOP_INTERVAL,
        default=1.0,
        help="seconds between refreshes, 0.1 to 3600 (default 1)",
    )
    parser.add_argument(
        "--token-env",
        metavar="NAME",
        help="environment variable holding a bearer token to send with every request",
    )
    parser.add_argument(
        "--decisions",
        type=TOP_DECISIONS,
        default=0,
        metavar="N",
        help="also show the last N scheduling decisions from /debug/decisions (igw serve "
        "--debug-decisions; pass its IGW_DEBUG_TOKEN with --token-env); default 0: off",
    )
    parser.add_argument(
        "--screenshot", type=output_file, metavar="FILE", help="run headless and save the screen as SVG"
    )
    parser.add_argument(
        "--screenshot-after",
        type=COUNT,
        default=3,
        metavar="N",
        help="with --screenshot: refreshes to wait for before saving (default 3)",
    )
    parser.add_argument(
        "--screenshot-wait",
        type=TOP_SCREENSHOT_WAIT,
        default=0.0,
        metavar="S",
        help="with --screenshot: seconds to keep trying a gateway that does not answer at all (refused, "
        "reset, timed out), e.g. one still starting (default 0: give up at the first such attempt)",
    )


def run(args: argparse.Namespace) -> int:
    try:  # a port out of range (http://host:99999) was only found when fetching: 30 refreshes later
        http_url(args.url)
    except argparse.ArgumentTypeError:
        print(
            f"igw top: URL must be http(s)://host:port with a port from 1 to 65535, got {redact(args.url)!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.decisions and not args.token_env:
        print("igw top: --decisions needs --token-env (the gateway's debug token)", file=sys.stderr)
        return EXIT_USAGE
    for name in ("screenshot_after", "screenshot_wait"):
        if name in given(args) and args.screenshot is None:  # it was ignored: a live view ran
            option = "--" + name.replace("_", "-")
            print(f"igw top: {option} needs --screenshot FILE", file=sys.stderr)
            return EXIT_USAGE
    if args.screenshot_after < 1:
        print("igw top: --screenshot-after must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    token = None
    if args.token_env is not None and not args.token_env.strip():
        print("igw top: --token-env: '' names no environment variable", file=sys.stderr)
        return EXIT_USAGE
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            print(f"igw top: --token-env: environment variable {args.token_env} is not set", file=sys.stderr)
            return EXIT_USAGE
    if args.screenshot is None and not (_is_terminal(sys.stdin) and _is_terminal(sys.stderr)):
        # the live view reads keys from stdin and draws on stderr: without a terminal (CI, `< /dev/null`,
        # `2> log`) it ran until killed, writing screen-drawing escapes to the log, no key could quit it
        print(
            "igw top: the live view needs a terminal on stdin and stderr; --screenshot FILE saves the "
            "view without one",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # deferred: start-up cost: textual and aiohttp load only when this command runs (igw builds every parser)
    from igw.top.app import TopApp
    from igw.top.screenshot import save_screenshot
    from igw.top.source import GatewaySource

    source = GatewaySource(args.url, token=token, decisions=args.decisions)
    app = TopApp(source, interval_s=args.interval, show_decisions=args.decisions > 0)
    if args.screenshot:
        create_parent(args.screenshot)
        return save_screenshot(
            app, args.screenshot, refreshes=args.screenshot_after, wait_unanswered_s=args.screenshot_wait
        )
    app.run()
    return EXIT_OK


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())
