"""``igw serve``: run the gateway data plane.

Examples::

    igw serve --config igwc.yaml --endpoints endpoints.yaml            # local: static endpoints
    igw serve --config igwc.yaml --in-cluster                          # in a pod: watch the API
    igw serve --config igwc.yaml --in-cluster --kubeconfig ~/.kube/config   # outside, same watch
    igw serve --config igwc.yaml --endpoints endpoints.yaml --workers 2  # two processes, one port
    igw serve --config igwc.yaml --in-cluster --workers auto           # one per CPU the pod may use
    igw serve --config igwc.yaml --in-cluster --management-port 9090   # /metrics, /readyz detail there

The configuration file is validated at start-up (exit 2 with every problem listed) and hot-reloaded
when it changes (an invalid new version is rejected and the running one stays).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from igw.cli.arg_types import (
    ANY_INT,
    EMF_INTERVAL,
    FINITE,
    NON_NEGATIVE_INT,
    PORT,
    WORKER_COUNT,
    WORKER_TIMEOUT,
    existing_directory,
    existing_file,
    listen_host,
    source_name,
)
from igw.cli.option_scope import given
from igw.cli.tracing_flags import add_tracing_options
from igw.gateway.worker_heartbeat import STUCK_AFTER_S

HELP = "Run the GPU-aware inference gateway (OpenAI-compatible proxy with the endpoint picker)."
HOLDS_HANGUP = True
"""SIGHUP stays blocked from igw's start until the reload handler is installed (the single process's
:class:`~igw.gateway.stop_signals.ReloadSignal`, the ``--workers`` parent's own): one sent during the
start-up is a configuration check once serving, not the default action (:mod:`igw.cli.early_stop`)."""

EXIT_CONFIG = 2
EXIT_WORKER_SETUP = 1
"""A worker that cannot join its group (its parent already gone, the kernel refused the link)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, type=source_name, metavar="IGWC.yaml", help="InferenceGatewayConfig file"
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--endpoints", type=existing_file, metavar="FILE", help="static endpoints file (re-read on change)"
    )
    where.add_argument(
        "--in-cluster",
        action="store_true",
        help="discover pods and bbr-managed ConfigMaps via the Kubernetes API",
    )
    parser.add_argument(
        "--kubeconfig",
        type=existing_file,
        metavar="FILE",
        help="with --in-cluster: use this kubeconfig instead of the pod's account",
    )
    parser.add_argument(
        "--config-map",
        metavar="NS/NAME[/KEY]",
        help="with --in-cluster: keep --config equal to this ConfigMap key (default key config.yaml), "
        "fetched at start and on every change (what igw operator's gateway pods use)",
    )
    parser.add_argument(
        "--config-maps",
        type=existing_directory,
        metavar="DIR",
        help="with --endpoints: directory holding configMapRef EndpointPickerConfigs as DIR/<name>/<key>",
    )
    parser.add_argument(
        "--host",
        type=listen_host,
        default="0.0.0.0",
        help="listen address, not empty (default 0.0.0.0; :: for every IPv6 interface)",
    )
    parser.add_argument("--port", type=PORT, default=8080, help="listen port (default 8080; 0 picks one)")
    parser.add_argument(
        "--management-port",
        type=PORT,
        default=None,
        metavar="PORT",
        help="serve /metrics, the detailed /readyz and /debug/decisions on this port only; the "
        "inference port keeps /healthz and a /readyz without detail (default: "
        "spec.extensions.management.port, else none: one port serves everything; 0 picks one)",
    )
    parser.add_argument(
        "--workers",
        type=WORKER_COUNT,
        default=1,
        metavar="N|auto",
        help="gateway processes sharing the port (SO_REUSEPORT); worker 0 scrapes every pod for all, "
        "/metrics answers for all with a worker label; one dying stops the group (exit 3); auto: one per "
        "CPU the container may count on (affinity, cgroup CPU limit, IGW_CPU_REQUEST_MILLICORES, "
        "the memory limit at 352 MiB each beside 64 MiB for the parent; logged at start) (default 1)",
    )
    parser.add_argument(
        "--worker-timeout",
        type=WORKER_TIMEOUT,
        default=STUCK_AFTER_S,
        metavar="S",
        help="with --workers: kill a worker whose event loop has not answered the parent for S seconds "
        "(it would keep its share of the port's connections and hang them), which stops the group "
        "(exit 3); a starting worker has 60 s more; 0: off, else 2 to 3600 (default 30)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default info)"
    )
    parser.add_argument("--no-reload", action="store_true", help="do not watch the configuration file")
    parser.add_argument(
        "--emf-interval",
        type=EMF_INTERVAL,
        default=0.0,
        metavar="SECONDS",
        help="write CloudWatch Embedded Metric Format lines (per-model requests, error rate, P99 "
        "latency/TTFT; per-pool KV and ready pods) every SECONDS, 0.01 to 3600 (default 0: off)",
    )
    parser.add_argument(
        "--emf-endpoint",
        metavar="tcp://HOST:PORT|udp://HOST:PORT",
        help="send the EMF documents to the CloudWatch agent's EMF listener (port 25888) instead of "
        "stdout; never blocks: documents the agent cannot take are dropped and counted "
        "(default: $AWS_EMF_AGENT_ENDPOINT, else stdout)",
    )
    parser.add_argument(
        "--debug-decisions",
        type=NON_NEGATIVE_INT,
        default=0,
        metavar="N",
        help="keep the last N scheduling decisions and serve them at /debug/decisions to callers "
        "presenting the token in $IGW_DEBUG_TOKEN (default 0: off)",
    )
    add_tracing_options(
        parser, sends="request traces", trusted="callers that are trusted, e.g. the global router"
    )
    d = _default_limits()
    limits = parser.add_argument_group("client timeouts, limits and shutdown")
    for flag, dest, kind, text in (
        ("--header-timeout", "header_timeout_s", FINITE, "seconds for a request head, from its first byte"),
        ("--body-timeout", "body_timeout_s", FINITE, "seconds for a request body"),
        ("--send-timeout", "send_timeout_s", FINITE, "seconds a client may read none of its answer"),
        (
            "--keepalive-timeout",
            "keepalive_timeout_s",
            FINITE,
            "idle seconds before a client connection closes (<= 120)",
        ),
        ("--max-connections", "max_connections", ANY_INT, "client connections (capped below the fd limit)"),
        ("--max-headers", "max_headers", ANY_INT, "request header fields"),
        ("--max-header-bytes", "max_header_field_bytes", ANY_INT, "bytes in one request header field"),
        (
            "--max-body-bytes-held",
            "max_body_bytes_held",
            ANY_INT,
            "request-body bytes held at once, 0: from the memory limit",
        ),
        ("--drain-seconds", "drain_s", FINITE, "after SIGTERM: seconds not-ready while still serving"),
        (
            "--stream-grace-seconds",
            "stream_grace_s",
            FINITE,
            "after the drain: seconds for in-flight requests",
        ),
    ):
        default = getattr(d, dest)
        # default None: an option given on the command line overrides spec.extensions.serverLimits
        limits.add_argument(
            flag,
            dest=dest,
            type=kind,
            default=None,
            help=f"{text} (default: spec.extensions.serverLimits, else {default:g})",
        )


