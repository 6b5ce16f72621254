"""The operator's IAM role (``cdk/constructs/operator_role.py``): with auto-issued TLS on (the chart's
default) the operator imports certificates into ACM with its pod's credentials, so the app binds its
service account to a role that allows every ACM call the operator makes, and nothing else.

Before session s39 no role was bound: a ``spec.tls: {}`` object never got its TLS listener. The calls
are recorded from the operator's own :class:`~igw.operator.tls.AcmImporter` against moto's ACM (the
AWS seam), never listed by hand; the service account is the one the chart renders from the
synthesized values.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import aws_cdk as cdk
import boto3
import pytest
import trustme
from moto import mock_aws

from cdk.config import AddonConfig, GatewayConfigManifest, ImageConfig
from cdk.constructs.operator_role import operator_service_account, wants_operator_role
from igw.addon import chart, pins
from igw.checks.iam import action_matches
from igw.operator.tls import NAME_TAG, UID_TAG, AcmImporter, IssuedCertificate
from tests.cdk.support import Synthesized, inference_kubernetes_inputs, resolve

REGION = "us-west-2"
ACCOUNT = "111111111111"
NEW_CERTIFICATE = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/00000000-0000-0000-0000-000000000000"
CERTIFICATE = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate"
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


class Call(NamedTuple):
    """One ACM authorisation: the IAM action, the certificate ARN (or ``"*"``) and the tags IAM's
    conditions read: those in the request (``aws:RequestTag``, ``aws:TagKeys``) and those the
    certificate had when called (``aws:ResourceTag``)."""

    action: str
    resource: str
    request_tags: Mapping[str, str]
    resource_tags: Mapping[str, str]


@pytest.fixture
def acm_calls() -> Iterator[set[Call]]:
    """Every ACM authorisation one auto-issue lifecycle needs: a first import, a lost status (the owned
    certificate found again), a renewal, the delete, and the orphan sweep (its listing, then the
    delete of an import whose config is gone)."""
    calls: list[Call] = []

    with mock_aws():
        client = boto3.client("acm", region_name=REGION)
        plain = boto3.client("acm", region_name=REGION)  # reads the tags a certificate has, unrecorded

        def record(model: Any, params: Mapping[str, Any], **_: Any) -> None:
            resource = str(params.get("CertificateArn") or "*")
            request = {str(t["Key"]): str(t.get("Value") or "") for t in params.get("Tags") or []}
            existing: dict[str, str] = {}
            if resource != "*":
                try:
                    tags = plain.list_tags_for_certificate(CertificateArn=resource).get("Tags") or []
                except plain.exceptions.ResourceNotFoundException:
                    tags = []
                existing = {str(t["Key"]): str(t.get("Value") or "") for t in tags}
            if model.name == "ImportCertificate" and resource == "*":
                resource = NEW_CERTIFICATE  # a fresh import: authorised on the ARN it gets
            calls.append(Call(f"acm:{model.name}", resource, request, existing))
            if model.name == "ImportCertificate" and request:
                # ACM authorises the tags of an import as AddTagsToCertificate too.
                calls.append(Call("acm:AddTagsToCertificate", resource, request, existing))

        client.meta.events.register("before-parameter-build.acm", record)
        importer = AcmImporter(lambda: client)
        ca = trustme.CA()
        arn = importer.ensure_imported(_issued(ca, "a.example"), arn=None, uid="u1", name="chat")
        assert importer.ensure_imported(_issued(ca, "a.example"), arn=None, uid="u1", name="chat") == arn
        assert importer.ensure_imported(_issued(ca, "b.example"), arn=arn, uid="u1", name="chat") == arn
        # A cluster tag learnt later is added to an owned import (the sweep finds it by that tag).
        assert (
            importer.ensure_imported(_issued(ca, "b.example"), arn=arn, uid="u1", name="chat", cluster="c")
            == arn
        )
        assert importer.delete_owned(arn, uid="u1")
        gone = importer.ensure_imported(
            _issued(ca, "c.example"), arn=None, uid="u2", name="gone", namespace="n", cluster="c"
        )
        (orphan,) = importer.owned_imports("c")
        assert orphan.arn == gone
        assert importer.delete_owned(orphan.arn, uid=orphan.uid)
        yield {
            Call(c.action, _in_stack_account(c.resource), _Frozen(c.request_tags), _Frozen(c.resource_tags))
            for c in calls
        }


class _Frozen(dict[str, str]):
    """A hashable tag mapping (calls are collected in a set)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


def _in_stack_account(arn: str) -> str:
    """moto's ARN (its own account) as the stack's account would have it."""
    if arn == "*":
        return arn
    parts = arn.split(":")
    parts[4] = ACCOUNT
    return ":".join(parts)


def _condition_holds(operator: str, key: str, wanted: Any, call: Call) -> bool:
    """One condition of an IAM statement against a call: the operators and keys the role uses (any
    other fails the test, so a new condition is never waved through)."""
    wanted = wanted if isinstance(wanted, list) else [wanted]
    if key.startswith("aws:RequestTag/"):
        value = call.request_tags.get(key.removeprefix("aws:RequestTag/"))
    elif key.startswith("aws:ResourceTag/"):
        value = call.resource_tags.get(key.removeprefix("aws:ResourceTag/"))
    elif key != "aws:TagKeys":
        raise AssertionError(f"condition key {key} not modelled")
    if operator == "Null":
        present = bool(call.request_tags) if key == "aws:TagKeys" else value is not None
        return present is not (str(wanted[0]).lower() == "true")
    if operator == "ForAllValues:StringLike" and key == "aws:TagKeys":
        return all(any(fnmatch.fnmatchcase(k, w) for w in wanted) for k in call.request_tags)
    if operator == "StringEquals" and key != "aws:TagKeys":
        return value is not None and value in wanted
    raise AssertionError(f"condition operator {operator} on {key} not modelled")


