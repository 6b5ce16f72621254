"""The real ``kubectl`` (v1.32 client) drives the operator through the fake API server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, make_pod
from tests.operator.harness import (
    DATA_PLANE_KINDS,
    OperatorThread,
    find,
    igwc,
    mark_deployment_ready,
    owned_by,
    wait_condition,
    wait_for,
)
from tests.operator.kubectl_cli import kubectl, needs_kubectl, run_kubectl

pytestmark = needs_kubectl


def test_apply_get_describe_reapply_delete(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    cluster.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(igwc("chat")))

    assert "inferencegatewayconfig.inference.sagemaker.aws.amazon.com/chat created" in kubectl(
        kubeconfig, "apply", "-f", str(manifest)
    )
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    mark_deployment_ready(cluster, "inference", "chat-gateway")
    wait_condition(cluster, "chat", "Ready", "True")

    table = kubectl(kubeconfig, "get", "igwc", "-n", "inference")
    header, row = table.strip().splitlines()
    columns = ["NAME", "MODELS", "ACCEPTED", "PROGRAMMED", "READY", "ENDPOINTS", "ADDRESS", "AGE"]
    assert header.split() == columns
    assert row.split()[:7] == ["chat", "llama", "True", "True", "True", "1", "chat-gateway.inference.svc"]
    header, row = kubectl(kubeconfig, "get", "igwc", "-n", "inference", "-o", "wide").strip().splitlines()
    assert header.split() == [*columns[:3], "REASON", *columns[3:7], "BBR", "TLS-ARN", "AGE"]
    assert row.split()[3] == "Valid"
    assert row.split()[8] == "true"

    # The events follow the status they describe by one API call: wait for the last one.
    def described_once_ready() -> str | None:
        text = kubectl(kubeconfig, "describe", "igwc", "chat", "-n", "inference")
        return text if "ReadyReady" in text else None

    described = wait_for(described_once_ready, what="the ReadyReady event in kubectl describe")
    assert "Rollout State:  Available" in described
    assert "AcceptedValid" in described

    changed = igwc("chat")
    changed["spec"]["schedulers"][0]["modelName"] = "llama-3.1"
    manifest.write_text(yaml.safe_dump(changed))
    assert "configured" in kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_for(
        lambda: "llama-3.1" in kubectl(kubeconfig, "get", "igwc", "chat", "-n", "inference"),
        what="the new model in kubectl get",
    )
    # What the CRD's schema refuses never reaches the operator: the API server answers kubectl.
    out_of_range = igwc("chat")
    out_of_range["spec"]["schedulers"][0]["targetPort"] = 70000
    manifest.write_text(yaml.safe_dump(out_of_range))
    refused = run_kubectl(kubeconfig, "apply", "-f", str(manifest))
    assert refused.returncode != 0
    assert "spec.schedulers[0].targetPort: Invalid value: 70000" in refused.stderr
    # What only the operator's own checks refuse (a limit below its request) lands on the object.
    broken = changed
    broken["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    manifest.write_text(yaml.safe_dump(broken))
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_for(
        lambda: (
            "spec.podDefaults.resources.limits.cpu"
            in kubectl(kubeconfig, "describe", "igwc", "chat", "-n", "inference")
        ),
        what="the refusal in kubectl describe",
    )
    # A refused spec whose previous data plane still serves stands out in the table.
    refused_row = kubectl(kubeconfig, "get", "igwc", "chat", "-n", "inference", "--no-headers").split()
    assert refused_row[:5] == ["chat", "llama-3.1", "False", "True", "True"]
    # ... and -o wide says why it is refused (the Accepted condition's reason).
    wide_row = kubectl(kubeconfig, "get", "igwc", "chat", "-n", "inference", "-o", "wide", "--no-headers")
    assert wide_row.split()[2:5] == ["False", "InvalidSpec", "True"]

    assert "deleted" in kubectl(kubeconfig, "delete", "-f", str(manifest))
    assert find(cluster, "Deployment", "inference", "chat-gateway") is None
    assert find(cluster, "Pod", "inference", "llama-0") is not None


READY_REASON: str = 'jsonpath={.status.conditions[?(@.type=="Ready")].reason}'


def test_before_any_model_server_runs_ready_says_no_ready_endpoints_as_the_runbook_expects(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """docs/runbook.md step 4: with no model server yet, ``Ready=False`` is ``NoReadyEndpoints``.
    A gateway pod's ``/readyz`` needs a Ready model-server pod, so its Deployment has no ready
    replica then either; the operator said ``GatewayNotReady`` ("no gateway replica is ready yet"),
    which sent the operator after the gateway instead of the missing model servers. Once a model
    server is ready while the gateway is not, the gateway is the problem and says so."""
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(igwc("chat")))
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")

    def ready_reason() -> str:
        return kubectl(kubeconfig, "get", "igwc", "chat", "-n", "inference", "-o", READY_REASON)

    wait_for(lambda: ready_reason() == "NoReadyEndpoints" or None, what="Ready=False, NoReadyEndpoints")
    described = kubectl(kubeconfig, "describe", "igwc", "chat", "-n", "inference")
    assert "no ready model-server pod for scheduler(s): main" in described

    cluster.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    wait_for(lambda: ready_reason() == "GatewayNotReady" or None, what="Ready=False, GatewayNotReady")
    mark_deployment_ready(cluster, "inference", "chat-gateway")
    wait_for(lambda: ready_reason() == "Ready" or None, what="Ready=True")


def test_kubectl_scale_and_an_hpa_through_the_operator_s_autoscaled_gateway(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """An operator's usual moves on an autoscaled gateway, with kubectl's short names: the HPA the
    operator made is listed, ``kubectl scale`` (the ``/scale`` subresource, as the HPA controller
    writes it) sets the count, and the operator's next passes leave it."""
    doc = igwc("chat")
    doc["spec"]["extensions"] = {"dataPlane": {"autoscaling": {"minReplicas": 2, "maxReplicas": 6}}}
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_for(lambda: find(cluster, "HorizontalPodAutoscaler", "inference", "chat-gateway"), what="hpa")
    assert "chat-gateway" in kubectl(kubeconfig, "get", "hpa", "-n", "inference")
    assert "scaled" in kubectl(
        kubeconfig, "scale", "deploy/chat-gateway", "-n", "inference", "--replicas", "5"
    )
    # Re-applying the object runs a pass; the count stays the autoscaler's.
    doc["spec"]["podDefaults"] = {"labels": {"team": "a"}}
    manifest.write_text(yaml.safe_dump(doc))
    kubectl(kubeconfig, "apply", "-f", str(manifest))

    def relabelled() -> bool | None:
        deployment = find(cluster, "Deployment", "inference", "chat-gateway")
        if deployment is None or deployment["spec"]["template"]["metadata"]["labels"].get("team") != "a":
            return None
        return True

    wait_for(relabelled, what="the pass that applied the new labels")
    jsonpath = "jsonpath={.spec.replicas}"
    assert kubectl(kubeconfig, "get", "deploy", "chat-gateway", "-n", "inference", "-o", jsonpath) == "5"


