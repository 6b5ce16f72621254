"""The Kubernetes Service as clients really meet it: a random backend per *connection*, not per request.

Behind a load balancer, kube-proxy (iptables mode) picks a uniformly random backend pod when a TCP
connection is opened, and every request sent over that connection goes to the same pod. Clients reuse
keep-alive connections from a pool, so what a pod receives depends on how many pooled connections
happen to point at it and on which connection the pool hands out, not on a per-request rotation.
Per-request round-robin (:class:`~igw.bench.policies.baselines.RoundRobinPolicy`) is therefore the
*kindest* model of a Service; this policy is the faithful one.

Client model (the common HTTP/1.1 pool shape of urllib3, requests and aiohttp): ``clients`` client
processes, each with its own pool; a request comes from a uniformly random client; it takes the
most recently returned idle connection of that client's pool (LIFO, as urllib3's pool queue does),
or opens a new one (kube-proxy draws its backend then) when none is idle; one request at a time per
connection; a finished request returns its connection to the pool unless ``pool_size`` connections
are already idle there (then it is closed); a failed request closes its connection; a connection to
a pod that left the endpoint set is dropped.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from igw.bench.policies.decisions import no_endpoints, picked
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome, RoutingDecision, RoutingRequest

DEFAULT_CLIENTS = 4
"""Client processes behind the load balancer (e.g. a few application replicas)."""
DEFAULT_POOL_SIZE = 10
"""Idle keep-alive connections a client keeps (urllib3's and requests' default ``maxsize``)."""


@dataclass(slots=True)
class _Client:
    idle: list[EndpointKey] = field(default_factory=list)
    """Idle pooled connections, each named by the pod it is bound to; the last is reused first."""


class KubeServicePolicy:
    """Random backend per connection over per-client keep-alive pools (see the module docstring)."""

    name = "kube-service"

    def __init__(
        self, *, rng: random.Random, clients: int = DEFAULT_CLIENTS, pool_size: int = DEFAULT_POOL_SIZE
    ) -> None:
        if clients < 1:
            raise ValueError(f"clients must be >= 1, got {clients}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self._rng = rng
        self._clients = [_Client() for _ in range(clients)]
        self._pool_size = pool_size
        self._busy: dict[str, tuple[_Client, EndpointKey]] = {}
        self.connections_opened = 0

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del now
        if not endpoints:
            return no_endpoints()
        live = {e.key for e in endpoints}
        client = self._clients[self._rng.randrange(len(self._clients))]
        client.idle = [k for k in client.idle if k in live]
        if client.idle:
            backend = client.idle.pop()
            reason = "kube-service: pooled connection"
        else:
            backend = self._rng.choice(sorted(live))
            self.connections_opened += 1
            reason = "kube-service: new connection, random backend"
        self._busy[request.request_id] = (client, backend)
        return picked(backend, endpoints, reason=reason)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        del now
        held = self._busy.pop(outcome.request_id, None)
        if held is None:
            return
        client, backend = held
        if outcome.ok and outcome.endpoint == backend and len(client.idle) < self._pool_size:
            client.idle.append(backend)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        gone = set(keys)
        for client in self._clients:
            client.idle = [k for k in client.idle if k not in gone]
