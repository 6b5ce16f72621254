"""Per-cluster availability: drained on a stale heartbeat or failing requests, slow start on return.

Pure state with an injected clock (the router passes ``now``), so every transition is table-tested.

- **Heartbeats**: :meth:`ClusterHealth.observe_heartbeat` is called with every heartbeat read; a
  *new* one is one whose ``seq`` differs from the last seen, and its arrival time is taken on this
  router's clock. A cluster whose last new heartbeat is older than ``heartbeat_staleness_s`` is
  drained (``stale``); a heartbeat that disappears (the gateway deleted it on shutdown) drains it at
  once (``gone``; not when the store lost several clusters' keys at once, or one across an outage:
  :mod:`igw.global_router.heartbeats`); a heartbeat that says ``draining`` (the gateway got
  SIGTERM) too, and so does a value the router cannot read (``malformed``: a broken or newer
  writer; the cluster's last good heartbeat says nothing about it any more). While the
  heartbeat store itself cannot be read, staleness is suspended (``source_up=False``): a Redis
  outage must not drain the whole fleet, and passive failure detection still works. The outage's
  length is not counted when the store is back either (:meth:`ClusterHealth.excuse`): the gateways
  could not publish through it, so every heartbeat read first after an outage longer than
  ``heartbeat_staleness_s`` was stale, and until session s38 the router drained every cluster at
  that read (``503 no_healthy_cluster`` for every request until the gateways' next publication,
  then a slow start of the whole fleet).
- **Requests**: ``failure_threshold`` consecutive failures eject for ``ejection_s``. Connect errors
  are the cluster's (its gateway is unreachable for every model): they eject the cluster, and any
  success resets their count. A failed *answer* (a 5xx) is counted against the cluster *for the
  request's model* and ejects the cluster for that model only; a success of that model resets its
  count. A cluster serves several models, each on pods of its own: until session s39 one model's
  failures (its engine crashing on every request) counted against the cluster and drained it for
  every model, moving all of their traffic elsewhere. Within a bound (:func:`record_failure`): at
  most ``max_ejection_percent`` of the clusters serving a model are out for its failures at once
  (rounded down, at least one), and never the last available cluster serving it, as tier 1 bounds
  its pods' ejections: clusters that all answer 5xx at once are more likely failing the requests
  (bodies every engine fails on, since session s34) than failing themselves, and emptying the fleet
  turned that into a 503 for every caller. A refused connection is no request's doing: an ejection
  it completes is not bounded.
- **A 503's ``Retry-After``** (since session s50): a failed answer that is a 503 saying when to come
  back (tier 1's ``no_endpoints`` while a pool has no ready pod: ``retryAfter``, from 1 s) ejects the
  cluster for that model for that long, not for ``ejection_s``, bounded to
  [:data:`MIN_DRAIN_S` (or ``ejection_s`` when shorter), ``ejection_s`` x :data:`MAX_DRAIN_FACTOR`]
  (:func:`ejection_seconds`): a broken or hostile gateway's ``0`` or ``999999999`` can neither
  make the ejection nothing nor keep the model out for ever (it comes back, slow-starting, and is
  ejected again after ``failure_threshold`` more). Until then every ejection lasted ``ejection_s``:
  a cluster saying ``Retry-After: 30`` while its pool scaled up was tried again after 5 s, three
  more requests spent on it each time (each moved on to the next cluster, a round trip later).
- **Repeated drains grow** (since session s50): a model's ejection at a cluster lasts ``ejection_s``
  times its ejections there in a row, at most ``ejection_s`` x :data:`MAX_DRAIN_FACTOR`; once the
  model has been back there that long after its last ejection, the next is the first again (tier
  1's pod ejections, Envoy's ``base_ejection_time`` x ejections capped by ``max_ejection_time``). A
  503's ``Retry-After`` sets the length of the one it completes, as above, and counts in the row.
  Until then a cluster answering 503 without ``Retry-After`` (or failing) for one model for minutes
  was drained for ``ejection_s`` each time and spent ``failure_threshold`` more requests every
  ``ejection_s``.
- **Slow start**: when a drained cluster becomes available again its share of traffic ramps
  linearly from :data:`RAMP_FLOOR` to 1 over ``slow_start_s`` (:meth:`ClusterHealth.ramp`), so a
  recovering cluster is not hit by a thundering herd. So does a cluster's share of one model's
  traffic when its ejection for that model's failed answers ends (``ramp(model=...)``, the smaller
  of the two ramps), reported as a recovery of the cluster for that model
  (:meth:`ClusterHealth.model_recoveries`). Until session s39 such a model came back at full share
  the moment its ejection ended, with no recovery event, while a whole cluster's return ramped.
- **A reload** (since session s50, :meth:`ClusterHealth.reconfigure`): a kept cluster takes the new
  ``failover`` settings but ``heartbeat_staleness_s`` (restart-only: the reader's replica merges
  hold it, and the rule that the poll period is below it checks the file's period, not the running
  one). An ejection's end is computed when it starts, so one under way keeps its end; the next
  failure counts against the new ``failure_threshold`` and ``max_ejection_percent``, the next
  ejection lasts the new ``ejection_s``. A slow start under way keeps the window it started with
  (pinned at the reload), the next one ramps over the new ``slow_start_s``: without the pin an edit
  from 30 s to 300 s dropped a cluster 20 s into its ramp from 70 % back to 16 % of its traffic.

Transitions are reported as :class:`Transition` values (the router counts them as failover and
recovery events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from igw.gateway.heartbeat_message import Heartbeat
from igw.global_router.config import ClusterSpec, FailoverSpec
from igw.scheduling.outliers import ejection_bound

RAMP_FLOOR: Final = 0.1
"""Share of its full traffic a returning cluster gets at the start of its slow-start window."""
MIN_DRAIN_S: Final = 1.0
"""The shortest ejection a 503's ``Retry-After`` makes (the least a tier-1 gateway sends): a ``0``
still takes the model out for a second (``ejection_s`` when that is shorter)."""
MAX_DRAIN_FACTOR: Final = 10
"""The longest ejection a 503's ``Retry-After`` makes, in ``ejection_s``: the operator's setting
bounds what a cluster may ask (Envoy's ``max_ejection_time`` default is 10 times its base)."""


def ejection_seconds(spec: FailoverSpec, retry_after_s: float | None, *, in_a_row: int = 1) -> float:
    """How long an ejection lasts: ``ejection_s`` times ``in_a_row`` (the ejections of the model here
    in a row, this one included) up to ``ejection_s`` x :data:`MAX_DRAIN_FACTOR`, or the
    ``Retry-After`` of the 503 that completed it (``retry_after_s``, ``None`` when it had none that
    could be read) within the module's bounds."""
    if retry_after_s is None or retry_after_s != retry_after_s:  # none, or NaN
        return spec.ejection_s * min(max(1, in_a_row), MAX_DRAIN_FACTOR)
    floor = min(MIN_DRAIN_S, spec.ejection_s)
    return min(spec.ejection_s * MAX_DRAIN_FACTOR, max(floor, retry_after_s))


DrainReason = Literal["stale", "gone", "draining", "failures", "no-heartbeat", "malformed"]


@dataclass(frozen=True, slots=True)
class Transition:
    cluster: str
    kind: Literal["failover", "recovery"]
    reason: str
    at: float
    model: str | None = None
    """Set for a failover of the cluster for one model only (its failed answers)."""


class ClusterHealth:
    def __init__(self, name: str, spec: FailoverSpec, *, heartbeat_required: bool = True) -> None:
        self.name = name
        self._spec = spec
        self._required = heartbeat_required
        self.heartbeat: Heartbeat | None = None
        self.heartbeat_seen_at: float | None = None
        self._excused_s = 0.0
        """Seconds since the last new heartbeat during which the store could not be read: not
        counted toward staleness (:meth:`excuse`)."""
        self._gone = False
        self._malformed = False
        self.consecutive_failures = 0
        """Connect failures in a row (the cluster's own, whatever the model)."""
        self.ejected_until = float("-inf")
        self.model_failures: dict[str, int] = {}
        """Per model: failed answers in a row (a model of the cluster's configuration: bounded)."""
        self._model_ejected_until: dict[str, float] = {}
        """Per model: when its ejection here ends (kept through the slow start that follows it)."""
        self._model_drains: dict[str, tuple[int, float]] = {}
        """Per model: its ejections here in a row and when the last one ends (kept after its slow
        start: the row goes on; bounded by the configured models)."""
        self._model_returned: set[str] = set()
        """The models whose ejection ended and whose recovery was reported (slow start under way)."""
        self.available_since: float | None = None
        """When the cluster last became available (``None`` while it is drained)."""
        self._has_failed = False
        self.drain_reason: DrainReason | None = "no-heartbeat" if heartbeat_required else None
        self._ramp_s: float | None = None
        """The window of the cluster's slow start under way at a reload, pinned (:meth:`reconfigure`);
        ``None``: ``slow_start_s``."""
        self._model_ramp_s: dict[str, float] = {}
        """Per model: the window of its slow start under way at a reload, pinned (as :attr:`_ramp_s`;
        forgotten with its ejection)."""

    def reconfigure(self, spec: FailoverSpec, *, now: float) -> None:
        """Take ``spec`` (a reload's ``failover``; its ``heartbeat_staleness_s`` the running one):
        ejections under way keep their end, slow starts under way at ``now`` keep their window, the
        next failure, ejection and slow start follow ``spec``."""
        since = self.available_since
        if since is not None and self.drain_reason is None and now - since < self._window():
            self._ramp_s = self._window()
        else:
            self._ramp_s = None
        for model, until in self._model_ejected_until.items():
            if until <= now and now - until < self._window(model):
                self._model_ramp_s[model] = self._window(model)
        self._spec = spec

    def _window(self, model: str | None = None) -> float:
        """The window of the cluster's (or ``model``'s) slow start: pinned by a reload, else
        ``slow_start_s``."""
        pinned = self._ramp_s if model is None else self._model_ramp_s.get(model)
        return max(0.0, self._spec.slow_start_s if pinned is None else pinned)

    # -- inputs --------------------------------------------------------------------------------
    def observe_heartbeat(self, beat: Heartbeat | None, *, now: float, malformed: bool = False) -> None:
        """Record what the store holds for this cluster (``None``: no key, or with ``malformed`` a
        value that could not be read)."""
        self._malformed = malformed
        if beat is None:
            self._gone = self.heartbeat is not None
            return
        self._gone = False
        if self.heartbeat is None or beat.seq != self.heartbeat.seq:
            self.heartbeat_seen_at = now
            self._excused_s = 0.0
        self.heartbeat = beat

    def excuse(self, seconds: float) -> None:
        """The heartbeat store could not be read for ``seconds`` (an outage now over): that time is
        not counted toward this cluster's staleness, which goes on from where it stood when the
        store went away (its gateway could not publish through the outage either)."""
        if self.heartbeat_seen_at is not None:
            self._excused_s += max(0.0, seconds)

    def silence(self, *, now: float) -> float | None:
        """Seconds since this cluster's last new heartbeat, less the time excused (what staleness
        compares with ``heartbeat_staleness_s``); ``None`` when it has none to judge (no heartbeat,
        or one that is gone, malformed or draining: drained for that, whatever its age)."""
        beat, seen = self.heartbeat, self.heartbeat_seen_at
        if beat is None or seen is None or self._gone or self._malformed or beat.draining:
            return None
        return now - seen - self._excused_s

    def record_success(self, model: str | None = None) -> None:
        """A request (of ``model``) succeeded here: the cluster answers, and that model works."""
        self.consecutive_failures = 0
        if model is not None:
            self.model_failures.pop(model, None)

    def count_failure(self, model: str | None = None) -> bool:
        """A request failed here (``model``: its answer failed, counted for that model; ``None``: the
        cluster failed, a connection); True when that makes ``failure_threshold`` in a row (the count
        starts again: the caller ejects the cluster, or the model here, or says why not)."""
        if model is None:
            self.consecutive_failures += 1
            if self.consecutive_failures < self._spec.failure_threshold:
                return False
            self.consecutive_failures = 0
            return True
        count = self.model_failures.get(model, 0) + 1
        if count < self._spec.failure_threshold:
            self.model_failures[model] = count
            return False
        self.model_failures.pop(model, None)
        return True

    def take_back_failure(self, model: str | None = None) -> None:
        """A failure counted here (for ``model``) turned out to be the request's (it failed at
        another cluster too): one less in the row, if the row is still going."""
        if model is None:
            if self.consecutive_failures > 0:
                self.consecutive_failures -= 1
            return
        count = self.model_failures.get(model, 0)
        if count > 1:
            self.model_failures[model] = count - 1
        else:
            self.model_failures.pop(model, None)

    def eject(self, *, now: float, model: str | None = None, retry_after_s: float | None = None) -> None:
        """Out for ``ejection_s`` from ``now``: the cluster, or only for ``model``, for ``ejection_s``
        times its ejections here in a row (or for the ``Retry-After`` of the 503 that completed it
        when it had one: :func:`ejection_seconds`). The row starts again once the model has been back
        here ``ejection_s`` x :data:`MAX_DRAIN_FACTOR`; an ejection made while the model is still out
        (requests sent before it failing late) restarts it without lengthening the row."""
        if model is None:
            self.ejected_until = now + self._spec.ejection_s
            return
        in_a_row, ended = self._model_drains.get(model, (0, float("-inf")))
        if now >= ended:
            if now - ended >= self._spec.ejection_s * MAX_DRAIN_FACTOR:
                in_a_row = 0  # back long enough since the last one: the next is the first again
            in_a_row += 1
        until = now + ejection_seconds(self._spec, retry_after_s, in_a_row=in_a_row)
        self._model_drains[model] = (in_a_row, until)
        self._model_ejected_until[model] = until
        self._model_ramp_s.pop(model, None)  # its next slow start: the window set then
        self._model_returned.discard(model)

    def model_ejection_ends(self, model: str) -> float | None:
        """When this cluster's ejection for ``model`` ends (or ended, its slow start under way);
        ``None`` when there is none."""
        return self._model_ejected_until.get(model)

    def ejected(self, *, now: float, model: str | None = None) -> bool:
        """Out for failing requests at ``now``: the cluster, or (``model``) the cluster for that model."""
        if now < self.ejected_until:
            return True
        return model is not None and now < self._model_ejected_until.get(model, float("-inf"))

    def ejected_models(self, *, now: float) -> list[str]:
        """The models this cluster is out for at ``now`` (their failed answers), sorted."""
        return sorted(model for model, until in self._model_ejected_until.items() if now < until)

    def model_recoveries(self, *, now: float) -> list[Transition]:
        """The recoveries of this cluster for models whose ejection ended by ``now`` (each reported
        once; their slow start runs from the ejection's end), sorted by model; forgets the models
        whose slow start is over (what is kept is bounded by the configured models)."""
        back: list[Transition] = []
        for model, until in sorted(self._model_ejected_until.items()):
            if now < until:
                continue
            if model not in self._model_returned:
                self._model_returned.add(model)
                back.append(Transition(self.name, "recovery", "available", now, model=model))
            if now - until >= self._window(model):
                del self._model_ejected_until[model]
                self._model_ramp_s.pop(model, None)
                self._model_returned.discard(model)
        return back

    # -- state ---------------------------------------------------------------------------------
    def reason_drained(self, *, now: float, source_up: bool) -> DrainReason | None:
        """Why the cluster gets no traffic now, or ``None`` when it is available."""
        if now < self.ejected_until:
            return "failures"
        if self._malformed:
            return "malformed"
        if self.heartbeat is None:
            return "no-heartbeat" if self._required else None
        if self._gone:
            return "gone"
        if self.heartbeat.draining:
            return "draining"
        seen = self.heartbeat_seen_at
        if source_up and seen is not None and now - seen - self._excused_s > self._spec.heartbeat_staleness_s:
            return "stale"
        return None

    def evaluate(self, *, now: float, source_up: bool) -> Transition | None:
        """Update availability; the failover or recovery that happened, if any.

        Becoming available for the first time (the router starting, the first heartbeat) is neither
        a recovery nor a reason to ramp; only a return after a drain is.
        """
        reason = self.reason_drained(now=now, source_up=source_up)
        was_available = self.drain_reason is None
        self.drain_reason = reason
        if reason is None:
            if not was_available:
                self.available_since = now if self._has_failed else float("-inf")
                if self._has_failed:
                    return Transition(self.name, "recovery", "available", now)
            elif self.available_since is None:
                self.available_since = float("-inf")
            return None
        if was_available:
            self.available_since = None
            self._ramp_s = None  # its next slow start: the window set then
            self._has_failed = True
            return Transition(self.name, "failover", reason, now)
        return None

    def available(self) -> bool:
        return self.drain_reason is None

    def ramp(self, *, now: float, model: str | None = None) -> float:
        """Share of full traffic (``RAMP_FLOOR`` .. 1) during slow start; 0 while drained. With
        ``model``: of that model's traffic, whose own slow start follows an ejection for its failed
        answers (0 while it lasts), the smaller of the two ramps."""
        if self.drain_reason is not None or self.available_since is None:
            return 0.0
        share = self._slow_start(now - self.available_since, self._window())
        until = None if model is None else self._model_ejected_until.get(model)
        if until is not None and model is not None:
            share = 0.0 if now < until else min(share, self._slow_start(now - until, self._window(model)))
        return share

    @staticmethod
    def _slow_start(elapsed: float, window: float) -> float:
        """The share ``elapsed`` seconds into a slow start over ``window`` seconds."""
        if window <= 0 or elapsed >= window:
            return 1.0
        return RAMP_FLOOR + (1.0 - RAMP_FLOOR) * max(0.0, elapsed) / window


def record_failure(
    health: Mapping[str, ClusterHealth],
    clusters: Mapping[str, ClusterSpec],
    name: str,
    *,
    now: float,
    spec: FailoverSpec,
    unreachable: bool = False,
    model: str | None = None,
    retry_after_s: float | None = None,
) -> str | None:
    """Count a failed request at cluster ``name`` and eject it at ``failure_threshold`` in a row,
    within the fleet's bound (the module's rules); the reason an ejection due was not made, else
    ``None``. ``unreachable``: this failure is a connection the cluster refused (or never
    answered), which no request can cause: the ejection it completes is made whatever the bound
    (several clusters down at once fail over at once, as before the bound). ``model``: a failed
    answer to a request for that model, counted and ejected for that model only (among the clusters
    serving it); ignored when ``unreachable``. ``retry_after_s``: that answer's ``Retry-After``
    (a 503's), how long an ejection it completes lasts (:func:`ejection_seconds`). The caller
    evaluates the fleet afterwards (a cluster's ejection shows as a failover)."""
    if model is not None and not unreachable:
        return _record_model_failure(
            health, clusters, name, model, now=now, spec=spec, retry_after_s=retry_after_s
        )
    if not health[name].count_failure():
        return None
    if unreachable:
        health[name].eject(now=now)
        return None
    out = sum(1 for h in health.values() if h.ejected(now=now))
    bound = ejection_bound(len(health), spec.max_ejection_percent)
    if out >= bound:
        return (
            f"{out} of {len(health)} clusters are out for failures already "
            f"(failover.maxEjectionPercent {spec.max_ejection_percent})"
        )
    for model in clusters[name].models:
        if not any(
            other != name and h.available() and model in clusters[other].models for other, h in health.items()
        ):
            return f"it is the last available cluster serving model {model!r}"
    health[name].eject(now=now)
    return None


def _record_model_failure(
    health: Mapping[str, ClusterHealth],
    clusters: Mapping[str, ClusterSpec],
    name: str,
    model: str,
    *,
    now: float,
    spec: FailoverSpec,
    retry_after_s: float | None = None,
) -> str | None:
    """:func:`record_failure` of a failed answer for ``model``: ejects ``name`` for that model, the
    bound counted among the clusters configured for it."""
    if not health[name].count_failure(model):
        return None
    peers = [other for other, cluster in clusters.items() if model in cluster.models]
    out = sum(1 for other in peers if health[other].ejected(now=now, model=model))
    bound = ejection_bound(len(peers), spec.max_ejection_percent)
    if out >= bound:
        return (
            f"{out} of {len(peers)} clusters serving model {model!r} are out for its failures already "
            f"(failover.maxEjectionPercent {spec.max_ejection_percent})"
        )
    if not any(
        other != name and health[other].available() and not health[other].ejected(now=now, model=model)
        for other in peers
    ):
        return f"it is the last available cluster serving model {model!r}"
    health[name].eject(now=now, model=model, retry_after_s=retry_after_s)
    return None