def test_a_config_deleted_with_cascade_orphan_and_applied_again_takes_its_data_plane_back(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """``kubectl delete --cascade=orphan`` then ``kubectl apply`` (re-creating the object without
    stopping its gateway, the usual way round a field that cannot change): the data plane the
    operator made for that name, orphaned by the garbage collector, is adopted by the new object and
    keeps running (the same Deployment, no new rollout). It was refused for good as "controlled by no
    controller (created outside the operator)", GatewayProgrammed=False."""
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(igwc("chat")))
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    before = find(cluster, "Deployment", "inference", "chat-gateway")
    assert before is not None
    kubectl(kubeconfig, "delete", "igwc", "chat", "-n", "inference", "--cascade=orphan")
    orphaned = find(cluster, "Deployment", "inference", "chat-gateway")
    assert orphaned is not None
    assert "ownerReferences" not in orphaned["metadata"]

    kubectl(kubeconfig, "apply", "-f", str(manifest))
    reborn = wait_for(
        lambda: find(cluster, "InferenceGatewayConfig", "inference", "chat"), what="the new object"
    )
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    uid = reborn["metadata"]["uid"]
    adopted = {obj["kind"] for obj in owned_by(cluster, uid)}
    assert adopted >= DATA_PLANE_KINDS, DATA_PLANE_KINDS - adopted
    after = find(cluster, "Deployment", "inference", "chat-gateway")
    assert after is not None
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    # No new rollout: the pod template is the orphaned one. (The generation moves: the operator's
    # applied-hash annotation changes on adoption, and a Deployment's generation follows annotations.)
    assert after["spec"]["template"] == orphaned["spec"]["template"]


