"""Flow control: per-priority-band queues for requests that arrive while their pool is saturated.

Instead of answering 429 to everyone when a pool is full, a saturated request waits in the queue of
its *band* (an integer priority; higher is more important; below zero is sheddable, as with the
reference's ``InferenceObjective``). The dispatcher asks :meth:`FlowController.peek` which request
should go next, tries to place it, and commits with :meth:`FlowController.take` when it could:

* higher bands always dispatch first;
* within a band, tenants take turns (round-robin) so one tenant's burst cannot starve another, or
  the band can use one strict global order instead;
* within a tenant, first-come-first-served or earliest-deadline-first;
* capacity is bounded per band and globally, in requests and in bytes;
* a band may hold *headroom* for the bands above it: its requests dispatch (from the queue or
  straight on arrival) only while the pool's utilisation is below the band's ``dispatch_below``
  fraction, so when lower bands have filled the pool up to their threshold, a higher-band arrival
  still finds a free slot instead of waiting for one to finish (:meth:`FlowController.admits`);
* a band may also keep places *at each endpoint* free for the bands above
  (:meth:`FlowController.admits_to`): it dispatches to an endpoint only while fewer than its
  ``max_endpoint_queue`` requests wait there, so a higher-band request sent there queues behind at
  most that many lower-band ones in the model server's own first-come queue; and, once the
  endpoint's batch size is known (:class:`BatchEstimate`), only while at least ``keep_slots`` of its
  batch slots would stay free, so a higher-band arrival starts at once instead of waiting for a
  running sequence to finish;
* a queued request leaves when its TTL (the band's, or the client's deadline when shorter) passes,
  or at once when its client goes away (:meth:`FlowController.cancel`).

When an arrival does not fit, shedding goes from the bottom up: an arrival may displace queued
requests of strictly lower bands (the lowest band and its most recent arrival first), so sheddable
traffic absorbs the overload, a queued standard request is shed once its TTL passes, and a critical
request is refused only when there is nothing lower to displace (its own band, or the whole queue,
full of equal or higher priority work).

The module does no I/O and reads no clock: every call takes ``now`` so the policies are table-tested
with an injected clock, and the gateway wires the waits and wake-ups around it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from igw.config.durations import parse_duration
from igw.config.extension_references import band_order_violations
from igw.errors import IgwSchedulingError
from igw.scheduling.engine_priority import EXTENSION_FIELD as ENGINE_PRIORITY_FIELD
from igw.scheduling.engine_priority import EnginePriority, engine_priorities
from igw.scheduling.recent_count import SLOTS_PER_WINDOW, RecentCount
from igw.scheduling.types import EndpointKey

CRITICAL: Final = 1
STANDARD: Final = 0
SHEDDABLE: Final = -1
NAMED_PRIORITIES: Final[Mapping[str, int]] = {
    "Critical": CRITICAL,
    "Standard": STANDARD,
    "Sheddable": SHEDDABLE,
}
"""The three named bands; any other integer priority is allowed and uses the nearest one's limits."""
EXTENSION_NAME: Final = "flowControl"
DISPATCH_WINDOW_S: Final = 10.0
"""How far back dispatches count towards the dispatch rate behind a shed request's ``Retry-After``."""
DISPATCH_MIN_SPAN_S: Final = 1.0
"""The shortest span the dispatch rate is taken over: a burst dispatched in one pass is not a
sustained rate of thousands a second (the saturation ``Retry-After``'s drain rate floors its span
the same way)."""
DEFAULT_POLL_INTERVAL: Final = "20ms"
DEFAULT_DISPATCH_BELOW: Final = 0.9
"""The named Standard and Sheddable bands' ``dispatch_below``: a tenth of the pool stays free for
Critical arrivals once the lower bands have filled the rest."""
DEFAULT_MAX_ENDPOINT_QUEUE: Final = 2
"""The named Standard and Sheddable bands' ``max_endpoint_queue``: a Critical request sent to an
endpoint waits there behind at most this many lower-band requests (plus the running batch)."""
DEFAULT_KEEP_SLOTS: Final = 1
"""The named Standard and Sheddable bands' ``keep_slots``: one batch slot per endpoint stays free for
Critical arrivals once the endpoint's batch size is known."""
DEFAULT_SLOT_WAIT_S: Final = 0.015
"""The named Standard band's ``slot_wait_s``: it keeps enough batch slots free that a Critical
arrival waits longer than this for one only at the :data:`SLOT_WAIT_QUANTILE` tail."""
DEFAULT_MAX_KEPT_SHARE: Final = 0.5
"""The default ``maxKeptShare``: ``slotWait`` keeps at most half an endpoint's batch."""
SLOT_WAIT_QUANTILE: Final = 0.99
"""The share of higher-band arrivals that must find a batch slot within ``slot_wait_s``."""
ARRIVAL_WINDOW_S: Final = 10.0
"""How far back arrivals count towards a band's measured arrival rate."""
CAPACITY_WINDOW_S: Final = 30.0
"""How far back busy batch slots count towards an endpoint's per-slot completion rate (the
gateway's default ``drainWindow``, over which its completion rate is counted)."""
CAPACITY_MIN_BUSY_SLOT_S: Final = 1.0
"""Busy slot-seconds an endpoint must have run before its capacity is estimated from them."""


class FlowControlError(IgwSchedulingError, ValueError):
    """Flow-control settings that cannot work (a non-positive capacity or TTL); names the field."""


class Fairness(StrEnum):
    ROUND_ROBIN = "round-robin"
    """Tenants in a band take turns, one request each."""
    GLOBAL = "global"
    """One strict order across all tenants of a band."""


class Ordering(StrEnum):
    FCFS = "fcfs"
    """First come, first served."""
    EDF = "edf"
    """Earliest deadline first (the TTL or the client's deadline, whichever is sooner)."""


class ShedReason(StrEnum):
    BAND_FULL = "band_full"
    FAIR_SHARE = "fair_share"
    """Displaced from a full band by a tenant with fewer requests queued there."""
    QUEUE_FULL = "queue_full"
    DISPLACED = "displaced"
    POOL_SHARE = "pool_share"
    """Displaced by an arrival of another pool: this pool held more than its share of the
    process's ``maxBytes`` and the other pool less (:class:`QueueBytes`)."""
    TTL_EXPIRED = "ttl_expired"


@dataclass(frozen=True, slots=True, kw_only=True)
class BandLimits:
    """Capacity and time limits of one band."""

    max_requests: int
    max_bytes: int
    ttl_s: float
    dispatch_below: float = 1.0
    """The band dispatches only while the pool's utilisation (a fraction of its saturation point)
    is below this; 1.0 dispatches until the pool is saturated, a smaller value keeps the rest of the
    pool free for higher bands."""
    max_endpoint_queue: int | None = None
    """The band dispatches to an endpoint only while fewer than this many requests wait there
    (scraped waiting plus dispatches the scrapes have not shown yet); ``None``: no per-endpoint
    limit besides saturation. Keeps queue places at each model server free for higher bands."""
    keep_slots: int = 0
    """Batch slots the band leaves free at each endpoint for higher bands: it dispatches to an
    endpoint only while the requests there (running and waiting) stay below its batch size minus
    this. Applies only where the batch size is known (:class:`BatchEstimate`); never the
    whole batch (:func:`kept_slots`)."""
    slot_wait_s: float | None = None
    """Keep more batch slots than ``keep_slots`` when the bands above need them: as many as the
    higher bands' measured arrival rate and the endpoint's completion rate require for a higher-band
    arrival to wait longer than this for a slot at most ``1 - SLOT_WAIT_QUANTILE`` of the time
    (:func:`slots_for_wait`), up to ``max_kept_share`` of the batch. Bands below keep at least as
    many. ``None``: ``keep_slots`` alone."""

    def check(self, where: str) -> None:
        if self.max_requests < 1:
            raise FlowControlError(f"{where}.maxRequests must be at least 1, got {self.max_requests}")
        if self.max_bytes < 1:
            raise FlowControlError(f"{where}.maxBytes must be at least 1, got {self.max_bytes}")
        if not self.ttl_s > 0:
            raise FlowControlError(f"{where}.ttl must be positive, got {self.ttl_s:g}s")
        if not 0.0 < self.dispatch_below <= 1.0:
            raise FlowControlError(f"{where}.dispatchBelow must be in (0, 1], got {self.dispatch_below:g}")
        if self.max_endpoint_queue is not None and self.max_endpoint_queue < 1:
            raise FlowControlError(
                f"{where}.maxEndpointQueue must be at least 1, got {self.max_endpoint_queue}"
            )
        if self.keep_slots < 0:
            raise FlowControlError(f"{where}.keepSlots must be at least 0, got {self.keep_slots}")
        if self.slot_wait_s is not None and not self.slot_wait_s > 0:
            raise FlowControlError(f"{where}.slotWait must be positive, got {self.slot_wait_s:g}s")


