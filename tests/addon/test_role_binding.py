"""``igw addon create/update`` bind the gateway's IAM role to the service account the chart renders, once.

The add-on seam is driven by botocore's Stubber (checked against the EKS service model); the cluster and
the roles live in moto. Each case is one an operator hit without an error: the add-on went ACTIVE and
the gateway's AWS calls failed with AccessDenied, or ran under another role than the one given.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from igw.addon import operations, pins
from tests.addon import test_operations
from tests.addon.test_operations import (
    CLUSTER,
    GATEWAY_MODE,
    OURS,
    AwsFixture,
    _addon,
    _dependencies_installed,
    _expect_create,
    _trust,
)

moto_aws = test_operations.moto_aws
aws = test_operations.aws
"""The add-on seam's Stubber and moto's cluster and roles, as ``test_operations`` sets them up."""

OWN_SUB = f"system:serviceaccount:{pins.ADDON_NAMESPACE}:{pins.GATEWAY_SERVICE_ACCOUNT}"


def _issuer_provider(clients: operations.AwsClients) -> str:
    issuer = clients.eks.describe_cluster(name=CLUSTER)["cluster"]["identity"]["oidc"]["issuer"]
    return str(issuer).removeprefix("https://")


def _irsa_role(clients: operations.AwsClients, name: str, condition: dict[str, Any] | None) -> str:
    """A role trusting the cluster's OIDC provider under ``condition`` (e.g. a ``sub`` test)."""
    provider = _issuer_provider(clients)
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{provider}"},
        "Action": "sts:AssumeRoleWithWebIdentity",
    }
    if condition is not None:
        statement["Condition"] = json.loads(json.dumps(condition).replace("PROVIDER", provider))
    with contextlib.suppress(clients.iam.exceptions.NoSuchEntityException):
        clients.iam.delete_role(RoleName=name)
    created = clients.iam.create_role(RoleName=name, AssumeRolePolicyDocument=_trust(statement))
    return str(created["Role"]["Arn"])


@pytest.mark.parametrize(
    ("condition", "values", "refused"),
    [
        # a policy copied from another add-on: its service account, not the gateway's
        (
            {"StringEquals": {"PROVIDER:sub": "system:serviceaccount:kube-system:aws-node"}},
            GATEWAY_MODE,
            "system:serviceaccount:kube-system:aws-node",
        ),
        # the gateway's service account renamed in the values, the role still for the default name
        (
            {"StringEquals": {"PROVIDER:sub": OWN_SUB}},
            {**GATEWAY_MODE, "serviceAccount": {"name": "llm-gateway"}},
            "runs as service account llm-gateway",
        ),
        (
            {
                "StringLike": {
                    "PROVIDER:sub": ["system:serviceaccount:*:other-*", "system:serviceaccount:x:y"]
                }
            },
            GATEWAY_MODE,
            "system:serviceaccount:*:other-*",
        ),
    ],
)
def test_an_irsa_role_for_another_service_account_is_refused_before_any_change(
    aws: AwsFixture, condition: dict[str, Any], values: dict[str, Any], refused: str
) -> None:
    """The trust check looked at the provider and the action only; a ``sub`` condition naming another
    service account passed, the add-on went ACTIVE, and STS refused every AssumeRoleWithWebIdentity."""
    clients, stubber, _ = aws
    role = _irsa_role(clients, "igw-gateway-other-sa", condition)
    _dependencies_installed(stubber, agent=False)
    with pytest.raises(operations.AddonOperationError) as caught:  # no create_addon stubbed: none may be made
        operations.create(clients=clients, cluster=CLUSTER, role_arn=role, values=values, identity="irsa")
    assert "lets only other service accounts assume it (IRSA)" in str(caught.value)
    assert refused in str(caught.value)