def test_a_spec_over_half_the_annotation_limit_is_handled_and_so_is_its_edit(
    cluster: FakeKubeApiServer,
    kubeconfig: Path,
    operator: OperatorThread,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``kubectl apply`` keeps a copy of the object in an annotation, and kopf kept another (the
    configuration it last handled). A 160 KiB spec, which the CRD allows, put the two over the API
    server's 256 KiB for all of an object's annotations: before session s38 kopf's write was refused
    (422 ``metadata.annotations: Too long``) after every pass, logged as an error each time, and the
    object never recorded as handled. kopf keeps a digest now (:mod:`igw.operator.diffbase`)."""
    doc = igwc("chat")
    doc["spec"]["schedulers"] = [
        {
            "name": f"s{i}",
            "modelName": f"model-{i}",
            "modelSelector": {"matchLabels": {"app": f"m{i}"}},
            "loraAdapters": [f"adapter-{i}-{j}-" + "x" * 180 for j in range(50)],
        }
        for i in range(16)
    ]
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    assert len(json.dumps(doc["spec"])) > 150_000
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    wait_condition(cluster, "chat", "Accepted", "True")
    doc["spec"]["schedulers"][0]["modelName"] = "model-edited"
    manifest.write_text(yaml.safe_dump(doc))
    assert "configured" in kubectl(kubeconfig, "apply", "-f", str(manifest))

    def edited() -> dict[str, str] | None:
        obj = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
        served = "model-edited" in str((obj.get("status") or {}).get("models"))
        annotations: dict[str, str] = obj["metadata"].get("annotations") or {}
        # kopf's handled record is its own patch after the status write: wait for both.
        recorded = "operator.igw.dev/last-handled-configuration" in annotations
        return annotations if served and recorded else None

    annotations = wait_for(edited, what="the edit reconciled")
    kopf_copy = annotations.get("operator.igw.dev/last-handled-configuration")
    assert kopf_copy is not None, "kopf never recorded the object as handled"
    assert len(kopf_copy) < 200  # a digest, not a copy of the spec
    assert not [r for r in caplog.records if "Too long" in r.getMessage()]


def test_kubectl_patch_of_a_config_takes_the_patch_types_a_custom_resource_takes(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """``kubectl patch`` sends a strategic merge patch unless told otherwise; a custom resource takes
    none (the API server answers 415 naming the types it takes), where the fake merged it as a merge
    patch, so a documented ``kubectl patch igwc ...`` could pass here and fail on a cluster. A merge
    patch and a JSON patch (``move`` and ``copy`` included, which the fake refused) go through."""
    cluster.add(igwc("chat"))
    refused = run_kubectl(
        kubeconfig, "patch", "igwc", "chat", "-n", "inference", "-p", '{"spec":{"bbr":{"enabled":false}}}'
    )
    assert refused.returncode != 0
    assert (
        "the body of the request was in an unknown format - accepted media types include: " in refused.stderr
    )
    assert "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml" in (
        refused.stderr
    )
    assert find(cluster, "InferenceGatewayConfig", "inference", "chat")["spec"]["bbr"]["enabled"] is True  # type: ignore[index]
    merge = '{"spec":{"bbr":{"enabled":false}}}'
    assert "patched" in kubectl(
        kubeconfig, "patch", "igwc", "chat", "-n", "inference", "--type=merge", "-p", merge
    )
    ops = json.dumps(
        [
            {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}},
            {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"},
            {"op": "move", "from": "/metadata/labels/team", "path": "/metadata/labels/owner"},
        ]
    )
    assert "patched" in kubectl(
        kubeconfig, "patch", "igwc", "chat", "-n", "inference", "--type=json", "-p", ops
    )
    stored = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert stored["spec"]["bbr"]["enabled"] is False
    assert stored["metadata"]["labels"] == {"owner": "a"}
    assert stored["metadata"]["annotations"]["team"] == "a"
    pods = json.dumps({"metadata": {"labels": {"app": "x"}}})
    cluster.add(make_pod(name="p", namespace="inference", labels={"app": "llama"}))
    assert "patched" in kubectl(kubeconfig, "patch", "pod", "p", "-n", "inference", "-p", pods)
