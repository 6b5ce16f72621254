"""Assemble and run a gateway process from CLI options (used by ``igw serve``): the composition root.

It sits above :mod:`igw.gateway` and :mod:`igw.security` because it wires the two together: the gateway
defines the request-guard port (:mod:`igw.gateway.guards`), security implements it, and neither
imports the other's internals (the layer contract in ``pyproject.toml``).

Decides, once, the pieces that differ between local and in-cluster use: the discovery source, where
``configMapRef`` EndpointPickerConfigs come from, the request guard (``igw.security`` when that
package is installed, else :class:`~igw.gateway.guards.OpenGuard`) and TLS termination.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Info

from igw.compiled import inspect_tree
from igw.config.documents import DocumentReadError, read_documents
from igw.config.model import GatewayConfig
from igw.errors import IgwGatewayError
from igw.gateway.app import create_app
from igw.gateway.body_budget import budget_meaning
from igw.gateway.collector_probe import probe_collector
from igw.gateway.debug_api import DecisionDebug
from igw.gateway.discovery import DiscoverySource
from igw.gateway.discovery.kube_client import KubeClientError, make_api_client
from igw.gateway.discovery.static_file import EndpointsFileError, StaticFileDiscovery
from igw.gateway.gc_tuning import tune_collector
from igw.gateway.guards import GuardFactory, OpenGuard, RequestGuard
from igw.gateway.inference import STATE_KEY
from igw.gateway.management import management_app
from igw.gateway.memory import MemoryPlan, configured_queue_bytes, memory_plan, pin_mmap_threshold
from igw.gateway.picker_share import SharedPickerConfigs
from igw.gateway.runtime import PickerConfigs, picker_config_key
from igw.gateway.serving import (
    ListenError,
    ServerLimits,
    effective_max_connections,
    raise_fd_limit,
    serve_app,
)
from igw.gateway.stop_signals import ReloadSignal, StopSignals
from igw.gateway.tracing_options import TracingOptions, ratio_words
from igw.gateway.worker_count import memory_limit
from igw.gateway.worker_heartbeat import Heartbeat
from igw.gateway.workers import WorkerRole
from igw.redaction import redact_url
from igw.scheduling.flow_control import EXTENSION_NAME as FLOW_EXTENSION

if TYPE_CHECKING:
    from igw.gateway.tracing import Tracing

log = logging.getLogger("igw.gateway")


class LaunchError(IgwGatewayError):
    """Start-up failed for a reason the operator must fix (message says which)."""


class ListenUnavailableError(LaunchError):
    """A listener could not be opened (:class:`~igw.gateway.serving.ListenError`: a port in use, an
    address not on this host, no permission): the machine's state at start, not the command line's
    mistake, so ``igw serve`` exits 1 for it rather than the usage error's 2."""


def _tracing(options: TracingOptions | None) -> Tracing | None:
    if options is None:
        return None
    # deferred: start-up cost: the OpenTelemetry SDK and exporter load only when tracing is on
    from igw.gateway.tracing import Tracing

    return Tracing.exporting(options)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchOptions:
    config_path: str
    endpoints_file: str | None = None
    in_cluster: bool = False
    kubeconfig: str | None = None
    config_maps_dir: str | None = None
    host: str = "0.0.0.0"
    port: int = 8080
    reload: bool = True
    config_digest: str | None = None
    """:func:`~igw.gateway.reload.file_digest` of ``config_path`` taken before the configuration was
    loaded from it: the hot reload applies an edit made while the process started (``None``: the file
    as it is once the gateway is up is taken for the loaded configuration)."""
    config_map: str | None = None
    """``NAMESPACE/NAME[/KEY]``: keep ``config_path`` equal to that ConfigMap key (in-cluster only;
    see :mod:`igw.gateway.config_sync`)."""
    decision_debug: DecisionDebug | None = None
    """Keep recent scheduling decisions for ``/debug/decisions`` (off when ``None``)."""
    emf_interval_s: float | None = None
    """Log CloudWatch EMF documents at this interval (off when ``None``)."""
    tracing: TracingOptions | None = None
    """Export OpenTelemetry traces of inference requests over OTLP/HTTP (off when ``None``)."""
    emf_destination: str = "stdout"
    """Where the EMF documents go, as the start-up line names it (``tcp://HOST:PORT`` of the
    CloudWatch agent, else ``stdout``)."""
    worker: WorkerRole | None = None
    """This process's place in an ``igw serve --workers N`` group (``None``: a single process)."""
    management_port: int | None = None
    """Serve ``/metrics``, the detailed ``/readyz`` and ``/debug/decisions`` on this port (on ``host``)
    instead of the inference port (``None``: one port serves everything; see
    :mod:`igw.gateway.management`)."""
    limits: ServerLimits = field(default_factory=ServerLimits)
    """Client timeouts and limits, and the shutdown timing: after SIGTERM ``/readyz`` answers 503
    for ``drain_s`` while requests are still served (so the load balancer stops routing here
    first), then no new connections, in-flight requests get ``stream_grace_s``, then the exit."""
    limit_options: frozenset[str] = frozenset()
    """The ``limits`` fields given on the command line: a hot reload's ``serverLimits`` does not
    change them (``--max-body-bytes-held`` keeps the body budget where a reload would set it)."""