@pytest.mark.parametrize(
    "condition",
    [
        None,  # no condition: any service account of the cluster (broad, but the gateway's works)
        {"StringEquals": {"PROVIDER:sub": "system:serviceaccount:hyperpod-inference-system:llm-gateway"}},
        {"StringLike": {"PROVIDER:sub": "system:serviceaccount:*:llm-gateway"}},
        {
            "ForAnyValue:StringLike": {
                "PROVIDER:sub": ["system:serviceaccount:x:y", "system:serviceaccount:igw:llm-*"]
            }
        },
        {"StringEquals": {"PROVIDER:aud": "sts.amazonaws.com"}},
    ],
)
def test_an_irsa_role_for_the_gateways_service_account_is_taken(
    aws: AwsFixture, condition: dict[str, Any] | None
) -> None:
    clients, stubber, _ = aws
    role = _irsa_role(clients, "igw-gateway-own-sa", condition)
    values = {**GATEWAY_MODE, "serviceAccount": {"name": "llm-gateway"}}
    _dependencies_installed(stubber, agent=False)
    _expect_create(
        stubber,
        '{"mode":"gateway","serviceAccount":{"name":"llm-gateway","roleArn":"' + role + '"}}',
        serviceAccountRoleArn=role,
    )
    created = operations.create(
        clients=clients, cluster=CLUSTER, role_arn=role, values=values, identity="irsa"
    )
    assert created["status"] == "CREATING"


def test_the_pod_identity_association_names_the_service_account_the_chart_renders(aws: AwsFixture) -> None:
    """With ``serviceAccount.name`` set, the association was still made for ``inference-gateway``: the
    gateway's pods, running as the renamed account, got no credentials."""
    clients, stubber, gateway = aws
    values = {**GATEWAY_MODE, "serviceAccount": {"name": "llm-gateway"}}
    _dependencies_installed(stubber)
    _expect_create(
        stubber,
        '{"mode":"gateway","serviceAccount":{"name":"llm-gateway"}}',
        podIdentityAssociations=[{"serviceAccount": "llm-gateway", "roleArn": gateway}],
    )
    assert operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=values)["status"] == (
        "CREATING"
    )


@pytest.mark.parametrize(
    ("account", "identity", "says"),
    [
        (
            {"roleArn": "arn:aws:iam::123456789012:role/values-role"},
            "pod-identity",
            "serviceAccount.roleArn: an IRSA role (arn:aws:iam::123456789012:role/values-role) beside "
            "--role-arn's Pod Identity association would be the one the gateway uses",
        ),
        (
            {"roleArn": "arn:aws:iam::123456789012:role/values-role"},
            "irsa",
            "serviceAccount.roleArn: arn:aws:iam::123456789012:role/values-role differs from --role-arn",
        ),
        ({"name": ""}, "pod-identity", "serviceAccount.name: empty, so the chart names"),
    ],
)
def test_a_second_or_unnamed_binding_is_refused_before_any_call(
    aws: AwsFixture, account: dict[str, str], identity: operations.Identity, says: str
) -> None:
    """A values role beside a Pod Identity role won (SDKs read the web-identity token first); with
    ``--identity irsa`` it was replaced silently; an unnamed account cannot be bound by name."""
    clients, _stubber, gateway = aws  # nothing stubbed: any API call would fail the test
    values = {**GATEWAY_MODE, "serviceAccount": account}
    with pytest.raises(operations.AddonInputError) as caught:
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=gateway, values=values, identity=identity
        )
    assert any(says in problem for problem in caught.value.problems), caught.value.problems


def _installed_with_irsa(role: str) -> dict[str, Any]:
    return _addon(
        pins.IGW_ADDON_NAME,
        pins.IGW_ADDON_VERSION,
        serviceAccountRoleArn=role,
        configurationValues='{"mode":"gateway","serviceAccount":{"roleArn":"' + role + '"}}',
    )


