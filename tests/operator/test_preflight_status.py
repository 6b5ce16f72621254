"""``igw preflight`` against a cluster run by the operator reads and reports each object's status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checks.helpers import cli
from tests.fakes.kube_api import FakeKubeApiServer, make_pod
from tests.operator.harness import (
    OperatorThread,
    find,
    igwc,
    mark_deployment_ready,
    update_spec,
    wait_condition,
    wait_for,
)


def _status_results(kubeconfig: Path) -> list[dict[str, Any]]:
    _, out = cli("preflight", "--kubeconfig", str(kubeconfig), "-o", "json", "--check", "IGW-PF016")
    return [r for r in json.loads(out)["results"] if r["checkId"] == "IGW-PF016"]


def test_preflight_reports_ready_degraded_and_refused_objects(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread
) -> None:
    cluster.add(
        make_pod(name="old", namespace="inference", labels={"app": "llama"}, image="vllm/vllm-openai:v0.8.5")
    )
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    mark_deployment_ready(cluster, "inference", "chat-gateway")
    wait_condition(cluster, "chat", "Ready", "True")
    [degraded] = _status_results(kubeconfig)
    assert (degraded["status"], degraded["resource"]) == (
        "WARN",
        "InferenceGatewayConfig inference/chat scheduler main",
    )
    assert "0.8.5" in degraded["message"]

    def break_it(spec: dict[str, Any]) -> None:
        # valid for the CRD (a real API server stores it); only the operator's own check refuses it
        spec["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}

    update_spec(cluster, "inference", "chat", break_it)
    wait_condition(cluster, "chat", "Accepted", "False")
    [refused] = _status_results(kubeconfig)
    assert (refused["status"], refused["severity"]) == ("FAIL", "CRITICAL")
    assert "spec.podDefaults.resources.limits.cpu" in refused["message"]