_NOT_FORWARDED = frozenset({"help", "workers", "worker_timeout", "port", "management_port"})


def worker_argv(args: argparse.Namespace, port: int, management_port: int | None = None) -> list[str]:
    """The ``igw serve`` options of ``args`` for one worker of a ``--workers`` group on ``port`` (and
    its management listener on ``management_port``, the parent's reservation, when not ``None``)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in _NOT_FORWARDED:
            continue
        value = getattr(args, action.dest, None)
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            out += [flag] if value else []
        elif value is not None and value != action.default:
            out += [flag, str(value)]
    management = [] if management_port is None else ["--management-port", str(management_port)]
    return [*out, "--port", str(port), *management]


def _worker_count(asked: int | str) -> int:
    """``--workers``: the number given, or the one ``auto`` chooses here (logged with its bounds)."""
    if isinstance(asked, int):
        return asked
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import logging

    from igw.gateway.worker_count import auto_workers

    budget = auto_workers()
    logging.getLogger("igw.gateway.workers").info("%s", budget.describe())
    return budget.workers


def _max_token_bytes(config: Any) -> int | None:
    """The JWT size cap the guard of ``config`` (a ``GatewayConfig``) enforces; ``None`` without
    ``spec.auth`` (no tokens to carry). The reloader holds a reloaded config to the same bound."""
    # deferred: start-up cost: like the guard's own settings, read only when this command runs
    from igw.gateway.limits_config import token_cap

    cap: int | None = token_cap(config)
    return cap


def _default_limits() -> Any:
    # deferred: start-up cost: like every gateway import of this module, ``igw --help`` must not load aiohttp
    from igw.gateway.serving import ServerLimits

    return ServerLimits()


def _ignored_option(args: argparse.Namespace) -> str | None:
    """Why an option given would do nothing, or ``None``: ``--worker-timeout`` checks a worker group
    (one process has no parent watching it) and ``--emf-endpoint`` is where EMF documents go, which
    ``--emf-interval`` switches on. Both were accepted and ignored, so a user believed a check or a
    CloudWatch feed was in place."""
    options = given(args)
    if "worker_timeout" in options and args.workers == 1:
        return "--worker-timeout needs --workers N (N > 1) or auto: a single process has no group to check"
    if "emf_endpoint" in options and args.emf_interval <= 0:
        return "--emf-endpoint needs --emf-interval SECONDS > 0: without it no EMF document is written"
    return None


def run(args: argparse.Namespace) -> int:
    """``igw serve``; the log handlers it installs are removed and closed when it returns, so a
    caller in the same process (a test, an embedding tool) is not left writing to its streams."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import logging

    from igw.gateway.log_buffer import close_reporting  # deferred: as logging, above

    loggers = [logging.getLogger(name) for name in ("igw.access", "igw.emf")]
    installed_before = {id(handler) for logger in loggers for handler in logger.handlers}
    try:
        return _run(args)
    finally:
        for logger in loggers:
            for handler in [h for h in logger.handlers if id(h) not in installed_before]:
                logger.removeHandler(handler)
                close_reporting(handler)  # bounded: a stdout nobody reads cannot hold the exit


