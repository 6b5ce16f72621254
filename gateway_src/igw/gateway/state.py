"""The live gateway: the current runtime (swapped on reload), discovery results, scraper, metrics.

This is the object discovery reports to (:class:`~igw.gateway.discovery.DiscoverySink`) and the
HTTP handlers read from. All mutation happens on the event loop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from igw.config.model import GatewayConfig
from igw.gateway.body_budget import BodyBudget, BodyBudgetCollector, HeapTrim
from igw.gateway.decision_log import DecisionLog
from igw.gateway.default_backend import DefaultBackendResolver
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.event_tokens import TokensPerEvent
from igw.gateway.flow_gate import FlowGates
from igw.gateway.guards import RequestGuard
from igw.gateway.memory import MemoryPlan
from igw.gateway.response_search import SEARCHES_PER_SCOPE, ResponseSearches
from igw.gateway.retries import RetryBudget, RetryBudgetCollector
from igw.gateway.rewrite_metrics import RewriteMetrics
from igw.gateway.runtime import GatewayRuntime, PickerConfigs
from igw.gateway.scraper import ScrapeService
from igw.gateway.shutdown import InflightRequests
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.tenant_labels import anonymous_tenant

if TYPE_CHECKING:
    from igw.gateway.tracing import Tracing
    from igw.gateway.upstream_client import UpstreamPool

log = logging.getLogger("igw.gateway")


class GatewayState:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        guard: RequestGuard,
        clock: Callable[[], float],
        rng: random.Random,
        picker_configs: PickerConfigs | None = None,
        registry: CollectorRegistry | None = None,
        service_domain: str | None = None,
        index_blocks: int | None = None,
        exports_scrapes: bool = True,
    ) -> None:
        """``exports_scrapes``: whether this process's ``/metrics`` carries the series read from
        scrapes (``False`` for a worker that follows worker 0's; :class:`GatewayMetrics`)."""
        self.guard = guard
        self.clock = clock
        self.rng = rng
        self.runtime = GatewayRuntime(
            config,
            rng=rng,
            clock=clock,
            picker_configs=picker_configs,
            index_blocks=index_blocks,
            on_ejected=self._endpoint_ejected,
            on_request_fault=self._request_fault,
        )
        self.metrics = GatewayMetrics(
            lister=lambda: self.runtime.endpoints(),
            clock=clock,
            registry=registry,
            stale_threshold_s=lambda: self.runtime.settings.stale_threshold_s,
            scrapes=exports_scrapes,
            ejections=lambda: self.runtime.ejections(),
            known_adapters=lambda: self.runtime.router.adapters,
        )
        self.flow = FlowGates(registry=self.metrics.registry, clock=clock)
        """Flow-control queues per scheduler (``spec.extensions.flowControl``), kept across reloads."""
        self._configure_flow()
        self.rewrite_metrics = RewriteMetrics(self.metrics.registry)
        """Per-rule, per-target series of canary rewrites (``spec.extensions.modelRewrites``)."""
        self.scraper: ScrapeService | None = None
        self.upstream: UpstreamPool | None = None
        """The connection pool to the model servers, once the app's services started (also the
        app's ``SESSION_KEY``): read here per request, an attribute rather than aiohttp's
        ``Application.__getitem__`` (an interpreted call in the compiled build)."""
        self.decision_log: DecisionLog | None = None
        """The last scheduling decisions ("why this pod"), when the gateway runs with a decision log."""
        self.tracing: Tracing | None = None
        """OpenTelemetry spans of inference requests (``None``: off, no tracer call on the request path)."""
        self.discovered: dict[str, list[DiscoveredEndpoint]] = {}
        self.bbr_adapters: dict[str, str] = {}
        self.default_backend = DefaultBackendResolver(service_domain=service_domain)
        """Where requests matching no scheduler go (``spec.bbr.defaultBackend``), see its module."""
        self.discovery_ready = False
        self.inflight = InflightRequests()
        """Requests being forwarded, so a shutdown can wait for them and then end them cleanly."""
        self.retry_budget = RetryBudget()
        """Retries of answered requests in flight, per pool (``spec.extensions.routing.retry``'s budget)."""
        self.response_searches = ResponseSearches(per_scope=SEARCHES_PER_SCOPE)
        """Searches of the pods for a stored response no scheduler remembers: their bounds, a caller
        scope's ``SEARCHES_PER_SCOPE`` at most (since session s46)."""
        self.body_budget = BodyBudget()
        """Request-body bytes held at once (``serverLimits.maxBodyBytesHeld``; ``igw serve`` sets
        the limit at start, :mod:`igw.gateway.body_budget`)."""
        self.memory_plan: MemoryPlan | None = None
        """This process's memory plan (``igw serve`` sets it at start, :mod:`igw.gateway.memory`);
        a reload that changes ``flowControl.maxBytes`` re-checks it (:mod:`igw.gateway.reload`)."""
        self.heap_trim = HeapTrim(self.body_budget)
        """Trims the C heap once the bodies of a burst are all given back (:class:`HeapTrim`)."""
        self.metrics.registry.register(BodyBudgetCollector(self.body_budget))
        self.metrics.registry.register(
            RetryBudgetCollector(
                self.retry_budget, self._requests_in_flight, lambda: self.runtime.settings.retry
            )
        )
        self.tokens_per_event: dict[str, TokensPerEvent] = {}
        """Per scheduler: the output tokens its pool's stream events carry, learnt from its streams
        (what a stream cut before its usage is charged: :mod:`igw.gateway.event_tokens`)."""
        self.draining = False
        """Set on SIGTERM: /readyz answers 503 so load balancers stop sending before we stop serving."""
        self.on_config_applied: list[Callable[[GatewayConfig], None]] = []
        """Called after a reload is applied (discovery follows new scheduler names and selectors)."""
        self.check_config_now: Callable[[], None] | None = None
        """While the configuration reloader runs: have it check the file now (SIGHUP,
        :class:`~igw.gateway.stop_signals.ReloadSignal`); ``None``: reload is off (``--no-reload``)."""
        self.config_error: str | None = None
        """The last rejected reload's message (shown in /readyz until a valid config is applied)."""
        self.group_serving: Callable[[], bool] | None = None
        """In an ``igw serve --workers`` group: whether every worker serves (``WorkerRole.group_serving``);
        /readyz answers 503 until then. ``None``: a single process."""

    # ---- discovery sink -------------------------------------------------------------------------
    def _requests_in_flight(self) -> dict[str, int]:
        """Per configured pool: the requests in flight at its pods (what its retry budget is a share
        of, :mod:`igw.gateway.retries`); read at a scrape, not on the request path."""
        return {
            name: sum(ep.inflight for ep in sr.pool.states.values())
            for name, sr in self.runtime.schedulers.items()
        }

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self.discovered[scheduler] = list(endpoints)
        self.discovery_ready = True
        sr = self.runtime.schedulers.get(scheduler)
        if sr is None:
            return
        added, removed = sr.pool.replace(endpoints)
        if removed:
            sr.scheduler.on_endpoints_removed(removed)
            self.flow.forget(removed)
            self.metrics.drop_departed()  # starts the removed endpoints' grace period
        if added or removed:
            log.info("scheduler %s endpoints: +%s -%s", scheduler, added, removed)
            if self.scraper is not None:
                self.scraper.sync()

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        if dict(adapters) != self.bbr_adapters:
            log.info("bbr-managed LoRA adapters: %s", dict(sorted(adapters.items())))
        self.bbr_adapters = dict(adapters)
        self.runtime.with_bbr_adapters(self.bbr_adapters)

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        self.default_backend.apply_services(services)

    # ---- hot reload -----------------------------------------------------------------------------
    def apply_config(self, config: GatewayConfig, *, picker_configs: PickerConfigs | None = None) -> None:
        """Swap in a runtime for ``config``; raises (leaving the current one) if it cannot be built."""
        new = GatewayRuntime(
            config,
            rng=self.rng,
            clock=self.clock,
            picker_configs=self.runtime.picker_configs if picker_configs is None else picker_configs,
            bbr_adapters=self.bbr_adapters,
            previous=self.runtime,
            index_blocks=self.runtime.index_blocks,
            on_ejected=self._endpoint_ejected,
            on_request_fault=self._request_fault,
        )
        for name, sr in new.schedulers.items():
            if name in self.discovered:
                _, removed = sr.pool.replace(self.discovered[name])
                if removed:
                    sr.scheduler.on_endpoints_removed(removed)
                    self.flow.forget(removed)
        self.runtime = new
        self.config_error = None
        self.metrics.drop_departed()  # the endpoints of a scheduler the reload removed have left too
        self._configure_flow()
        for hook in self.on_config_applied:
            hook(config)
        if self.scraper is not None:
            self.scraper.sync()

    def _request_fault(self, scheduler: str, endpoints: frozenset[str]) -> None:
        """Outlier detection took a request that failed on two endpoints for the fault: counted and
        logged (the request's body is not: it may hold anything)."""
        self.metrics.child(self.metrics.request_faults, scheduler).inc()
        log.warning(
            "scheduler %s: one request failed on %s within a minute: taken for the request's "
            "fault, not counted against those endpoints (a poison request; "
            "spec.extensions.routing.outlierDetection)",
            scheduler,
            ", ".join(sorted(endpoints)),
        )

    def _endpoint_ejected(self, scheduler: str, key: str, seconds: float, failures: int) -> None:
        """Outlier detection ejected ``key``: counted, and logged (an operator looks at the pod). The
        only endpoint of its pool is never left out: said so, not counted as an ejection."""
        sr = self.runtime.schedulers.get(scheduler)
        if sr is not None and sr.scheduler.outliers.bound(len(sr.pool.states)) == 0:
            log.warning(
                "scheduler %s: endpoint %s failed %d requests in a row but is the only endpoint of its "
                "pool: not ejected, requests still go to it (spec.extensions.routing.outlierDetection)",
                scheduler,
                key,
                failures,
            )
            return
        self.metrics.child(self.metrics.ejections, scheduler, key).inc()
        log.warning(
            "scheduler %s: endpoint %s ejected for %gs after %d failed requests in a row "
            "(spec.extensions.routing.outlierDetection)",
            scheduler,
            key,
            seconds,
            failures,
        )

    def _configure_flow(self) -> None:
        """Hand the runtime's flow-control settings to the queues: at start, and on each applied
        reload, so queued requests are held to the new limits at once (:meth:`FlowGates.configure`)."""
        rt = self.runtime
        bounds = (rt.settings.retry_after_min_s, rt.settings.retry_after_max_s)
        self.flow.configure(
            rt.flow_settings,
            retry_after_bounds=bounds,
            anonymous_tenant=anonymous_tenant(rt.config.extensions),
            schedulers=rt.schedulers.keys(),
        )

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready when discovery has reported, some scheduler has an endpoint and the guard is ready.

        Stale endpoints do not make the gateway unready: it still routes (by its own in-flight
        counts), and taking it out of the load balancer would turn degraded service into none.
        """
        now = self.clock()
        schedulers: dict[str, Any] = {}
        any_usable = False
        for name, sr in self.runtime.schedulers.items():
            endpoints = {}
            left_out = dict(sr.scheduler.outliers.seconds_left(sr.pool.states.keys(), now))
            for key, st in sr.pool.states.items():
                fresh = sr.scheduler.is_fresh(st.view(), now)
                any_usable = True
                endpoints[key] = {
                    "fresh": fresh,
                    "scrape_age_s": None if st.scraped_at is None else round(now - st.scraped_at, 3),
                    "error": st.last_error,
                    "missing_signals": sorted(st.missing),
                    "kv_source": st.kv_source,
                    "adapters": None  # LoRA adapters in the running batch, as last scraped
                    if st.metrics is None or st.metrics.active_adapters is None
                    else sorted(st.metrics.active_adapters),
                    "inflight": st.inflight,
                    "ejected_s": None if key not in left_out else round(left_out[key], 3),
                    "metrics_frozen": st.page.frozen,
                    "max_model_len": st.max_model_len,
                }
            schedulers[name] = {
                "model": sr.spec.model_name,
                "engine": sr.spec.engine_type,
                "scorers": sr.scheduler.profile.describe(),
                "endpoints": endpoints,
            }
        guard = self.guard.readiness()
        detail: dict[str, Any] = {
            "discovery_ready": self.discovery_ready,
            "schedulers": schedulers,
            "guard": guard.as_detail(),
            "unroutable_bbr_adapters": list(self.runtime.router.unroutable_bbr),
        }
        if self.config_error:
            detail["config_reload_error"] = self.config_error
        if self.draining:
            detail["draining"] = True
        group = self.group_serving is None or self.group_serving()
        if not group:
            detail["workers_serving"] = False
        ready = self.discovery_ready and any_usable and guard.ready and group and not self.draining
        return ready, detail