def _named_lower_band(
    *, max_requests: int, max_bytes: int, ttl_s: float, slot_wait_s: float | None = None
) -> BandLimits:
    """A default band below Critical: it keeps headroom, queue places and batch slots for it."""
    return BandLimits(
        max_requests=max_requests,
        max_bytes=max_bytes,
        ttl_s=ttl_s,
        dispatch_below=DEFAULT_DISPATCH_BELOW,
        max_endpoint_queue=DEFAULT_MAX_ENDPOINT_QUEUE,
        keep_slots=DEFAULT_KEEP_SLOTS,
        slot_wait_s=slot_wait_s,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowControlSettings:
    """Limits per band (by priority) and for the whole queue, and the ordering policies."""

    bands: Mapping[int, BandLimits] = field(
        default_factory=lambda: {
            CRITICAL: BandLimits(max_requests=256, max_bytes=64 << 20, ttl_s=60.0),
            STANDARD: _named_lower_band(
                max_requests=256, max_bytes=64 << 20, ttl_s=30.0, slot_wait_s=DEFAULT_SLOT_WAIT_S
            ),
            SHEDDABLE: _named_lower_band(max_requests=128, max_bytes=32 << 20, ttl_s=10.0),
        }
    )
    max_requests: int = 512
    max_bytes: int = 128 << 20
    fairness: Fairness = Fairness.ROUND_ROBIN
    ordering: Ordering = Ordering.FCFS
    objectives: Mapping[str, int] = field(default_factory=dict)
    """Objective name -> priority (the ``InferenceObjective`` shape)."""
    model_priorities: Mapping[str, int] = field(default_factory=dict)
    """Model or adapter name -> priority, for requests without a known objective."""
    tenant_priorities: Mapping[str, int] = field(default_factory=dict)
    """Tenant -> priority, for requests without a known objective or model priority."""
    tenant_objectives: Mapping[str, str] = field(default_factory=dict)
    """Tenant -> the name of the objective that lists it (a tenant named only by the client's
    fairness header takes it under the same limits as the objective header naming it)."""
    objective_tenants: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Objective name -> the authenticated tenants that alone may name it by header (``objectiveAccess``)."""
    header_priority_limit: int | None = None
    """The highest priority a header may claim for a tenant ``objectiveAccess`` does not list for that
    objective (``None``: no limit, the reference's behaviour)."""
    poll_interval_s: float = 0.02
    """How often waiting requests re-check their pool for capacity."""
    assumed_batch: int | None = None
    """The batch size (requests run at once) taken for an endpoint until its scrapes show its own
    (:meth:`BatchEstimate.size`): the model server's configured ``max_num_seqs`` /
    ``max_running_requests``, which its metrics page does not publish. Without it, no batch slot is
    kept at an endpoint before it has been seen full."""
    max_kept_share: float = DEFAULT_MAX_KEPT_SHARE
    """The largest share of an endpoint's batch that ``slot_wait_s`` may keep free for higher bands
    (rounded down; never the whole batch): the trade-off between the higher bands' tail and the
    lower bands' throughput where the batch is small (docs/flow-control.md, the kept-slots table)."""
    dispatch_per_endpoint: int = 2
    """Queued requests one endpoint may take per poll. The scheduler sees load through scraped
    metrics, which lag: without a cap, one poll after capacity appears would release the whole queue
    onto the pool, and the model server's own first-come queue would undo the band order."""
    tenant_labels: frozenset[str] = frozenset()
    """Tenants that always get their own metric label; when set, every other tenant is ``other``."""
    max_tenant_labels: int = 32
    """Without ``tenant_labels``: the first this many distinct tenants get their own label, later
    ones ``other`` (a client-chosen fairness header cannot grow the series count without bound)."""
    engine_priority: Mapping[str, EnginePriority] = field(default_factory=dict)
    """Scheduler name -> how its engine reads the body's ``priority`` (``enginePriority``): the
    gateway writes each request's band there, and where the engine preempts for a batch slot the
    lower bands keep no slots for the higher ones (:class:`FlowController` ``engine_priority``)."""

    @staticmethod
    def from_extension(
        raw: Mapping[str, Any], *, scheduler_engines: Mapping[str, str] | None = None
    ) -> FlowControlSettings:
        """Build from a *schema-validated* ``spec.extensions.flowControl`` mapping;
        ``scheduler_engines`` (scheduler name -> engine) resolves ``enginePriority``."""
        where = f"spec.extensions.{EXTENSION_NAME}"
        defaults = FlowControlSettings()
        bands: dict[int, BandLimits] = dict(defaults.bands)
        if "bands" in raw:
            bands = {}
            for i, band in enumerate(raw["bands"]):
                priority = int(band["priority"])
                if priority in bands:
                    raise FlowControlError(f"{where}.bands[{i}].priority: {priority} is listed twice")
                bands[priority] = BandLimits(
                    max_requests=int(band.get("maxRequests", 256)),
                    max_bytes=int(band.get("maxBytes", 64 << 20)),
                    ttl_s=_duration(band.get("ttl", "30s"), f"{where}.bands[{i}].ttl"),
                    dispatch_below=float(band.get("dispatchBelow", 1.0)),
                    max_endpoint_queue=(
                        int(band["maxEndpointQueue"]) if "maxEndpointQueue" in band else None
                    ),
                    keep_slots=int(band.get("keepSlots", 0)),
                    slot_wait_s=(
                        _duration(band["slotWait"], f"{where}.bands[{i}].slotWait")
                        if "slotWait" in band
                        else None
                    ),
                )
            _check_headroom_order(raw["bands"], where)
        objectives: dict[str, int] = {}
        objective_tenants: dict[str, frozenset[str]] = {}
        by_model: dict[str, int] = {}
        by_tenant: dict[str, int] = {}
        tenant_objectives: dict[str, str] = {}
        owner: dict[tuple[str, str], int] = {}
        """(field, model or tenant) -> the index of the objective that lists it."""
        for i, objective in enumerate(raw.get("objectives", ())):
            name = str(objective["name"])
            if name in objectives:
                raise FlowControlError(f"{where}.objectives[{i}].name: {name!r} is listed twice")
            priority = int(objective["priority"])
            objectives[name] = priority
            for field_name, table in (("models", by_model), ("tenants", by_tenant)):
                for j, value in enumerate(objective.get(field_name, ())):
                    if owner.setdefault((field_name, value), i) != i:  # twice in one objective is fine
                        raise FlowControlError(
                            f"{where}.objectives[{i}].{field_name}[{j}]: {value!r} already has an objective"
                        )
                    table[value] = priority
            for value in objective.get("tenants", ()):
                tenant_objectives[value] = name
        for i, access in enumerate(raw.get("objectiveAccess", ())):
            objective = str(access["objective"])
            if objective in objective_tenants:
                raise FlowControlError(
                    f"{where}.objectiveAccess[{i}].objective: {objective!r} is listed twice"
                )
            objective_tenants[objective] = frozenset(str(t) for t in access["tenants"])
        return FlowControlSettings(
            bands=bands,
            max_requests=int(raw.get("maxRequests", defaults.max_requests)),
            max_bytes=int(raw.get("maxBytes", defaults.max_bytes)),
            fairness=Fairness(raw.get("fairness", defaults.fairness)),
            ordering=Ordering(raw.get("ordering", defaults.ordering)),
            objectives=objectives,
            model_priorities=by_model,
            tenant_priorities=by_tenant,
            tenant_objectives=tenant_objectives,
            objective_tenants=objective_tenants,
            header_priority_limit=(int(raw["headerPriorityLimit"]) if "headerPriorityLimit" in raw else None),
            poll_interval_s=_duration(
                raw.get("pollInterval", DEFAULT_POLL_INTERVAL), f"{where}.pollInterval"
            ),
            dispatch_per_endpoint=int(raw.get("dispatchPerEndpoint", defaults.dispatch_per_endpoint)),
            assumed_batch=int(raw["assumedBatch"]) if "assumedBatch" in raw else None,
            max_kept_share=float(raw.get("maxKeptShare", defaults.max_kept_share)),
            tenant_labels=frozenset(str(t) for t in (raw.get("metrics") or {}).get("tenantLabels", ())),
            max_tenant_labels=int(
                (raw.get("metrics") or {}).get("maxTenantLabels", defaults.max_tenant_labels)
            ),
            engine_priority=engine_priorities(
                raw.get(ENGINE_PRIORITY_FIELD),
                scheduler_engines=scheduler_engines,
                where=f"{where}.{ENGINE_PRIORITY_FIELD}",
            ),
        )

    def __post_init__(self) -> None:
        if not self.bands:
            raise FlowControlError("flowControl.bands must name at least one band")
        for priority, limits in self.bands.items():
            limits.check(f"flowControl.bands[{priority}]")
        ordered = sorted(self.bands.items())
        for (low, low_limits), (high, high_limits) in itertools.pairwise(ordered):
            if low_limits.dispatch_below > high_limits.dispatch_below:
                raise FlowControlError(
                    f"flowControl.bands[{low}].dispatchBelow ({low_limits.dispatch_below:g}) is above "
                    f"that of the higher band {high} ({high_limits.dispatch_below:g}): a lower band "
                    "cannot keep headroom from a higher one"
                )
            if _queue_cap(low_limits) > _queue_cap(high_limits):
                raise FlowControlError(
                    f"flowControl.bands[{low}].maxEndpointQueue ({low_limits.max_endpoint_queue}) is "
                    f"above that of the higher band {high} ({high_limits.max_endpoint_queue}): a lower "
                    "band cannot keep queue places from a higher one"
                )
            if low_limits.keep_slots < high_limits.keep_slots:
                raise FlowControlError(
                    f"flowControl.bands[{low}].keepSlots ({low_limits.keep_slots}) is below that of "
                    f"the higher band {high} ({high_limits.keep_slots}): a lower band cannot keep batch "
                    "slots from a higher one"
                )
        if self.max_requests < 1:
            raise FlowControlError(f"flowControl.maxRequests must be at least 1, got {self.max_requests}")
        if self.max_bytes < 1:
            raise FlowControlError(f"flowControl.maxBytes must be at least 1, got {self.max_bytes}")
        if not self.poll_interval_s > 0:  # 0: the pump re-ran without a pause, a CPU core per queue
            raise FlowControlError(
                f"flowControl.pollInterval must be greater than 0s, got {self.poll_interval_s:g}s"
            )
        if self.dispatch_per_endpoint < 1:
            raise FlowControlError(
                f"flowControl.dispatchPerEndpoint must be at least 1, got {self.dispatch_per_endpoint}"
            )
        if self.assumed_batch is not None and self.assumed_batch < 1:
            raise FlowControlError(f"flowControl.assumedBatch must be at least 1, got {self.assumed_batch}")
        if not 0.0 <= self.max_kept_share <= 1.0:
            raise FlowControlError(
                f"flowControl.maxKeptShare must be between 0 and 1, got {self.max_kept_share:g}"
            )

    def most_kept(self, batch: int) -> int:
        """The most batch slots ``slot_wait_s`` may keep at an endpoint running ``batch`` at once."""
        return max(0, min(batch - 1, math.floor(batch * self.max_kept_share)))

    def steers(self, priority: int) -> bool:
        """Whether requests of ``priority`` go to the endpoint with the smallest predicted wait
        (:func:`least_wait`): those of the top configured band, for which the lower bands keep
        their places."""
        return priority >= max(self.bands)

    def limits_for(self, priority: int) -> BandLimits:
        """The band's own limits, else those of the nearest configured priority (ties: the lower)."""
        exact = self.bands.get(priority)
        if exact is not None:
            return exact
        nearest = min(self.bands, key=lambda p: (abs(p - priority), p))
        return self.bands[nearest]


def _queue_cap(limits: BandLimits) -> float:
    """``max_endpoint_queue`` with "no limit" as infinity, for ordering bands."""
    return math.inf if limits.max_endpoint_queue is None else limits.max_endpoint_queue


def _check_headroom_order(bands: list[Mapping[str, Any]], where: str) -> None:
    """Refuse a lower band that keeps more room than a higher band, naming the higher entry (the
    first of :func:`~igw.config.extension_references.band_order_violations`, which ``igw validate``
    reports in full)."""
    for j, field_name, message in band_order_violations(bands):
        raise FlowControlError(f"{where}.bands[{j}].{field_name}: {message}")


def _duration(text: str, where: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise FlowControlError(f"{where}: {exc}") from exc


def header_objective_allowed(
    objective: str,
    settings: FlowControlSettings,
    *,
    authenticated_tenant: str | None,
) -> bool:
    """Whether a request may take the objective its ``x-gateway-inference-objective`` header names.

    The header is chosen by the client, so without limits any client can put its traffic in the top
    band. An objective listed in ``objectiveAccess`` may be named only by its tenants - by the
    authenticated tenant claim, never by the client-chosen fairness header - and
    ``headerPriorityLimit`` caps what everyone else may claim. An objective nobody defined is allowed
    (it counts as absent anyway).
    """
    priority = settings.objectives.get(objective, NAMED_PRIORITIES.get(objective))
    if priority is None:
        return True
    allowed = settings.objective_tenants.get(objective)
    if allowed is not None:
        return authenticated_tenant is not None and authenticated_tenant in allowed
    limit = settings.header_priority_limit
    return limit is None or priority <= limit


def header_tenant_denied(tenant: str, settings: FlowControlSettings) -> str | None:
    """The objective a request would take from a tenant objective while its tenant is only what the
    client's ``x-gateway-inference-fairness-id`` header says, when the header could not name that
    objective itself (:func:`header_objective_allowed`); ``None`` when it could, or the tenant has none.

    The fairness header is the client's choice like the objective header: were it to unlock tenant
    objectives freely, any caller without a tenant claim would name a listed tenant in it and take
    that tenant's band past ``objectiveAccess`` and ``headerPriorityLimit``.
    """
    objective = settings.tenant_objectives.get(tenant)
    if objective is None:
        return None
    return None if header_objective_allowed(objective, settings, authenticated_tenant=None) else objective


def reaches_tenant(objective: str | None, model: str | None, settings: FlowControlSettings) -> bool:
    """Whether :func:`priority_for` would come to the tenant's objective: the objective header names
    no known objective, and the model has no priority of its own."""
    named = objective is not None and (objective in settings.objectives or objective in NAMED_PRIORITIES)
    return not named and (model is None or model not in settings.model_priorities)


def priority_for(
    objective: str | None,
    objectives: Mapping[str, int],
    *,
    model: str | None = None,
    tenant: str | None = None,
    by_model: Mapping[str, int] | None = None,
    by_tenant: Mapping[str, int] | None = None,
) -> int:
    """A request's priority: its named objective, else its model's, else its tenant's, else 0.

    An objective header naming nothing known counts as absent, so an unknown objective ends up
    Standard (0) unless the model or tenant has a priority of its own.
    """
    if objective is not None:
        if objective in objectives:
            return objectives[objective]
        if objective in NAMED_PRIORITIES:
            return NAMED_PRIORITIES[objective]
    if model is not None and by_model and model in by_model:
        return by_model[model]
    if tenant is not None and by_tenant and tenant in by_tenant:
        return by_tenant[tenant]
    return STANDARD


@dataclass(frozen=True, slots=True)
class EndpointLoad:
    """What flow control knows of one endpoint when it decides whether a band may go there."""

    waiting: int
    """Requests waiting at the model server (not running), the router's dispatches that its
    scrapes have not shown yet included."""
    occupancy: int
    """Requests running or waiting there."""
    batch: int | None = None
    """How many requests it runs at once (:class:`BatchEstimate`); ``None`` while unknown."""
    completion_rate: float | None = None
    """Requests it completes per second when its batch is full (:class:`CapacityEstimate`, else the
    counted completion rate); ``None`` while unknown."""
    pool_completion_rate: float | None = None
    """The same summed over the pool's endpoints (the higher bands' arrivals spread over them)."""


def slot_miss(kept: int, offered: float) -> float:
    """The share of higher-band arrivals that find none of ``kept`` batch slots free at an endpoint
    whose lower bands fill every other slot, when the higher bands keep ``offered`` slots busy on
    average (their arrival rate there times the time a sequence holds a slot).

    A kept slot comes back only when the higher-band sequence in it finishes: a lower-band
    sequence that finishes is replaced by the next lower-band one, since the lower bands refill up
    to the batch less the kept slots. So the kept slots are a loss system for the higher bands, and
    the chance that all are busy is Erlang's B formula ``B(kept, offered)`` (Poisson arrivals; it
    holds for any distribution of the time in a slot). An earlier model, where every completion of
    the endpoint freed a kept slot, found half the batch enough where the live benchmark's Critical
    requests still found the batch full.
    """
    if offered <= 0:
        return 0.0 if kept > 0 else 1.0
    blocked = 1.0
    for servers in range(1, kept + 1):  # B(k) = a B(k-1) / (k + a B(k-1)), stable for any k
        blocked = offered * blocked / (servers + offered * blocked)
    return blocked


def slots_for_wait(
    *,
    higher_rate: float,
    completion_rate: float,
    pool_completion_rate: float,
    batch: int,
    wait_s: float,
    most: int,
) -> int:
    """The fewest free batch slots (at most ``most``) for which a higher-band arrival at an endpoint
    running ``batch`` sequences at once waits longer than ``wait_s`` for one with a probability of
    at most ``1 - SLOT_WAIT_QUANTILE``.

    ``higher_rate`` is the higher bands' arrival rate at the pool, spread over its endpoints in
    proportion to their completion rates; a sequence holds its slot ``batch / completion_rate``
    seconds on average, so the higher bands keep ``higher_rate / pool_completion_rate * batch``
    slots of the endpoint busy (:func:`slot_miss`). An arrival that finds none free waits for the
    next completion of the full batch (exponential with the endpoint's ``completion_rate``), so the
    wait exceeds ``wait_s`` with probability ``slot_miss(k) * exp(-completion_rate * wait_s)``. A
    small batch completes slowly and needs several slots; a large one completes so often that a
    late arrival barely waits, and needs none.
    """
    if higher_rate <= 0 or completion_rate <= 0 or pool_completion_rate <= 0 or batch <= 0:
        return 0
    offered = higher_rate / pool_completion_rate * batch
    late = math.exp(-completion_rate * wait_s)
    allowed = 1.0 - SLOT_WAIT_QUANTILE
    kept, blocked = 0, 1.0  # blocked = slot_miss(kept, offered), one recursion step per slot
    while kept < most and blocked * late > allowed:
        kept += 1
        blocked = offered * blocked / (kept + offered * blocked)
    return kept


def predicted_wait_s(load: EndpointLoad) -> float:
    """Seconds a request sent to an endpoint with ``load`` now is expected to wait for a batch slot:
    none while one is free, else the requests ahead of it (and the one to finish first) at the
    endpoint's completion rate. Without a known batch, the requests waiting there stand for those
    ahead; without a completion rate, a wait that cannot be told is infinite (:func:`least_wait`
    then compares how many are ahead)."""
    ahead = _ahead(load)
    if ahead == 0:
        return 0.0
    rate = load.completion_rate
    return ahead / rate if rate else math.inf


def _ahead(load: EndpointLoad) -> int:
    """Requests that must start or finish before one sent now gets a slot (0: a slot is free)."""
    if load.batch is not None:
        over = load.occupancy - load.batch
        return 0 if over < 0 else over + 1
    return load.waiting + 1 if load.waiting > 0 else 0


def least_wait(
    candidates: Sequence[EndpointKey], loads: Mapping[EndpointKey, EndpointLoad]
) -> EndpointKey | None:
    """Of ``candidates`` (the scheduler's pick first, then its fallbacks), the one with the smallest
    :func:`predicted_wait_s`; on a tie the earlier one, so the scheduler's ranking decides between
    equally free endpoints. ``None`` when the pick is already the best or no candidate has a load.

    Used for the top band: the scheduler ranks endpoints for the whole pool's benefit (prefix
    cache, adapters, load), while a Critical request's time to first token is decided by whether
    its endpoint has a free batch slot now.
    """
    if not candidates or candidates[0] not in loads:
        return None

    def rank(key: EndpointKey) -> tuple[float, int]:
        return predicted_wait_s(loads[key]), _ahead(loads[key])

    pick = candidates[0]
    best = min((key for key in candidates if key in loads), key=rank)  # min keeps the earliest tie
    return best if rank(best) < rank(pick) else None


def kept_slots(keep_slots: int, batch: int) -> int:
    """The batch slots a band keeps free at an endpoint running ``batch`` at once: ``keep_slots``,
    but never the whole batch, so every band may always use one slot of an endpoint (an idle
    endpoint has a place for any band, whatever its batch size or a mistaken estimate of it)."""
    return max(0, min(keep_slots, batch - 1))


@dataclass(frozen=True, slots=True)
class BatchEstimate:
    """What the scrapes of one endpoint have shown about its batch size (how many requests it runs
    at once), updated once per new scrape with :meth:`after_scrape`.

    A queue behind running requests is evidence of a full batch only when it lasts: a request that
    arrives between two engine steps waits until the next step even when the batch has room, so a
    single scrape taken in that window shows ``running=1, waiting=19`` for a burst of twenty sent
    to an idle pod. Learning 1 from it would leave no batch slot for lower bands at all (with
    ``keep_slots`` 1) until something else filled the pod. So the batch is learned only from two
    consecutive scrapes that both showed a queue (the larger of their running counts), and any
    scrape running more than the learned batch raises it, since a pod that ran that many can.
    A smaller full batch later (long sequences filling the KV cache) does not lower it: lower bands
    held below a too-small batch would never fill the endpoint again to show its real size.
    """

    batch: int | None = None
    """The learned batch size; ``None`` until two consecutive scrapes showed a queue."""
    queued_running: int | None = None
    """The running count of the previous scrape when that scrape showed a queue, else ``None``."""
    most_running: int = 0
    """The most requests any scrape showed running (raises a configured prior that is too small)."""

    def after_scrape(self, *, waiting: int | None, running: int | None) -> BatchEstimate:
        """The estimate once a new scrape showing ``waiting`` and ``running`` has been seen."""
        batch = self.batch
        most = max(self.most_running, running or 0)
        if batch is not None and running is not None and running > batch:
            batch = running
        if not (waiting is not None and waiting > 0 and running is not None and running > 0):
            return BatchEstimate(batch, None, most)
        if self.queued_running is not None:
            batch = max(batch or 0, self.queued_running, running)
        return BatchEstimate(batch, running, most)

    def size(self, prior: int | None) -> int | None:
        """The batch size to plan with: the learned one, else ``prior`` (the configured
        ``assumedBatch``) raised to the most a scrape showed running, else ``None``.

        What the scrapes show wins over the prior both ways: a pod seen full at fewer sequences
        runs fewer, and one seen running more can run more. The prior only covers the time before
        the endpoint has been seen full, when no slot would otherwise be kept.
        """
        if self.batch is not None:
            return self.batch
        if prior is None:
            return None
        return max(prior, self.most_running)


@dataclass(slots=True)
class _BusySlot:
    """The busy slot-seconds of one slot of time (index ``index`` of ``window_s / SLOTS_PER_WINDOW``
    seconds), and the part of the slot they were spread over (``first`` to ``last``)."""

    index: int
    first: float
    last: float
    seconds: float


class CapacityEstimate:
    """How many requests per second one endpoint completes with its batch full, from the completions
    it made and the batch slots that were busy meanwhile.

    The completion rate counted while lower bands are held back below the batch (kept slots idle)
    is below what the endpoint can do, and sizing the kept slots from it keeps more than needed.
    Each busy slot completes at the same rate whatever the occupancy (one over the mean service
    time), so the capacity is the counted rate over the time-averaged busy slots of the same window,
    times the batch. Busy slots are observed as a step function (each observation holds until the
    next); the window is :data:`CAPACITY_WINDOW_S`. Pure: every call takes ``now``.

    Flow control observes every endpoint of a pool on every arrival, so one entry per step held
    300k entries (29 MB) per endpoint for a 30 s window at 10k requests/s (until session s42). The
    busy slot-seconds are summed per slot of a hundredth of the window instead, as
    :class:`~igw.scheduling.recent_count.RecentCount` counts events: at most 101 slots whatever the
    rate. Within the oldest slot, cut by the window's trailing edge, the slot-seconds are taken as
    spread evenly over the time they cover, so the mean is exact to within one slot (1 %).
    """

    __slots__ = (
        "_first_busy",
        "_last_at",
        "_last_busy",
        "_seen",
        "_slot_s",
        "_slot_seconds",
        "_slots",
        "window_s",
    )

    def __init__(self, window_s: float = CAPACITY_WINDOW_S) -> None:
        self.window_s = window_s
        self._slot_s = window_s / SLOTS_PER_WINDOW
        self._slots: deque[_BusySlot] = deque()
        """Slots holding busy slot-seconds of closed steps, oldest first."""
        self._slot_seconds = 0.0
        """Busy slot-seconds of the slots in ``_slots``."""
        self._seen = False
        """Whether anything was observed (``_last_at`` and ``_last_busy`` hold the latest step)."""
        self._last_at = 0.0
        self._last_busy = 0
        self._first_busy: float | None = None

    def observe(self, now: float, busy: int) -> None:
        """Record that ``busy`` batch slots are taken from ``now`` on."""
        if self._seen and now > self._last_at and self._last_busy > 0:
            self._add(max(self._last_at, now - self.window_s), now, self._last_busy)
        if busy > 0 and self._first_busy is None:
            self._first_busy = now
        if not self._seen or now >= self._last_at:  # a clock that stepped back: the latest step holds
            self._seen = True
            self._last_at = now
            self._last_busy = busy
        self._trim(now)

    def _add(self, start: float, end: float, busy: int) -> None:
        """Add ``busy`` slots held from ``start`` to ``end`` to the slots that time falls in (at most
        one window's worth: the caller cuts what lies before it)."""
        slot_s = self._slot_s
        slots = self._slots
        index = math.floor(start / slot_s)
        while start < end:
            stop = (index + 1) * slot_s
            if stop > end:
                stop = end
            if stop > start:
                seconds = busy * (stop - start)
                self._slot_seconds += seconds
                if slots and slots[-1].index >= index:  # the same slot (never an older one)
                    slot = slots[-1]
                    slot.seconds += seconds
                    if start < slot.first:
                        slot.first = start
                    if stop > slot.last:
                        slot.last = stop
                else:
                    slots.append(_BusySlot(index, start, stop, seconds))
                start = stop
            index += 1

    def _trim(self, now: float) -> None:
        horizon = now - self.window_s
        slots = self._slots
        while slots and slots[0].last <= horizon:
            self._slot_seconds -= slots.popleft().seconds
        if not slots:
            self._slot_seconds = 0.0  # no rounding left over from the slots gone

    def mean_busy(self, now: float) -> float | None:
        """Time-averaged busy slots over the window (or since the first busy one, while shorter)."""
        if self._first_busy is None:
            return None
        self._trim(now)
        span = min(self.window_s, now - self._first_busy)
        if span <= 0:
            return None
        horizon = now - span
        seconds = self._slot_seconds
        if self._slots:  # the oldest slot may reach back past the window
            oldest = self._slots[0]
            if oldest.first < horizon:
                seconds -= oldest.seconds * (horizon - oldest.first) / (oldest.last - oldest.first)
        if self._seen and now > self._last_at:
            seconds += self._last_busy * (now - max(self._last_at, horizon))
        if seconds < CAPACITY_MIN_BUSY_SLOT_S:
            return None
        return seconds / span

    def capacity(self, now: float, *, completion_rate: float | None, batch: int | None) -> float | None:
        """Completions per second with ``batch`` slots busy, from the ``completion_rate`` counted over
        the same window; ``completion_rate`` itself while too little has run to tell."""
        if completion_rate is None or batch is None:
            return completion_rate
        busy = self.mean_busy(now)
        if busy is None:
            return completion_rate
        return completion_rate * batch / min(float(batch), busy)


@dataclass(slots=True, kw_only=True)
class QueuedRequest:
    """One waiting request; ``payload`` is whatever the caller needs to dispatch it."""

    request_id: str
    priority: int
    tenant: str
    size_bytes: int
    enqueued_at: float
    deadline: float
    seq: int = 0
    payload: Any = None  # Any, not object: mypyc's dataclass support fails on `object` (KeyError)
    client_deadline: float | None = None
    """The client's own deadline (``x-gateway-max-queue-ms``), kept apart from the band's TTL so a
    reload that changes the TTL recomputes ``deadline`` from both (:meth:`FlowController.reconfigure`)."""

    def key(self, ordering: Ordering) -> tuple[float, int]:
        return (self.deadline if ordering is Ordering.EDF else self.enqueued_at, self.seq)


@dataclass(frozen=True, slots=True)
class Shed:
    """A request the controller refused or removed, and why."""

    request: QueuedRequest
    reason: ShedReason


@dataclass(frozen=True, slots=True)
class Offer:
    """The result of :meth:`FlowController.offer`: queued or not, plus anything it displaced."""

    queued: bool
    reason: ShedReason | None
    displaced: tuple[Shed, ...] = ()
    displaced_elsewhere: tuple[tuple[FlowController, Shed], ...] = ()
    """Requests of other pools' queues (the controllers sharing its :class:`QueueBytes`) that the
    arrival displaced under the fair-share rule (``pool_share``), each with its controller."""
    wait_bytes: int = 0
    """For a refusal: the bytes that must leave the shared queue before the arrival fits its
    ``maxBytes`` (0: not refused by the shared bytes), for its ``Retry-After``."""


class _Band:
    """The queued requests of one priority, per tenant, each tenant's list kept in dispatch order."""

    def __init__(self, priority: int, limits: BandLimits) -> None:
        self.priority = priority
        self.limits = limits
        self.tenants: dict[str, list[QueuedRequest]] = {}
        self.turns: list[str] = []
        """Round-robin rotation: the tenant whose turn it is comes first."""
        self.count = 0
        self.bytes = 0

    def add(self, item: QueuedRequest, ordering: Ordering) -> None:
        queue = self.tenants.get(item.tenant)
        if queue is None:
            queue = self.tenants[item.tenant] = []
            self.turns.append(item.tenant)
        bisect.insort(queue, item, key=lambda r: r.key(ordering))
        self.count += 1
        self.bytes += item.size_bytes

    def remove(self, item: QueuedRequest) -> None:
        queue = self.tenants[item.tenant]
        queue.remove(item)
        self.count -= 1
        self.bytes -= item.size_bytes
        if not queue:
            del self.tenants[item.tenant]
            self.turns.remove(item.tenant)

    def head(self, fairness: Fairness, ordering: Ordering) -> QueuedRequest | None:
        if not self.turns:
            return None
        if fairness is Fairness.ROUND_ROBIN:
            return self.tenants[self.turns[0]][0]
        return min((q[0] for q in self.tenants.values()), key=lambda r: r.key(ordering))

    def rotate_past(self, tenant: str) -> None:
        """Give the next tenant its turn after ``tenant`` dispatched."""
        if tenant in self.turns:
            self.turns.remove(tenant)
            self.turns.append(tenant)

    def items(self) -> Iterator[QueuedRequest]:
        for queue in self.tenants.values():
            yield from queue


@dataclass(slots=True)
class QueueBytes:
    """The bytes queued by every :class:`FlowController` that shares it: the whole queue's
    ``maxBytes`` bounds this total, not each controller's own (the gateway's controllers, one per
    scheduler, share one, so ``maxBytes`` bounds the process's queued bytes as the memory plan
    reserves it: :class:`igw.gateway.flow_gate.FlowGates`).

    ``members``: the controllers sharing it (each joins when it is made, :meth:`leave` when its
    pool is gone). Each member holding queued requests is entitled to an equal share of
    ``maxBytes`` (:meth:`FlowController.offer`)."""

    held: int = 0
    members: list[FlowController] = field(default_factory=list)

    def leave(self, controller: FlowController) -> None:
        """Stop counting ``controller`` among the members (its pool was removed)."""
        self.members = [m for m in self.members if m is not controller]

    def fit(self, max_bytes: int) -> tuple[tuple[FlowController, Shed], ...]:
        """Shed queued requests until the members' bytes together fit ``max_bytes`` (a reload
        lowered it; each member's :meth:`FlowController.reconfigure` fits only its own bytes), and
        return them with their queues (``queue_full``).

        The shares are an arrival's (:meth:`FlowController.offer`, ``pool_share``): each member
        with queued requests is entitled to ``max_bytes`` divided by their number, and the member
        holding the most, the one most over its share, gives up its lowest band's most recent
        request first (between members holding as many, the lower band's request, then the later
        arrival). While the total is over ``max_bytes`` that member is over its share, so a pool
        within its share never loses a request while another is over it. Shedding the lowest band
        newest first across every pool instead emptied two light pools, each within its share,
        and left a flooded pool at three times its own untouched (until session s49)."""
        order = {
            id(m): sorted(m.queued(), key=lambda r: (r.priority, -r.seq), reverse=True) for m in self.members
        }

        def rank(m: FlowController) -> tuple[int, int, float]:
            candidate = order[id(m)][-1]
            return (m.queued_bytes, -candidate.priority, candidate.enqueued_at)

        shed: list[tuple[FlowController, Shed]] = []
        while self.held > max_bytes:
            holding = [m for m in self.members if order[id(m)]]
            if not holding:
                break
            most = max(holding, key=rank)
            victim = order[id(most)].pop()
            if most.cancel(victim.request_id) is not None:
                shed.append((most, Shed(victim, ShedReason.QUEUE_FULL)))
        return tuple(shed)


def _dispatch_span(now: float, oldest: float) -> float:
    """The seconds a dispatch rate is taken over: since its oldest dispatch, within
    :data:`DISPATCH_MIN_SPAN_S` and :data:`DISPATCH_WINDOW_S`."""
    return min(DISPATCH_WINDOW_S, max(DISPATCH_MIN_SPAN_S, now - oldest))


class FlowController:
    """The queues of one pool. Not thread-safe: one event loop owns it.

    ``shared_bytes``: the byte total that the global ``max_bytes`` bounds, shared with other
    controllers (:class:`QueueBytes`; by default this controller's own). Each controller with
    queued requests is entitled to an equal share of it: an arrival that would pass it, and would
    stay within its pool's share, displaces the most recent lowest-band requests of the pool most
    over its share (``pool_share``), then its own lower bands; an arrival that would take its pool
    past its share displaces only its own lower bands, and is refused (``queue_full``) where those
    do not free enough. Until session s48 another pool's requests were never shed, so one pool
    flooded with large prompts held the whole budget and every other pool's arrivals were refused."""

    def __init__(
        self,
        settings: FlowControlSettings,
        *,
        engine_priority: EnginePriority | None = None,
        shared_bytes: QueueBytes | None = None,
    ) -> None:
        self.settings = settings
        self.shared_bytes = QueueBytes() if shared_bytes is None else shared_bytes
        self.shared_bytes.members.append(self)
        self.engine_priority = engine_priority
        """The pool's engine-side priority (``enginePriority``); where its engine preempts for a
        batch slot, no band keeps slots for the ones above (:meth:`slots_kept`)."""
        self._bands: dict[int, _Band] = {}
        self._by_id: dict[str, QueuedRequest] = {}
        self._seq = itertools.count()
        self._bytes = 0
        self._taken = RecentCount(DISPATCH_WINDOW_S)
        """The queue's dispatches (:meth:`take`) within the last :data:`DISPATCH_WINDOW_S`, for the
        computed ``Retry-After``."""
        self._straight: dict[int, RecentCount] = {}
        """Those sent without queueing (:meth:`dispatched`), per band: a band above the refused
        request's takes capacity ahead of it without ever being in the queue ahead
        (:meth:`retry_after_s`)."""
        self._arrivals: dict[int, RecentCount] = {}
        """Arrivals per band within the last :data:`ARRIVAL_WINDOW_S` (for ``slot_wait_s``)."""
        self._first_arrival: dict[int, float] = {}
        self._arrival_count = 0
        self._rate_cache: tuple[tuple[int, float, int], float] | None = None

    # -- queries ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def queued(self) -> tuple[QueuedRequest, ...]:
        """Every queued request (a copy: the caller may remove them as it goes)."""
        return tuple(self._by_id.values())

    def depth(self, priority: int) -> int:
        band = self._bands.get(priority)
        return band.count if band is not None else 0

    def priorities(self) -> list[int]:
        """Every band that has held a request (emptied bands included, for zeroing gauges)."""
        return sorted(self._bands)

    def depths(self) -> dict[int, int]:
        return {p: b.count for p, b in self._bands.items() if b.count}

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._by_id

    def admits(self, priority: int, utilisation: float) -> bool:
        """Whether a request of ``priority`` may be dispatched now, by its band's headroom rule.

        ``utilisation`` is the pool's load as a fraction of its saturation point (1.0: saturated),
        measured before this dispatch.
        """
        return utilisation < self.settings.limits_for(priority).dispatch_below

    def admits_to(self, priority: int, load: EndpointLoad, *, now: float | None = None) -> bool:
        """Whether a request of ``priority`` may go to an endpoint with ``load``, by its band's
        per-endpoint places (``max_endpoint_queue``, and ``keep_slots`` or what ``slot_wait_s``
        needs at the higher bands' arrival rate measured up to ``now``)."""
        limits = self.settings.limits_for(priority)
        if limits.max_endpoint_queue is not None and load.waiting >= limits.max_endpoint_queue:
            return False
        if load.batch is None:
            return True
        keep = self.slots_kept(priority, load, now=now)
        return not keep or load.occupancy < load.batch - kept_slots(keep, load.batch)

    def slots_kept(self, priority: int, load: EndpointLoad, *, now: float | None = None) -> int:
        """Batch slots a request of ``priority`` leaves free at an endpoint with ``load``.

        None where the pool's engine preempts lower-priority running requests for a batch slot
        (``enginePriority`` on SGLang): a higher-band arrival takes a lower band's slot there.
        Otherwise its band's ``keep_slots``, raised to what the ``slot_wait_s`` of its own band and of every
        band above it needs (a band keeps at least the slots a band above keeps, or it would hand
        them out below it). Needs the endpoint's batch and ``now``. While the endpoint's completion
        rates are not known yet (the first seconds of traffic), a ``slot_wait_s`` band with
        higher-band traffic keeps the most it may (:meth:`FlowControlSettings.most_kept`): sized
        by ``keep_slots`` alone there, the lower bands filled the pod in the first fraction of a
        second of the live benchmark and the Critical arrivals of that moment waited a whole
        sequence for a slot.
        """
        engine = self.engine_priority
        if engine is not None and engine.preempts_for_slot:
            return 0  # the engine empties a lower band's slot for a higher band: none is kept idle
        keep = self.settings.limits_for(priority).keep_slots
        batch, rate, pool_rate = load.batch, load.completion_rate, load.pool_completion_rate
        if now is None or batch is None:
            return keep
        most = self.settings.most_kept(batch)
        for band_priority, band in self.settings.bands.items():
            if band_priority < priority or band.slot_wait_s is None:
                continue
            higher_rate = self.arrival_rate_above(band_priority, now)
            if rate is None or pool_rate is None:
                needed = most if higher_rate > 0 else 0  # not measured yet: the safe side
            else:
                needed = slots_for_wait(
                    higher_rate=higher_rate,
                    completion_rate=rate,
                    pool_completion_rate=pool_rate,
                    batch=batch,
                    wait_s=band.slot_wait_s,
                    most=most,
                )
            keep = max(keep, needed)
        return keep

    def steers(self, priority: int) -> bool:
        """Whether requests of ``priority`` go to the endpoint with the smallest predicted wait
        (:meth:`FlowControlSettings.steers`)."""
        return self.settings.steers(priority)

    def arrived(self, priority: int, now: float) -> None:
        """Count one arrival of ``priority`` (every arrival, queued or not) for the arrival rates."""
        recent = self._arrivals.get(priority)
        if recent is None:
            recent = self._arrivals[priority] = RecentCount(ARRIVAL_WINDOW_S)
            self._first_arrival.setdefault(priority, now)
        recent.add(now)
        self._arrival_count += 1

    def arrival_rate_above(self, priority: int, now: float) -> float:
        """Arrivals per second of the bands above ``priority`` over the last :data:`ARRIVAL_WINDOW_S`
        (over the time since the first arrival, at least a second, while that is shorter).

        The last answer is kept until an arrival or another ``now``: one dispatch decision asks it
        once per endpoint of the pool."""
        key = (priority, now, self._arrival_count)
        if self._rate_cache is not None and self._rate_cache[0] == key:
            return self._rate_cache[1]
        rate = self._arrival_rate_above(priority, now)
        self._rate_cache = (key, rate)
        return rate

    def _arrival_rate_above(self, priority: int, now: float) -> float:
        count = 0
        first = now
        for p, recent in self._arrivals.items():
            if p > priority:
                recent.forget(now)
                count += recent.count
                first = min(first, self._first_arrival[p])
        return count / min(ARRIVAL_WINDOW_S, max(now - first, 1.0)) if count else 0.0

    def queued_at_or_above(self, priority: int) -> int:
        """Requests waiting in bands of ``priority`` or higher (an arrival must not overtake them)."""
        return sum(b.count for p, b in self._bands.items() if p >= priority)

    # -- arrivals ---------------------------------------------------------------------------
    def offer(
        self,
        *,
        request_id: str,
        priority: int,
        tenant: str,
        size_bytes: int,
        now: float,
        client_deadline: float | None = None,
        payload: object = None,
    ) -> Offer:
        """Queue a request, displacing lower-priority work if needed; or refuse it."""
        if request_id in self._by_id:
            raise FlowControlError(f"request {request_id!r} is already queued")
        expired = tuple(self.expire(now))
        limits = self.settings.limits_for(priority)
        deadline = now + limits.ttl_s
        if client_deadline is not None:
            deadline = min(deadline, client_deadline)
        item = QueuedRequest(
            request_id=request_id,
            priority=priority,
            tenant=tenant,
            size_bytes=size_bytes,
            enqueued_at=now,
            deadline=deadline,
            seq=next(self._seq),
            payload=payload,
            client_deadline=client_deadline,
        )
        band = self._bands.get(priority)
        band_count = band.count if band is not None else 0
        band_bytes = band.bytes if band is not None else 0
        fair: list[QueuedRequest] = []
        if band_count + 1 > limits.max_requests or band_bytes + size_bytes > limits.max_bytes:
            taken = self._fair_share_victims(band, item, limits)
            if taken is None:
                return Offer(False, ShedReason.BAND_FULL, expired)
            fair = taken
        room = self._victims_for(item, freed=fair)
        if isinstance(room, int):
            return Offer(False, ShedReason.QUEUE_FULL, expired, wait_bytes=room)
        victims, elsewhere = room
        for victim in (*fair, *victims):
            self._remove(victim)
        for other, victim in elsewhere:
            other._remove(victim)
        if band is None:
            band = self._bands[priority] = _Band(priority, limits)
        band.add(item, self.settings.ordering)
        self._by_id[request_id] = item
        self._bytes += size_bytes
        self.shared_bytes.held += size_bytes
        displaced = tuple(Shed(v, ShedReason.FAIR_SHARE) for v in fair)
        displaced += tuple(Shed(v, ShedReason.DISPLACED) for v in victims)
        foreign = tuple((other, Shed(v, ShedReason.POOL_SHARE)) for other, v in elsewhere)
        return Offer(True, None, expired + displaced, displaced_elsewhere=foreign)

    def _fair_share_victims(
        self, band: _Band | None, item: QueuedRequest, limits: BandLimits
    ) -> list[QueuedRequest] | None:
        """Requests of the tenants with the most queued in ``item``'s full band to drop so it fits,
        or ``None`` when its tenant already holds its share.

        Round-robin dispatch gives each tenant the same turns, but only while each has something
        queued: when a full band admitted arrivals first come, first served, a tenant sending most
        of the band's traffic filled it, the others' arrivals were refused, their queues ran empty
        and their turns went unused. So a full band takes the arrival of a tenant with fewer queued
        requests than another tenant has (by two or more, so two tenants never take turns
        displacing each other), in place of that tenant's most recent request. With global
        fairness there are no shares, and a full band refuses the arrival.
        """
        if band is None or self.settings.fairness is not Fairness.ROUND_ROBIN:
            return None
        counts = {tenant: len(queue) for tenant, queue in band.tenants.items()}
        mine = counts.pop(item.tenant, 0) + 1
        count_over = band.count + 1 - limits.max_requests
        bytes_over = band.bytes + item.size_bytes - limits.max_bytes
        dropped: dict[str, int] = {}
        victims: list[QueuedRequest] = []
        while count_over > 0 or bytes_over > 0:
            tenant = max(counts, key=counts.__getitem__, default=None)
            if tenant is None or counts[tenant] <= mine:
                return None
            newest_first = sorted(band.tenants[tenant], key=lambda r: r.seq, reverse=True)
            victim = newest_first[dropped.get(tenant, 0)]
            dropped[tenant] = dropped.get(tenant, 0) + 1
            counts[tenant] -= 1
            victims.append(victim)
            count_over -= 1
            bytes_over -= victim.size_bytes
        return victims

    def _victims_for(
        self, item: QueuedRequest, *, freed: list[QueuedRequest]
    ) -> tuple[list[QueuedRequest], list[tuple[FlowController, QueuedRequest]]] | int:
        """Queued requests to drop so ``item`` fits globally (``freed`` already leaving): other
        pools' over their share of the shared bytes (:meth:`_over_share_victims`), then this
        queue's strictly lower bands; or, where they do not free enough, the bytes still missing
        (0 where the request count alone is short). The bytes are the shared total's
        (:class:`QueueBytes`)."""
        freed_bytes = sum(r.size_bytes for r in freed)
        count_over = len(self._by_id) + 1 - len(freed) - self.settings.max_requests
        bytes_over = self.shared_bytes.held + item.size_bytes - freed_bytes - self.settings.max_bytes
        elsewhere: list[tuple[FlowController, QueuedRequest]] = []
        if bytes_over > 0:
            elsewhere = self._over_share_victims(self._bytes - freed_bytes + item.size_bytes, bytes_over)
            bytes_over -= sum(v.size_bytes for _, v in elsewhere)
        victims: list[QueuedRequest] = []
        lower = sorted(p for p in self._bands if p < item.priority)
        candidates = (
            r for p in lower for r in sorted(self._bands[p].items(), key=lambda r: r.seq, reverse=True)
        )
        while count_over > 0 or bytes_over > 0:
            victim = next(candidates, None)
            if victim is None:
                return max(bytes_over, 0)
            victims.append(victim)
            count_over -= 1
            bytes_over -= victim.size_bytes
        return victims, elsewhere

    def _over_share_victims(self, mine: int, bytes_over: int) -> list[tuple[FlowController, QueuedRequest]]:
        """Other pools' requests to drop, up to ``bytes_over`` bytes, for an arrival that leaves
        its pool holding ``mine`` bytes: none unless that is within its share.

        Each pool with queued requests (the arrival's counted) is entitled to ``maxBytes`` divided
        by their number. While a pool holds more than its share, the pool holding the most gives up
        its lowest band's most recent request, as one queue sheds its own lower bands. Only a pool
        over its share gives up requests, and only for an arrival that stays within its own, so two
        pools never take turns displacing each other. The bands of different pools are not
        compared: a pool's priorities order its own requests against each other, and a Critical
        request of a pool over its share gives way to a Sheddable one of a pool within it."""
        others = [m for m in self.shared_bytes.members if m is not self and m._by_id]
        if not others:
            return []
        share = self.settings.max_bytes / (len(others) + 1)
        if mine > share:
            return []
        held = [m._bytes for m in others]
        order = [sorted(m._by_id.values(), key=lambda r: (r.priority, -r.seq)) for m in others]
        taken = [0] * len(others)
        victims: list[tuple[FlowController, QueuedRequest]] = []
        while bytes_over > 0:
            most = max(range(len(others)), key=held.__getitem__)
            if held[most] <= share:
                break
            victim = order[most][taken[most]]
            taken[most] += 1
            held[most] -= victim.size_bytes
            bytes_over -= victim.size_bytes
            victims.append((others[most], victim))
        return victims

    # -- reloads ----------------------------------------------------------------------------
    def reconfigure(
        self,
        settings: FlowControlSettings,
        *,
        engine_priority: EnginePriority | None,
        now: float,
        priorities: Mapping[str, int] | None = None,
    ) -> tuple[Shed, ...]:
        """Apply new settings to the requests already queued, at once; what no longer fits is shed.

        A reload changes the limits under requests that were admitted by the old ones; applying the
        new ones only to later arrivals left a lowered bound or TTL without effect on a full queue
        until those requests were served or expired by the old limits. ``priorities`` (request id ->
        its band under the new settings, for the requests the caller classified again) moves each
        request whose objective's priority changed to its new band first (:meth:`_move`), keeping
        its arrival time and place in the arrival order. Then each queued request's deadline is
        recomputed from its band's new ``ttl`` (still capped by the client's own deadline), the
        bands' orders are rebuilt for the new ``ordering``, and then, in this order:

        * requests past their new deadline leave (``ttl_expired``);
        * a band over its new ``maxRequests`` / ``maxBytes`` sheds until it fits (``band_full``):
          with round-robin fairness the newest request of the tenant holding the most there (the
          newest of those tenants' requests on a tie; the tenants' shares stay as even as an
          arrival's ``fair_share`` rule keeps them), else the newest request of the band;
        * a queue over its new global bounds sheds from the lowest band up, newest first, as an
          arrival displaces (``queue_full``); the bytes counted are this queue's own (a shared
          total, :class:`QueueBytes`, is fitted by its owner across its queues afterwards,
          :meth:`QueueBytes.fit`).

        Raised limits need nothing here: the next dispatch pass reads them.
        """
        self.settings = settings
        self.engine_priority = engine_priority
        for request_id, priority in (priorities or {}).items():
            item = self._by_id.get(request_id)
            if item is not None and item.priority != priority:
                self._move(item, priority)
        for band in self._bands.values():
            band.limits = settings.limits_for(band.priority)
            for item in band.items():
                item.deadline = item.enqueued_at + band.limits.ttl_s
                if item.client_deadline is not None:
                    item.deadline = min(item.deadline, item.client_deadline)
            for queue in band.tenants.values():
                queue.sort(key=lambda r: r.key(settings.ordering))
        shed = list(self.expire(now))
        for priority in sorted(self._bands):
            band = self._bands[priority]
            while band.count > band.limits.max_requests or band.bytes > band.limits.max_bytes:
                victim = self._band_victim(band)
                self._remove(victim)
                shed.append(Shed(victim, ShedReason.BAND_FULL))
        lowest_newest = sorted(self._by_id.values(), key=lambda r: (r.priority, -r.seq))
        for victim in lowest_newest:
            if len(self._by_id) <= settings.max_requests and self._bytes <= settings.max_bytes:
                break
            self._remove(victim)
            shed.append(Shed(victim, ShedReason.QUEUE_FULL))
        return tuple(shed)

    def _move(self, item: QueuedRequest, priority: int) -> None:
        """Put a queued request in the band of ``priority`` (its objective's priority changed).

        It keeps its arrival time and sequence number, so it takes its arrival-order place among the
        new band's requests of its tenant (FCFS, and EDF once :meth:`reconfigure` recomputes its
        deadline from the new band's TTL counted from its arrival), and joins the band's round-robin
        turns last when its tenant had nothing queued there. Its bytes stay counted (the queue's
        total is unchanged); the band bounds are applied by :meth:`reconfigure` afterwards."""
        self._bands[item.priority].remove(item)
        item.priority = priority
        band = self._bands.get(priority)
        if band is None:
            band = self._bands[priority] = _Band(priority, self.settings.limits_for(priority))
        band.add(item, self.settings.ordering)

    def _band_victim(self, band: _Band) -> QueuedRequest:
        """The request a band over its limits gives up first (see :meth:`reconfigure`)."""
        if self.settings.fairness is Fairness.ROUND_ROBIN:
            newest = [max(queue, key=lambda r: r.seq) for queue in band.tenants.values()]
            counts = [len(queue) for queue in band.tenants.values()]
            # the heaviest tenant; between tenants holding as many, the newest request
            return max(zip(counts, newest, strict=True), key=lambda c: (c[0], c[1].seq))[1]
        return max(band.items(), key=lambda r: r.seq)

    # -- departures -------------------------------------------------------------------------
    def peek(self, now: float, *, utilisation: float | None = None) -> QueuedRequest | None:
        """The request that should dispatch next (highest band, its tenant's turn), not removed.

        With ``utilisation`` (see :meth:`admits`), ``None`` when the highest waiting band must hold
        back for headroom: bands below it hold back too (their thresholds are never higher), and
        a lower band never overtakes a higher one.
        """
        for priority in sorted(self._bands, reverse=True):
            head = self._bands[priority].head(self.settings.fairness, self.settings.ordering)
            if head is not None:
                if utilisation is not None and not self.admits(priority, utilisation):
                    return None
                return head
        return None

    def take(self, item: QueuedRequest, now: float) -> None:
        """Commit the dispatch of ``item`` (normally what :meth:`peek` returned)."""
        band = self._bands[item.priority]
        self._remove(item)
        band.rotate_past(item.tenant)
        self._taken.add(now)

    def dispatched(self, now: float, priority: int) -> None:
        """Count a request of band ``priority`` sent without queueing (a pick made on arrival)
        towards the rate behind :meth:`retry_after_s`, as :meth:`take` counts the queue's.

        Both take a batch slot as capacity turns over. Counting the queue's alone told a Critical
        request refused right after 20 requests were served straight (none queued) to come back at
        ``maxSeconds`` (9 s in the probe over loopback HTTP) as if nothing drained (until session s42).
        """
        recent = self._straight.get(priority)
        if recent is None:
            recent = self._straight[priority] = RecentCount(DISPATCH_WINDOW_S)
        recent.add(now)

    def cancel(self, request_id: str) -> QueuedRequest | None:
        """Remove a request whose client went away; ``None`` when it is no longer queued."""
        item = self._by_id.get(request_id)
        if item is not None:
            self._remove(item)
        return item

    def drain(self) -> tuple[QueuedRequest, ...]:
        """Remove and return every queued request, oldest first (its pool is gone: a reload removed
        its scheduler, so nothing will ever dispatch them)."""
        items = tuple(sorted(self._by_id.values(), key=lambda r: r.seq))
        for item in items:
            self._remove(item)
        return items

    def expire(self, now: float) -> Iterator[Shed]:
        """Remove and yield every request whose deadline has passed."""
        late = [r for r in self._by_id.values() if r.deadline <= now]
        for item in late:
            self._remove(item)
            yield Shed(item, ShedReason.TTL_EXPIRED)

    def next_deadline(self) -> float | None:
        """When the earliest queued request expires (for the caller's timer)."""
        return min((r.deadline for r in self._by_id.values()), default=None)

    def retry_after_s(
        self,
        now: float,
        *,
        priority: int | None = None,
        wait_bytes: int = 0,
        min_s: int = 1,
        max_s: int = 60,
    ) -> int:
        """Whole seconds a refused client should wait: the queue ahead at the recent dispatch rate.

        The queue ahead of a request of ``priority`` is what waits in its band and the bands above
        (they dispatch first; lower bands never go before it); without ``priority``, the whole
        queue. Counting the whole queue told a Critical request refused by its full band (2 queued
        there) to come back in 37 s behind 70 queued Sheddable requests it would never wait for,
        where 2 s was the answer (until session s42).

        The rate is the dispatches of the last :data:`DISPATCH_WINDOW_S` over the time since the
        oldest of them (at least :data:`DISPATCH_MIN_SPAN_S`): dividing by the whole window while
        the dispatches spanned less of it (an overload's first seconds) made the rate too low, 10
        dispatches in the last second read as 1/s, and a client behind 20 queued requests was told
        21 s where 3 s was the answer (until session s42). A stall still lowers the rate: the span
        runs to ``now``, not to the newest dispatch.

        Requests of bands above ``priority`` sent without queueing do not count: they took the
        capacity ahead of it, and counting them told a Sheddable request behind 9 queued ones,
        with 1 a second of its band dispatched and 10 a second of Critical ones sent straight, 1 s
        where 10 s was the answer.

        ``wait_bytes`` (an arrival refused by the shared ``maxBytes``, :attr:`Offer.wait_bytes`):
        the answer is also at least the time for that many bytes to leave the queues sharing it
        (:class:`QueueBytes`), at the rate each pool's queue dispatches its bytes
        (:meth:`_byte_rate`). Counting the refused pool's queue alone told a light pool's arrival,
        refused because another pool's flood held the budget, to come back in 1 s (its own queue
        empty) while the flood drained at a few requests a second (until session s48)."""
        rate = self._dispatch_rate(now, priority)
        if rate is None and wait_bytes <= 0:
            return max_s
        wait = 0.0
        if rate is not None:
            ahead = len(self._by_id) if priority is None else self.queued_at_or_above(priority)
            wait = (ahead + 1) / rate
        if wait_bytes > 0:
            byte_rate = sum(m._byte_rate(now) for m in self.shared_bytes.members)
            if byte_rate <= 0:
                return max_s
            wait = max(wait, wait_bytes / byte_rate)
        return max(min_s, min(max_s, math.ceil(wait)))

    def _dispatch_rate(self, now: float, priority: int | None) -> float | None:
        """Dispatches a second that take capacity ahead of a request of ``priority`` (every
        dispatch without it), see :meth:`retry_after_s`; ``None`` when none was seen."""
        counted = 0
        oldest = now
        for p, recent in (*self._straight.items(), (None, self._taken)):
            recent.forget(now)
            first = recent.oldest()
            if first is None:
                continue
            oldest = min(oldest, first)  # every dispatch's: the span the turnover was seen over
            if priority is None or p is None or p <= priority:
                counted += recent.count
        if counted <= 0:
            return None
        return counted / _dispatch_span(now, oldest)

    def _byte_rate(self, now: float) -> float:
        """Bytes a second this queue gives up by dispatching: its recent dispatches from the queue
        (:meth:`take`, over the span :meth:`retry_after_s` uses) times its mean queued request.

        Requests leaving by TTL (:meth:`expire`), by a shed or by a cancel are not counted, as they
        are not in the dispatch rate: they free bytes but are not service. A queue whose requests
        only expire is not being served, and its freed bytes go to the next arrivals of an overload
        that is still running; counting them would tell a refused client to come back for capacity
        that is not there, to wait in a queue that does not move and expire in turn."""
        if not self._by_id:
            return 0.0
        self._taken.forget(now)
        first = self._taken.oldest()
        if first is None:
            return 0.0
        return self._taken.count / _dispatch_span(now, first) * self._bytes / len(self._by_id)

    def _remove(self, item: QueuedRequest) -> None:
        self._bands[item.priority].remove(item)
        del self._by_id[item.request_id]
        self._bytes -= item.size_bytes
        self.shared_bytes.held -= item.size_bytes
