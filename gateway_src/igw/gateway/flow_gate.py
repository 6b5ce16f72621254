"""Flow control in the request path: a saturated request waits in its band's queue.

Wraps the pure queues of :mod:`igw.scheduling.flow_control` (one :class:`FlowController` per
scheduler, so one pool's overload never queues another pool's traffic) with asyncio futures. One
pump task per scheduler, alive while its queue holds requests, runs :meth:`FlowGates.pump` each
poll interval: it expires requests past their TTL and, while the head of the highest band can be
placed (the scheduler no longer answers ``SATURATED``), hands it its routing decision. Capacity is
therefore seen through the scraped metrics, the same signal the saturation check uses for new
arrivals. Waiting requests only await their own future: with each of them polling instead, a queue
of a few hundred requests woke the event loop tens of thousands of times a second and took the
gateway's CPU from the requests it was serving.

A waiter that is cancelled (its client disconnected) leaves its queue at once, and gives back a pick
handed to it in the same loop turn (:meth:`FlowGates.wait`'s ``release``). A reload that removes
a scheduler answers the requests queued for it at once (:meth:`FlowGates.configure`): nothing
dispatches them any more (its pool is no longer discovered nor scraped).

Per-band headroom (``dispatchBelow``) needs the pool's utilisation, which only the request path
can read (it owns the scheduler and the pool's views): it hands a :data:`Utilisation` probe to
:meth:`FlowGates.wait`, and asks :meth:`FlowGates.must_wait` whether an arrival the scheduler did
not call saturated must still queue. Without a probe the gate dispatches on saturation alone.
Per-endpoint places (``maxEndpointQueue``, ``keepSlots``) likewise need an :data:`EndpointSamples`
probe: the scraped queue and batch of each fresh endpoint, the dispatches the scrapes have not
shown yet, and the router's own in-flight requests there. The gate learns each endpoint's batch
size from them (:class:`~igw.scheduling.flow_control.BatchEstimate`, once per new scrape), and
forgets what it learned of an endpoint when the endpoint leaves its pool (:meth:`FlowGates.forget`).
A lower band is held while no
endpoint has a place for it; the probe is read before the scheduler runs, because a pick that is not
sent would still count as a dispatch in the scheduler's ledger of unreflected dispatches.

Where a pool's engine preempts running requests for a batch slot by the body's ``priority``
(``flowControl.enginePriority`` on SGLang), the gate keeps each endpoint's requests in flight per
band (:meth:`FlowGates.started` / :meth:`FlowGates.finished`, no scrape lag) and lets a top-band
request that finds the pool saturated go at once to an endpoint whose batch the engine can free for
it (:meth:`FlowGates.preempting_endpoint`).

The ``tenant`` label of the rejection counter is bounded (:class:`TenantLabels`): the tenant may be
a client-chosen header value, and every distinct label value is a new time series.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import math
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from igw.errors import IgwGatewayError
from igw.gateway.tenant_labels import ANONYMOUS_TENANT, TenantLabels
from igw.scheduling.engine_priority import EnginePriority
from igw.scheduling.flow_control import (
    BatchEstimate,
    CapacityEstimate,
    EndpointLoad,
    FlowController,
    FlowControlSettings,
    QueueBytes,
    QueuedRequest,
    Shed,
    ShedReason,
    header_objective_allowed,
    header_tenant_denied,
    least_wait,
    priority_for,
    reaches_tenant,
)
from igw.scheduling.types import DecisionKind, EndpointKey, EndpointView, RoutingDecision

log = logging.getLogger("igw.gateway.flow")

OBJECTIVE_HEADER: Final = "x-gateway-inference-objective"
FAIRNESS_HEADER: Final = "x-gateway-inference-fairness-id"
MAX_QUEUE_MS_HEADER: Final = "x-gateway-max-queue-ms"
WAIT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_QUEUE_MS_DIGITS: Final = 12
"""Significant digits of the longest ``x-gateway-max-queue-ms`` read as a number; a longer one is
longer than any band's TTL (which then decides alone), and converting it would only cost time."""

Picker = Callable[[], RoutingDecision]
"""Re-runs the scheduler for one queued request against the pool as it is now."""
Classifier = Callable[[], int]
"""Classifies one queued request again under the gate's settings now (its band after a reload)."""
Releaser = Callable[[RoutingDecision], None]
"""Takes back a pick that was handed to a queued request but never sent (its dispatch ledger entry)."""
Utilisation = Callable[[], float]
"""Reads the pool's load now, as a fraction of its saturation point (1.0: saturated)."""
REMOVED_BY_RELOAD: Final = (
    "its scheduler {scheduler!r} was removed by a configuration reload; retry the request"
)
"""The reason of the decision a request queued for a scheduler that a reload removed is answered with."""
HELD_BY_FLOW_CONTROL: Final = RoutingDecision(
    kind=DecisionKind.SATURATED, reason="held back by flow control for higher bands"
)
"""What the request path holds for an arrival that queues without a pick (headroom or queue
places): treated like a saturated pick, and replaced by the decision the queue hands out."""


