"""A request's plan at the largest fleet a configuration may hold (1 000 clusters of 256 models):
only the clusters configured for its model are looked at (session s43).

Until session s43 each request's plan, and each check that its model is known, compared the model
with every configured model of every cluster: at 1 000 clusters of 256 models (the schema's limits)
9.6 ms of the event loop per request for a model one cluster serves, 8.5 ms for an unknown one
(``igw global serve`` relays nothing else meanwhile). The cost is counted here in comparisons of the
model's name, which does not depend on the machine's speed.
"""

from __future__ import annotations

import random
import time

from igw.global_router.config import build_global_config
from igw.global_router.fleet import Fleet
from igw.global_router.metrics import FleetMetrics

CLUSTERS = 1000
MODELS = 256


class CountedName(str):
    """A model name that counts the comparisons made with it (``x in tuple`` and a dict lookup
    call the subclass's ``__eq__`` first)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _largest_fleet() -> Fleet:
    clusters = [
        {
            "name": f"c{i}",
            "region": f"r{i % 5}",
            "endpoint": f"http://127.0.0.1:{i + 1}",
            "models": [f"m{i}-{j}" for j in range(MODELS - 1)] + ["shared"],
        }
        for i in range(CLUSTERS)
    ]
    doc = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "GlobalRouterConfig",
        "metadata": {"name": "g"},
        "spec": {"region": "r0", "clusters": clusters, "heartbeats": {"required": False}},
    }
    return Fleet(
        build_global_config(doc),
        region="r0",
        clock=time.monotonic,
        rng=random.Random(1),
        metrics=FleetMetrics(),
        reader=None,
    )


def test_a_request_looks_only_at_the_clusters_configured_for_its_model() -> None:
    fleet = _largest_fleet()
    one = CountedName("m500-254")
    CountedName.compared = 0
    assert fleet.known_model(one)
    assert [choice.cluster.name for choice in fleet.plan(one)] == ["c500"]
    assert CountedName.compared <= MODELS + 10  # the one cluster's list; 384 254 before session s43

    unknown = CountedName("nope")
    CountedName.compared = 0
    assert not fleet.known_model(unknown)
    assert fleet.plan(unknown) == []
    assert CountedName.compared < 10  # 512 000 before session s43

    # A model every cluster serves is planned over all of them, this region's first.
    shared = fleet.plan("shared")
    assert len(shared) == CLUSTERS
    assert shared[0].cluster.region == "r0"
