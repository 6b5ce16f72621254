"""Deploy and destroy order inside the synthesized templates: whatever runs with an IAM role is created
after every policy attached to that role, and so deleted before it.

CloudFormation orders resources only by references and ``DependsOn``. A role's inline policy
(``AWS::IAM::Policy``) or a managed policy naming the role in its ``Roles`` is a resource of its own
that nothing references: a HyperPod cluster or an EKS add-on naming only the role's ARN is created
beside the policy (its first calls made without it) and, on ``cdk destroy``, deleted after the policy
is gone. CDK orders its own Lambda functions after their role's policy for this reason. Before session
s40 the HyperPod cluster (whose nodes' network interfaces HyperPod creates and deletes with the
execution role), the Mountpoint S3 CSI add-on (reading model buckets with its IRSA role) and the VPC's
flow log (delivering to CloudWatch Logs with its ``DeliverLogsPermissionArn`` role, whose policy
``ec2.Vpc(flow_logs=...)`` creates beside it) were not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cdk.support import Synthesized

ACTS_AS_ROLE = (
    "AWS::EC2::FlowLog",
    "AWS::SageMaker::Cluster",
    "AWS::EKS::Addon",
    "AWS::Lambda::Function",
    "Custom::AWSCDK-EKS-HelmChart",
    "Custom::AWSCDK-EKS-KubernetesResource",
)
"""Resources whose service or pods call AWS with a role they name (directly or through a binding).
Bindings themselves (Pod Identity associations, access entries) need no permission of the role."""


def _names(value: Any) -> Iterator[str]:
    """Logical ids a value references (``Ref``, ``Fn::GetAtt``), however deeply nested."""
    if isinstance(value, dict):
        if isinstance(value.get("Ref"), str):
            yield value["Ref"]
        attribute = value.get("Fn::GetAtt")
        if attribute is not None:
            yield attribute[0] if isinstance(attribute, list) else str(attribute).split(".")[0]
        for item in value.values():
            yield from _names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _names(item)


def _before(resources: dict[str, Any], logical_id: str) -> set[str]:
    """Every resource CloudFormation must create before ``logical_id`` (references and DependsOn)."""
    seen: set[str] = set()
    todo = [logical_id]
    while todo:
        resource = resources[todo.pop()]
        depends = resource.get("DependsOn", [])
        named = {*([depends] if isinstance(depends, str) else depends)}
        named.update(_names(resource.get("Properties", {})))
        for other in named - seen:
            if other in resources:
                seen.add(other)
                todo.append(other)
    return seen


def unordered_role_consumers(template: dict[str, Any]) -> list[str]:
    """``consumer -> policy`` for each resource acting as a role created without that role's policy."""
    resources: dict[str, Any] = template["Resources"]
    roles = {name for name, r in resources.items() if r["Type"] == "AWS::IAM::Role"}
    policies: dict[str, list[str]] = {}
    for name, resource in resources.items():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for role in set(_names(resource["Properties"].get("Roles", []))) & roles:
                policies.setdefault(role, []).append(name)
    found = []
    for name, resource in resources.items():
        if resource["Type"] not in ACTS_AS_ROLE:
            continue
        before = _before(resources, name)
        for role in sorted(before & roles):
            found += [f"{name} -> {policy}" for policy in policies.get(role, []) if policy not in before]
    return found


@pytest.mark.parametrize("assembly", ["synthesized", "variant", "existing"])
def test_what_runs_with_a_role_is_created_after_its_policies_and_deleted_before_them(
    assembly: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(assembly)
    found = {role: unordered_role_consumers(t) for role, t in synthesized.templates.items()}

    assert {role: names for role, names in found.items() if names} == {}


def test_the_check_sees_a_consumer_beside_its_roles_policy() -> None:
    """The HyperPod cluster's shape before the fix: the role's ARN referenced, its policy not."""
    template = {
        "Resources": {
            "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
            "RolePolicy": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "Role"}]}},
            "Cluster": {
                "Type": "AWS::SageMaker::Cluster",
                "Properties": {"InstanceGroups": [{"ExecutionRole": {"Fn::GetAtt": ["Role", "Arn"]}}]},
            },
        }
    }

    assert unordered_role_consumers(template) == ["Cluster -> RolePolicy"]
    template["Resources"]["Cluster"]["DependsOn"] = ["RolePolicy"]
    assert unordered_role_consumers(template) == []
