"""IGW-PF019: Inference Extension CRDs another installation owns are found before the chart collides
with them (Helm's ownership check, the EKS add-on's OVERWRITE takeover)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from igw.addon import pins
from igw.checks.inventory import Addon
from igw.checks.model import Command, Severity, Status
from igw.checks.sources.manifests import inventory_from_documents
from tests.checks.helpers import cli, of, run
from tests.fakes.kube_api import running_fake_kube

ROOT = Path(__file__).parents[2]
OBJECTIVES = "inferenceobjectives.inference.networking.x-k8s.io"
REWRITES = "inferencemodelrewrites.inference.networking.x-k8s.io"


def _crd(
    name: str, *, labels: dict[str, str] | None = None, helm_release: str | None = None
) -> dict[str, Any]:
    """The generated CRD ``name`` as another installation would have applied it."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load((ROOT / "crds" / f"{name}.yaml").read_text()))
    metadata = doc["metadata"]
    metadata["labels"] = dict(labels or {})
    if helm_release:
        metadata["labels"]["app.kubernetes.io/managed-by"] = "Helm"
        metadata["annotations"] = {
            "meta.helm.sh/release-name": helm_release,
            "meta.helm.sh/release-namespace": "gie-system",
        }
    return doc


def test_a_live_cluster_with_the_reference_crds_fails_before_the_chart_collides(tmp_path: Path) -> None:
    """The reference Inference Extension's chart installed both CRDs; our chart is not installed yet:
    its default would make helm install stop (or the add-on take them over), so preflight says which
    value to set, naming the release that owns them."""
    with running_fake_kube() as kube:
        kube.add_all([_crd(OBJECTIVES, helm_release="inferencepool"), _crd(REWRITES)])
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli("preflight", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-PF019")
    results = json.loads(out)["results"]
    by_resource = {r["resource"]: r for r in results}
    objectives = by_resource[f"CustomResourceDefinition {OBJECTIVES}"]
    assert (objectives["status"], objectives["severity"]) == ("FAIL", "HIGH")
    assert "already installed by Helm release inferencepool in gie-system" in objectives["message"]
    assert "crds.inferenceExtension.enabled: false" in objectives["remediation"]
    rewrites = by_resource[f"CustomResourceDefinition {REWRITES}"]
    assert rewrites["status"] == "FAIL"
    assert "no Helm ownership metadata" in rewrites["message"]
    assert code == 1


def test_crds_this_chart_installed_pass() -> None:
    ours = {"app.kubernetes.io/part-of": "inference-gateway"}
    results = of(run([_crd(OBJECTIVES, labels=ours)], Command.PREFLIGHT), "IGW-PF019")
    assert [(r.status, r.message) for r in results] == [(Status.PASS, "installed by this chart")]


def test_values_that_leave_the_crds_alone_pass_and_those_that_do_not_fail() -> None:
    def verdict(values: dict[str, Any]) -> list[Status]:
        inventory = inventory_from_documents([_crd(OBJECTIVES, helm_release="inferencepool")], source="t")
        inventory.aws.addons = {
            pins.IGW_ADDON_NAME: Addon(
                pins.IGW_ADDON_NAME, "v0.1.0-eksbuild.1", "ACTIVE", None, json.dumps(values)
            )
        }
        return [r.status for r in of(run(inventory, Command.PREFLIGHT), "IGW-PF019")]

    assert verdict({"crds": {"inferenceExtension": {"enabled": False}}}) == [Status.PASS]
    assert verdict({"crds": {"enabled": False}}) == [Status.PASS]
    assert verdict({"mode": "gateway"}) == [Status.PASS]
    assert verdict({"operator": {"replicaCount": 2}}) == [Status.FAIL]


def test_a_foreign_crd_at_another_version_says_the_operator_does_not_read_it() -> None:
    crd = _crd(OBJECTIVES, helm_release="inferencepool")
    crd["spec"]["versions"][0]["name"] = "v1alpha3"
    [result] = of(run([crd], Command.PREFLIGHT), "IGW-PF019")
    assert result.severity is Severity.HIGH
    assert "it serves v1alpha3, and the operator reads v1alpha2" in result.message


def test_no_inference_extension_crd_is_nothing_in_scope() -> None:
    [result] = of(run([], Command.PREFLIGHT), "IGW-PF019")
    assert result.status is Status.SKIP