@dataclass(frozen=True, slots=True)
class EndpointSample:
    """One endpoint as the request path sees it now (the input of the per-endpoint places)."""

    waiting: int | None
    """Scraped waiting requests."""
    running: int | None
    """Scraped running requests."""
    unreflected: int = 0
    """This router's dispatches that the scrape does not show yet."""
    inflight: int = 0
    """This router's requests there that have not completed (no scrape lag; other routers' traffic
    is not in it)."""
    scraped_at: float | None = None
    """When the scrape was taken (a new value is a new scrape)."""
    completion_rate: float | None = None
    """This router's completions there per second, measured (``None`` before any)."""

    def load(
        self, batch: int | None, inflight_at_scrape: int | None, pool_completion_rate: float | None = None
    ) -> EndpointLoad:
        """The endpoint's load now.

        The scrape is up to a scrape interval old: it still counts sequences that have finished
        since, which would hold lower bands back until the next scrape and leave batch slots idle.
        So the occupancy is this router's in-flight count now (no lag) plus the rest of what the
        scrape showed: the other routers' requests, the scraped total less this router's in-flight
        count when the scrape was first seen (``inflight_at_scrape``; ``None`` before that). The
        requests waiting there are what exceeds the batch size once it is known; before that, the
        scraped queue plus what was sent since (none when the scrape showed no queue).
        """
        scraped = max(0, self.waiting or 0) + max(0, self.running or 0)
        if inflight_at_scrape is None:
            occupancy = max(self.inflight, scraped + max(0, self.unreflected))
        else:
            occupancy = self.inflight + max(0, scraped - inflight_at_scrape)
        scraped_waiting = max(0, self.waiting or 0)
        if batch is not None:
            waiting = max(0, occupancy - batch)
        elif scraped_waiting:  # a queue at the scrape: what was sent since joined it
            waiting = scraped_waiting + max(0, self.unreflected)
        else:  # never seen full, no queue at the scrape: what was sent since is taken to run
            waiting = 0
        return EndpointLoad(
            waiting=waiting,
            occupancy=occupancy,
            batch=batch,
            completion_rate=self.completion_rate,
            pool_completion_rate=pool_completion_rate,
        )


EndpointSamples = Callable[[], Mapping[EndpointKey, EndpointSample]]
"""Reads each fresh endpoint of the pool now (see :func:`endpoint_samples`)."""


def endpoint_samples(
    views: Sequence[EndpointView], completion_rate: Callable[[EndpointKey], float | None] | None = None
) -> dict[EndpointKey, EndpointSample]:
    """One sample per endpoint with metrics.

    ``views`` are the pool's fresh endpoints as the scheduler annotates them (its ledger fills in
    ``unreflected_dispatches``), so a burst sent since the last scrape already counts;
    ``completion_rate`` reads an endpoint's measured completions per second.
    """
    return {
        v.key: EndpointSample(
            v.metrics.waiting,
            v.metrics.running,
            v.unreflected_dispatches,
            v.inflight,
            v.scraped_at,
            None if completion_rate is None else completion_rate(v.key),
        )
        for v in views
        if v.metrics is not None
    }


def flow_tenant(tenant: str | None, authenticated: bool, headers: Mapping[str, str]) -> str:
    """The request's tenant in flow control: its authenticated tenant claim; for a request the gateway
    did not authenticate (no ``spec.auth``), the client's ``x-gateway-inference-fairness-id``; else the
    one shared anonymous tenant (``""``).

    An authenticated caller whose token carries no tenant claim does not name its tenant by header:
    each name is a tenant of its own in the round-robin and in the displacement of a full band, so a
    caller sending a new name per request took one turn per name and pushed another tenant's queued
    requests out (429 ``fair_share``) down to one, that tenant's authenticated requests included.
    Without authentication the header is the only signal there is, as in the reference.

    A canary rule's ``stickyBy: tenant`` keys its split by this tenant too (``None`` for ``""``: a
    random draw), so a caller whose token names no tenant cannot pick its target by the header."""
    if tenant:
        return tenant
    if authenticated:
        return ""
    return headers.get(FAIRNESS_HEADER) or ""


class BadQueueDeadline(IgwGatewayError, ValueError):
    """The client's ``x-gateway-max-queue-ms`` is not a whole number of milliseconds."""


def client_max_queue_s(value: str | None) -> float | None:
    """The client's queue deadline in seconds from its ``x-gateway-max-queue-ms`` header value.

    ``None`` when the header is absent or empty, or longer than :data:`MAX_QUEUE_MS_DIGITS` digits
    (the band's TTL is shorter). Anything but ASCII digits raises :class:`BadQueueDeadline`: a sign,
    a fraction, or a Unicode digit (``str.isdigit`` accepts ``"²"``, which ``int`` refuses) is the
    client's mistake, answered 400 naming the header instead of being ignored or failing the request.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise BadQueueDeadline(
            f"header {MAX_QUEUE_MS_HEADER} must be a whole number of milliseconds (digits 0-9 only)"
        )
    significant = text.lstrip("0")
    if len(significant) > MAX_QUEUE_MS_DIGITS:
        return None
    return int(significant or "0") / 1000


HTTP11_LINE_END: Final = len(" HTTP/1.1\r\n")
"""The request line's bytes after its target."""


def request_head_bytes(method: str, target: str, fields: Iterable[tuple[bytes, bytes]]) -> int:
    """The request head's size as received: its request line (``METHOD target HTTP/1.1``) and each
    header field (``name: value`` and its line end), then the empty line that ends the head."""
    size = len(method) + 1 + len(target) + HTTP11_LINE_END + 2
    for name, value in fields:
        size += len(name) + len(value) + 4
    return size


