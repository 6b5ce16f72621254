"""``igw global serve``: run a tier-2 global router replica.

Examples::

    igw global serve --config global.yaml                       # region from spec.region
    igw global serve --config global.yaml --region us-west-2 --port 8090
    igw global serve --config global.yaml --emf-interval 60     # fleet metrics as CloudWatch EMF
    igw global serve --config global.yaml --otel-endpoint http://collector:4318   # request spans

The configuration (a ``GlobalRouterConfig``) is validated at start-up: exit 2 with every problem
listed. Replicas are stateless; run several behind a load balancer, all pointing at the same Redis.
An edit of the file is reloaded: validated as at start, applied where it can be live, the running
configuration kept when it is invalid (docs/global-router.md); not a configuration read from standard
input (``--config -``) or from the environment (``IGW_GLOBAL_CONFIG``: the CDK stack's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from igw.cli.arg_types import (
    EMF_INTERVAL,
    GLOBAL_DRAIN_SECONDS,
    PORT,
    existing_file_or_stdin,
    listen_host,
    region_name,
)
from igw.cli.tracing_flags import add_tracing_options

if TYPE_CHECKING:
    from igw.gateway.serving import ServerLimits

HELP = "Tier-2 global inference router across clusters and regions (igw global serve)."

EXIT_CONFIG = 2
MANAGEMENT_PATH = "spec.management.port"
"""The GlobalRouterConfig field of the management port (``--management-port`` overrides it)."""
SERVER_LIMITS_PATH = "spec.serverLimits"
"""The GlobalRouterConfig field of the client listener's limits (``--drain-seconds`` overrides one)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="global_command", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="run one router replica", description="Run one router replica.")
    serve.add_argument(
        "--config",
        required=True,
        type=existing_file_or_stdin,
        metavar="GLOBAL.yaml",
        help="GlobalRouterConfig file",
    )
    serve.add_argument(
        "--region", type=region_name, default=None, help="this replica's region (default: spec.region)"
    )
    serve.add_argument(
        "--host", type=listen_host, default="0.0.0.0", help="listen address, not empty (default 0.0.0.0)"
    )
    serve.add_argument("--port", type=PORT, default=8080, help="listen port (default 8080; 0 picks one)")
    serve.add_argument(
        "--management-port",
        type=PORT,
        default=None,
        help="serve /metrics and the detailed /readyz on this port only, keeping them off the traffic "
        "port the load balancer exposes (default: the config's spec.management.port, else one port "
        "serves everything)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default info)"
    )
    serve.add_argument(
        "--drain-seconds",
        type=GLOBAL_DRAIN_SECONDS,
        default=None,
        help="after SIGTERM, report not-ready for this long before stopping, 0 to 3600 s (default: the "
        "config's spec.serverLimits.drainPeriod, else 5)",
    )
    serve.add_argument(
        "--emf-interval",
        type=EMF_INTERVAL,
        default=0.0,
        metavar="S",
        help="write fleet metrics as CloudWatch EMF lines on stdout every S seconds, 0.01 to 3600 "
        "(default 0: off)",
    )
    add_tracing_options(
        serve,
        sends="a span per request",
        note="; clusters get the span's traceparent",
        trusted="callers that are trusted",
    )