def _allowed(statements: list[dict[str, Any]], call: Call) -> bool:
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        if statement["Effect"] != "Allow":
            continue
        conditions = statement.get("Condition", {})
        if not all(
            _condition_holds(operator, key, wanted, call)
            for operator, pairs in conditions.items()
            for key, wanted in pairs.items()
        ):
            continue
        if any(action_matches(a, call.action) for a in actions) and any(
            r == "*" or (call.resource != "*" and action_matches(r, call.resource)) for r in resources
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
    synthesized: Synthesized, acm_calls: set[Call]
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
    assert {c.action for c in calls} >= {"acm:ImportCertificate", "acm:ListCertificates"}
    refused = [call for call in calls if not _allowed(statements, call)]
    assert refused == [], (refused, statements)
    granted = {
        a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert granted == {c.action for c in calls}, "the role grants only what the operator calls"
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


def _operator_statements(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The policy statements of the role the Pod Identity association in our chart's namespace binds."""
    _, helm = inference_kubernetes_inputs(template)
    (association,) = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == helm["Namespace"]
    ]
    return _role_statements(template, association["RoleArn"]["Fn::GetAtt"][0])


@pytest.mark.parametrize(
    ("call", "allowed"),
    [
        # The endpoint's DNS-validated certificate, or another team's import: no owner tag.
        (Call("acm:DeleteCertificate", f"{CERTIFICATE}/endpoint", {}, {"Name": "llm"}), False),
        (Call("acm:ImportCertificate", f"{CERTIFICATE}/endpoint", {}, {"Name": "llm"}), False),
        (Call("acm:AddTagsToCertificate", f"{CERTIFICATE}/endpoint", {"team": "x"}, {}), False),
        # Reads cover every certificate (finding the owned one reads the tags of all of them).
        (Call("acm:ListTagsForCertificate", f"{CERTIFICATE}/endpoint", {}, {"Name": "llm"}), True),
        (Call("acm:GetCertificate", f"{CERTIFICATE}/endpoint", {}, {}), True),
        # A new import without the owner tag, or with tags outside igw.dev/.
        (Call("acm:ImportCertificate", NEW_CERTIFICATE, {}, {}), False),
        (Call("acm:ImportCertificate", NEW_CERTIFICATE, {UID_TAG: "u", "owner": "x"}, {}), False),
        (Call("acm:AddTagsToCertificate", NEW_CERTIFICATE, {UID_TAG: "u", "owner": "x"}, {}), False),
        (Call("acm:ImportCertificate", NEW_CERTIFICATE, {UID_TAG: "u", NAME_TAG: "g"}, {}), True),
        # An owned import: re-imported, re-tagged and deleted; a foreign tag key still refused.
        (Call("acm:ImportCertificate", f"{CERTIFICATE}/own", {}, {UID_TAG: "u"}), True),
        (Call("acm:DeleteCertificate", f"{CERTIFICATE}/own", {}, {UID_TAG: "u"}), True),
        (Call("acm:AddTagsToCertificate", f"{CERTIFICATE}/own", {"owner": "x"}, {UID_TAG: "u"}), False),
    ],
)
def test_the_role_writes_only_certificates_carrying_the_operators_owner_tag(
    synthesized: Synthesized, call: Call, allowed: bool
) -> None:
    assert _allowed(_operator_statements(synthesized.templates["inference"]), call) is allowed


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


def test_the_operator_reaches_acm_of_the_stacks_region_with_pod_identity_credentials(
    synthesized: Synthesized,
) -> None:
    """EKS Pod Identity (the default identity) injects credentials but no region, and the operator's
    NetworkPolicy allowed only DNS and TCP 443: neither the Pod Identity agent (169.254.170.23:80)
    nor the instance metadata service (the SDK's region fallback) was reachable, so every ACM call of
    auto-issued TLS failed. Before session s40 the app set no region and the chart opened no route to
    the agent."""
    _, helm = inference_kubernetes_inputs(synthesized.templates["inference"])
    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == REGION
    (policy,) = [
        o
        for o in rendered
        if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"] == deployment["spec"]["selector"]
    ]
    agent = [
        rule
        for rule in policy["spec"]["egress"]
        if {"ipBlock": {"cidr": "169.254.170.23/32"}} in rule.get("to", [])
    ]
    assert [rule["ports"] for rule in agent] == [[{"port": 80, "protocol": "TCP"}]]


def test_without_auto_tls_the_operator_gets_no_route_to_aws_credentials() -> None:
    rendered = chart.render(
        {"operator": {"autoTls": False}}, release=pins.CHART_NAME, namespace=pins.ADDON_NAMESPACE
    )
    (policy,) = [o for o in rendered if o["kind"] == "NetworkPolicy"]
    assert all("169.254.170.23/32" not in json.dumps(rule) for rule in policy["spec"]["egress"]), policy[
        "spec"
    ]["egress"]