def picker_configs_from_dir(config: GatewayConfig, directory: Path | None) -> PickerConfigs:
    out: dict[str, Mapping[str, Any]] = {}
    for spec in config.schedulers:
        key = picker_config_key(spec)
        if key is None or spec.config_map_ref is None:
            continue
        if directory is None:
            raise ValueError(
                f"scheduler {spec.name!r} uses configMapRef {key}: pass --config-maps DIR (file DIR/{key})"
            )
        path = directory / spec.config_map_ref.name / spec.config_map_ref.key
        try:
            documents = read_documents(path)
        except DocumentReadError as exc:
            raise ValueError(f"scheduler {spec.name!r} configMapRef {key}: {exc}") from exc
        where = f"scheduler {spec.name!r} configMapRef {key}: {path}"
        if len(documents) != 1:
            count = f"{len(documents)} YAML documents" if documents else "no YAML document"
            raise ValueError(f"{where} holds {count}, expected one EndpointPickerConfig")
        doc = documents[0].content
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
            # the manifest kubectl applies, copied whole: the gateway reads the files a ConfigMap
            # volume mounts (one per data key); until session s42 this got "is not a YAML mapping"
            # (beside other documents) or the picker schema's "kind: expected 'EndpointPickerConfig'"
            raise ValueError(
                f"{where} holds a whole ConfigMap manifest; the file must hold only the value of its "
                f"data key {spec.config_map_ref.key!r} (the EndpointPickerConfig itself), as a "
                "ConfigMap volume mounts it"
            )
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where} is not a YAML mapping")
        out[key] = doc
    return out


def picker_configs_from_cluster(config: GatewayConfig, api_client: Any) -> PickerConfigs:
    # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
    from igw.gateway.discovery.kube import read_picker_config

    out: dict[str, Mapping[str, Any]] = {}
    for spec in config.schedulers:
        ref = spec.config_map_ref
        key = picker_config_key(spec)
        if ref is None or key is None:
            continue
        out[key] = read_picker_config(api_client, namespace=config.namespace, name=ref.name, key=ref.key)
    return out


@dataclass(frozen=True, slots=True)
class GuardWiring:
    """What :func:`guard_factory` hands the gateway: the factory, and the counter of held token
    bounds its guards' local rate-limit buckets refused (``None`` without ``igw.security``), for
    the EMF reporter (``RateLimitHoldsRefused``) - kept where it is made, as the gateway cannot
    import ``igw.security`` to find it."""

    factory: GuardFactory
    holds_refused: Counter | None = None