def _refuse(message: str) -> None:
    """Say ``igw serve: message`` on stderr, after the log lines still queued in the log writers.

    Why: the handlers write from a thread every 0.2 s (:class:`~igw.gateway.log_buffer.BatchedLineHandler`)
    and the rest at exit, so a refusal printed at once came before the start-up lines logged ahead of
    it - worker 0 of ``--workers auto`` refusing ``--in-cluster`` without credentials put its INFO
    lines after the error, which scrolled out of sight. Flushed first, the refusal is the last line.
    """
    import logging  # deferred: start-up cost, as in _run

    for handler in logging.getLogger().handlers:
        handler.flush()
    print(f"igw serve: {message}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import asyncio
    import contextlib
    import logging
    from collections.abc import Callable
    from dataclasses import fields
    from pathlib import Path

    from igw.config.errors import ConfigError
    from igw.config.loader import load_gateway_config
    from igw.gateway.limits_config import EXTENSION_NAME, ServerLimitsError, server_limits
    from igw.gateway.log_buffer import BatchedLineHandler, share_streams
    from igw.gateway.redaction import RedactingFormatter, configure_logging, install, worker_log_format
    from igw.gateway.reload import file_digest
    from igw.gateway.serving import EXIT_LISTEN_FAILED, ServerLimits
    from igw.gateway.tracing_options import TracingConfigError, tracing_options
    from igw.launch import LaunchError, LaunchOptions, ListenUnavailableError, run_gateway

    try:
        tracing = tracing_options(
            args.otel_endpoint,
            args.otel_sample_ratio,
            trust_parent_sampling=args.otel_trust_parent_sampling,
        )
    except TracingConfigError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    # Every line the process logs passes through redaction (tokens, credential headers, JWTs).
    configure_logging(
        args.log_level, lambda: BatchedLineHandler(sys.stderr, label="stderr")
    )  # never blocks the loop
    # Our formats use none of these LogRecord fields; collecting them costs several µs per record,
    # and the access log writes one record per request (the logging HOWTO's "Optimization" section).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # no caller lookup (a frame walk per record): the same HOWTO table
    logging.getLogger("igw.access").propagate = False
    # Queued on the request path, formatted and written in batches by a writer thread; what is still
    # queued is written at exit (logging.shutdown), also after SIGTERM.
    access = BatchedLineHandler(sys.stdout, label="stdout")
    access.setFormatter(RedactingFormatter("%(message)s"))
    logging.getLogger("igw.access").addHandler(access)
    logging.getLogger("igw.emf").propagate = False
    logging.getLogger("igw.emf").setLevel(logging.INFO)  # the documents are the output, not diagnostics
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.emf_sink import AgentHandler, EmfEndpointError, endpoint_from

    try:
        emf_endpoint = endpoint_from(args.emf_endpoint)
    except EmfEndpointError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    ignored = _ignored_option(args)  # after the endpoint's own check: a bad value is named first
    if ignored is not None:
        _refuse(ignored)
        return EXIT_CONFIG
    if emf_endpoint is None:
        logging.getLogger("igw.emf").addHandler(access)  # EMF lines share stdout with the access log
    else:  # closed by logging's exit hook, which sends what is still queued
        logging.getLogger("igw.emf").addHandler(AgentHandler(emf_endpoint))
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.workers import PortUnavailableError, WorkerRole, WorkerSetupError, supervise

    try:
        role = WorkerRole.from_env()
    except WorkerSetupError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    if role is not None:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        import atexit

        # At every exit from here on (a refusal's return, the parent-death SIGTERM during start-up,
        # the end of serving): the group's directory goes when the parent is gone. Only the end of
        # serving did, so a parent killed outright while a worker started left it in the temporary
        # directory (the worker found its parent gone, or got the SIGTERM, before serving).
        atexit.register(role.leave)
        install(logging.getLogger().handlers, worker_log_format(role.index))  # lines name the worker
        # The workers share stdout and stderr: a line longer than PIPE_BUF is written whole only under
        # the group's lock on that stream (log_buffer.StreamLock).
        share_streams([*logging.getLogger().handlers, access], role.directory)
    if role is not None and role.parent is not None:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.gateway.parent_death import ParentGoneError, stop_with_parent

        try:  # first: a worker left without its parent would serve the port unsupervised
            stop_with_parent(role.parent)
        except (ParentGoneError, OSError) as exc:
            _refuse(f"worker {role.index}: {exc}")
            return EXIT_WORKER_SETUP
    if args.config_map and not args.in_cluster:
        _refuse("--config-map needs --in-cluster")
        return EXIT_CONFIG
    # Both were ignored (a kubeconfig or a --config-maps folder that does not exist is refused while
    # parsing: arg_types.existing_file / existing_directory).
    if args.kubeconfig is not None and not args.in_cluster:
        _refuse("--kubeconfig needs --in-cluster (--endpoints reads no cluster)")
        return EXIT_CONFIG
    if args.config_maps is not None and args.in_cluster:
        _refuse("--config-maps needs --endpoints (--in-cluster reads the ConfigMaps from the cluster)")
        return EXIT_CONFIG
    if args.config_map and role is None:  # a worker's parent has already written the file
        # deferred: start-up cost: the kubernetes client loads only for --config-map
        from igw.gateway.config_sync import ConfigMapRef, ConfigSyncError, fetch_config_map
        from igw.gateway.discovery.kube_client import KubeClientError, make_api_client

        try:
            fetch_config_map(
                make_api_client(kubeconfig=args.kubeconfig),
                ConfigMapRef.parse(args.config_map),
                Path(args.config),
            )
        except (ConfigSyncError, KubeClientError) as exc:
            _refuse(str(exc))
            return EXIT_CONFIG
    # Taken before the load, so that an edit landing after it is seen as one by the hot reload (an
    # unreadable file: the load names why).
    config_digest = None
    with contextlib.suppress(OSError):
        config_digest = file_digest(Path(args.config))
    try:
        config = load_gateway_config(args.config)
    except ConfigError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    if role is None:  # once per igw serve, not once more by each worker of a group
        # A user who applies the YAML or serves the file never ran igw validate: same notes, logged.
        for note in config.notes:
            logging.getLogger("igw.config").warning("%s", note)
    try:
        limits = server_limits(
            config.extensions.get(EXTENSION_NAME),
            {f.name: getattr(args, f.name) for f in fields(ServerLimits)},
            max_token_bytes=_max_token_bytes(config),
        )
    except ServerLimitsError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.gateway.management import EXTENSION as MANAGEMENT_EXTENSION
    from igw.gateway.management import ManagementPortError, management_port

    try:
        management = management_port(
            config.extensions.get(MANAGEMENT_EXTENSION), args.management_port, serving_port=args.port
        )
    except ManagementPortError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    try:
        workers = _worker_count(args.workers) if role is None else 1
        if workers > 1:
            return supervise(
                workers,
                host=args.host,
                port=args.port,
                worker_command=lambda port, management_port: [
                    sys.executable,
                    "-m",
                    "igw.cli.main",
                    "serve",
                    *worker_argv(args, port, management_port),
                ],
                stop_budget_s=limits.drain_s + limits.stream_grace_s,
                management_port=management,
                stuck_after_s=args.worker_timeout or None,
            )
    except PortUnavailableError as exc:
        _refuse(str(exc))
        return EXIT_LISTEN_FAILED
    except WorkerSetupError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    decision_debug = None
    if args.debug_decisions:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        import os

        from igw.errors import IgwGatewayError
        from igw.gateway.debug_api import DEBUG_TOKEN_ENV, DecisionDebug
        from igw.gateway.decision_log import MAX_CAPACITY

        if not 1 <= args.debug_decisions <= MAX_CAPACITY:
            _refuse(f"--debug-decisions must be 0..{MAX_CAPACITY}")
            return EXIT_CONFIG
        try:
            decision_debug = DecisionDebug(args.debug_decisions, os.environ.get(DEBUG_TOKEN_ENV, ""))
        except IgwGatewayError as exc:
            _refuse(f"--debug-decisions: {exc}")
            return EXIT_CONFIG
    options = LaunchOptions(
        config_path=args.config,
        endpoints_file=args.endpoints,
        in_cluster=args.in_cluster,
        kubeconfig=args.kubeconfig,
        config_maps_dir=args.config_maps,
        config_map=args.config_map,
        host=args.host,
        port=args.port,
        reload=not args.no_reload,
        config_digest=config_digest,
        limits=limits,
        limit_options=frozenset(f.name for f in fields(ServerLimits) if getattr(args, f.name) is not None),
        decision_debug=decision_debug,
        emf_interval_s=args.emf_interval if args.emf_interval > 0 else None,
        tracing=tracing,
        emf_destination="stdout" if emf_endpoint is None else str(emf_endpoint),
        worker=role,
        management_port=management,
    )
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    with contextlib.suppress(ImportError):  # uvloop is in the gateway extra; plain asyncio otherwise
        # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
        import uvloop

        loop_factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run_gateway(config, options))
    except ListenUnavailableError as exc:
        _refuse(str(exc))
        return EXIT_LISTEN_FAILED
    except LaunchError as exc:
        _refuse(str(exc))
        return EXIT_CONFIG
    except KeyboardInterrupt:
        pass
    return 0
