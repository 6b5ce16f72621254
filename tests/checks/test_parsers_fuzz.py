"""E13: the manifest and CloudFormation readers never crash and stay bounded on hostile input."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from igw.checks.model import Command
from igw.checks.sources.cdk_out import load_cdk_out, render
from igw.checks.sources.documents import static_view
from igw.checks.sources.manifests import load_manifests
from igw.config.documents import MANIFEST_LIMITS, DocumentReadError, parse_text
from tests.checks.helpers import run
from tests.config.hostile_documents import billion_laughs

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
    with contextlib.suppress(DocumentReadError):
        parse_text(text, source="f", limits=MANIFEST_LIMITS)


@settings(max_examples=80, deadline=None)
@given(json_values)
def test_cfn_render_is_total(value: Any) -> None:
    render(value)


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(billion_laughs(9))
    (tmp_path / "ok.yaml").write_text("kind: Namespace\nmetadata: &m {name: ml}\nextra: *m\n")
    inventory = load_manifests(tmp_path)
    assert inventory.errors == [
        f"{tmp_path / 'bomb.yaml'}: more than 2,000,000 values once its aliases are expanded"
    ]
    assert len(inventory.kube.objects["Namespace"]) == 1  # type: ignore[arg-type]


def nested(levels: int, leaf: str = "x") -> dict[str, Any]:
    """A CustomResourceDefinition whose schema nests ``levels`` mappings below ``spec``."""
    value: Any = leaf
    for _ in range(levels):
        value = {"p": value}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "spec": value}


def test_files_too_deep_are_source_problems_and_the_rest_is_read(tmp_path: Path) -> None:
    """A file nested past the limit (as YAML, flow YAML or JSON) is listed as a source problem and
    the other files are still read: the checks' own loader ended such a file in "maximum recursion
    depth exceeded", and a cdk.out template nested that deep ended the whole scan."""
    limit = MANIFEST_LIMITS.max_nesting
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep-flow.yaml").write_text("a: " + "[" * 20_000 + "\n")
    (tmp_path / "deep-block.yaml").write_text(
        "kind: Namespace\na:\n" + "".join("  " * i + "- \n" for i in range(1, 3000))
    )
    (tmp_path / "crd.json").write_text(json.dumps(nested(limit - 2)))  # deeper than a configuration may be
    inventory = load_manifests(tmp_path)
    assert sorted(inventory.errors) == sorted(
        f"{tmp_path / name}: nested deeper than {limit} levels"
        for name in ("deep.json", "deep-flow.yaml", "deep-block.yaml")
    )
    assert len(inventory.kube.objects["CustomResourceDefinition"]) == 1  # type: ignore[arg-type]

    cdk = tmp_path / "cdk.out"
    cdk.mkdir()
    (cdk / "Deep.template.json").write_text('{"Resources": ' + "[" * 100_000 + "]" * 100_000 + "}")
    manifest = json.dumps([nested(limit + 1)])
    (cdk / "Fine.template.json").write_text(
        json.dumps(
            {
                "Resources": {
                    "Deep": {
                        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                        "Properties": {"Manifest": "[" * 100_000 + "]" * 100_000},
                    },
                    "Deeper": {
                        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                        "Properties": {"Manifest": manifest},
                    },
                    "Crd": {
                        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                        "Properties": {"Manifest": json.dumps([nested(limit - 3)])},
                    },
                }
            }
        )
    )
    templates = load_cdk_out(cdk)
    kind = "Custom::AWSCDK-EKS-KubernetesResource"
    assert sorted(templates.errors) == [
        f"{cdk / 'Deep.template.json'}: nested deeper than {limit} levels",
        f"{cdk / 'Fine.template.json'}: Deep ({kind}): Manifest: nested deeper than {limit} levels",
        f"{cdk / 'Fine.template.json'}: Deeper ({kind}): Manifest: nested deeper than {limit} levels",
    ]
    assert len(templates.kube.objects["CustomResourceDefinition"]) == 1  # type: ignore[arg-type]


def test_a_key_given_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    """``kubectl`` refuses a manifest that gives a key twice; the checks read its last value, so a
    failing setting hidden under a passing one was audited as the passing one."""
    (tmp_path / "twice.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
        "    securityContext: {privileged: true}\n    securityContext: {privileged: false}\n"
    )
    (tmp_path / "ok.yaml").write_text("kind: Namespace\nmetadata: {name: ml}\n")
    inventory = load_manifests(tmp_path)
    assert inventory.errors == [
        f"{tmp_path / 'twice.yaml'}: line 8, column 5: duplicate key 'securityContext'"
    ]
    assert "Pod" not in inventory.kube.objects or not inventory.kube.objects["Pod"]


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