def run(args: argparse.Namespace) -> int:
    """``igw global serve``; the EMF handler it installs is removed and closed (what is queued
    written) when it returns, so a caller in the same process (a test, an embedding tool) is not
    left with a writer thread on its stdout, nor with one more handler at every call."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.log_buffer import close_reporting

    loggers = [logging.getLogger(name) for name in ("igw.emf", "igw.global_router.access")]
    installed_before = {id(handler) for logger in loggers for handler in logger.handlers}
    try:
        return _run(args)
    finally:
        closed: set[int] = set()
        for logger in loggers:
            for handler in [h for h in logger.handlers if id(h) not in installed_before]:
                logger.removeHandler(handler)
                if id(handler) not in closed:  # one handler may serve both loggers
                    closed.add(id(handler))
                    close_reporting(handler)  # bounded: a stdout nobody reads cannot hold the exit


def _run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.file_watch import file_digest
    from igw.gateway.limits_config import ServerLimitsError, server_limits
    from igw.gateway.log_buffer import BatchedLineHandler
    from igw.gateway.management import ManagementPortError, management_port
    from igw.gateway.redaction import RedactingFormatter, configure_logging
    from igw.gateway.serving import EXIT_LISTEN_FAILED, ListenError
    from igw.gateway.tracing_options import TracingConfigError, tracing_options
    from igw.global_router.config import CONFIG_ENV, GlobalConfigError, GlobalRouterConfig, load_global_config
    from igw.global_router.launch import run_global_router

    try:
        tracing = tracing_options(
            args.otel_endpoint,
            args.otel_sample_ratio,
            trust_parent_sampling=args.otel_trust_parent_sampling,
        )
    except TracingConfigError as exc:
        print(f"igw global serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(
        args.log_level, lambda: BatchedLineHandler(sys.stderr, label="stderr")
    )  # never blocks the loop

    def validate(loaded: GlobalRouterConfig) -> ServerLimits:
        """The checks beyond the document's own, at start and of each reloaded file."""
        management_port(loaded.management, args.management_port, serving_port=args.port, path=MANAGEMENT_PATH)
        return server_limits(loaded.server_limits, {"drain_s": args.drain_seconds}, path=SERVER_LIMITS_PATH)

    from_env = bool(os.environ.get(CONFIG_ENV))
    watched = None if args.config == "-" or from_env else Path(args.config)
    try:
        digest = (
            None if watched is None else file_digest(watched)
        )  # before the load: an edit in between is seen
    except OSError:
        watched = digest = None  # not a file to watch (a FIFO read once, gone): the load says why
    try:
        config = load_global_config(args.config)
        management = management_port(
            config.management, args.management_port, serving_port=args.port, path=MANAGEMENT_PATH
        )
        limits = validate(config)
    except (GlobalConfigError, ManagementPortError, ServerLimitsError) as exc:
        print(f"igw global serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    emf = logging.getLogger("igw.emf")
    emf.propagate = False  # the documents are the output, not diagnostics: bare JSON lines on stdout
    emf.setLevel(logging.INFO)
    # Queued on the event loop, written in batches by a writer thread, bounded, dropping and counting
    # what a stalled stdout reader leaves waiting: as igw serve's access log and EMF lines. Until s42
    # a logging.StreamHandler wrote each line on the loop, so a log shipper that stopped reading (a
    # full 64 KiB pipe) blocked the loop and every request of the replica with it.
    lines = BatchedLineHandler(sys.stdout, label="stdout")
    lines.setFormatter(RedactingFormatter("%(message)s"))
    emf.addHandler(lines)
    # The access log, as igw serve's: its own stdout handler shared with the EMF lines (one writer
    # thread, one drop count), or a writer of its own on stderr
    access = logging.getLogger("igw.global_router.access")
    access.propagate = False
    if config.access_log.enabled:
        access.setLevel(logging.INFO)
        if config.access_log.destination == "stdout":
            access.addHandler(lines)
        else:
            errors = BatchedLineHandler(sys.stderr, label="stderr")
            errors.setFormatter(RedactingFormatter("%(message)s"))
            access.addHandler(errors)
    if watched is None:
        logging.getLogger("igw.global_router").info(
            "configuration read %s: not reloaded; restart the router to change it",
            f"from {CONFIG_ENV} (a new task definition deploys new tasks)"
            if from_env
            else "from standard input",
        )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                run_global_router(
                    config,
                    host=args.host,
                    port=args.port,
                    region=args.region,
                    limits=limits,
                    emf_interval_s=args.emf_interval if args.emf_interval > 0 else None,
                    management_port=management,
                    tracing=tracing,
                    config_path=watched,
                    validate=validate,
                    loaded_digest=digest,
                )
            )
    except ListenError as exc:  # the machine's state (a port in use), not a usage error: as igw serve
        print(f"igw global serve: {exc}", file=sys.stderr)
        return EXIT_LISTEN_FAILED
    return 0
