"""The API server shedding load (429, or 503 with ``Retry-After``): the operator waits as told and
sends the call again, once for the whole client, instead of failing every pass meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from igw.operator.kube import Kube
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import igwc


@pytest.mark.parametrize("status", [429, 503])
def test_a_throttled_write_waits_out_retry_after_and_is_sent_again(
    cluster: FakeKubeApiServer, status: int
) -> None:
    """Three concurrent writes (Events: POST; urllib3 retries a throttled GET or PUT by itself, never
    a POST or PATCH), refused once (the throttle lasts less than its ``Retry-After``), are each sent
    again after the wait and stored. Before, each raised ``TooManyRequestsError`` and its pass failed."""
    involved = cluster.add(igwc("c"))
    kube = Kube(cluster.api_client())

    async def writes() -> None:
        await kube.event(involved, reason="First", message="resources discovered", warning=False)
        cluster.throttle(0.5, status=status, retry_after_s=1)
        await asyncio.gather(
            *(kube.event(involved, reason=f"R{i}", message="m", warning=False) for i in range(3))
        )

    since = len(cluster.requests)
    asyncio.run(writes())
    reasons = {obj.get("reason") for obj in cluster.store.iter_all() if obj["kind"] == "Event"}
    assert {"R0", "R1", "R2"} <= reasons
    posts = [
        path for method, path, _ in cluster.requests[since:] if method == "POST" and path.endswith("/events")
    ]
    assert 5 <= len(posts) <= 7  # the first; then a refusal (one at least) and three stored


def test_a_503_without_retry_after_is_an_outage_not_a_throttle(cluster: FakeKubeApiServer) -> None:
    """Only a 503 that names a wait is retried; a bare one is raised at once, as before."""
    from kubernetes.dynamic.exceptions import ServiceUnavailableError

    cluster.add(igwc("c"))
    kube = Kube(cluster.api_client())
    api = "inference.sagemaker.aws.amazon.com/v1alpha1"
    asyncio.run(kube.get(api, "InferenceGatewayConfig", "inference", "c"))
    cluster.throttle(30, status=503, retry_after_s=None)
    with pytest.raises(ServiceUnavailableError):
        asyncio.run(kube.get(api, "InferenceGatewayConfig", "inference", "c"))
