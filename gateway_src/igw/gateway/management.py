"""The management listener: ``/metrics``, the detailed ``/readyz`` and the decision debug API on a port
of their own (``spec.extensions.management.port`` / ``igw serve --management-port``).

Why: the inference port is the one the load balancer exposes (internet-facing in some deployments) and
JWT auth guards only the inference routes, so on one port anyone who can send a request reads every
model-server pod's address and last scrape error, the worker's pid and every tenant/model/adapter
label of the metrics. Production proxies keep these off the traffic port the same way (Envoy's admin
port, nginx's ``stub_status`` on a private listener, the vLLM and SGLang routers' metrics ports).

With a management port, the inference app (:func:`igw.gateway.app.create_app` with
``management_listener=True``) keeps ``/healthz`` and a ``/readyz`` that answers 200/503 with no detail,
so the load balancer's health check and the drain after SIGTERM work on the traffic port as before;
every other operational path answers an OpenAI-shaped 404 there. The app built here shares the
inference app's state (the same registry, readiness and decision log) and has no services of its own.
Without a management port (plain ``igw serve``), one port serves everything, as before.

With ``igw serve --workers N`` every worker binds the management port too (``SO_REUSEPORT``, like the
inference port): ``/metrics`` answers for the whole host whichever worker takes the scrape (see
:mod:`igw.gateway.worker_metrics`); the detailed ``/readyz`` is the answering worker's (its index and
pid; the endpoints' scrape fields are worker 0's snapshots, which every worker follows, and
``inflight`` is that worker's own ledger), and ``/debug/decisions`` lists that worker's decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from igw.errors import IgwGatewayError
from igw.gateway.app import (
    WORKER_KEY,
    WORKER_METRICS_KEY,
    detailed_readyz,
    healthz,
    metrics_page,
    openai_errors,
)
from igw.gateway.debug_api import add_debug_routes
from igw.gateway.inference import STATE_KEY
from igw.gateway.server_identity import name_every_answer

EXTENSION: Final = "management"
PATH: Final = f"spec.extensions.{EXTENSION}.port"


class ManagementPortError(IgwGatewayError, ValueError):
    """The management port cannot be used as given (the message names the option or field)."""


def management_port(
    extension: Mapping[str, Any] | None, override: int | None, *, serving_port: int, path: str = PATH
) -> int | None:
    """The management listener's port: ``--management-port`` (``override``) when given, else the
    config's field (``extension``, at ``path``: ``spec.extensions.management.port`` of an
    InferenceGatewayConfig, ``spec.management.port`` of a GlobalRouterConfig), else ``None`` (one port
    serves everything). The one precedence rule for ``igw serve`` and ``igw global serve``.

    Raises :class:`ManagementPortError` when it equals ``serving_port``, naming where the port came from
    (port 0, "pick a free one", never collides: each listener gets its own).
    """
    if override is not None:
        port, source = override, "--management-port"
    elif extension and extension.get("port") is not None:
        port, source = int(extension["port"]), path
    else:
        return None
    if port != 0 and port == serving_port:
        raise ManagementPortError(
            f"{source}: {port} is also the inference port (--port): "
            "the management listener needs a port of its own"
        )
    return port


def management_app(gateway: web.Application) -> web.Application:
    """The management listener's app over ``gateway``'s state (build ``gateway`` with
    ``management_listener=True``, and serve both; this app starts no service of its own)."""
    app = name_every_answer(web.Application(middlewares=[openai_errors]))
    state = gateway[STATE_KEY]
    app[STATE_KEY] = state
    worker = gateway.get(WORKER_KEY)
    if worker is not None:
        app[WORKER_KEY] = worker
    worker_metrics = gateway.get(WORKER_METRICS_KEY)
    if worker_metrics is not None:
        app[WORKER_METRICS_KEY] = worker_metrics
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", detailed_readyz)
    app.router.add_get("/metrics", metrics_page)
    if state.decision_log is not None:
        add_debug_routes(app, state.decision_log)
    return app
