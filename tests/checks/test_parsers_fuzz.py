"""E13: the manifest and CloudFormation readers never crash and stay bounded on hostile input."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from igw.checks.model import Command
from igw.checks.sources.cdk_out import load_cdk_out, render
from igw.checks.sources.documents import static_view
from igw.checks.sources.manifests import load_manifests
from igw.checks.sources.yaml_safe import MAX_ALIASES, ManifestFileError, load_documents
from tests.checks.helpers import run

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
kinds = st.sampled_from(
    [
        "Deployment",
        "Pod",
        "Ingress",
        "Service",
        "InferenceGatewayConfig",
        "NetworkPolicy",
        "Certificate",
        "CustomResourceDefinition",
        "PodDisruptionBudget",
        "List",
    ]
)


@st.composite
def manifests(draw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = draw(
        st.dictionaries(st.sampled_from(["metadata", "spec", "status", "items"]), json_values, max_size=4)
    )
    doc["kind"] = draw(kinds)
    return doc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(manifests(), max_size=6))
def test_checks_never_crash_on_odd_manifests(docs: list[dict[str, Any]]) -> None:
    from igw.checks.inventory import AwsView, Inventory

    inventory = Inventory(kube=static_view(docs, source="fuzz"), aws=AwsView.absent("fuzz"), source="fuzz")
    for command in Command:
        for result in run(inventory, command):
            assert "check could not run" not in result.message, result


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_yaml_loader_raises_only_its_own_error(text: str) -> None:
    with contextlib.suppress(ManifestFileError):
        load_documents(text)


@settings(max_examples=80, deadline=None)
@given(json_values)
def test_cfn_render_is_total(value: Any) -> None:
    render(value)


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):  # 9 aliases per level: few aliases, 9**10 nodes once expanded
        prev, cur = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines))
    (tmp_path / "ok.yaml").write_text("kind: Namespace\nmetadata: &m {name: ml}\nextra: *m\n")
    inventory = load_manifests(tmp_path)
    assert len(inventory.errors) == 1
    assert "bomb.yaml: a document expands to more than" in inventory.errors[0]
    assert len(inventory.kube.objects["Namespace"]) == 1  # type: ignore[arg-type]
    with pytest.raises(ManifestFileError, match="more than 1000 YAML aliases"):
        load_documents("a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]")


def test_cloudformation_tags_and_getatt_strings(tmp_path: Path) -> None:
    template = {
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {"Fn::GetAtt": "X.Value"},
                    "ManagedPolicyArns": [{"Fn::ImportValue": "p"}],
                },
            },
            "Weird": {"Type": "AWS::EC2::Subnet", "Properties": {"Tags": {"Fn::If": ["c", [], []]}}},
            "NotAMapping": "oops",
        }
    }
    (tmp_path / "T.template.json").write_text(json.dumps(template))
    inventory = load_cdk_out(tmp_path)
    for command in Command:
        assert all("check could not run" not in r.message for r in run(inventory, command))
