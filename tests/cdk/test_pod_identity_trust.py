"""EKS Pod Identity roles trust only the service account they are bound to, read from the templates.

A role trusting ``pods.eks.amazonaws.com`` with no condition can be assumed through *any* Pod Identity
association in the account: whoever may create an association and pass the role binds it to another
service account, namespace or cluster, while an IRSA role's trust pins ``sub`` to one service account.
EKS Pod Identity tags its sessions (``eks-cluster-name``, ``kubernetes-namespace``,
``kubernetes-service-account``, ...), and AWS documents conditions on those tags for exactly this.
Before session s40 every Pod Identity role of the app (operator, Load Balancer Controller, CloudWatch
agent, External Secrets) trusted the service principal unconditionally.
"""

from __future__ import annotations

from typing import Any

import pytest

from igw.addon import pins
from tests.cdk.support import Synthesized

POD_IDENTITY = "pods.eks.amazonaws.com"
ADDON_NAMESPACES = {pins.CLOUDWATCH_OBSERVABILITY_ADDON: pins.CLOUDWATCH_NAMESPACE}
"""Where an add-on whose ``PodIdentityAssociations`` bind a role runs its service accounts."""


def _trusts_pod_identity(statement: dict[str, Any]) -> bool:
    services = statement.get("Principal", {}).get("Service", [])
    return POD_IDENTITY in (services if isinstance(services, list) else [services])


def bindings(template: dict[str, Any]) -> dict[str, tuple[Any, str, str]]:
    """Role logical id -> (cluster name, namespace, service account) of the association naming it,
    from ``AWS::EKS::PodIdentityAssociation`` and an add-on's ``PodIdentityAssociations``."""
    found: dict[str, tuple[Any, str, str]] = {}
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::EKS::PodIdentityAssociation":
            role = properties["RoleArn"]["Fn::GetAtt"][0]
            found[role] = (properties["ClusterName"], properties["Namespace"], properties["ServiceAccount"])
        elif resource["Type"] == "AWS::EKS::Addon":
            for association in properties.get("PodIdentityAssociations", []):
                role = association["RoleArn"]["Fn::GetAtt"][0]
                namespace = ADDON_NAMESPACES[properties["AddonName"]]
                found[role] = (properties["ClusterName"], namespace, association["ServiceAccount"])
    return found


def unscoped_pod_identity_roles(template: dict[str, Any]) -> list[str]:
    """Roles trusting Pod Identity whose trust does not name their one binding's tags."""
    bound = bindings(template)
    problems = []
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            if not _trusts_pod_identity(statement):
                continue
            if name not in bound:
                problems.append(f"{name}: trusts Pod Identity but no association binds it")
                continue
            cluster, namespace, service_account = bound[name]
            expected = {
                "aws:RequestTag/eks-cluster-name": cluster,
                "aws:RequestTag/kubernetes-namespace": namespace,
                "aws:RequestTag/kubernetes-service-account": service_account,
            }
            if statement.get("Condition") != {"StringEquals": expected}:
                condition = statement.get("Condition")
                problems.append(f"{name}: condition {condition} for {namespace}/{service_account}")
    return problems


@pytest.mark.parametrize("assembly", ["synthesized", "existing"])
def test_each_pod_identity_role_is_assumable_only_by_its_bound_service_account(
    assembly: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(assembly)
    roles = [
        name
        for template in synthesized.templates.values()
        for name, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
        and any(_trusts_pod_identity(s) for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"])
    ]

    found = {role: unscoped_pod_identity_roles(t) for role, t in synthesized.templates.items()}

    assert len(roles) >= 3  # operator, Load Balancer Controller, CloudWatch agent
    assert {role: problems for role, problems in found.items() if problems} == {}
