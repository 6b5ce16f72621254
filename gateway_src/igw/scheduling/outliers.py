"""Passive outlier detection: endpoints that keep failing the requests sent to them leave scheduling
for a while (``spec.extensions.routing.outlierDetection``,
:class:`~igw.scheduling.settings.OutlierDetection`).

Why the scheduler needs it: every signal it ranks by says how busy a pod is, none whether the pod
answers. A pod whose inference API fails at once (an engine that died behind a live HTTP server, a
broken adapter store, a bad GPU) while its ``/metrics`` page still looks healthy finishes every
request immediately, so it looks like the idlest pod of the pool and draws most of the traffic. In
the DES, one such pod among four (``error_rate: 1.0``) failed about two thirds of the requests the
scheduler routed and a quarter of round-robin's (docs/gateway.md, "Outlier detection").

The rule is Envoy's consecutive-failure ejection, the same defaults:

- the gateway reports each request's end with ``RequestOutcome.pod_fault`` (a 5xx answer, a stream
  the model server broke or left silent, a response timeout) and each refused connection; a
  complete answer (``ok``) resets the endpoint's count; client errors (4xx), client disconnects and
  the route's own timeout change nothing;
- ``consecutive_failures`` in a row eject the endpoint for ``base_ejection_s`` times the number of
  ejections in a row, at most ``max_ejection_s``; once it has stayed in for ``max_ejection_s`` after
  returning, the next ejection is the first again;
- at most ``max_ejection_percent`` of the pool (rounded down, at least one, never the last endpoint)
  is left out at a time: when more are ejected, those whose ejection ends soonest come back first,
  so a fault of the whole pool (or of the requests) does not empty it.

**A request that fails on two pods is the request's fault** (since session s33): a request whose
body makes the engine fail (a "poison" request: an input that crashes its request processing, a
500) failed wherever it went, and each failure counted against a healthy pod. An SDK retries a 500
twice by itself, prefix affinity sends the retries to the same pod, and five such failures ejected
it, up to half the pool for a caller repeating them. So the gateway gives each pod fault the
request's digest (``RequestOutcome.request_digest``, a hash of its body), the detector keeps the pods
each digest failed on (:attr:`OutlierDetector.request_faults`, the rule of
:mod:`igw.scheduling.request_faults`, which the tier-2 router applies to clusters) and the gateway
routes the same request again (``RoutingRequest.avoid``) to another pod, as Envoy's
``previous_hosts`` retry predicate does within one request. If it fails there too, the request is
taken for the fault: that failure is not counted, the first pod's is taken back (one failure less in
its row, if it is still in one), and the digest's later failures count nowhere. If it succeeds
there, the first pod's failure stands. The same body sent over and over (a load test with a fixed
prompt) goes to other pods after its first failure. An ejection already made stands (its window is
short). Requests without a digest (the DES, a refused connection) count as before.

Ejection is a time window, not a health check: the endpoint returns when it ends and is ejected again
after another ``consecutive_failures`` failures. Each scheduler counts the failures of its own
requests; with ``igw serve --workers N`` an ejection travels to the other workers as a pick note
(:mod:`igw.scheduling.pick_notes`, named :data:`OUTLIER_NOTES`: the ejection's end and its number in
a row), so the group ejects a failing pod after ``consecutive_failures`` failures of one worker's
requests, not after that many at each of N workers. The pick reads one attribute
(:attr:`OutlierDetector.ejected`) while nothing is ejected; the records exist only for endpoints
that failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final

from igw.scheduling.cycle import CycleContext
from igw.scheduling.request_faults import RequestFaultMemory
from igw.scheduling.settings import OutlierDetection
from igw.scheduling.types import EndpointKey, EndpointView

OUTLIER_NOTES: Final = "@outlier-detection"
"""The name an ejection's note travels under between the workers of a group (not a plugin's name)."""

Ejection = tuple[float, int]
"""An ejection: when it ends (the scheduler's clock) and its number in a row."""

EjectionListener = Callable[[EndpointKey, float, int], None]
"""Told of each ejection: ``(endpoint, seconds, failures in a row)`` (the gateway counts and logs it)."""

RequestFaultListener = Callable[[frozenset[EndpointKey]], None]
"""Told of each request taken for the fault: the endpoints it failed on (the gateway counts and
logs it)."""


def ejection_bound(n: int, max_ejection_percent: int) -> int:
    """How many of ``n`` places (a pool's endpoints, the tier-2 router's clusters) may be out for
    failures at once: ``max_ejection_percent`` of them rounded down, at least one, never all (0 of
    one): Envoy's ``max_ejection_percent``, except that one may always be out and one always stays in."""
    return min(max(1, n * max_ejection_percent // 100), n - 1)


class _Record:
    """One endpoint's failure history."""

    __slots__ = ("ejections", "failures", "returned_at")

    def __init__(self) -> None:
        self.failures = 0
        """Failures since the last complete answer (or since the last ejection ended)."""
        self.ejections = 0
        """Ejections in a row: the multiplier of the next ejection's length."""
        self.returned_at: float | None = None
        """When the last ejection ended (``None``: never ejected)."""


class OutlierDetector:
    """Failure counts and ejections of one scheduler's endpoints."""

    def __init__(self, settings: OutlierDetection, *, on_ejected: EjectionListener | None = None) -> None:
        self.name = OUTLIER_NOTES
        """Its name among the schedulers' note sharers (:mod:`igw.scheduling.pick_notes`)."""
        self.settings = settings
        self.on_ejected = on_ejected
        self.on_request_fault: RequestFaultListener | None = None
        """Told when a request that failed on two endpoints is taken for the fault."""
        self.ejected: dict[EndpointKey, float] = {}
        """Endpoint -> when its ejection ends; entries past their end are dropped by :meth:`admit`."""
        self._records: dict[EndpointKey, _Record] = {}
        self.request_faults: RequestFaultMemory[EndpointKey] = RequestFaultMemory()
        """The pods each failed request body failed on (the module's "request's fault")."""

    def failed(self, key: EndpointKey, *, now: float, digest: int | None = None) -> Ejection | None:
        """A request to ``key`` failed by the endpoint's fault (or its connection was refused); the
        ejection it caused, if it did. ``digest``: the request's (the module's "request's fault"),
        whose failure on another pod makes this one the request's, not counted."""
        s = self.settings
        if s.consecutive_failures <= 0:
            return None
        if digest is not None and self._requests_fault(key, digest, now):
            return None
        until = self.ejected.get(key)
        if until is not None:
            if now < until:
                return None  # already out: requests sent before the ejection are still ending
            self._returned(key)
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = _Record()
        record.failures += 1
        if record.failures < s.consecutive_failures:
            return None
        if record.returned_at is not None and now - record.returned_at >= s.max_ejection_s:
            record.ejections = 0  # in long enough since the last ejection: start again
        record.ejections += 1
        seconds = min(s.base_ejection_s * record.ejections, max(s.max_ejection_s, s.base_ejection_s))
        until = self.ejected[key] = now + seconds
        failures, record.failures = record.failures, 0
        if self.on_ejected is not None:
            self.on_ejected(key, seconds, failures)
        return until, record.ejections

    def _requests_fault(self, key: EndpointKey, digest: int, now: float) -> bool:
        """Remember that the request ``digest`` failed on ``key``; True when it is the request's fault
        (it failed on another pod too), the other pods' failures of it then taken back."""
        taken = self.request_faults.record(key, digest, now=now)
        if taken is None:
            return False
        if taken:
            for other in taken:
                record = self._records.get(other)
                if other != key and record is not None and record.failures > 0:
                    record.failures -= 1
            if self.on_request_fault is not None:
                self.on_request_fault(taken)
        return True

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """Picks teach it nothing (:class:`~igw.scheduling.framework.SharesPicks`): its notes are the
        ejections, which the scheduler sends as they happen."""
        return None

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Another worker ejected ``endpoint``: ``note`` is ``[until, ejections in a row]``
        (``ValueError`` otherwise). Out here until then too, and its next ejection at least one
        longer; not counted as this worker's own (no listener call)."""
        if not isinstance(note, list | tuple) or len(note) != 2:
            raise ValueError(f"{OUTLIER_NOTES}: a note is [until, ejections]")
        until, ejections = note
        if type(until) not in (int, float) or not math.isfinite(until) or type(ejections) is not int:
            raise ValueError(f"{OUTLIER_NOTES}: a note is [until, ejections], a finite time and an integer")
        if ejections < 1:
            raise ValueError(f"{OUTLIER_NOTES}: ejections must be at least 1")
        if until > self.ejected.get(endpoint, -math.inf):
            self.ejected[endpoint] = float(until)
        record = self._records.get(endpoint)
        if record is None:
            record = self._records[endpoint] = _Record()
        record.failures = 0
        if ejections > record.ejections:
            record.ejections = ejections

    def succeeded(self, key: EndpointKey) -> None:
        """A request to ``key`` got a complete answer: its failures are no longer in a row."""
        record = self._records.get(key)
        if record is not None:
            record.failures = 0

    def admit(self, endpoints: Sequence[EndpointView], *, now: float) -> Sequence[EndpointView]:
        """``endpoints`` without the ejected ones, within the pool's bound (the module's rules); the
        same sequence when none is left out. Drops ejections that have ended."""
        ejected = self.ejected
        for key in [key for key, until in ejected.items() if now >= until]:
            self._returned(key)
        if not ejected:
            return endpoints
        out = [e.key for e in endpoints if e.key in ejected]
        if not out:
            return endpoints
        left_out = self._bounded(out, len(endpoints))
        if not left_out:
            return endpoints
        return [e for e in endpoints if e.key not in left_out]

    def bound(self, n: int) -> int:
        """How many of a pool of ``n`` endpoints may be left out at once (:func:`ejection_bound`)."""
        return ejection_bound(n, self.settings.max_ejection_percent)

    def _bounded(self, out: list[EndpointKey], n: int) -> set[EndpointKey]:
        """Of the ejected endpoints ``out`` of a pool of ``n``, those left out: all within the
        :meth:`bound`, else the ones whose ejection ends last (ties by key: the same set on every
        pick), so those ending soonest come back first."""
        bound = self.bound(n)
        if len(out) > bound:
            ejected = self.ejected
            out = sorted(out, key=lambda key: (ejected[key], key), reverse=True)[:bound]
        return set(out)

    def _returned(self, key: EndpointKey) -> None:
        """``key``'s ejection has ended: it counts its failures afresh."""
        until = self.ejected.pop(key)
        record = self._records.get(key)
        if record is not None:
            record.returned_at = until
            record.failures = 0

    def seconds_left(self, pool: Collection[EndpointKey], now: float) -> list[tuple[EndpointKey, float]]:
        """The endpoints of ``pool`` left out at ``now`` (ejected, within the pool's :meth:`bound`:
        the only endpoint of a pool is never out, whatever its failures) with the seconds their
        ejection has left, by key."""
        out = [key for key, until in self.ejected.items() if until > now and key in pool]
        ejected = self.ejected
        return sorted((key, ejected[key] - now) for key in self._bounded(out, len(pool)))

    def in_force(self, now: float) -> list[tuple[EndpointKey, Ejection]]:
        """Every ejection not ended at ``now``, as ``(endpoint, (until, ejections in a row))`` by key:
        the group's state a worker that joins late (or reconnects) is told at once, rather than only
        the notes younger than the stale threshold, which missed an ejection made a few seconds
        earlier while it still had most of its time to run (:mod:`igw.gateway.pick_share`)."""
        records = self._records
        return sorted(
            (key, (until, max(1, records[key].ejections if key in records else 1)))
            for key, until in self.ejected.items()
            if until > now
        )

    def forget(self, keys: Iterable[EndpointKey]) -> None:
        """Endpoints left the pool: their history goes with them."""
        for key in keys:
            self.ejected.pop(key, None)
            self._records.pop(key, None)

    def adopt(self, previous: OutlierDetector) -> None:
        """Share ``previous``'s counts and ejections (a reload rebuilt the scheduler): a reload does
        not let a failing endpoint back in, and the requests still ending on the old scheduler count
        on the new one."""
        self.ejected = previous.ejected
        self._records = previous._records
        self.request_faults.adopt(previous.request_faults)