def guard_factory(registry: CollectorRegistry, *, processes: int = 1) -> GuardWiring:
    """``igw.security``'s guards when installed (they read spec.auth and our extensions), else open.

    A factory rather than one guard, so a hot reload that changes ``spec.auth`` or the security
    extensions rebuilds the guard (see :mod:`igw.gateway.reload`). ``processes``: the workers of this
    pod's group, each of which enforces its share of the local rate limits (before session s40 each
    enforced all of them, and a tenant got N times its limit from ``--workers N``).
    """
    if importlib.util.find_spec("igw.security.factory") is None:
        log.warning("igw.security is not installed: requests are not authenticated (OpenGuard)")

        def open_guard(config: GatewayConfig) -> RequestGuard:
            return OpenGuard()

        return GuardWiring(open_guard)
    # deferred: optional package: a slim install may lack igw.security (checked by find_spec above)
    from igw.security.factory import RequestGuardFactory

    factory = RequestGuardFactory(registry=registry, processes=processes)
    return GuardWiring(factory, holds_refused=factory.holds_refused)


def _announce_code(registry: CollectorRegistry) -> None:
    """Refuse to start on a compiled module built from other sources than the ``.py`` beside it (it
    would run the old code, :mod:`igw.compiled`); else log and export which code runs:
    ``igw_gateway_code_info{code="python"|"mypyc", compiled_modules="N"} 1``."""
    code = inspect_tree()
    if code.stale:
        raise LaunchError("stale compiled module(s): " + "; ".join(code.stale))
    log.info("code: %s", code.describe())
    Info(
        "igw_gateway_code", "Which code this gateway runs: pure Python or mypyc-compiled.", registry=registry
    ).info({"code": code.mode, "compiled_modules": str(len(code.compiled))})


def optional_features(options: LaunchOptions, env: Mapping[str, str] = os.environ) -> list[str]:
    """One start-up line per optional feature switched on (tracing, EMF, decision debug), so the log
    shows what runs before any request uses it: ``igw serve --otel-endpoint URL`` said nothing about
    tracing until a span was exported (before session s44). The OTLP endpoint is shown with its
    credentials masked (:func:`igw.redaction.redact_url`); the management port has its own line when
    its listener opens."""
    lines: list[str] = []
    tracing = options.tracing
    if tracing is not None:
        if tracing.sample_ratio is not None:
            sampling = ratio_words(tracing)
        elif env.get("OTEL_TRACES_SAMPLER"):
            arg = env.get("OTEL_TRACES_SAMPLER_ARG")
            sampling = f"OTEL_TRACES_SAMPLER={env['OTEL_TRACES_SAMPLER']}" + (f" ({arg})" if arg else "")
            if not tracing.trust_parent_sampling:  # its ratio drawn here (env_sampler_ratio)
                sampling += ", callers' sampled flag not followed"
        else:
            sampling = "every request"
        lines.append(
            f"tracing: OTLP/HTTP export to {redact_url(tracing.endpoint)}, sampling {sampling}, export "
            f"timeout {tracing.export_timeout_s:g}s; failures counted in igw_trace_export_spans_total"
        )
    if options.emf_interval_s is not None:
        lines.append(f"EMF metrics: every {options.emf_interval_s:g}s to {options.emf_destination}")
    if options.decision_debug is not None:
        where = "management port" if options.management_port is not None else "inference port"
        lines.append(
            f"decision debug: the last {options.decision_debug.capacity} scheduling decisions at "
            f"/debug/decisions on the {where}, for callers presenting $IGW_DEBUG_TOKEN"
        )
    return lines


async def run_gateway(config: GatewayConfig, options: LaunchOptions) -> None:
    problems = options.limits.problems()
    if problems:
        raise LaunchError("; ".join(problems))
    beat_fd = None if options.worker is None else options.worker.heartbeat_fd
    if beat_fd is None:
        await _run_gateway(config, options)
        return
    # A worker of a group: its event loop beats from the start to the end (the parent kills a
    # worker whose loop stops beating, igw.gateway.worker_heartbeat).
    heartbeat = Heartbeat(beat_fd, asyncio.get_running_loop())
    heartbeat.start()
    try:
        await _run_gateway(config, options)
    finally:
        heartbeat.stop()


