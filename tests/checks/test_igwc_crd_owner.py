"""IGW-PF006: an ``InferenceGatewayConfig`` CRD another installation owns fails HIGH, as IGW-PF019 does
for the Inference Extension CRDs, since Helm's ownership check stops the install just the same."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from igw.addon import pins
from igw.checks.inventory import Addon
from igw.checks.model import Command, Status
from igw.checks.sources.manifests import inventory_from_documents
from tests.checks.helpers import cli, of, run
from tests.fakes.kube_api import running_fake_kube

ROOT = Path(__file__).parents[2]
CRD = "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"


def _foreign_crd() -> dict[str, Any]:
    """The generated CRD as another Helm release installed it."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load((ROOT / "crds" / f"{CRD}.yaml").read_text()))
    doc["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    doc["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": "aws-inference",
        "meta.helm.sh/release-namespace": "kube-system",
    }
    return doc


def test_a_crd_another_release_owns_fails_high_before_the_chart_collides(tmp_path: Path) -> None:
    """It was a MEDIUM warning (exit 0 from ``igw preflight``), though ``helm install`` of the chart
    with its default ``crds.enabled: true`` stops on Helm's ownership check just as for IGW-PF019's
    CRDs (HIGH): a passing preflight, then a failed install."""
    with running_fake_kube() as kube:
        kube.add_all([_foreign_crd()])
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli("preflight", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-PF006")
    results = json.loads(out)["results"]
    [owned] = [r for r in results if "another installation" in r["message"]]
    assert (owned["status"], owned["severity"]) == ("FAIL", "HIGH"), owned
    assert "Helm release aws-inference in kube-system" in owned["message"]
    assert "Helm's ownership check" in owned["message"]
    assert "crds.enabled: false" in owned["remediation"]
    assert code == 1


def test_values_that_leave_the_crd_to_its_owner_pass() -> None:
    def verdict(values: dict[str, Any]) -> list[Status]:
        inventory = inventory_from_documents([_foreign_crd()], source="t")
        inventory.aws.addons = {
            pins.IGW_ADDON_NAME: Addon(
                pins.IGW_ADDON_NAME, "v0.1.0-eksbuild.1", "ACTIVE", None, json.dumps(values)
            )
        }
        return [r.status for r in of(run(inventory, Command.PREFLIGHT), "IGW-PF006")]

    assert verdict({"crds": {"enabled": False}}) == [Status.PASS, Status.PASS]  # the owner, the version
    assert verdict({"mode": "gateway"}) == [Status.FAIL, Status.PASS]  # gateway mode installs it too
    assert verdict({}) == [Status.FAIL, Status.PASS]
