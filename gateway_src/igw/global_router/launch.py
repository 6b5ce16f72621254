"""Run one router replica until SIGTERM/SIGINT, then report not-ready for ``drain_s`` and stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from igw.gateway.serving import serve_app
from igw.global_router.config import GlobalRouterConfig
from igw.global_router.server import ROUTER_KEY, create_global_app

log = logging.getLogger("igw.global_router")


async def run_global_router(
    config: GlobalRouterConfig,
    *,
    host: str,
    port: int,
    region: str | None,
    drain_s: float,
    emf_interval_s: float | None = None,
) -> None:
    app = create_global_app(config, region=region, emf_interval_s=emf_interval_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with serve_app(app, host=host, port=port) as url:
        router = app[ROUTER_KEY]
        log.info(
            "igw global router %s (region %s) serving %d cluster(s) at %s",
            config.name,
            router.region,
            len(config.clusters),
            url,
        )
        await stop.wait()
        router.draining = True
        log.info("stopping: readiness is now false; draining for %gs", drain_s)
        await asyncio.sleep(drain_s)
    log.info("igw global router stopped")