async def _run_gateway(config: GatewayConfig, options: LaunchOptions) -> None:
    fd_limit = raise_fd_limit()
    log.info(
        "file descriptors: %d; at most %d client connections; fixed mmap threshold: %s",
        fd_limit,
        effective_max_connections(options.limits),
        "yes" if pin_mmap_threshold() else "no (not glibc)",
    )
    registry = CollectorRegistry(auto_describe=True)
    _announce_code(registry)
    for line in optional_features(options):
        log.info("%s", line)
    async with _collector_probe(options):
        await _serve(config, options, registry)


@contextlib.asynccontextmanager
async def _collector_probe(options: LaunchOptions) -> AsyncIterator[None]:
    """With tracing on, check in the background that the OTLP collector accepts a connection
    (:mod:`igw.gateway.collector_probe`: one WARNING if not) while the gateway starts and serves;
    cancelled if still running when the gateway stops. In a worker group only worker 0 probes: one
    line per pod, not one per worker."""
    tracing = options.tracing
    if tracing is None or (options.worker is not None and options.worker.index != 0):
        yield
        return
    probe = asyncio.create_task(
        probe_collector(tracing.endpoint, timeout_s=tracing.export_timeout_s), name="OTLP collector probe"
    )
    try:
        yield
    finally:
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe


def _memory_plan(config: GatewayConfig, options: LaunchOptions, processes: int) -> MemoryPlan:
    """This process's memory plan: its share of the container's limit split between its parts, the
    values the configuration sets (``serverLimits.maxBodyBytesHeld``, ``flowControl.maxBytes``) as set."""
    return memory_plan(
        memory_limit(),
        processes,
        body_bytes=options.limits.max_body_bytes_held or None,
        queue_bytes=configured_queue_bytes(config.stated_extensions.get(FLOW_EXTENSION)),
    )


