"""``Resource: "*"`` in the synthesized policies, read against IAM's own action table.

An action on ``*`` that IAM can scope to a resource ARN (cfn-lint ships the Service Authorization
Reference's table as ``Policies.json``) is a wildcard that could be narrowed; each one the templates
keep is listed here with why it stays. Before session s40 the HyperPod execution role allowed
``eks-auth:AssumeRoleForPodIdentity`` on every cluster (the action takes the cluster's ARN) under an
acknowledgement that spoke only of ENIs, ECR and lifecycle scripts; and the Load Balancer Controller's
acknowledgement said only Describe/List calls use ``Resource *``, while the policy creates security
groups there without any condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint
import pytest

from cdk import nag
from cdk.constructs.load_balancer_controller import WILDCARD_REASON
from tests.cdk.support import Synthesized

KEPT_ON_ANY_RESOURCE = {
    # AWS's execution-role policy for EKS-orchestrated HyperPod: the nodes' network interfaces exist
    # only once HyperPod creates them, in subnets of the cluster's VPC.
    "ec2:AssignPrivateIpAddresses": "HyperPod ENIs",
    "ec2:CreateNetworkInterface": "HyperPod ENIs",
    "ec2:CreateNetworkInterfacePermission": "HyperPod ENIs",
    "ec2:DeleteNetworkInterface": "HyperPod ENIs",
    "ec2:DeleteNetworkInterfacePermission": "HyperPod ENIs",
    "ec2:DetachNetworkInterface": "HyperPod ENIs",
    "ec2:ModifyNetworkInterfaceAttribute": "HyperPod ENIs",
    "ec2:UnassignPrivateIpAddresses": "HyperPod ENIs",
    # HyperPod nodes pull from registries of several accounts (AWS's plugin and agent images, the CDK
    # asset repository, model servers).
    "ecr:BatchCheckLayerAvailability": "images of several accounts",
    "ecr:BatchGetImage": "images of several accounts",
    "ecr:GetDownloadUrlForLayer": "images of several accounts",
}


@cache
def _iam_actions() -> dict[str, Any]:
    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    table: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return table


def takes_a_resource(action: str) -> bool:
    """Whether IAM lets a policy name ARNs for ``action`` (unknown actions count as scopable)."""
    service, name = action.split(":", 1)
    entry = _iam_actions().get(service, {}).get("Actions", {}).get(name.lower())
    return entry is None or bool(entry.get("Resources"))


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements_on_any_resource(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, resource in template["Resources"].items():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Effect"] == "Allow" and "*" in _listed(statement.get("Resource")):
                    yield name, statement


def scopable_wildcards(template: dict[str, Any]) -> list[str]:
    """``policy: action`` for each action on ``*`` that takes a resource and is not kept on purpose."""
    return [
        f"{name}: {action}"
        for name, statement in statements_on_any_resource(template)
        for action in _listed(statement["Action"])
        if takes_a_resource(action) and action not in KEPT_ON_ANY_RESOURCE
    ]


def test_iams_table_is_read() -> None:
    assert takes_a_resource("eks-auth:AssumeRoleForPodIdentity")
    assert not takes_a_resource("ecr:GetAuthorizationToken")
    assert not takes_a_resource("acm:ListCertificates")


@pytest.mark.parametrize("assembly", ["synthesized", "variant", "existing"])
def test_no_action_that_takes_an_arn_is_allowed_on_every_resource_unless_kept(
    assembly: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(assembly)

    found = {role: scopable_wildcards(template) for role, template in synthesized.templates.items()}

    assert {role: actions for role, actions in found.items() if actions} == {}


def test_hyperpod_nodes_exchange_pod_identity_tokens_of_their_own_cluster_only(
    synthesized: Synthesized,
) -> None:
    resources = synthesized.templates["cluster"]["Resources"]
    [cluster] = [name for name, r in resources.items() if r["Type"] == "AWS::EKS::Cluster"]
    [statement] = [
        statement
        for policy in resources.values()
        if policy["Type"] == "AWS::IAM::Policy"
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "eks-auth:AssumeRoleForPodIdentity" in _listed(statement["Action"])
    ]

    assert statement["Resource"] == {"Fn::GetAtt": [cluster, "Arn"]}


def test_the_load_balancer_controllers_acknowledgement_names_each_unconditioned_write_on_any_resource(
    synthesized: Synthesized,
) -> None:
    _, acknowledged = nag.read_report(synthesized.outdir)
    reasons = {
        f.reason for f in acknowledged if any("LoadBalancerController/Policy" in c for c in f.constructs)
    }
    writes = {
        action
        for name, statement in statements_on_any_resource(synthesized.templates["platform"])
        if name.startswith("LoadBalancerControllerPolicy") and "Condition" not in statement
        for action in _listed(statement["Action"])
        if not action.split(":")[1].startswith(("Describe", "List", "Get"))
    }

    assert reasons == {WILDCARD_REASON}
    # Before session s45 ec2:CreateSecurityGroup was allowed on Resource * (any VPC of any account).
    assert writes == set()
    assert "ec2:CreateSecurityGroup" in WILDCARD_REASON


def test_the_load_balancer_controller_keeps_on_any_resource_only_actions_that_take_none(
    synthesized: Synthesized,
) -> None:
    """Before session s45 its policy allowed creating, changing and deleting load balancers and target
    groups, creating security groups, describing certificates and creating the service-linked role on
    ``Resource *``; each now names its resource type in the stack's region and account."""
    kept = {
        action
        for name, statement in statements_on_any_resource(synthesized.templates["platform"])
        if name.startswith("LoadBalancerControllerPolicy")
        for action in _listed(statement["Action"])
    }

    assert kept
    assert [action for action in sorted(kept) if takes_a_resource(action)] == []


def _resource_texts(value: Any) -> Iterator[str]:
    """Each ``Resource`` of a statement as text, ``Fn::Join``s joined with ``<ref>`` for each reference
    (a colon-free stand-in, so the ARN's fields stay where they are)."""
    for item in _listed(value):
        if isinstance(item, str):
            yield item
        elif set(item) == {"Fn::Join"}:
            separator, parts = item["Fn::Join"]
            yield separator.join(p if isinstance(p, str) else "<ref>" for p in parts)
        else:
            yield "<ref>"


def any_region_or_account(template: dict[str, Any]) -> list[str]:
    """``policy: resource`` for each ARN of an allow statement whose region or account is ``*``."""
    found = []
    for name, resource in template["Resources"].items():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            for text in _resource_texts(statement.get("Resource")):
                fields = text.split(":")
                if len(fields) >= 6 and "*" in (fields[3], fields[4]):
                    found.append(f"{name}: {text}")
    return found


@pytest.mark.parametrize("assembly", ["synthesized", "variant", "existing"])
def test_arns_name_the_stacks_region_and_account(assembly: str, request: pytest.FixtureRequest) -> None:
    """The stacks' region and account are known. Before session s43 the HyperPod execution role could
    tag network interfaces of every region and account (``ec2:*:*:network-interface/*``), and before
    session s45 the Load Balancer Controller's policy named ``*:*`` as upstream ships it."""
    synthesized: Synthesized = request.getfixturevalue(assembly)

    found = [arn for template in synthesized.templates.values() for arn in any_region_or_account(template)]

    assert found == []
