"""Operator mode of flow control and canary: InferenceObjective / InferenceModelRewrite objects applied
with the real ``kubectl`` are merged into the served ConfigMap and get status conditions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.config.inference_extension import OBJECTIVE_KIND, REWRITE_KIND
from igw.operator.dataplane import CONFIG_KEY
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import ROOT, OperatorThread, condition, find, install_extension_crds, wait_for
from tests.operator.kubectl_cli import kubectl, needs_kubectl

pytestmark = needs_kubectl

EXAMPLE = ROOT / "crds" / "examples" / "objectives-and-rewrites.yaml"
NS = "inference"


@pytest.fixture
def extension_crds(cluster: FakeKubeApiServer) -> FakeKubeApiServer:
    install_extension_crds(cluster)
    return cluster


def served_extensions(cluster: FakeKubeApiServer) -> dict[str, Any]:
    cm = find(cluster, "ConfigMap", NS, "support-pool-gateway-config")
    if cm is None:
        return {}
    doc = yaml.safe_load(cm["data"][CONFIG_KEY])
    extensions: dict[str, Any] = doc["spec"].get("extensions") or {}
    return extensions


def wait_accepted(
    cluster: FakeKubeApiServer, kind: str, name: str, status: str, reason: str
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = condition(find(cluster, kind, NS, name), "Accepted")
        return found if found.get("status") == status and found.get("reason") == reason else None

    return wait_for(probe, what=f"Accepted={status}/{reason} on {kind} {name}")


def rewrite(
    name: str, *, model: str, targets: list[tuple[str, int]], pool: str = "support-pool"
) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": REWRITE_KIND,
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "poolRef": {"name": pool},
            "rules": [
                {
                    "matches": [{"model": {"value": model}}],
                    "targets": [{"modelRewrite": m, "weight": w} for m, w in targets],
                }
            ],
        },
    }


def test_objectives_and_rewrites_are_merged_and_get_conditions(
    extension_crds: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    cluster = extension_crds
    out = kubectl(kubeconfig, "apply", "-n", NS, "-f", str(EXAMPLE))
    assert "inferenceobjective.inference.networking.x-k8s.io/chat created" in out
    assert "inferencemodelrewrite.inference.networking.x-k8s.io/support-bot-rollout created" in out

    def merged() -> dict[str, Any] | None:
        ext = served_extensions(cluster)
        objectives = (ext.get("flowControl") or {}).get("objectives") or []
        return ext if len(objectives) == 2 and (ext.get("modelRewrites") or {}).get("rules") else None

    ext = wait_for(merged, what="objectives and rewrite rules in the served ConfigMap")
    assert sorted(ext["flowControl"]["objectives"], key=lambda o: o["name"]) == [
        {"name": "batch", "priority": -1},
        {"name": "chat", "priority": 10},
    ]
    assert ext["modelRewrites"]["rules"] == [
        {
            "name": "support-bot-rollout",
            "model": "support-bot",
            "headers": [{"name": "x-canary", "value": "always"}],
            "targets": [{"model": "support-bot-v2", "weight": 1}],
        },
        {
            "name": "support-bot-rollout",
            "model": "support-bot",
            "targets": [{"model": "support-bot-v1", "weight": 90}, {"model": "support-bot-v2", "weight": 10}],
        },
    ]
    for kind, name in (
        (OBJECTIVE_KIND, "chat"),
        (OBJECTIVE_KIND, "batch"),
        (REWRITE_KIND, "support-bot-rollout"),
    ):
        wait_accepted(cluster, kind, name, "True", "Accepted")
        assert condition(find(cluster, kind, NS, name), "ResolvedRefs")["status"] == "True"
    table = kubectl(kubeconfig, "get", "inferenceobjectives", "-n", NS, "chat")
    assert table.splitlines()[0].split()[:4] == ["NAME", "PRIORITY", "POOL", "ACCEPTED"]
    assert table.splitlines()[1].split()[:4] == ["chat", "10", "support-pool", "True"]

    # A newer object matching the same model is refused whole; the older keeps serving.
    clash = tmp_path / "clash.yaml"
    clash.write_text(
        yaml.safe_dump(rewrite("support-bot-second", model="support-bot", targets=[("support-bot-v2", 1)]))
    )
    kubectl(kubeconfig, "apply", "-f", str(clash))
    refused = wait_accepted(cluster, REWRITE_KIND, "support-bot-second", "False", "Conflict")
    assert (
        'model "support-bot" is already matched by InferenceModelRewrite "support-bot-rollout"'
        in refused["message"]
    )
    assert len(served_extensions(cluster)["modelRewrites"]["rules"]) == 2

    # A target the config does not serve, and a pool that does not exist.
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump(rewrite("typo", model="other", targets=[("support-bot-v9", 1)])))
    kubectl(kubeconfig, "apply", "-f", str(unknown))
    assert (
        "support-bot-v9" in wait_accepted(cluster, REWRITE_KIND, "typo", "False", "UnknownTarget")["message"]
    )
    orphan = tmp_path / "orphan.yaml"
    orphan.write_text(
        yaml.safe_dump(rewrite("orphan", model="x", targets=[("x-next", 1)], pool="no-such-pool"))
    )
    kubectl(kubeconfig, "apply", "-f", str(orphan))
    wait_accepted(cluster, REWRITE_KIND, "orphan", "False", "PoolNotFound")
    resolved = condition(find(cluster, REWRITE_KIND, NS, "orphan"), "ResolvedRefs")
    assert resolved["status"] == "False"
    assert 'no InferenceGatewayConfig "no-such-pool"' in resolved["message"]

    # Weights change live (10 % -> 50 %) and a deleted object leaves the served spec.
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    docs[3]["spec"]["rules"][1]["targets"][1]["weight"] = 90
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump_all(docs[3:]))
    kubectl(kubeconfig, "apply", "-n", NS, "-f", str(moved))
    wait_for(
        lambda: served_extensions(cluster)["modelRewrites"]["rules"][1]["targets"][1]["weight"] == 90,
        what="the new weight in the served ConfigMap",
    )
    kubectl(kubeconfig, "delete", "-n", NS, "inferenceobjective", "batch")
    wait_for(
        lambda: [o["name"] for o in served_extensions(cluster)["flowControl"]["objectives"]] == ["chat"],
        what="the deleted objective to leave the served ConfigMap",
    )
