"""The API server shedding load (429, or 503 with ``Retry-After``): the operator waits as told and
sends the call again, once for the whole client, instead of failing every pass meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from igw.operator.kube import Kube
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc


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


def test_a_throttle_starting_mid_apply_is_waited_out_and_the_pass_completes(
    cluster: FakeKubeApiServer,
) -> None:
    """The API server starts shedding load right after the pass's first real write (the ConfigMap):
    the next write is refused 429. The pass waits out the ``Retry-After`` and sends the refused
    request again, so every object is written once and GatewayProgrammed is True. Before, the 429 was
    wrapped as ``PartlyApplied`` (never retried): the status said ``ApplyFailed``, the served
    ConfigMap new and the rest of the data plane missing until the next pass."""
    from igw.operator.dataplane import DataPlaneSettings
    from igw.operator.reconcile import Reconciler

    def throttle_after_the_real_write(_operation: str, _obj: Any, _old: Any) -> None:
        if reviewed[-1][2] is False:  # the ConfigMap's real create (its dry run came first)
            cluster.throttle(0.5, status=429, retry_after_s=1)

    reviewed = cluster.add_validating_webhook(
        "throttle.example.com", ["configmaps"], throttle_after_the_real_write
    )
    cluster.add(igwc("chat"))
    kube = Kube(cluster.api_client())
    since = len(cluster.requests)
    assert asyncio.run(Reconciler(kube, DataPlaneSettings()).reconcile("inference", "chat")) is True

    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert programmed["status"] == "True", programmed
    assert ("CREATE", "chat-gateway-config", False) in reviewed
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"):
        assert find(cluster, kind, "inference", "chat-gateway") is not None, kind
    real_creates = [
        path.rsplit("/", 1)[-1]
        for method, path, query in cluster.requests[since:]
        if method == "POST" and "dryRun" not in query and "/namespaces/inference/" in path
    ]
    assert real_creates.count("configmaps") == 1  # written once, not again after the throttle
    assert real_creates.count("serviceaccounts") >= 2  # refused 429, then sent again and stored