async def _serve(config: GatewayConfig, options: LaunchOptions, registry: CollectorRegistry) -> None:
    discovery: DiscoverySource
    if options.in_cluster:
        # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
        from igw.gateway.discovery.kube import KubeDiscovery

        try:
            api = make_api_client(kubeconfig=options.kubeconfig)
        except KubeClientError as exc:
            raise LaunchError(str(exc)) from exc

        def load_pickers(cfg: GatewayConfig) -> PickerConfigs:
            return picker_configs_from_cluster(cfg, api)

        discovery = KubeDiscovery(api_client=api, namespace=config.namespace, schedulers=config.schedulers)
        if options.config_map and (options.worker is None or options.worker.mirrors_config_map):
            # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
            from igw.gateway.config_sync import ConfigMapFileSync, ConfigMapRef

            config_sync = ConfigMapFileSync(
                api, ConfigMapRef.parse(options.config_map), Path(options.config_path)
            )
            config_sync.start(asyncio.get_running_loop())
    else:
        assert options.endpoints_file is not None
        directory = Path(options.config_maps_dir) if options.config_maps_dir else None

        def load_pickers(cfg: GatewayConfig) -> PickerConfigs:
            return picker_configs_from_dir(cfg, directory)

        discovery = StaticFileDiscovery.for_schedulers(Path(options.endpoints_file), config.schedulers)
    loader: Callable[[GatewayConfig], PickerConfigs] = load_pickers
    if options.worker is not None:  # worker 0 reads the configMapRefs, the others take its read
        loader = SharedPickerConfigs(
            options.worker.picker_configs, leads=options.worker.index == 0, load=load_pickers
        )
    processes = 1 if options.worker is None else options.worker.count
    plan = _memory_plan(config, options, processes)
    log.info("%s", plan.describe())
    if (overcommit := plan.overcommit_warning()) is not None:
        log.warning("%s", overcommit)
    index_blocks = plan.index_blocks
    try:
        if isinstance(loader, SharedPickerConfigs):
            pickers = await asyncio.to_thread(loader.load, config, options.config_digest)
        else:
            pickers = await asyncio.to_thread(loader, config)
        tls = _tls(config, registry)
        security = guard_factory(registry, processes=processes)
        app = create_app(
            config,
            guard_factory=security.factory,
            holds_refused=security.holds_refused,
            discovery=discovery,
            picker_configs=pickers,
            config_path=Path(options.config_path) if options.reload else None,
            config_digest=options.config_digest,
            load_picker_configs=loader,
            registry=registry,
            service_domain=f"{config.namespace}.svc" if options.in_cluster else None,
            decision_debug=options.decision_debug,
            emf_interval_s=options.emf_interval_s,
            tracing=_tracing(options.tracing),
            worker=options.worker,
            management_listener=options.management_port is not None,
            index_blocks=index_blocks,
            max_header_field_bytes=options.limits.max_header_field_bytes,
            limit_options=options.limit_options,
        )
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc
    held = options.limits.max_body_bytes_held
    budget = app[STATE_KEY].body_budget
    budget.limit = plan.body_bytes
    app[STATE_KEY].memory_plan = plan
    log.info(
        "request bodies held at once (read, not yet queued or forwarded): at most %d bytes (%s): %s",
        budget.limit,
        "serverLimits.maxBodyBytesHeld" if held else "derived: the memory plan's, or 256 MiB without a limit",
        budget_meaning(budget.limit),
    )
    stop = asyncio.Event()
    ssl_context = None if tls is None else tls[0]
    limits = options.limits
    async with contextlib.AsyncExitStack() as started:
        stop_signals = started.enter_context(StopSignals(stop, asyncio.get_running_loop()))
        state = app[STATE_KEY]

        def reload_now() -> None:
            check = state.check_config_now
            if check is None:
                log.info("SIGHUP ignored: configuration reload is off (--no-reload)")
                return
            log.info("SIGHUP: checking the configuration file %s now", options.config_path)
            check()

        reload_signal = started.enter_context(
            ReloadSignal(reload_now, asyncio.get_running_loop(), stop.is_set)
        )
        try:
            if options.management_port is not None:
                # Entered first, so it closes last: /metrics and /readyz stay readable while the
                # inference listener drains.
                management_url = await started.enter_async_context(
                    serve_app(
                        management_app(app),
                        host=options.host,
                        port=options.management_port,
                        ssl_context=ssl_context,
                        limits=limits,
                        reuse_port=options.worker is not None,
                    )
                )
                log.info("igw gateway %s management listener at %s", config.name, management_url)
            url = await started.enter_async_context(
                serve_app(
                    app,
                    host=options.host,
                    port=options.port,
                    ssl_context=ssl_context,
                    limits=limits,
                    reuse_port=options.worker is not None,
                )
            )
        except EndpointsFileError as exc:
            raise LaunchError(str(exc)) from exc
        except ListenError as exc:  # a port in use, an address not on this host
            raise ListenUnavailableError(str(exc)) from exc
        if tls is not None:
            await tls[1].start()
        # Serving, the reloader running: a SIGHUP held back since the worker's start is handled now.
        reload_signal.release_held()
        if options.worker is not None:  # the parent starts the group's other workers after worker 0
            options.worker.report_started()
        log.info("igw gateway %s serving %d scheduler(s) at %s", config.name, len(config.schedulers), url)
        log.info("garbage collector: start-up objects frozen, thresholds %s", tune_collector())
        try:
            await stop.wait()
            stop_signals.ignore_further()
            state.draining = True
            log.info(
                "stopping: not ready; serving for %gs more, then up to %gs for in-flight requests",
                limits.drain_s,
                limits.stream_grace_s,
            )
            await asyncio.sleep(limits.drain_s)
            log.info("drain period over: no new connections")
        finally:
            if tls is not None:
                await tls[1].close()
    log.info("igw gateway stopped")


def _tls(config: GatewayConfig, registry: CollectorRegistry) -> Any:
    if importlib.util.find_spec("igw.security.tls") is None:
        return None
    # deferred: optional package: a slim install may lack igw.security (checked by find_spec above)
    from igw.security.tls import build_server_tls

    try:
        return build_server_tls(config.extensions, registry=registry)
    except (OSError, ValueError) as exc:
        raise LaunchError(f"spec.extensions.tlsTermination: {exc}") from exc
