"""The operator's IAM role (``cdk/constructs/operator_role.py``): with auto-issued TLS on (the chart's
default) the operator imports certificates into ACM with its pod's credentials, so the app binds its
service account to a role that allows every ACM call the operator makes, and nothing else.

Before session s39 no role was bound: a ``spec.tls: {}`` object never got its TLS listener. The calls
are recorded from the operator's own :class:`~igw.operator.tls.AcmImporter` against moto's ACM (the
AWS seam), never listed by hand; the service account is the one the chart renders from the
synthesized values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
import trustme
from moto import mock_aws

from cdk.config import AddonConfig, GatewayConfigManifest, ImageConfig
from cdk.constructs.operator_role import operator_service_account, wants_operator_role
from igw.addon import chart, pins
from igw.checks.iam import action_matches
from igw.operator.tls import AcmImporter, IssuedCertificate
from tests.cdk.support import Synthesized, inference_kubernetes_inputs, resolve

REGION = "us-west-2"
ACCOUNT = "111111111111"
NEW_CERTIFICATE = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/00000000-0000-0000-0000-000000000000"
OIDC = f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/X"


def _resources(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _issued(ca: trustme.CA, name: str) -> IssuedCertificate:
    leaf = ca.issue_cert(name)
    return IssuedCertificate(
        leaf=leaf.cert_chain_pems[0].bytes().decode(),
        chain=ca.cert_pem.bytes().decode(),
        private_key=leaf.private_key_pem.bytes().decode(),
        issued_at="2026-01-01T00:00:00Z",
    )


@pytest.fixture
def acm_calls() -> Iterator[set[tuple[str, str]]]:
    """``(IAM action, certificate ARN or "*")`` of every ACM call one auto-issue lifecycle makes:
    a first import, a lost status (the owned certificate found again), a renewal, the delete, and the
    orphan sweep (its listing, then the delete of an import whose config is gone)."""
    calls: set[tuple[str, str]] = set()

    def record(model: Any, params: Mapping[str, Any], **_: Any) -> None:
        resource = str(params.get("CertificateArn") or "*")
        if model.name == "ImportCertificate" and resource == "*":
            resource = NEW_CERTIFICATE  # a fresh import: authorised on the ARN it gets
        calls.add((f"acm:{model.name}", resource))
        if model.name == "ImportCertificate" and params.get("Tags"):
            # ACM authorises the tags of an import as AddTagsToCertificate too.
            calls.add(("acm:AddTagsToCertificate", resource))

    with mock_aws():
        client = boto3.client("acm", region_name=REGION)
        client.meta.events.register("before-parameter-build.acm", record)
        importer = AcmImporter(lambda: client)
        ca = trustme.CA()
        arn = importer.ensure_imported(_issued(ca, "a.example"), arn=None, uid="u1", name="chat")
        assert importer.ensure_imported(_issued(ca, "a.example"), arn=None, uid="u1", name="chat") == arn
        assert importer.ensure_imported(_issued(ca, "b.example"), arn=arn, uid="u1", name="chat") == arn
        assert importer.delete_owned(arn, uid="u1")
        gone = importer.ensure_imported(
            _issued(ca, "c.example"), arn=None, uid="u2", name="gone", namespace="n", cluster="c"
        )
        (orphan,) = importer.owned_imports("c")
        assert orphan.arn == gone
        assert importer.delete_owned(orphan.arn, uid=orphan.uid)
        yield {(action, _in_stack_account(resource)) for action, resource in calls}


def _in_stack_account(arn: str) -> str:
    """moto's ARN (its own account) as the stack's account would have it."""
    if arn == "*":
        return arn
    parts = arn.split(":")
    parts[4] = ACCOUNT
    return ":".join(parts)


def _allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        if statement["Effect"] != "Allow" or "Condition" in statement:
            continue
        if any(action_matches(a, action) for a in actions) and any(
            r == "*" or (resource != "*" and action_matches(r, resource)) for r in resources
        ):
            return True
    return False


def _role_statements(template: Mapping[str, Any], role_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            found += resolve(policy["Properties"]["PolicyDocument"]["Statement"], {})
    return found


def test_the_operators_service_account_gets_a_role_allowing_every_acm_call_it_makes(
    synthesized: Synthesized, acm_calls: set[tuple[str, str]]
) -> None:
    template = synthesized.templates["inference"]
    _, helm = inference_kubernetes_inputs(template)
    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]

    associations = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == helm["Namespace"]
    ]
    assert [a["ServiceAccount"] for a in associations] == [service_account], "no role for the operator"
    role_id = associations[0]["RoleArn"]["Fn::GetAtt"][0]
    (trust,) = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}

    statements = _role_statements(template, role_id)
    calls = acm_calls
    assert {action for action, _ in calls} >= {"acm:ImportCertificate", "acm:ListCertificates"}
    refused = sorted(call for call in calls if not _allowed(statements, *call))
    assert refused == [], (refused, statements)
    granted = {
        a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert granted == {action for action, _ in calls}, "the role grants only what the operator calls"
    certificate_scope = {r for s in statements if s["Resource"] != "*" for r in [s["Resource"]]}
    assert certificate_scope == {f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/*"}

    (chart_resource,) = [
        r
        for r in _resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == helm["Release"]
    ]
    association_ids = [
        k
        for k, r in _resources(template, "AWS::EKS::PodIdentityAssociation").items()
        if r["Properties"]["Namespace"] == helm["Namespace"]
    ]
    policy_ids = [
        k
        for k, r in _resources(template, "AWS::IAM::Policy").items()
        if {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    assert {*association_ids, *policy_ids} <= set(chart_resource["DependsOn"]), "credentials before the pods"


def _bare_chart_stack(values: Mapping[str, Any]) -> dict[str, Any]:
    """Our chart in a stack of its own against an imported cluster, with IRSA."""
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk import aws_iam as iam

    from cdk.constructs.gateway_image import GatewayImage
    from cdk.constructs.igw_chart import IgwChart

    stack = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account=ACCOUNT, region=REGION))
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Kubectl",
        service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/kubectl"),
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="igw", kubectl_provider=provider
    )
    IgwChart(
        stack,
        "Gateway",
        cluster=cluster,
        config=AddonConfig(configuration_values=dict(values)),
        gateway_config=GatewayConfigManifest(name="g", namespace="default", spec={}),
        image=GatewayImage(stack, "Image", config=ImageConfig(repository="example.com/igw", tag="1")),
        certificate_arn=None,
        identity="irsa",
        oidc_provider=eks.OidcProviderNative.from_oidc_provider_arn(stack, "Oidc", OIDC),
    )
    template = dict(cdk.assertions.Template.from_stack(stack).to_json())
    return template


def test_with_irsa_the_operators_service_account_names_a_role_trusting_only_it() -> None:
    template = _bare_chart_stack({"fullnameOverride": "edge"})
    assert _resources(template, "AWS::EKS::PodIdentityAssociation") == {}
    (helm,) = _resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
    parts = helm["Properties"]["Values"]["Fn::Join"][1]
    (role_ref,) = [part for part in parts if isinstance(part, dict)]
    role_id = role_ref["Fn::GetAtt"][0]
    values = json.loads(
        "".join(p if isinstance(p, str) else "arn:aws:iam::111111111111:role/r" for p in parts)
    )
    assert values["operator"]["roleArn"] == "arn:aws:iam::111111111111:role/r"
    rendered = chart.render(values, release=pins.CHART_NAME, namespace=pins.ADDON_NAMESPACE)
    (account,) = [o for o in rendered if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111111111111:role/r"
    }
    (trust,) = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    (conditions,) = _resources(template, "Custom::AWSCDKCfnJson").values()
    subject = json.loads(conditions["Properties"]["Value"])["oidc.eks.us-west-2.amazonaws.com/id/X:sub"]
    assert subject == f"system:serviceaccount:{pins.ADDON_NAMESPACE}:{account['metadata']['name']}"
    assert account["metadata"]["name"] == "edge-operator"


@pytest.mark.parametrize(
    ("values", "wanted"),
    [
        ({}, True),
        ({"mode": "operator", "operator": {"replicaCount": 2}}, True),
        ({"operator": {"autoTls": False}}, False),  # no ACM call is ever made
        ({"operator": {"roleArn": "arn:aws:iam::111111111111:role/mine"}}, False),  # the user's own role
        ({"mode": "gateway"}, False),  # no operator
    ],
)
def test_the_role_is_made_only_where_the_operator_imports_into_acm_with_no_role_of_its_own(
    values: dict[str, Any], wanted: bool
) -> None:
    assert wants_operator_role(values) is wanted


def test_the_service_account_name_follows_the_chart_with_long_names() -> None:
    long = "a" * 60 + "-b"
    rendered = chart.render(
        {"fullnameOverride": long}, release=pins.CHART_NAME, namespace=pins.ADDON_NAMESPACE
    )
    (account,) = [o for o in rendered if o["kind"] == "ServiceAccount"]
    assert (
        operator_service_account({"fullnameOverride": long}, release=pins.CHART_NAME)
        == account["metadata"]["name"]
    )
    assert operator_service_account({}, release=pins.CHART_NAME) == "inference-gateway-operator"
