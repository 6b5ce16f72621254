"""The routing interface shared by the gateway and the discrete-event simulator.

Both the live gateway and the simulator (``igw.sim``) build the same three inputs for every
routing decision and call the same :class:`RoutingPolicy`. Keeping this surface small and free of
I/O is what lets the benchmark run the gateway's real scheduler code in virtual time.

What a router may know about an endpoint is exactly what a gateway can know:

* the latest *scrape* of its ``/metrics`` page (:class:`EngineMetrics`), with the clock time the
  sample was taken (so its age can be computed against the injected clock), and
* what the router itself has counted (requests it dispatched that have not completed).

Anything an engine does not publish is ``None``, never zero: a missing signal must be handled
explicitly by the scorer that needs it (see ``igw.scheduling.framework``: the scorer returns ``None``
and the framework imputes and reports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

# The records themselves live in igw.scheduling.values, compiled in the mypyc build (this module's
# runtime-checkable protocols keep it interpreted there: igw.compiled); re-exported here, where every
# caller has always imported them from.
from igw.scheduling.retry_policy import RetryPolicy
from igw.scheduling.values import DecisionKind as DecisionKind
from igw.scheduling.values import EndpointKey as EndpointKey
from igw.scheduling.values import EndpointView as EndpointView
from igw.scheduling.values import EngineMetrics as EngineMetrics
from igw.scheduling.values import RequestOutcome as RequestOutcome
from igw.scheduling.values import RoutingDecision as RoutingDecision
from igw.scheduling.values import RoutingRequest as RoutingRequest


@runtime_checkable
class RoutingPolicy(Protocol):
    """A routing policy: the gateway's scheduler, or a baseline such as round-robin.

    The caller (gateway or simulator) owns the in-flight counts it passes in ``EndpointView`` and
    calls the hooks in this order for each request: ``pick`` -> (dispatch) -> ``on_complete``.
    ``now`` is the caller's clock (wall clock in the gateway, virtual time in the simulator).
    """

    name: str

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision: ...

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None: ...

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None: ...


@runtime_checkable
class ModelMissingObserver(Protocol):
    """A policy that also wants to hear when an endpoint answered 404 to a request for a LoRA adapter
    (it does not serve it): the scheduler then leaves the endpoint out for that adapter a while
    (``lora-slot-filter``). Optional beside :class:`RoutingPolicy`."""

    def on_model_missing(self, endpoint: EndpointKey, model: str, *, now: float) -> None: ...


@runtime_checkable
class RetryingPolicy(Protocol):
    """A policy behind which ``igw serve`` retries a refused attempt on the decision's next fallback
    (``spec.extensions.routing.retry``), so the DES retries as the gateway would. Optional beside
    :class:`RoutingPolicy`: a policy without it has no refusal retried."""

    @property
    def retry_policy(self) -> RetryPolicy: ...


@runtime_checkable
class FirstTokenObserver(Protocol):
    """A policy that also wants to hear when a dispatched request's first token arrives.

    Optional beside :class:`RoutingPolicy`: a policy that learns from time to first token learns it
    in one TTFT instead of waiting for the whole response (seconds of decoding on a slow GPU). The
    outcome carries ``ttft_s`` and ``prompt_tokens``; ``on_complete`` still follows.
    """

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None: ...
