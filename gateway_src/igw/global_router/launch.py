"""Run one router replica until SIGTERM/SIGINT, then report not-ready for ``drain_s`` and stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from igw.gateway.body_budget import budget_meaning
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.stop_signals import StopSignals
from igw.gateway.tracing_options import TracingOptions, ratio_words
from igw.global_router.config import GlobalRouterConfig
from igw.global_router.reload import RELOAD_INTERVAL_S, GlobalConfigReloader, body_plan
from igw.global_router.server import ROUTER_KEY, create_global_app, global_management_app
from igw.redaction import redact_url

if TYPE_CHECKING:
    from igw.gateway.tracing import Tracing

log = logging.getLogger("igw.global_router")


def _tracing(options: TracingOptions | None) -> Tracing | None:
    if options is None:
        return None
    # deferred: start-up cost: the OTLP exporter loads only when tracing is on
    from igw.gateway.tracing import Tracing
    from igw.global_router.tracing import SERVICE_NAME

    log.info(
        "tracing: OTLP/HTTP export to %s, sampling %s, export timeout %gs; failures counted in "
        "igw_trace_export_spans_total",
        redact_url(options.endpoint),
        (
            "as OTEL_TRACES_SAMPLER says"
            + ("" if options.trust_parent_sampling else " (its ratio; callers' sampled flag not followed)")
            + ", else every request"
        )
        if options.sample_ratio is None
        else ratio_words(options),
        options.export_timeout_s,
    )
    return Tracing.exporting(options, service_name=SERVICE_NAME)


async def run_global_router(
    config: GlobalRouterConfig,
    *,
    host: str,
    port: int,
    region: str | None,
    limits: ServerLimits,
    emf_interval_s: float | None = None,
    management_port: int | None = None,
    tracing: TracingOptions | None = None,
    config_path: Path | None = None,
    validate: Callable[[GlobalRouterConfig], ServerLimits] | None = None,
    loaded_digest: str | None = None,
    reload_interval_s: float = RELOAD_INTERVAL_S,
) -> None:
    """``limits``: the client listener's timeouts and bounds (``spec.serverLimits``), its drain period
    and stream grace included. ``management_port``: serve ``/metrics`` and the detailed ``/readyz``
    there, not on ``port`` (opened first and closed last, so the drain stays observable).
    ``tracing``: export a span per request there (:mod:`igw.global_router.tracing`).
    ``config_path``: the file ``config`` was read from, reloaded when it changes
    (:mod:`igw.global_router.reload`; ``validate``: the command line's checks of a reloaded file,
    ``loaded_digest``: the file's digest taken before ``config`` was read); ``None``: not reloaded."""
    app = create_global_app(
        config,
        region=region,
        emf_interval_s=emf_interval_s,
        management_listener=management_port is not None,
        tracing=_tracing(tracing),
    )
    held = limits.max_body_bytes_held
    budget = app[ROUTER_KEY].body_budget
    plan = body_plan(held)
    log.info("%s", plan.describe())
    if (overcommit := plan.overcommit_warning()) is not None:
        log.warning("%s", overcommit)
    budget.limit = plan.body_bytes
    log.info(
        "request bodies held at once (each until its request is answered, streams included): at most "
        "%d bytes (%s): %s",
        budget.limit,
        "spec.serverLimits.maxBodyBytesHeld" if held else "derived: the memory plan's, else 256 MiB",
        budget_meaning(budget.limit),
    )
    stop = asyncio.Event()
    with StopSignals(stop, asyncio.get_running_loop()) as stop_signals:
        async with contextlib.AsyncExitStack() as listeners:
            if management_port is not None:
                management_url = await listeners.enter_async_context(
                    serve_app(global_management_app(app), host=host, port=management_port)
                )
                log.info("management listener (/metrics, /readyz) at %s", management_url)
            url = await listeners.enter_async_context(serve_app(app, host=host, port=port, limits=limits))
            router = app[ROUTER_KEY]
            log.info(
                "igw global router %s (region %s) serving %d cluster(s) at %s",
                config.name,
                router.region,
                len(config.clusters),
                url,
            )
            reloader = None
            if config_path is not None and validate is not None:
                reloader = GlobalConfigReloader(
                    app,
                    config_path,
                    validate=validate,
                    loaded_digest=loaded_digest,
                    interval_s=reload_interval_s,
                )
                reloader.start()
                listeners.push_async_callback(reloader.stop)
                log.info(
                    "configuration %s: reloaded when it changes (checked every %gs; restart-only fields "
                    "are named when an edit changes them)",
                    config_path,
                    reload_interval_s,
                )
            await stop.wait()
            stop_signals.ignore_further()
            router.draining = True
            log.info("stopping: readiness is now false; draining for %gs", limits.drain_s)
            await asyncio.sleep(limits.drain_s)
    log.info("igw global router stopped")