def queued_size_bytes(*, body: bytes, prompt_text: str, head_bytes: int) -> int:
    """What a queued request holds in memory, as the queue's ``maxBytes`` bounds count it.

    Its body; the prompt text the router reads (the prompt, or the messages serialised, copied out
    of the body: at its in-memory size, up to four bytes a character); and its head twice, once as
    the fields received (bytes, forwarded as they came) and once as the decoded header map. Counting
    the body alone let requests with small bodies and large heads (up to the server's header limits)
    hold many times what ``maxBytes`` said while queued. Per-object overheads of the header map and
    the connection's own buffers are not counted.
    """
    return len(body) + sys.getsizeof(prompt_text) + 2 * head_bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """The request was shed: answer 429 with ``retry_after_s``."""

    reason: ShedReason
    retry_after_s: int
    priority: int


@dataclass(frozen=True, slots=True)
class _Scraped:
    """What the gate remembers of an endpoint's latest scrape it has seen."""

    scraped_at: float
    inflight: int
    """This router's in-flight count when the scrape was first seen."""
    batch: BatchEstimate


@dataclass(slots=True)
class _Waiter:
    pick: Picker
    future: asyncio.Future[RoutingDecision | Refused]
    gate: str
    request_id: str
    """The request's own id (for logs); the queue knows it by a key of the gate's own."""
    priority: int
    """Its band now (a reload may move it: :meth:`FlowGates.configure`)."""
    classify: Classifier | None = None
    release: Releaser | None = None


