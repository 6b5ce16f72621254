"""``spec.extensions.dataPlane.autoscaling``: the operator's HorizontalPodAutoscaler for the gateway, or
another autoscaler's, and the operator never resetting the replica count an autoscaler set.

Against the fake API server with the real client, one reconciliation pass at a time. An autoscaler
is played by writing the Deployment's ``/scale`` subresource as the HPA controller does (the fake
defaults a Deployment written without the count to 1, as the API server does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes.dynamic import DynamicClient

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import IGWC_API_VERSION, Kube
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import find, igwc, owned_by

NAMESPACE = "inference"


def _with_autoscaling(name: str, scaling: dict[str, Any] | None) -> dict[str, Any]:
    doc = igwc(name)
    if scaling is not None:
        doc["spec"].setdefault("extensions", {})["dataPlane"] = {"autoscaling": scaling}
    return doc


def _reconcile(cluster: FakeKubeApiServer, name: str) -> None:
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    asyncio.run(reconciler.reconcile(NAMESPACE, name))


def _deployment(cluster: FakeKubeApiServer, name: str) -> dict[str, Any]:
    found = find(cluster, "Deployment", NAMESPACE, f"{name}-gateway")
    assert found is not None
    return found


def _hpa(cluster: FakeKubeApiServer, name: str) -> dict[str, Any] | None:
    return find(cluster, "HorizontalPodAutoscaler", NAMESPACE, f"{name}-gateway")


def _client(cluster: FakeKubeApiServer) -> DynamicClient:
    return DynamicClient(cluster.api_client())  # type: ignore[no-untyped-call]


def _scale(cluster: FakeKubeApiServer, name: str, replicas: int) -> str:
    """Set the gateway Deployment's replicas through its ``/scale`` subresource, as the HPA controller
    (and ``kubectl scale``) does; the Deployment's new resourceVersion."""
    deployments = _client(cluster).resources.get(api_version="apps/v1", kind="Deployment")
    deployments.subresources["scale"].patch(
        name=f"{name}-gateway",
        namespace=NAMESPACE,
        body={"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )
    return str(_deployment(cluster, name)["metadata"]["resourceVersion"])


def _update(cluster: FakeKubeApiServer, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    igwcs = _client(cluster).resources.get(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )
    current = igwcs.get(name=name, namespace=NAMESPACE).to_dict()
    change(current["spec"])
    igwcs.replace(body=current, name=name, namespace=NAMESPACE)


def test_bounds_give_an_owned_hpa_and_the_count_it_sets_survives_every_pass(
    cluster: FakeKubeApiServer,
) -> None:
    created = cluster.add(_with_autoscaling("chat", {"minReplicas": 3, "maxReplicas": 12}))
    _reconcile(cluster, "chat")
    hpa = _hpa(cluster, "chat")
    assert hpa is not None
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-gateway"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (3, 12)
    assert spec["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
        }
    ]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 3  # created at the HPA's floor

    version = _scale(cluster, "chat", 7)  # the HPA scales up
    _reconcile(cluster, "chat")
    deployment = _deployment(cluster, "chat")
    assert deployment["spec"]["replicas"] == 7
    assert deployment["metadata"]["resourceVersion"] == version  # nothing rewritten

    # A spec change that rolls the pods keeps the autoscaler's count too.
    _update(
        cluster, "chat", lambda spec: spec.setdefault("podDefaults", {}).update({"labels": {"team": "a"}})
    )
    _reconcile(cluster, "chat")
    deployment = _deployment(cluster, "chat")
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "a"
    assert deployment["spec"]["replicas"] == 7


def test_without_autoscaling_the_spec_s_count_is_put_back(cluster: FakeKubeApiServer) -> None:
    cluster.add(_with_autoscaling("chat", None))
    _reconcile(cluster, "chat")
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 2
    _scale(cluster, "chat", 7)
    _reconcile(cluster, "chat")
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 2
    assert _hpa(cluster, "chat") is None


def test_an_external_autoscaler_owns_the_count_and_gets_no_hpa(cluster: FakeKubeApiServer) -> None:
    cluster.add(_with_autoscaling("chat", {"external": True}))
    _reconcile(cluster, "chat")
    assert _hpa(cluster, "chat") is None
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 2  # the schedulers' count to start with
    _scale(cluster, "chat", 5)  # KEDA's HPA, say
    _reconcile(cluster, "chat")
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 5


def test_dropping_autoscaling_deletes_the_hpa_and_restores_the_spec_s_count(
    cluster: FakeKubeApiServer,
) -> None:
    created = cluster.add(
        _with_autoscaling("chat", {"minReplicas": 2, "maxReplicas": 6, "targetCPUUtilizationPercentage": 55})
    )
    _reconcile(cluster, "chat")
    hpa = _hpa(cluster, "chat")
    assert hpa is not None
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 55
    _scale(cluster, "chat", 6)

    _update(
        cluster,
        "chat",
        lambda spec: spec["extensions"]["dataPlane"].update({"autoscaling": {"external": True}}),
    )
    _reconcile(cluster, "chat")
    assert _hpa(cluster, "chat") is None  # the other autoscaler's alone now
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 6

    _update(cluster, "chat", lambda spec: spec["extensions"].pop("dataPlane"))
    _reconcile(cluster, "chat")
    assert _deployment(cluster, "chat")["spec"]["replicas"] == 2
    assert "HorizontalPodAutoscaler" not in {o["kind"] for o in owned_by(cluster, created["metadata"]["uid"])}


def test_an_hpa_the_operator_did_not_make_is_left_alone(cluster: FakeKubeApiServer) -> None:
    cluster.add(_with_autoscaling("chat", {"external": True}))
    theirs = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "chat-gateway", "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-gateway"},
            "minReplicas": 2,
            "maxReplicas": 4,
        },
    }
    cluster.add(theirs)
    _reconcile(cluster, "chat")
    assert _hpa(cluster, "chat") is not None


def test_the_hpa_an_orphaning_delete_left_goes_when_the_config_returns_without_autoscaling(
    cluster: FakeKubeApiServer,
) -> None:
    """``kubectl delete --cascade=orphan`` keeps the data plane, the HPA with it; the config applied
    again adopts the Deployment. Without ``autoscaling`` now, the old HPA (no controller, so not
    "ours" by uid) was left resizing the adopted Deployment against the spec's count on every pass."""
    cluster.add(_with_autoscaling("chat", {"minReplicas": 3, "maxReplicas": 9}))
    _reconcile(cluster, "chat")
    assert _hpa(cluster, "chat") is not None
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(kind, NAMESPACE, "chat", propagation="Orphan")
    orphan = _hpa(cluster, "chat")
    assert orphan is not None
    assert "ownerReferences" not in orphan["metadata"]

    reborn = cluster.add(_with_autoscaling("chat", None))
    _reconcile(cluster, "chat")
    assert _hpa(cluster, "chat") is None
    deployment = _deployment(cluster, "chat")
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == reborn["metadata"]["uid"]
    assert deployment["spec"]["replicas"] == 2