def test_update_binds_the_new_irsa_role_of_the_values_not_the_installed_one(aws: AwsFixture) -> None:
    """``update`` sent the installed ``serviceAccountRoleArn`` beside new values naming another role:
    the service account was annotated with the new role by the chart and the old one by EKS."""
    clients, stubber, gateway = aws
    new = _irsa_role(
        clients,
        "igw-gateway-next",
        {"StringEquals": {"PROVIDER:sub": OWN_SUB}},
    )
    stubber.add_response("describe_addon", _installed_with_irsa(gateway), OURS)
    stubber.add_response(
        "update_addon",
        {"update": {"id": "u9", "status": "InProgress", "type": "AddonUpdate"}},
        {
            "clusterName": CLUSTER,
            "addonName": pins.IGW_ADDON_NAME,
            "resolveConflicts": "OVERWRITE",
            "configurationValues": '{"mode":"gateway","serviceAccount":{"roleArn":"' + new + '"}}',
            "serviceAccountRoleArn": new,
        },
    )
    values = {**GATEWAY_MODE, "serviceAccount": {"roleArn": new}}
    assert operations.update(clients=clients, cluster=CLUSTER, values=values, version=None)["id"] == "u9"


def test_update_refuses_a_new_irsa_role_the_gateway_cannot_use(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    other = _irsa_role(
        clients,
        "igw-gateway-wrong",
        {"StringEquals": {"PROVIDER:sub": "system:serviceaccount:kube-system:x"}},
    )
    for installed, says in (
        (_installed_with_irsa(gateway), "lets only other service accounts assume it"),
        (
            _addon(
                pins.IGW_ADDON_NAME,
                pins.IGW_ADDON_VERSION,
                podIdentityAssociations=["arn:aws:eks:us-west-2:123456789012:podidentityassociation/igw/a-1"],
            ),
            "the add-on's gateway is bound by EKS Pod Identity",
        ),
    ):
        stubber.add_response("describe_addon", installed, OURS)
        values = {**GATEWAY_MODE, "serviceAccount": {"roleArn": other}}
        with pytest.raises(operations.AddonOperationError) as caught:
            operations.update(clients=clients, cluster=CLUSTER, values=values, version=None)
        assert says in str(caught.value)


def test_irsa_without_a_role_is_refused_before_any_call(aws: AwsFixture) -> None:
    """``--identity irsa`` with no role anywhere went on to the AWS calls (DescribeCluster...) and,
    on a cluster that passed them, installed a gateway without the role the flag asked for."""
    clients, _stubber, _ = aws  # nothing stubbed: any add-on API call would fail the test
    with pytest.raises(operations.AddonInputError) as caught:
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=None, values=GATEWAY_MODE, identity="irsa"
        )
    assert any("--identity irsa" in p and "--role-arn" in p for p in caught.value.problems), (
        caught.value.problems
    )


def test_irsa_takes_the_values_role_and_checks_it_like_a_flag_role(aws: AwsFixture) -> None:
    """With ``--identity irsa``, no ``--role-arn`` and ``serviceAccount.roleArn`` in the values, that
    role is the one bound: its trust is checked (a role for another service account is refused) and it
    is sent as ``serviceAccountRoleArn``, as ``update`` does with a role new values set. It was
    installed unchecked, without ``serviceAccountRoleArn``."""
    clients, stubber, _ = aws
    other = _irsa_role(
        clients,
        "igw-gateway-values-other",
        {"StringEquals": {"PROVIDER:sub": "system:serviceaccount:kube-system:aws-node"}},
    )
    values = {**GATEWAY_MODE, "serviceAccount": {"roleArn": other}}
    _dependencies_installed(stubber, agent=False)
    with pytest.raises(operations.AddonOperationError) as caught:  # no create_addon stubbed
        operations.create(clients=clients, cluster=CLUSTER, role_arn=None, values=values, identity="irsa")
    assert "lets only other service accounts assume it (IRSA)" in str(caught.value)

    own = _irsa_role(clients, "igw-gateway-values-own", {"StringEquals": {"PROVIDER:sub": OWN_SUB}})
    values = {**GATEWAY_MODE, "serviceAccount": {"roleArn": own}}
    _dependencies_installed(stubber, agent=False)
    _expect_create(
        stubber,
        '{"mode":"gateway","serviceAccount":{"roleArn":"' + own + '"}}',
        serviceAccountRoleArn=own,
    )
    created = operations.create(
        clients=clients, cluster=CLUSTER, role_arn=None, values=values, identity="irsa"
    )
    assert created["status"] == "CREATING"
