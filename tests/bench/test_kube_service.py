"""The faithful Kubernetes Service model: a random backend per pooled keep-alive connection."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from igw.bench.policies.kube_service import KubeServicePolicy
from igw.scheduling.types import DecisionKind, RequestOutcome
from tests.bench.helpers import request, views


def _done(policy: KubeServicePolicy, request_id: str, endpoint: str, *, ok: bool = True) -> None:
    policy.on_complete(RequestOutcome(request_id=request_id, endpoint=endpoint, ok=ok), now=0.0)


def test_sequential_requests_reuse_one_connection_and_so_one_pod() -> None:
    """One client, one request at a time: the pooled connection (and its pod) serves them all, where
    per-request round-robin would rotate over every pod."""
    policy = KubeServicePolicy(rng=random.Random(3), clients=1)
    eps = views(a=0, b=0, c=0, d=0)
    picks = []
    for i in range(20):
        d = policy.pick(request(rid=f"r{i}"), eps, now=0.0)
        assert d.kind is DecisionKind.PICKED
        picks.append(d.endpoint)
        _done(policy, f"r{i}", d.endpoint or "")
    assert len(set(picks)) == 1
    assert policy.connections_opened == 1


@pytest.mark.parametrize(
    ("concurrent", "pool_size", "opened_after_two_waves"),
    [
        (1, 10, 1),  # one connection, reused
        (5, 10, 5),  # five busy at once: five connections, all kept and reused in the second wave
        (5, 2, 8),  # only two are kept idle: the second wave opens three new ones
    ],
)
def test_connections_open_only_when_none_is_idle_and_the_pool_keeps_at_most_pool_size(
    concurrent: int, pool_size: int, opened_after_two_waves: int
) -> None:
    policy = KubeServicePolicy(rng=random.Random(1), clients=1, pool_size=pool_size)
    eps = views(a=0, b=0, c=0)
    for wave in range(2):
        held = [
            (f"w{wave}-{i}", policy.pick(request(rid=f"w{wave}-{i}"), eps, now=0.0).endpoint)
            for i in range(concurrent)
        ]
        for rid, ep in held:
            _done(policy, rid, ep or "")
    assert policy.connections_opened == opened_after_two_waves


def test_a_failed_request_closes_its_connection_and_a_removed_pod_loses_its_connections() -> None:
    policy = KubeServicePolicy(rng=random.Random(5), clients=1)
    eps = views(a=0, b=0)
    first = policy.pick(request(rid="r1"), eps, now=0.0).endpoint
    _done(policy, "r1", first or "", ok=False)
    second = policy.pick(request(rid="r2"), eps, now=0.0).endpoint
    assert policy.connections_opened == 2  # the failed connection was not reused
    _done(policy, "r2", second or "")
    only = [e for e in eps if e.key != second]  # the pod of the only pooled connection leaves
    d = policy.pick(request(rid="r3"), only, now=0.0)
    assert d.endpoint == only[0].key
    assert policy.connections_opened == 3


def test_load_is_uneven_across_pods_unlike_per_request_rotation() -> None:
    """With few pooled connections per pod, shares follow how connections happened to land."""
    policy = KubeServicePolicy(rng=random.Random(11), clients=2, pool_size=3)
    eps = views(**{f"p{i}": 0 for i in range(8)})
    counts: Counter[str] = Counter()
    for i in range(400):
        rid = f"r{i}"
        ep = policy.pick(request(rid=rid), eps, now=0.0).endpoint or ""
        counts[ep] += 1
        _done(policy, rid, ep)
    assert policy.connections_opened <= 2  # sequential traffic: one connection per client
    assert len(counts) <= 2  # at most two of the eight pods see any traffic


def test_same_seed_same_choices_and_empty_set_is_no_endpoints() -> None:
    def run(seed: int) -> list[str | None]:
        p = KubeServicePolicy(rng=random.Random(seed))
        return [p.pick(request(rid=f"r{i}"), views(a=0, b=0, c=0), now=0.0).endpoint for i in range(30)]

    assert run(4) == run(4)
    assert (
        KubeServicePolicy(rng=random.Random(1)).pick(request(), [], now=0.0).kind is DecisionKind.NO_ENDPOINTS
    )
    with pytest.raises(ValueError, match="pool_size"):
        KubeServicePolicy(rng=random.Random(1), pool_size=0)