class FlowMetrics:
    """Queue depth, wait time and rejections per band (series named ``igw_flow_*``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "igw_flow_queue_depth",
            "Requests waiting per scheduler and band.",
            ["scheduler", "priority"],
            registry=registry,
        )
        self.wait = Histogram(
            "igw_flow_wait_seconds",
            "Time a request waited in its band's queue before dispatch.",
            ["scheduler", "priority"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.rejections = Counter(
            "igw_flow_rejections",
            "Requests shed by flow control, by band, tenant and reason.",
            ["scheduler", "priority", "tenant", "reason"],
            registry=registry,
        )
        self.objective_denied = Counter(
            "igw_flow_objective_denied",
            "Objective headers ignored because the tenant may not name that objective "
            "(objectiveAccess, headerPriorityLimit); the objective label is a configured or named band.",
            ["scheduler", "objective"],
            registry=registry,
        )


class FlowGates:
    """The queues of every scheduler, kept across configuration reloads."""

    def __init__(self, *, registry: CollectorRegistry, clock: Callable[[], float]) -> None:
        self.metrics = FlowMetrics(registry)
        self.tenant_labels = TenantLabels.of(registry)
        """Shared with the other families of ``registry`` labelled by tenant (:mod:`.tenant_labels`)."""
        self.clock = clock
        self._controllers: dict[str, FlowController] = {}
        self._queued_bytes = QueueBytes()
        """The bytes queued for every scheduler together, which ``maxBytes`` bounds: one budget for
        the process, as the memory plan reserves it (:mod:`igw.gateway.memory`). Until session s48
        each scheduler's queue had its own ``maxBytes``, so three pools' full queues held three
        times what the plan reserved."""
        self._waiters: dict[str, _Waiter] = {}
        """Each queued request's waiter, by the queue key :meth:`wait` gave it (not the request id:
        that may be the client's ``X-Request-Id``, which two requests can share)."""
        self._keys = itertools.count()
        self._last_pump: dict[str, float] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        """Each scheduler's pump task, while its queue holds requests."""
        self._utilisation: dict[str, Utilisation] = {}
        """The latest utilisation probe each scheduler's waiters brought (for headroom)."""
        self._samples: dict[str, EndpointSamples] = {}
        """The latest endpoint probe each scheduler's waiters brought (for per-endpoint places)."""
        self._scraped: dict[EndpointKey, _Scraped] = {}
        """Each endpoint's latest scrape seen, with its learned batch size."""
        self._capacity: dict[EndpointKey, CapacityEstimate] = {}
        """Each endpoint's busy batch slots over time, for its capacity (:class:`CapacityEstimate`)."""
        self._inflight: dict[EndpointKey, collections.Counter[int]] = {}
        """This router's requests in flight at each endpoint, per band (engine preemption)."""
        self._leaving: set[EndpointKey] = set()
        """Endpoints that left their pool with requests still in flight here: their entry in
        ``_inflight`` goes once the last of those finishes (kept, its emptied counter stayed for
        good, one per pod that a rolling update drained)."""
        self.settings: FlowControlSettings | None = None
        self.schedulers: frozenset[str] | None = None
        """The schedulers of the runtime applied last (``None``: not told, every name is taken)."""
        self.retry_after_bounds = (1, 60)
        """Whole seconds a ``Retry-After`` may say (``spec.extensions.routing.retryAfter``)."""
        self.anonymous_tenant = ANONYMOUS_TENANT
        """What the metrics and the access log call the queues' anonymous tenant (``""``, see
        :func:`flow_tenant`): ``rateLimits.anonymousTenant``, the security families' name for it."""

    def configure(
        self,
        settings: FlowControlSettings | None,
        *,
        retry_after_bounds: tuple[int, int],
        anonymous_tenant: str = ANONYMOUS_TENANT,
        schedulers: Collection[str] | None = None,
    ) -> None:
        """Apply the current runtime's settings (``None``: off; the queued requests are answered
        at once, as an arrival is without flow control: :meth:`_release_all`).

        Called when the gateway starts and when a reload is applied
        (:meth:`~igw.gateway.state.GatewayState.apply_config`), so new settings reach the queues
        that exist at once, not at their pool's next arrival: every queued request is classified
        again (:meth:`_reclassified`: an objective's new priority moves it to its new band), every
        queue is reconfigured
        (:meth:`~igw.scheduling.flow_control.FlowController.reconfigure`), and what a lowered bound or
        TTL no longer admits is answered now as any shed or expired request is (429 ``request_shed``
        with a ``Retry-After``). Raised limits reach the queued requests at their pool's next
        dispatch pass, within a poll interval.

        ``schedulers``: the runtime's scheduler names. The requests queued for a scheduler not among
        them are answered at once with a ``NO_ENDPOINTS`` decision (503 ``no_endpoints``, naming the
        reload; a retry is routed by the new configuration): its pool is no longer discovered nor
        scraped, so nothing would dispatch them, and they waited for their TTL (a minute for
        Critical) to be told that a pool which no longer exists was saturated.
        """
        if schedulers is not None:
            self.schedulers = frozenset(schedulers)
            for gone in [name for name in self._controllers if name not in self.schedulers]:
                self._retire(gone)
        self.retry_after_bounds = retry_after_bounds
        self.anonymous_tenant = anonymous_tenant
        self.tenant_labels.name({anonymous_tenant})  # always labelled by name, as the guard's families do
        if settings is self.settings:
            return
        self.settings = settings
        if settings is None:
            for scheduler in list(self._controllers):
                self._release_all(scheduler)
            return
        self.tenant_labels.name(settings.tenant_labels)
        now = self.clock()
        for scheduler, controller in self._controllers.items():
            shed = controller.reconfigure(
                settings,
                engine_priority=settings.engine_priority.get(scheduler),
                now=now,
                priorities=self._reclassified(scheduler, controller),
            )
            self._shed(scheduler, controller, shed)
            self._update_depth(scheduler, controller)
        self._shed_past_shared_bytes(settings.max_bytes)

    def _shed_past_shared_bytes(self, max_bytes: int) -> None:
        """After a reload, shed across every scheduler's queue until their bytes together fit
        ``max_bytes`` (each queue's own reconfiguration fits only its own bytes): the pool most over
        its share of ``max_bytes`` first, its lowest band's newest request first (``queue_full``,
        :meth:`~igw.scheduling.flow_control.QueueBytes.fit`), so a pool within its share keeps its
        requests while another is over its own."""
        for controller, shed in self._queued_bytes.fit(max_bytes):
            scheduler = next((n for n, c in self._controllers.items() if c is controller), None)
            if scheduler is not None:
                self._shed(scheduler, controller, (shed,))
                self._update_depth(scheduler, controller)

    def _reclassified(self, scheduler: str, controller: FlowController) -> dict[str, int]:
        """The band of each request queued for ``scheduler`` under the settings just applied (queue
        key -> priority), by the classifier its request path handed to :meth:`wait`.

        The objective, model and tenant tables are part of the settings: a reload that moved an
        objective's priority left its queued requests in the old band, so a request whose objective
        was raised above Critical was still displaced by a Critical arrival as the sheddable request
        it no longer was. A classifier that fails leaves its request where it is (logged)."""
        bands: dict[str, int] = {}
        for key, waiter in self._waiters.items():
            if waiter.gate != scheduler or waiter.classify is None or key not in controller:
                continue
            try:
                priority = waiter.classify()
            except Exception:  # one request's classification must not stop the reload's others
                log.exception("flow control: classifying queued request %s again failed", waiter.request_id)
                continue
            waiter.priority = bands[key] = priority
        return bands

    def _retire(self, scheduler: str) -> None:
        """Answer every request queued for ``scheduler`` (removed by a reload) and forget its queue."""
        gone = RoutingDecision(
            kind=DecisionKind.NO_ENDPOINTS, reason=REMOVED_BY_RELOAD.format(scheduler=scheduler)
        )
        for waiter in self._close_queue(scheduler):
            waiter.future.set_result(gone)

    def _release_all(self, scheduler: str) -> None:
        """Flow control turned off by a reload: answer every request queued for ``scheduler`` as an
        arrival is answered without flow control, with the scheduler's decision now (placed where
        the pool has room, else ``SATURATED``: 429 ``pool_saturated`` with its Retry-After), and
        forget the queue.

        Until session s41 they stayed queued under the rules of the settings removed: a Standard
        request held by ``dispatchBelow`` waited for its TTL (30 s by default) while a Standard
        request arriving after the reload was sent at once."""
        for waiter in self._close_queue(scheduler):
            try:
                decision = waiter.pick()
            except Exception as exc:  # a scheduler bug fails this request, not the reload
                log.exception("flow control: placing queued request %s failed", waiter.request_id)
                waiter.future.set_exception(exc)
                continue
            waiter.future.set_result(decision)

    def _close_queue(self, scheduler: str) -> list[_Waiter]:
        """Take ``scheduler``'s queue away (its requests, its series, its probes; its pump task,
        still sleeping, finds no queue and ends); the waiters of its requests still unanswered,
        oldest first."""
        controller = self._controllers.pop(scheduler)
        self._queued_bytes.leave(controller)
        waiters = []
        for item in controller.drain():
            waiter = self._waiters.get(item.request_id)
            if waiter is not None and not waiter.future.done():
                waiters.append(waiter)
        for priority in controller.priorities():
            self.metrics.depth.remove(scheduler, str(priority))
        self._last_pump.pop(scheduler, None)
        self._utilisation.pop(scheduler, None)
        self._samples.pop(scheduler, None)
        self._pumps.pop(scheduler, None)
        return waiters

    def _controller(self, scheduler: str, settings: FlowControlSettings) -> FlowController:
        controller = self._controllers.get(scheduler)
        if controller is None:
            controller = self._controllers[scheduler] = FlowController(
                settings,
                engine_priority=settings.engine_priority.get(scheduler),
                shared_bytes=self._queued_bytes,
            )
        return controller

    def engine_priority(self, scheduler: str) -> EnginePriority | None:
        """How ``scheduler``'s engine reads the body's ``priority``; ``None`` when not configured."""
        settings = self.settings
        return None if settings is None else settings.engine_priority.get(scheduler)

    def sent_straight(self, scheduler: str, priority: int) -> None:
        """A request of band ``priority`` of ``scheduler``'s pool was placed on arrival, without
        queueing: it counts towards the dispatch rate behind a refused request's ``Retry-After`` as
        a queued one's dispatch does (:meth:`~igw.scheduling.flow_control.FlowController.dispatched`)."""
        settings = self.settings
        if settings is not None:
            self._controller(scheduler, settings).dispatched(self.clock(), priority)

    def started(self, endpoint: EndpointKey, priority: int) -> None:
        """A request of band ``priority`` was sent to ``endpoint``."""
        counts = self._inflight.get(endpoint)
        if counts is None:
            counts = self._inflight[endpoint] = collections.Counter()
        counts[priority] += 1

    def finished(self, endpoint: EndpointKey, priority: int) -> None:
        """A request :meth:`started` there has completed (or failed)."""
        counts = self._inflight.get(endpoint)
        if counts is not None:
            counts[priority] -= 1
            if counts[priority] <= 0:
                del counts[priority]
                if not counts and endpoint in self._leaving:
                    self._leaving.discard(endpoint)
                    del self._inflight[endpoint]

    def preempting_endpoint(
        self, scheduler: str, priority: int, endpoints: Mapping[EndpointKey, EndpointSample]
    ) -> EndpointKey | None:
        """Where a top-band request that found the pool saturated can start at once because the engine
        preempts for it: an endpoint where this router has requests in flight of bands the engine lets
        ``priority`` preempt, and fewer of ``priority`` or above than the endpoint's batch (so its
        batch holds a preemptible request or a free slot). The one with the most preemptible requests;
        ``None`` where the engine does not preempt for a slot, for lower bands, or when none qualifies.
        """
        settings = self.settings
        engine = self.engine_priority(scheduler)
        if (
            settings is None
            or engine is None
            or not engine.preempts_for_slot
            or not settings.steers(priority)
        ):
            return None
        loads = self._loads(endpoints)
        best: tuple[int, EndpointKey] | None = None
        for key, load in loads.items():
            counts = self._inflight.get(key)
            if not counts:
                continue
            preemptible = sum(n for band, n in counts.items() if engine.preempts(priority, band))
            above = sum(n for band, n in counts.items() if band >= priority)
            if preemptible <= 0 or (load.batch is not None and above >= load.batch):
                continue
            if best is None or preemptible > best[0]:
                best = (preemptible, key)
        return None if best is None else best[1]

    def priority(
        self,
        headers: Mapping[str, str],
        *,
        scheduler: str,
        model: str,
        tenant: str,
        authenticated_tenant: str | None,
        requested_model: str | None = None,
        count_denied: bool = True,
    ) -> int:
        """The request's band: its objective header (where the tenant may name that objective), else
        its model's or tenant's objective, else 0. A tenant objective is taken for a tenant that only
        the fairness header names (no authenticated claim) where the objective header could name that
        objective too (:func:`~igw.scheduling.flow_control.header_tenant_denied`).

        ``model`` is the model routed to; ``requested_model`` the name the client sent when a canary
        rule (``modelRewrites``) replaced it. An objective listing the routed model wins; else one
        listing the client's name applies: the name clients send is the one an operator lists, and
        matching the canary's target alone left such an objective without effect (its requests
        landed in Standard).

        ``count_denied``: count an objective the tenant may not name in ``igw_flow_objective_denied``;
        off when a queued request is classified again on a reload (it was counted on arrival)."""
        s = self.settings
        objective = headers.get(OBJECTIVE_HEADER)
        if s is None:
            return priority_for(objective, {})
        if requested_model is not None and model not in s.model_priorities:
            model = requested_model if requested_model in s.model_priorities else model
        if objective is not None and not header_objective_allowed(
            objective, s, authenticated_tenant=authenticated_tenant
        ):
            if count_denied:
                self.metrics.objective_denied.labels(scheduler, objective).inc()
            objective = None
        by_tenant: str | None = tenant
        if authenticated_tenant is None and s.tenant_objectives and reaches_tenant(objective, model, s):
            denied = header_tenant_denied(tenant, s)
            if denied is not None:
                if count_denied:
                    self.metrics.objective_denied.labels(scheduler, denied).inc()
                by_tenant = None
        return priority_for(
            objective,
            s.objectives,
            model=model,
            tenant=by_tenant,
            by_model=s.model_priorities,
            by_tenant=s.tenant_priorities,
        )

    def must_wait(
        self,
        scheduler: str,
        *,
        priority: int,
        utilisation: float,
        endpoints: Mapping[EndpointKey, EndpointSample] | None = None,
    ) -> bool:
        """Whether an arrival must queue although the pool may not be saturated.

        It must when its band keeps headroom for higher bands and the pool is at or past the band's
        ``dispatchBelow``, when none of ``endpoints`` has a place for its band (``maxEndpointQueue``,
        ``keepSlots``), or when work of its own or a higher band is already queued (an arrival never
        overtakes it).
        """
        settings = self.settings
        if settings is None:
            return False
        controller = self._controller(scheduler, settings)
        now = self.clock()
        controller.arrived(priority, now)
        engine = controller.engine_priority
        if engine is not None and engine.preempts_for_slot and settings.steers(priority):
            # The engine frees a slot for it: no headroom to wait for; only queued work of its band
            # holds it (a saturated pick then goes to a pod running a lower band, or queues).
            return controller.queued_at_or_above(priority) > 0
        if endpoints and not self._has_place(controller, priority, self._loads(endpoints), now):
            return True
        return not controller.admits(priority, utilisation) or controller.queued_at_or_above(priority) > 0

    def steers(self, priority: int) -> bool:
        """Whether :meth:`steer` may move requests of ``priority`` (the top band; flow control on)."""
        return self.settings is not None and self.settings.steers(priority)

    def steer(
        self, decision: RoutingDecision, endpoints: Mapping[EndpointKey, EndpointSample]
    ) -> RoutingDecision:
        """``decision`` with its endpoint swapped for the candidate (its pick or a fallback) with the
        smallest predicted wait for a batch slot, when that is smaller than the pick's
        (:func:`~igw.scheduling.flow_control.least_wait`); the pick joins the fallbacks."""
        if decision.endpoint is None or not decision.fallbacks or not endpoints:
            return decision
        candidates = (decision.endpoint, *decision.fallbacks)
        best = least_wait(candidates, self._loads(endpoints))
        if best is None:
            return decision
        rest = tuple(key for key in candidates if key != best)
        return dataclasses.replace(decision, endpoint=best, fallbacks=rest)

    async def wait(
        self,
        *,
        scheduler: str,
        request_id: str,
        priority: int,
        tenant: str,
        size_bytes: int,
        max_queue_s: float | None,
        pick: Picker,
        utilisation: Utilisation | None = None,
        endpoints: EndpointSamples | None = None,
        classify: Classifier | None = None,
        release: Releaser | None = None,
    ) -> RoutingDecision | Refused:
        """Queue the request and wait for a picked decision or a refusal.

        With ``utilisation``, queued requests dispatch only while their band's headroom rule
        admits them (see :meth:`FlowController.peek`), besides the scheduler placing them; with
        ``endpoints``, only to an endpoint with a place for their band. With ``classify``, a reload
        applied while it waits moves it to the band ``classify`` then answers (its objective's new
        priority); the caller's classifier is where the caller learns that band (for the engine's
        ``priority`` field and its logs), and must not count the request's denied objective headers
        again. ``release`` takes back a pick handed to the request that it will not send: its client
        went away in the loop turn the queue handed it the pick, before its task resumed (the
        scheduler's ledger counted the dispatch, and kept counting it until the pod's next scrape).
        """
        settings = self.settings
        if settings is None:  # turned off by a reload between the caller's check and now
            # answered as an arrival without flow control is (and as :meth:`_release_all` answers
            # the requests it finds queued): the scheduler's decision now, a ``SATURATED`` one
            # carrying the scheduler's Retry-After within ``routing.retryAfter``. A refusal of its
            # own here said 429 ``request_shed`` (``queue_full``) with a fixed 1 s, below
            # ``retryAfter.minSeconds`` where that is higher, for a queue that no longer existed.
            return pick()
        if self.schedulers is not None and scheduler not in self.schedulers:  # removed meanwhile
            return RoutingDecision(
                kind=DecisionKind.NO_ENDPOINTS, reason=REMOVED_BY_RELOAD.format(scheduler=scheduler)
            )
        if utilisation is not None:
            self._utilisation[scheduler] = utilisation
        if endpoints is not None:
            self._samples[scheduler] = endpoints
        controller = self._controller(scheduler, settings)
        now = self.clock()
        # The queue's key is the gate's own: a client-chosen X-Request-Id already queued (a retry,
        # a client that sends one fixed id) must not fail the request or reach another's entry.
        key = f"{next(self._keys)}:{request_id}"
        offer = controller.offer(
            request_id=key,
            priority=priority,
            tenant=tenant,
            size_bytes=size_bytes,
            now=now,
            client_deadline=None if max_queue_s is None else now + max_queue_s,
        )
        self._shed(scheduler, controller, offer.displaced)
        self._shed_elsewhere(offer.displaced_elsewhere)
        if not offer.queued:
            reason = offer.reason or ShedReason.QUEUE_FULL
            self._count_rejection(scheduler, priority, tenant, reason)
            self._update_depth(scheduler, controller)
            retry = self._retry_after(controller, now, priority, wait_bytes=offer.wait_bytes)
            return Refused(reason, retry, priority)
        future: asyncio.Future[RoutingDecision | Refused] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(
            pick=pick,
            future=future,
            gate=scheduler,
            request_id=request_id,
            priority=priority,
            classify=classify,
            release=release,
        )
        self._waiters[key] = waiter
        self._update_depth(scheduler, controller)
        try:
            self._pump_logging_failures(scheduler)
            if not future.done():
                self._ensure_pump(scheduler)
            result = await future
        except asyncio.CancelledError:
            controller.cancel(key)
            self._update_depth(scheduler, controller)
            self._release_unsent(waiter)
            raise
        finally:
            self._waiters.pop(key, None)
        if isinstance(result, RoutingDecision) and result.kind is not DecisionKind.NO_ENDPOINTS:
            self.metrics.wait.labels(scheduler, str(waiter.priority)).observe(self.clock() - now)
        return result

    @staticmethod
    def _release_unsent(waiter: _Waiter) -> None:
        """Take back the pick a cancelled waiter was handed and will not send (see :meth:`wait`)."""
        future = waiter.future
        if waiter.release is None or not future.done() or future.cancelled():
            return
        decision = future.result()
        if isinstance(decision, RoutingDecision):
            FlowGates._give_back(waiter, decision)

    @staticmethod
    def _give_back(waiter: _Waiter, decision: RoutingDecision) -> None:
        """Take back ``decision``, a pick made for ``waiter`` that is not sent (its ``release``)."""
        if waiter.release is None or decision.endpoint is None:
            return
        try:
            waiter.release(decision)
        except Exception:  # the queue goes on: a failed release costs a scrape's phantom dispatch
            log.exception("flow control: taking back the pick of request %s failed", waiter.request_id)

    def _ensure_pump(self, scheduler: str) -> None:
        task = self._pumps.get(scheduler)
        if task is None or task.done():
            self._pumps[scheduler] = asyncio.get_running_loop().create_task(
                self._pump_while_queued(scheduler), name=f"igw-flow-pump-{scheduler}"
            )

    async def _pump_while_queued(self, scheduler: str) -> None:
        """Pump ``scheduler`` every poll interval until its queue is empty.

        A pass that fails (a probe of the pool raising) is logged and the next one tried: this task
        is the only thing that dispatches and expires the queued requests, so ending it would leave
        them waiting until their clients gave up. Expiry runs first in each pass, so TTLs still hold.
        """
        controller = self._controllers.get(scheduler)
        while controller is not None and len(controller):
            await asyncio.sleep(self.settings.poll_interval_s if self.settings is not None else 0.02)
            self._pump_logging_failures(scheduler)

    def _pump_logging_failures(self, scheduler: str) -> None:
        try:
            self.pump(scheduler)
        except Exception:  # logged, and retried at the next interval (see _pump_while_queued)
            log.exception("flow control: pumping the queue of scheduler %s failed", scheduler)

    def pump(self, scheduler: str) -> None:
        """Expire late requests, then dispatch from the top while the pool has capacity.

        Every waiter calls this each poll interval; it does its work at most once per interval per
        scheduler, so hundreds of waiters do not multiply the scheduler runs of an overloaded pool.
        One pass gives each endpoint at most ``dispatch_per_endpoint`` requests: the pool's scraped
        metrics do not show them yet, so the next pass (after more scrapes) decides about the rest.
        """
        controller = self._controllers.get(scheduler)
        if controller is None:
            return
        now = self.clock()
        interval = self.settings.poll_interval_s if self.settings is not None else 0.0
        if now - self._last_pump.get(scheduler, -math.inf) < interval:
            return
        self._last_pump[scheduler] = now
        self._shed(scheduler, controller, tuple(controller.expire(now)))
        budget = self.settings.dispatch_per_endpoint if self.settings is not None else 1
        taken: collections.Counter[str | None] = collections.Counter()
        probe = self._utilisation.get(scheduler)
        samples = self._samples.get(scheduler)
        engine = controller.engine_priority
        preempting = engine is not None and engine.preempts_for_slot
        while (item := self._head(controller, now, probe, preempting=preempting)) is not None:
            waiter = self._waiters.get(item.request_id)
            if waiter is None or waiter.future.done():
                # Its task is gone without cancelling (should not happen), or its client went away
                # and its task has not run its cancellation yet: a pick now would be a dispatch never
                # sent (and answering its cancelled future raised, ending this pass).
                controller.cancel(item.request_id)
                continue
            loads = self._loads(samples()) if samples is not None else {}
            if loads and not self._has_place(controller, item.priority, loads, now):
                break  # no endpoint has a place for this band (and lower bands wait behind it)
            if loads and all(taken[key] >= budget for key in loads):
                break  # every endpoint has had its budget: a pick now would only be a phantom dispatch
            try:
                decision = waiter.pick()
            except Exception as exc:  # a scheduler bug fails this request, not the whole queue
                log.exception("flow control: placing queued request %s failed", waiter.request_id)
                controller.cancel(item.request_id)
                waiter.future.set_exception(exc)
                continue
            if decision.kind is DecisionKind.SATURATED:
                break
            if taken[decision.endpoint] >= budget:
                self._give_back(waiter, decision)  # picked, but left queued: no dispatch to count
                break
            chosen = loads.get(decision.endpoint) if decision.endpoint is not None else None
            if chosen is not None and not controller.admits_to(item.priority, chosen, now=now):
                # the scheduler prefers an endpoint without a place: wait for the next poll, and take
                # the pick back (left counted, every poll added a phantom dispatch to that endpoint
                # and the prefix index placed the prompt there, until session s41)
                self._give_back(waiter, decision)
                break
            taken[decision.endpoint] += 1
            controller.take(item, now)
            waiter.future.set_result(decision)
        self._update_depth(scheduler, controller)

    def _head(
        self, controller: FlowController, now: float, probe: Utilisation | None, *, preempting: bool
    ) -> QueuedRequest | None:
        """The queued request to try next: the head :meth:`FlowController.peek` gives under the
        headroom rule; where the engine preempts for a batch slot, a top-band head also past it
        (its pick, when saturated, goes to a pod running a lower band)."""
        if probe is None:
            return controller.peek(now)
        item = controller.peek(now, utilisation=probe())
        if item is None and preempting:
            head = controller.peek(now)
            if head is not None and controller.steers(head.priority):
                return head
        return item

    def _loads(self, samples: Mapping[EndpointKey, EndpointSample]) -> dict[EndpointKey, EndpointLoad]:
        """Each endpoint's load, learning its batch size and its capacity from the sample on the way.

        Before an endpoint has been seen full, its batch is the configured ``assumedBatch`` (if
        any). Its completion rate is its capacity with the batch full (:class:`CapacityEstimate`:
        the counted rate over the time-averaged busy slots), so the slots ``slotWait`` keeps are
        sized from what the endpoint can complete, not from what held-back lower bands let it.
        """
        now = self.clock()
        prior = self.settings.assumed_batch if self.settings is not None else None
        loads: dict[EndpointKey, tuple[EndpointLoad, float | None]] = {}
        for key, sample in samples.items():
            seen = self._scraped.get(key)
            if sample.scraped_at is not None and (seen is None or seen.scraped_at != sample.scraped_at):
                before = seen.batch if seen is not None else BatchEstimate()
                batch = before.after_scrape(waiting=sample.waiting, running=sample.running)
                seen = self._scraped[key] = _Scraped(sample.scraped_at, sample.inflight, batch)
            if seen is None:
                load = sample.load(prior, None)
            else:
                load = sample.load(seen.batch.size(prior), seen.inflight)
            rate = sample.completion_rate
            if load.batch is not None:
                estimate = self._capacity.get(key)
                if estimate is None:
                    estimate = self._capacity[key] = CapacityEstimate()
                estimate.observe(now, min(load.occupancy, load.batch))
                rate = estimate.capacity(now, completion_rate=rate, batch=load.batch)
            loads[key] = (load, rate)
        rates = [rate for _, rate in loads.values() if rate is not None]
        pool_rate = sum(rates) if rates else None
        return {
            key: EndpointLoad(
                waiting=load.waiting,
                occupancy=load.occupancy,
                batch=load.batch,
                completion_rate=rate,
                pool_completion_rate=pool_rate,
            )
            for key, (load, rate) in loads.items()
        }

    def forget(self, endpoints: Sequence[EndpointKey]) -> None:
        """Drop what was learned of endpoints that left their pool (a returning one starts afresh)."""
        for key in endpoints:
            self._scraped.pop(key, None)
            self._capacity.pop(key, None)
            if self._inflight.get(key):  # requests still in flight there finish into it
                self._leaving.add(key)
            else:
                self._inflight.pop(key, None)
                self._leaving.discard(key)

    @staticmethod
    def _has_place(
        controller: FlowController, priority: int, loads: Mapping[EndpointKey, EndpointLoad], now: float
    ) -> bool:
        return any(controller.admits_to(priority, load, now=now) for load in loads.values())

    def depths(self, scheduler: str) -> dict[int, int]:
        controller = self._controllers.get(scheduler)
        return controller.depths() if controller is not None else {}

    def queued_bytes(self, scheduler: str | None = None) -> int:
        """The bytes ``scheduler``'s queue holds (:func:`queued_size_bytes`); without ``scheduler``,
        every queue's together, the total that ``maxBytes`` bounds."""
        if scheduler is None:
            return self._queued_bytes.held
        controller = self._controllers.get(scheduler)
        return controller.queued_bytes if controller is not None else 0

    def _shed(self, scheduler: str, controller: FlowController, shed: tuple[Shed, ...]) -> None:
        now = self.clock()
        for s in shed:
            self._count_rejection(scheduler, s.request.priority, s.request.tenant, s.reason)
            waiter = self._waiters.get(s.request.request_id)
            if waiter is not None and not waiter.future.done():
                retry = self._retry_after(controller, now, s.request.priority)
                refusal = Refused(s.reason, retry, s.request.priority)
                waiter.future.set_result(refusal)

    def _shed_elsewhere(self, displaced: tuple[tuple[FlowController, Shed], ...]) -> None:
        """Answer the requests of other schedulers' queues that an arrival displaced under the
        fair share of ``maxBytes`` (``pool_share``), each counted against its own scheduler."""
        for other, shed in displaced:
            scheduler = next((n for n, c in self._controllers.items() if c is other), None)
            if scheduler is not None:
                self._shed(scheduler, other, (shed,))
                self._update_depth(scheduler, other)

    def _retry_after(
        self, controller: FlowController, now: float, priority: int, *, wait_bytes: int = 0
    ) -> int:
        """``Retry-After`` for a refused request of ``priority``: the queue ahead of it (its band and
        those above) at the recent dispatch rate, and for one refused by the shared ``maxBytes``
        the time for ``wait_bytes`` to leave every pool's queue, within ``routing.retryAfter``."""
        low, high = self.retry_after_bounds
        return controller.retry_after_s(now, priority=priority, wait_bytes=wait_bytes, min_s=low, max_s=high)

    def _count_rejection(self, scheduler: str, priority: int, tenant: str, reason: ShedReason) -> None:
        settings = self.settings
        label = self.tenant_labels.label(
            tenant or self.anonymous_tenant,
            named=settings.tenant_labels if settings is not None else frozenset(),
            limit=settings.max_tenant_labels if settings is not None else 0,
            named_only=settings is None or bool(settings.tenant_labels),
        )
        self.metrics.rejections.labels(scheduler, str(priority), label, reason.value).inc()

    def _update_depth(self, scheduler: str, controller: FlowController) -> None:
        for priority in controller.priorities():
            self.metrics.depth.labels(scheduler, str(priority)).set(controller.depth(priority))
