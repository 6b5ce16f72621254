"""``igw addon`` flows: EKS add-on calls through the one seam (botocore Stubber, checked against the real
service model), clusters and IAM in moto."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from igw.addon import addon_version, operations, pins, schemas
from igw.addon.eks_api import AddonApiError, EksAddonApi
from igw.cli import main as cli
from igw.config import paths
from tests.config.hostile_documents import billion_laughs

REGION = "us-west-2"
CLUSTER = "igw"
ROLE = "igw-gateway"
K8S = pins.KUBERNETES_VERSION
"""The moto cluster's Kubernetes version (moto's own default, 1.19, no add-on is published for)."""
OURS = {"clusterName": CLUSTER, "addonName": pins.IGW_ADDON_NAME}
GATEWAY_MODE = {"mode": "gateway"}
"""The chart mode whose pods run as the gateway service account a role can be bound to."""
MotoAccount = tuple[Any, Any, str, Any]
"""moto's EKS client, IAM client, the gateway role's ARN, and the EKS client the add-on seam stubs
(boto3 clients are untyped here: the project installs no boto3 stubs)."""
AwsFixture = tuple[operations.AwsClients, Stubber, str]
"""The flows' clients, the Stubber on the add-on seam, the gateway role's ARN."""


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


POD_IDENTITY_TRUST: dict[str, Any] = {
    "Effect": "Allow",
    "Principal": {"Service": "pods.eks.amazonaws.com"},
    "Action": ["sts:AssumeRole", "sts:TagSession"],
}


def _irsa_trust(issuer: str) -> dict[str, Any]:
    """The trust statement IRSA needs: the cluster's OIDC provider, AssumeRoleWithWebIdentity."""
    provider = issuer.removeprefix("https://")
    return {
        "Effect": "Allow",
        "Principal": {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{provider}"},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{provider}:sub": "system:serviceaccount:igw:inference-gateway"}},
    }


def _trust(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


@pytest.fixture(scope="module")
def moto_aws() -> Iterator[MotoAccount]:
    """One moto account per module (cluster and gateway role are only read by the flows)."""
    with mock_aws():
        eks = boto3.client("eks", region_name=REGION)
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="eks-cluster", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        eks.create_cluster(name=CLUSTER, version=K8S, roleArn=role, resourcesVpcConfig={"subnetIds": []})
        issuer = eks.describe_cluster(name=CLUSTER)["cluster"]["identity"]["oidc"]["issuer"]
        trust = _trust(POD_IDENTITY_TRUST, _irsa_trust(issuer))
        gateway = iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        yield eks, iam, gateway, boto3.client("eks", region_name=REGION)


@pytest.fixture
def aws(moto_aws: MotoAccount) -> Iterator[AwsFixture]:
    """A fresh Stubber on the add-on seam for each test; every stubbed response must be consumed."""
    eks, iam, gateway, addon_client = moto_aws
    stubber = Stubber(addon_client)
    clients = operations.AwsClients(addons=EksAddonApi(addon_client), eks=eks, iam=iam)
    with stubber:
        yield clients, stubber, gateway
    stubber.assert_no_pending_responses()


def _addon(name: str, version: str, status: str = "ACTIVE", **extra: object) -> dict[str, dict[str, object]]:
    return {
        "addon": {
            "addonName": name,
            "clusterName": CLUSTER,
            "addonVersion": version,
            "status": status,
            **extra,
        }
    }


def _expect_create(stubber: Stubber, configuration_values: str, **extra: object) -> None:
    """``create_addon`` for our add-on with these configuration values (and extra request fields)."""
    stubber.add_response(
        "create_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "CREATING"),
        {
            "clusterName": CLUSTER,
            "addonName": pins.IGW_ADDON_NAME,
            "addonVersion": pins.IGW_ADDON_VERSION,
            "resolveConflicts": "OVERWRITE",
            "configurationValues": configuration_values,
            **extra,
        },
    )


def _published(stubber: Stubber, versions: tuple[str, ...] = (pins.IGW_ADDON_VERSION,)) -> None:
    """``DescribeAddonVersions`` for our add-on and the cluster's Kubernetes version, one page: these
    ``versions``; none (``()``) is what a region without the add-on answers, no ``addons`` entry."""
    entries = [{"addonVersion": v, "compatibilities": [{"clusterVersion": K8S}]} for v in versions]
    stubber.add_response(
        "describe_addon_versions",
        {"addons": [{"addonName": pins.IGW_ADDON_NAME, "addonVersions": entries}] if versions else []},
        {"addonName": pins.IGW_ADDON_NAME, "kubernetesVersion": K8S},
    )


def _dependencies_installed(
    stubber: Stubber, *, skip: str | None = None, versions: dict[str, str] | None = None, agent: bool = True
) -> None:
    """Our add-on absent, then each dependency add-on (and, for Pod Identity, the agent) as ``create``'s
    pre-checks read them."""
    stubber.add_client_error(
        "describe_addon", "ResourceNotFoundException", "No addon found", 404, expected_params=OURS
    )
    _published(stubber)
    for dependency in pins.DEPENDENCY_ADDONS:
        params = {"clusterName": CLUSTER, "addonName": dependency.name}
        if dependency.name == skip:
            stubber.add_client_error(
                "describe_addon", "ResourceNotFoundException", "No addon", 404, expected_params=params
            )
            continue
        version = (versions or {}).get(dependency.name, dependency.minimum)
        stubber.add_response("describe_addon", _addon(dependency.name, version), params)
    if agent:
        stubber.add_response(
            "describe_addon",
            _addon(pins.POD_IDENTITY_AGENT_ADDON, pins.POD_IDENTITY_AGENT_VERSION),
            {"clusterName": CLUSTER, "addonName": pins.POD_IDENTITY_AGENT_ADDON},
        )


def test_create_checks_then_creates_and_waits_for_active(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber)
    _expect_create(
        stubber,
        '{"mode":"gateway","replicaCount":3}',
        podIdentityAssociations=[{"serviceAccount": pins.GATEWAY_SERVICE_ACCOUNT, "roleArn": gateway}],
    )
    for status in ("CREATING", "CREATING", "ACTIVE"):
        stubber.add_response(
            "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, status), OURS
        )
    clock, lines = VirtualClock(), list[str]()
    waiter = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, poll_s=5, progress=lines.append)
    addon = operations.create(
        clients=clients,
        cluster=CLUSTER,
        role_arn=gateway,
        values={**GATEWAY_MODE, "replicaCount": 3},
        wait=waiter,
    )
    assert addon["status"] == "ACTIVE"
    assert lines == [
        f"{pins.IGW_ADDON_NAME} {pins.IGW_ADDON_VERSION}: CREATING",
        f"{pins.IGW_ADDON_NAME} {pins.IGW_ADDON_VERSION}: ACTIVE",
    ]
    assert clock.now == 10


def test_missing_dependency_addon_blocks_create(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber, skip="cert-manager")
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=GATEWAY_MODE)
    assert "dependency add-on cert-manager is not installed (needs >= v1.18.2-eksbuild.2" in str(caught.value)


def test_old_dependency_version_blocks_create(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber, versions={"cert-manager": "v1.18.2-eksbuild.1"})
    with pytest.raises(
        operations.AddonOperationError,
        match=r"cert-manager is v1\.18\.2-eksbuild\.1, needs >= v1\.18\.2-eksbuild\.2",
    ):
        operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=GATEWAY_MODE)


def test_invalid_configuration_fails_before_any_call(aws: AwsFixture) -> None:
    clients, _stubber, gateway = aws  # no stubbed response: any API call would raise
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=gateway, values={"replicaCount": 1, "bogus": True}
        )
    text = str(caught.value)
    assert 'configurationValues.bogus: unknown field "bogus" (rule schema.unknown-field)' in text
    assert "configurationValues.replicaCount" in text


def test_values_the_chart_refuses_at_render_time_fail_before_any_call(aws: AwsFixture) -> None:
    # EKS's configurationValues check reads only the schema: these went CREATE_FAILED after the call.
    clients, _stubber, gateway = aws  # no stubbed response: any API call would raise
    values = {**GATEWAY_MODE, "certManager": {"enabled": True, "duration": "2h", "renewBefore": "2h"}}
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=values)
    assert "configurationValues: certManager.renewBefore (2h) must be shorter than" in str(caught.value)


def test_missing_pod_identity_agent_is_reported_before_any_change(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber, agent=False)
    stubber.add_client_error(
        "describe_addon",
        "ResourceNotFoundException",
        "No addon",
        404,
        expected_params={"clusterName": CLUSTER, "addonName": pins.POD_IDENTITY_AGENT_ADDON},
    )
    # No create_addon is stubbed: reaching it would fail the test with an unexpected call.
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=GATEWAY_MODE)
    assert "eks-pod-identity-agent is not installed: EKS Pod Identity associations need it" in str(
        caught.value
    )


def test_create_with_irsa_sends_the_service_account_role(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber, agent=False)
    _expect_create(
        stubber,
        '{"mode":"gateway","serviceAccount":{"roleArn":"' + gateway + '"}}',
        serviceAccountRoleArn=gateway,
    )
    created = operations.create(
        clients=clients, cluster=CLUSTER, role_arn=gateway, values=GATEWAY_MODE, identity="irsa"
    )
    assert created["status"] == "CREATING"


def test_a_role_is_refused_in_operator_mode_before_any_call(aws: AwsFixture) -> None:
    """Operator mode runs no pod as the chart's gateway service account: a role bound to it would reach
    nothing (each config's gateway runs as <name>-gateway in its namespace and calls no AWS API)."""
    clients, _stubber, gateway = aws  # no stubbed response: any API call would raise
    for values in ({}, {"mode": "operator"}):
        with pytest.raises(operations.AddonOperationError) as caught:
            operations.create(clients=clients, cluster=CLUSTER, role_arn=gateway, values=values)
        assert "role: with the chart's mode operator no pod runs as service account inference-gateway" in str(
            caught.value
        )


@pytest.mark.parametrize("values", [{"replicaCount": 4}, {"service": {"scheme": "internet-facing"}}])
def test_gateway_mode_values_are_refused_in_operator_mode_before_any_call(
    aws: AwsFixture, values: dict[str, Any]
) -> None:
    """EKS accepts them (one schema for both modes) and the chart's default mode, operator, never reads
    them: ``igw addon create/update`` looked applied and changed nothing (the CDK app refused them)."""
    clients, _, _ = aws
    with pytest.raises(operations.AddonOperationError) as created:
        operations.create(clients=clients, cluster=CLUSTER, role_arn=None, values=values)
    with pytest.raises(operations.AddonOperationError) as updated:
        operations.update(clients=clients, cluster=CLUSTER, values=values, version=None)
    for refused in (created, updated):
        assert any("has no effect with the chart's mode operator" in p for p in refused.value.problems)


def test_create_without_a_role_binds_none(aws: AwsFixture) -> None:
    clients, stubber, _ = aws
    _dependencies_installed(stubber, agent=False)
    _expect_create(stubber, "{}")
    assert (
        operations.create(clients=clients, cluster=CLUSTER, role_arn=None, values={})["status"] == "CREATING"
    )


def test_update_keeps_the_irsa_role(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    installed = _addon(
        pins.IGW_ADDON_NAME,
        pins.IGW_ADDON_VERSION,
        serviceAccountRoleArn=gateway,
        configurationValues='{"serviceAccount":{"roleArn":"' + gateway + '"},"replicaCount":3}',
    )
    stubber.add_response("describe_addon", installed, OURS)
    stubber.add_response(
        "update_addon",
        {"update": {"id": "u2", "status": "InProgress", "type": "AddonUpdate"}},
        {
            "clusterName": CLUSTER,
            "addonName": pins.IGW_ADDON_NAME,
            "resolveConflicts": "OVERWRITE",
            "configurationValues": '{"mode":"gateway","replicaCount":4,"serviceAccount":{"roleArn":"'
            + gateway
            + '"}}',
            "serviceAccountRoleArn": gateway,
        },
    )
    result = operations.update(
        clients=clients, cluster=CLUSTER, values={**GATEWAY_MODE, "replicaCount": 4}, version=None
    )
    assert result["status"] == "InProgress"


@pytest.mark.parametrize(
    ("installed", "values", "message"),
    [
        pytest.param(
            {"configurationValues": '{"mode":"gateway","replicaCount":3}'},
            {"gateway": {"workers": 4}},
            r"configurationValues\.mode: the installed add-on runs mode gateway and these values leave "
            r"mode out, which means operator: the update would delete its gateway Deployment",
            id="mode-left-out",
        ),
        pytest.param(
            {"configurationValues": "mode: gateway\n", "serviceAccountRoleArn": "GATEWAY"},
            {"mode": "operator"},
            r"role: the installed add-on binds IRSA role arn:.*igw-gateway to its gateway's service "
            r"account, and with the chart's mode operator no pod runs as inference-gateway",
            id="irsa-role-to-operator",
        ),
        pytest.param(
            {"configurationValues": '{"mode":"gateway"}', "podIdentityAssociations": ["ASSOCIATION"]},
            {"mode": "operator"},
            r"role: the installed add-on binds Pod Identity association arn:.*:podidentityassociation/",
            id="pod-identity-to-operator",
        ),
    ],
)
def test_an_update_does_not_switch_a_gateway_mode_addon_to_operator_mode_unasked(
    aws: AwsFixture, installed: dict[str, Any], values: dict[str, Any], message: str
) -> None:
    """``UpdateAddon`` replaces the values whole and ``mode`` defaults to operator: values leaving it out
    deleted a gateway-mode add-on's gateway and its load balancer, and a switch to operator mode carried
    the installed IAM role into values and a request ``create`` refuses. Refused before UpdateAddon."""
    clients, stubber, gateway = aws
    association = f"arn:aws:eks:us-west-2:123456789012:podidentityassociation/{CLUSTER}/a-1"
    extra = {
        key: gateway if value == "GATEWAY" else [association] if value == ["ASSOCIATION"] else value
        for key, value in installed.items()
    }
    stubber.add_response(
        "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "ACTIVE", **extra), OURS
    )
    with pytest.raises(operations.AddonOperationError) as raised:
        operations.update(clients=clients, cluster=CLUSTER, values=values, version=None)
    assert len(raised.value.problems) == 1
    assert re.search(message, raised.value.problems[0]), raised.value.problems


def test_an_update_switching_a_gateway_mode_addon_without_a_role_to_operator_mode_is_sent(
    aws: AwsFixture,
) -> None:
    """``mode: operator`` written out is a deliberate switch; with no role bound it goes to EKS as given."""
    clients, stubber, _ = aws
    installed = _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, configurationValues='{"mode":"gateway"}')
    stubber.add_response("describe_addon", installed, OURS)
    stubber.add_response(
        "update_addon",
        {"update": {"id": "u3", "status": "InProgress", "type": "AddonUpdate"}},
        {**OURS, "resolveConflicts": "OVERWRITE", "configurationValues": '{"mode":"operator"}'},
    )
    result = operations.update(clients=clients, cluster=CLUSTER, values={"mode": "operator"}, version=None)
    assert result["status"] == "InProgress"


def test_missing_cluster_and_role_are_reported(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    with pytest.raises(operations.AddonOperationError, match="cluster 'nope' does not exist"):
        operations.create(clients=clients, cluster="nope", role_arn=gateway, values=GATEWAY_MODE)
    _dependencies_installed(stubber)
    with pytest.raises(
        operations.AddonOperationError, match=r"gateway IAM role .*missing-role does not exist"
    ):
        operations.create(
            clients=clients,
            cluster=CLUSTER,
            role_arn="arn:aws:iam::123456789012:role/missing-role",
            values=GATEWAY_MODE,
        )


def test_degraded_addon_prints_health_issues(aws: AwsFixture) -> None:
    clients, stubber, gateway = aws
    _dependencies_installed(stubber)
    stubber.add_response(
        "create_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "CREATING"), None
    )
    health = {
        "issues": [{"code": "InsufficientNumberOfReplicas", "message": "0/2 ready", "resourceIds": ["igw"]}]
    }
    stubber.add_response(
        "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "DEGRADED", health=health), OURS
    )
    clock = VirtualClock()
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(
            clients=clients,
            cluster=CLUSTER,
            role_arn=gateway,
            values=GATEWAY_MODE,
            wait=operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic),
        )
    assert "is DEGRADED" in str(caught.value)
    assert "InsufficientNumberOfReplicas: 0/2 ready [igw]" in str(caught.value)


def test_wait_times_out(aws: AwsFixture) -> None:
    clients, stubber, _ = aws
    for _ in range(3):
        stubber.add_response(
            "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "CREATING"), OURS
        )
    clock = VirtualClock()
    waiter = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, poll_s=10, timeout_s=20)
    with pytest.raises(operations.AddonOperationError, match="timed out after 20 s"):
        operations.wait_until_settled(clients=clients, cluster=CLUSTER, waiter=waiter)


def test_update_and_delete(aws: AwsFixture) -> None:
    clients, stubber, _ = aws
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    stubber.add_response(
        "update_addon",
        {"update": {"id": "u1", "status": "InProgress", "type": "AddonUpdate"}},
        {
            "clusterName": CLUSTER,
            "addonName": pins.IGW_ADDON_NAME,
            "resolveConflicts": "PRESERVE",
            "configurationValues": '{"mode":"gateway","replicaCount":4}',
        },
    )
    result = operations.update(
        clients=clients,
        cluster=CLUSTER,
        values={**GATEWAY_MODE, "replicaCount": 4},
        version=None,
        resolve_conflicts="PRESERVE",
    )
    assert result["status"] == "InProgress"
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    stubber.add_response(
        "delete_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "DELETING"),
        {"clusterName": CLUSTER, "addonName": pins.IGW_ADDON_NAME, "preserve": True},
    )
    assert operations.delete(clients=clients, cluster=CLUSTER, preserve=True)["status"] == "DELETING"


def _expect_delete(stubber: Stubber, *statuses: str) -> None:
    """``delete``'s calls: the add-on found, ``DeleteAddon``, then one ``DescribeAddon`` per status
    (``""``: the add-on gone, ResourceNotFoundException)."""
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    stubber.add_response(
        "delete_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "DELETING"),
        {"clusterName": CLUSTER, "addonName": pins.IGW_ADDON_NAME, "preserve": False},
    )
    for status in statuses:
        if status:
            issues = [{"code": "ClusterUnreachable", "message": "finalizer stuck", "resourceIds": ["igw"]}]
            health = {"health": {"issues": issues}} if status == "DELETE_FAILED" else {}
            stubber.add_response(
                "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, status, **health), OURS
            )
        else:
            stubber.add_client_error(
                "describe_addon", "ResourceNotFoundException", "No addon", 404, expected_params=OURS
            )


def test_delete_waits_until_the_addon_is_gone(aws: AwsFixture) -> None:
    """``DeleteAddon`` only starts the removal: ``delete`` returned at once (the CLI exit 0, "deleting"),
    so ``igw addon delete && igw addon create`` met the add-on still DELETING, and a removal that went
    DELETE_FAILED was never reported. It polls until the add-on is gone now; a DEGRADED or ACTIVE read
    right after the call is not taken for the outcome."""
    clients, stubber, _ = aws
    _expect_delete(stubber, "ACTIVE", "DELETING", "DELETING", "")
    clock = VirtualClock()
    lines: list[str] = []
    waiter = operations.Waiter(
        sleep=clock.sleep, monotonic=clock.monotonic, poll_s=10, timeout_s=60, progress=lines.append
    )
    operations.delete(
        clients=clients, cluster=CLUSTER, preserve=False, wait=waiter, allow_config_deletion=True
    )
    assert clock.now == 30
    assert lines[-1] == f"{pins.IGW_ADDON_NAME}: deleted"


def test_a_deletion_that_fails_or_outlasts_the_timeout_is_reported(aws: AwsFixture) -> None:
    clients, stubber, _ = aws
    clock = VirtualClock()
    waiter = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, poll_s=10, timeout_s=20)
    _expect_delete(stubber, "DELETING", "DELETE_FAILED")
    with pytest.raises(operations.AddonOperationError) as failed:
        operations.delete(
            clients=clients, cluster=CLUSTER, preserve=False, wait=waiter, allow_config_deletion=True
        )
    assert str(failed.value).splitlines() == [
        f"{pins.IGW_ADDON_NAME} is DELETE_FAILED",
        "  - ClusterUnreachable: finalizer stuck [igw]",
    ]
    _expect_delete(stubber, "DELETING", "DELETING", "DELETING")
    with pytest.raises(operations.AddonOperationError, match="timed out after 20 s waiting for the deletion"):
        operations.delete(
            clients=clients, cluster=CLUSTER, preserve=False, wait=waiter, allow_config_deletion=True
        )


def test_cli_delete_waits_unless_told_not_to(
    aws: AwsFixture, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from igw.cli import addon as addon_cli

    clients, stubber, _ = aws
    monkeypatch.setattr(addon_cli, "_clients", lambda _args: clients)  # the Stubber's, not boto3's own
    argv = ["addon", "delete", "--cluster", CLUSTER, "--region", REGION, "--allow-config-deletion"]
    _expect_delete(stubber, "")
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == f"{pins.IGW_ADDON_NAME}: deleted from {CLUSTER}\n"
    _expect_delete(stubber)
    assert cli.main([*argv, "--no-wait"]) == 0
    assert capsys.readouterr().out == f"{pins.IGW_ADDON_NAME}: deleting from {CLUSTER}\n"


def test_delete_without_preserve_refuses_while_the_addon_installs_the_config_crd(
    aws: AwsFixture, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--preserve`` EKS removes the chart's InferenceGatewayConfig CRD unless it honours
    ``helm.sh/resource-policy: keep`` (unverifiable), and with the CRD every InferenceGatewayConfig and
    its gateway go. ``igw addon delete`` called ``DeleteAddon`` with no word; it refuses now (exit 1,
    no ``DeleteAddon``: the Stubber has none queued) and names the safe ways, and goes ahead with
    ``--preserve``, ``--allow-config-deletion`` or values that install no CRD."""
    from igw.cli import addon as addon_cli

    clients, stubber, _ = aws
    monkeypatch.setattr(addon_cli, "_clients", lambda _args: clients)
    argv = ["addon", "delete", "--cluster", CLUSTER, "--region", REGION, "--no-wait"]
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "refusing to delete igw-inference-gateway from" in err
    assert "deleting the CRD deletes every InferenceGatewayConfig" in err
    assert "gateway Deployment and load balancer Service" in err
    assert "igw addon delete --preserve" in err
    assert "--allow-config-deletion" in err
    stubber.assert_no_pending_responses()

    no_keep = json.dumps({"crds": {"keep": False}})
    stubber.add_response(
        "describe_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, configurationValues=no_keep),
        OURS,
    )
    with pytest.raises(operations.AddonOperationError, match=r"does not keep the CRD \(crds.keep: false\)"):
        operations.delete(clients=clients, cluster=CLUSTER, preserve=False)

    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    stubber.add_response(
        "delete_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "DELETING"),
        {"clusterName": CLUSTER, "addonName": pins.IGW_ADDON_NAME, "preserve": True},
    )
    assert cli.main([*argv, "--preserve"]) == 0
    no_crds = json.dumps({"crds": {"enabled": False}})
    stubber.add_response(
        "describe_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, configurationValues=no_crds),
        OURS,
    )
    stubber.add_response(
        "delete_addon",
        _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "DELETING"),
        {"clusterName": CLUSTER, "addonName": pins.IGW_ADDON_NAME, "preserve": False},
    )
    assert cli.main(argv) == 0
    stubber.assert_no_pending_responses()


def test_versions_sorted_newest_first(aws: AwsFixture) -> None:
    clients, stubber, _ = aws
    page = {
        "addons": [
            {
                "addonName": pins.IGW_ADDON_NAME,
                "addonVersions": [
                    {"addonVersion": "v1.5.0-eksbuild.1"},
                    {"addonVersion": "v2.0.0-eksbuild.2"},
                    {"addonVersion": "v2.0.0-eksbuild.10"},
                ],
            }
        ]
    }
    stubber.add_response(
        "describe_addon_versions", {**page, "nextToken": "t"}, {"addonName": pins.IGW_ADDON_NAME}
    )
    stubber.add_response(
        "describe_addon_versions", {"addons": []}, {"addonName": pins.IGW_ADDON_NAME, "nextToken": "t"}
    )
    versions = operations.sorted_versions(clients.addons.addon_versions(name=pins.IGW_ADDON_NAME))
    assert [v["addonVersion"] for v in versions] == [
        "v2.0.0-eksbuild.10",
        "v2.0.0-eksbuild.2",
        "v1.5.0-eksbuild.1",
    ]


@pytest.mark.parametrize(
    ("version", "minimum", "ok"),
    [
        ("v2.0.0-eksbuild.2", "v2.0.0-eksbuild.2", True),
        ("v2.0.0-eksbuild.1", "v2.0.0-eksbuild.2", False),
        ("v2.1.0-eksbuild.1", "v2.0.0-eksbuild.2", True),
        ("1.0.1-rc.1", "1.0.1", False),
    ],
)
def test_addon_version_order(version: str, minimum: str, ok: bool) -> None:
    assert addon_version.at_least(version, minimum) is ok


@pytest.mark.parametrize(
    ("newer", "older"),
    [
        ("1.0.1-rc.10", "1.0.1-rc.9"),
        ("1.0.1-rc.1", "1.0.1-beta.11"),
        ("1.0.1-alpha.1", "1.0.1-alpha"),
        ("1.0.1-alpha.beta", "1.0.1-alpha.2"),
        ("v1.2.10-eksbuild.1", "v1.2.9-eksbuild.1"),
    ],
)
def test_pre_releases_are_ordered_as_semver_orders_them(newer: str, older: str) -> None:
    """``1.0.1-rc.9`` sorted above ``1.0.1-rc.10`` (the pre-release compared as one string): ``igw addon
    versions`` listed the older Marketplace pre-release first, and a minimum of ``rc.10`` passed rc.9."""
    assert addon_version.at_least(newer, older)
    assert not addon_version.at_least(older, newer)
    listed = operations.sorted_versions([{"addonVersion": older}, {"addonVersion": newer}])
    assert [item["addonVersion"] for item in listed] == [newer, older]


def test_addon_version_rejects_garbage() -> None:
    with pytest.raises(addon_version.AddonVersionError, match="'latest' is not an add-on version"):
        addon_version.AddonVersion.parse("latest")


def test_cli_rejects_bad_configuration_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "values.yaml"
    bad.write_text("replicaCount: [\n")
    code = cli.main(
        [
            "addon",
            "create",
            "--cluster",
            CLUSTER,
            "--role-arn",
            "arn:aws:iam::123456789012:role/x",
            "--configuration-values",
            str(bad),
            "--region",
            REGION,
        ]
    )
    assert code == 2
    assert "not valid JSON or YAML" in capsys.readouterr().err


def test_cli_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["addon", "package", "--destination", str(tmp_path)]) == 0
    archive, schema = capsys.readouterr().out.split()
    assert archive.endswith(f"{pins.CHART_NAME}-{pins.CHART_VERSION}.tgz")
    assert json.loads(Path(schema).read_text()) == json.loads(
        (paths.REPO_ROOT / schemas.CONFIGURATION_SCHEMA_FILE).read_text()
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("replicaCount: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 64 levels"),
        (
            billion_laughs(9) + "gateway: {config: {spec: {x: *a8}}}\n",
            "more than 1,000,000 values",
        ),
    ],
    ids=["nested-100000-deep", "alias-bomb"],
)
def test_cli_refuses_configuration_values_of_a_hostile_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, reason: str
) -> None:
    """A values file nested 100,000 levels deep ended ``igw addon create`` in a RecursionError
    traceback (exit 1); now it is refused like every configuration file, before any AWS call."""
    hostile = tmp_path / "values.yaml"
    hostile.write_text(text)
    code = cli.main(
        ["addon", "create", "--cluster", CLUSTER, "--configuration-values", str(hostile), "--region", REGION]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{hostile}: {reason}" in err
    assert "Traceback" not in err


def _expect_update(stubber: Stubber, update_id: str) -> None:
    """``update_addon`` for our add-on changing ``replicaCount`` to 4 under ``--resolve-conflicts NONE``."""
    stubber.add_response(
        "update_addon",
        {"update": {"id": update_id, "status": "InProgress", "type": "AddonUpdate"}},
        {
            "clusterName": CLUSTER,
            "addonName": pins.IGW_ADDON_NAME,
            "resolveConflicts": "NONE",
            "configurationValues": '{"mode":"gateway","replicaCount":4}',
        },
    )


def test_an_update_eks_refuses_fails_though_the_addon_stays_active(aws: AwsFixture) -> None:
    """``update`` waited on the add-on's status: an update EKS refuses for a conflict leaves the add-on
    ACTIVE at its old configuration, so the wait read ACTIVE and reported success. It waits on
    ``DescribeUpdate`` now and fails with the update's errors."""
    clients, stubber, _ = aws
    update = {"name": CLUSTER, "updateId": "u3", "addonName": pins.IGW_ADDON_NAME}
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    _expect_update(stubber, "u3")
    stubber.add_response("describe_update", {"update": {"id": "u3", "status": "InProgress"}}, update)
    conflict = (
        "Conflicts found when trying to apply. Will not continue due to resolve conflicts mode. "
        "Conflicts: Deployment.apps inference-gateway - .spec.replicas"
    )
    stubber.add_response(
        "describe_update",
        {
            "update": {
                "id": "u3",
                "status": "Failed",
                "type": "AddonUpdate",
                "errors": [{"errorCode": "ConfigurationConflict", "errorMessage": conflict}],
            }
        },
        update,
    )
    clock = VirtualClock()
    progress: list[str] = []
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.update(
            clients=clients,
            cluster=CLUSTER,
            values={**GATEWAY_MODE, "replicaCount": 4},
            version=None,
            resolve_conflicts="NONE",
            wait=operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, progress=progress.append),
        )
    assert str(caught.value).splitlines() == [
        f"update u3 of {pins.IGW_ADDON_NAME} on {CLUSTER} is Failed",
        f"  - ConfigurationConflict: {conflict}",
    ]
    assert progress == [
        f"{pins.IGW_ADDON_NAME} update u3: InProgress",
        f"{pins.IGW_ADDON_NAME} update u3: Failed",
    ]


def test_a_successful_update_then_waits_for_the_addon_within_the_same_timeout(aws: AwsFixture) -> None:
    """Once the update is ``Successful`` the add-on's own status decides (ACTIVE, or DEGRADED with its
    health issues), and the time the update took counts against ``--timeout``."""
    clients, stubber, _ = aws
    update = {"name": CLUSTER, "updateId": "u4", "addonName": pins.IGW_ADDON_NAME}
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    _expect_update(stubber, "u4")
    stubber.add_response("describe_update", {"update": {"id": "u4", "status": "InProgress"}}, update)
    stubber.add_response("describe_update", {"update": {"id": "u4", "status": "Successful"}}, update)
    for _ in range(3):  # at 10, 20 and 30 s: the update's 10 s count
        stubber.add_response(
            "describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION, "UPDATING"), OURS
        )
    clock = VirtualClock()
    with pytest.raises(operations.AddonOperationError, match="timed out after 30 s waiting for ACTIVE"):
        operations.update(
            clients=clients,
            cluster=CLUSTER,
            values={**GATEWAY_MODE, "replicaCount": 4},
            version=None,
            resolve_conflicts="NONE",
            wait=operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, poll_s=10, timeout_s=30),
        )
    assert clock.now == 30


def test_cli_update_reports_the_failed_update_and_names_the_update_without_waiting(
    aws: AwsFixture, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw addon update`` exits 1 with the update's error; with ``--no-wait`` it prints the update's id
    (it printed ``igw-inference-gateway : InProgress``, an empty version, from the update request)."""
    from igw.cli import addon as addon_cli

    clients, stubber, _ = aws
    monkeypatch.setattr(addon_cli, "_clients", lambda _args: clients)  # the Stubber's, not boto3's own
    update = {"name": CLUSTER, "updateId": "u5", "addonName": pins.IGW_ADDON_NAME}
    argv = ["addon", "update", "--cluster", CLUSTER, "--resolve-conflicts", "NONE", "--region", REGION]
    values = ["--configuration-values", '{"mode": "gateway", "replicaCount": 4}']
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    _expect_update(stubber, "u5")
    stubber.add_response(
        "describe_update",
        {
            "update": {
                "id": "u5",
                "status": "Failed",
                "errors": [{"errorCode": "AccessDenied", "errorMessage": "no"}],
            }
        },
        update,
    )
    assert cli.main([*argv, *values]) == 1
    assert (
        "update u5 of igw-inference-gateway on igw is Failed\n  - AccessDenied: no" in capsys.readouterr().err
    )
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    _expect_update(stubber, "u6")
    assert cli.main([*argv, *values, "--no-wait"]) == 0
    assert capsys.readouterr().out == f"{pins.IGW_ADDON_NAME} update u6: InProgress\n"


def test_create_refuses_preserve_before_any_call(aws: AwsFixture) -> None:
    """``CreateAddon`` refuses PRESERVE (InvalidParameterException), after every pre-check had run."""
    clients, _, _ = aws
    policy: Any = "PRESERVE"  # what an untyped caller (the CLI before its choices were narrowed) passed
    with pytest.raises(operations.AddonInputError, match="PRESERVE is not supported by CreateAddon"):
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=None, values={}, resolve_conflicts=policy
        )


@pytest.mark.parametrize(
    ("status", "health", "says"),
    [
        ("ACTIVE", {}, "(v0.1.0-eksbuild.1, ACTIVE): change it with igw addon update"),
        (
            "CREATE_FAILED",
            {
                "issues": [
                    {"code": "AdmissionRequestDenied", "message": "denied by policy", "resourceIds": ["igw"]}
                ]
            },
            "(v0.1.0-eksbuild.1, CREATE_FAILED): AdmissionRequestDenied: denied by policy [igw]; fix it with "
            "igw addon update, or igw addon delete it and create again",
        ),
        ("DELETING", {}, "(v0.1.0-eksbuild.1, DELETING): create again once it is gone"),
    ],
)
def test_create_names_an_addon_already_installed_before_any_change(
    aws: AwsFixture, status: str, health: dict[str, Any], says: str
) -> None:
    """``create`` on a cluster that has the add-on ran every other pre-check and then got ``CreateAddon``'s
    ResourceInUseException "Addon already exists.", a CREATE_FAILED one's health issues unseen."""
    clients, stubber, _ = aws
    stubber.add_response(
        "describe_addon", _addon(pins.IGW_ADDON_NAME, "v0.1.0-eksbuild.1", status, health=health), OURS
    )
    _published(stubber)
    for dependency in pins.DEPENDENCY_ADDONS:
        stubber.add_response(
            "describe_addon",
            _addon(dependency.name, dependency.minimum),
            {"clusterName": CLUSTER, "addonName": dependency.name},
        )
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(clients=clients, cluster=CLUSTER, role_arn=None, values={})
    assert f"  - {pins.IGW_ADDON_NAME} is already installed on {CLUSTER} {says}" in str(caught.value)


def _ours_absent(stubber: Stubber) -> None:
    """``create``'s first pre-check read: our add-on not installed."""
    stubber.add_client_error(
        "describe_addon", "ResourceNotFoundException", "No addon", 404, expected_params=OURS
    )


@pytest.mark.parametrize(
    ("published", "says"),
    [
        (
            ("v0.3.0-eksbuild.1", "v0.2.0-eksbuild.1"),
            f"{pins.IGW_ADDON_NAME} v0.1.0-eksbuild.1 is not published for Kubernetes {K8S} "
            f"(cluster {CLUSTER}) in {REGION}; published: v0.3.0-eksbuild.1, v0.2.0-eksbuild.1 "
            f"(igw addon versions --kubernetes-version {K8S})",
        ),
        (
            (),
            f"{pins.IGW_ADDON_NAME} has no version published for Kubernetes {K8S} (cluster {CLUSTER}) "
            f"in {REGION}",
        ),
    ],
    ids=["other-versions", "none-in-region"],
)
def test_create_refuses_a_version_not_published_for_the_clusters_kubernetes(
    aws: AwsFixture, published: tuple[str, ...], says: str
) -> None:
    """A version EKS does not offer for the cluster's Kubernetes version (or a region without the
    add-on) passed every pre-check and was refused by ``CreateAddon`` (InvalidParameterException),
    without the versions that would do."""
    clients, stubber, _ = aws
    _ours_absent(stubber)
    _published(stubber, published)
    for dependency in pins.DEPENDENCY_ADDONS:
        stubber.add_response(
            "describe_addon",
            _addon(dependency.name, dependency.minimum),
            {"clusterName": CLUSTER, "addonName": dependency.name},
        )
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=None, values={}, version="v0.1.0-eksbuild.1"
        )
    assert str(caught.value).splitlines()[1:] == [f"  - {says}"]


def test_update_refuses_a_version_not_published_for_the_clusters_kubernetes(aws: AwsFixture) -> None:
    """``update --version`` checks the same, paging through ``DescribeAddonVersions``: a version on the
    second page is found."""
    clients, stubber, _ = aws
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, "v0.1.0-eksbuild.1"), OURS)
    query = {"addonName": pins.IGW_ADDON_NAME, "kubernetesVersion": K8S}
    page = {
        "addons": [
            {"addonName": pins.IGW_ADDON_NAME, "addonVersions": [{"addonVersion": "v0.3.0-eksbuild.1"}]}
        ]
    }
    stubber.add_response("describe_addon_versions", {**page, "nextToken": "p2"}, query)
    stubber.add_response("describe_addon_versions", {"addons": []}, {**query, "nextToken": "p2"})
    with pytest.raises(
        operations.AddonOperationError, match=r"v0\.2\.0-eksbuild\.1 is not published for Kubernetes"
    ):
        operations.update(clients=clients, cluster=CLUSTER, values=None, version="v0.2.0-eksbuild.1")
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, "v0.1.0-eksbuild.1"), OURS)
    stubber.add_response("describe_addon_versions", {"addons": [], "nextToken": "p2"}, query)
    stubber.add_response("describe_addon_versions", page, {**query, "nextToken": "p2"})
    stubber.add_response(
        "update_addon",
        {"update": {"id": "u7", "status": "InProgress"}},
        {**OURS, "addonVersion": "v0.3.0-eksbuild.1", "resolveConflicts": "OVERWRITE"},
    )
    update = operations.update(clients=clients, cluster=CLUSTER, values=None, version="v0.3.0-eksbuild.1")
    assert update["id"] == "u7"


def test_a_throttled_poll_is_polled_again_until_the_timeout(aws: AwsFixture) -> None:
    """botocore retries a throttled ``DescribeAddon`` 3 times (standard mode); one that outlasted that
    ended the wait with exit 1 while the add-on went on installing. The wait polls again now, and
    only a non-transient error (access denied) or the timeout ends it."""
    clients, stubber, _ = aws
    stubber.add_client_error(
        "describe_addon", "ThrottlingException", "Rate exceeded", 400, expected_params=OURS
    )
    stubber.add_client_error("describe_addon", "ServerException", "Internal error", 500, expected_params=OURS)
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    clock = VirtualClock()
    progress: list[str] = []
    waiter = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, progress=progress.append)
    assert (
        operations.wait_until_settled(clients=clients, cluster=CLUSTER, waiter=waiter)["status"] == "ACTIVE"
    )
    assert progress == [
        "DescribeAddon: ThrottlingException: Rate exceeded (polling again)",
        "DescribeAddon: ServerException: Internal error (polling again)",
        f"{pins.IGW_ADDON_NAME} {pins.IGW_ADDON_VERSION}: ACTIVE",
    ]
    assert clock.now == 20
    for _ in range(3):
        stubber.add_client_error(
            "describe_addon", "ThrottlingException", "Rate exceeded", 400, expected_params=OURS
        )
    short = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic, poll_s=10, timeout_s=20)
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.wait_until_settled(clients=clients, cluster=CLUSTER, waiter=short)
    assert str(caught.value).splitlines() == [
        "timed out after 20 s waiting for ACTIVE",
        "  - last error: DescribeAddon: ThrottlingException: Rate exceeded",
        "  - AWS throttled or failed the call through botocore's retries with backoff: wait a minute and "
        "run again, or set AWS_MAX_ATTEMPTS=10 to retry longer",
    ]
    stubber.add_client_error(
        "describe_addon", "AccessDeniedException", "not authorized", 403, expected_params=OURS
    )
    with pytest.raises(AddonApiError, match="AccessDeniedException"):
        operations.wait_until_settled(clients=clients, cluster=CLUSTER, waiter=short)


def test_a_throttled_update_poll_is_polled_again(aws: AwsFixture) -> None:
    """The same for ``DescribeUpdate`` while an update runs."""
    clients, stubber, _ = aws
    update = {"name": CLUSTER, "updateId": "u8", "addonName": pins.IGW_ADDON_NAME}
    stubber.add_client_error(
        "describe_update", "ThrottlingException", "Rate exceeded", 400, expected_params=update
    )
    stubber.add_response("describe_update", {"update": {"id": "u8", "status": "Successful"}}, update)
    stubber.add_response("describe_addon", _addon(pins.IGW_ADDON_NAME, pins.IGW_ADDON_VERSION), OURS)
    clock = VirtualClock()
    waiter = operations.Waiter(sleep=clock.sleep, monotonic=clock.monotonic)
    settled = operations.wait_for_update(clients=clients, cluster=CLUSTER, update_id="u8", waiter=waiter)
    assert (settled["status"], clock.now) == ("ACTIVE", 10)


@pytest.mark.parametrize(
    ("identity", "statements", "says"),
    [
        (
            "pod-identity",
            [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
            "does not let EKS Pod Identity assume it: its trust policy needs an Allow for the service "
            "pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession",
        ),
        (
            "pod-identity",
            [{**POD_IDENTITY_TRUST, "Action": "sts:AssumeRole"}],
            "pods.eks.amazonaws.com with sts:TagSession",
        ),
        (
            "pod-identity",
            [{**POD_IDENTITY_TRUST, "Effect": "Deny"}],
            "pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession",
        ),
        (
            "irsa",
            [POD_IDENTITY_TRUST],
            "does not let the cluster's service accounts assume it (IRSA): its trust policy needs an Allow "
            "for the OIDC provider oidc.eks.",
        ),
        (
            "irsa",
            [_irsa_trust("https://oidc.eks.us-west-2.amazonaws.com/id/ANOTHERCLUSTER")],
            "with sts:AssumeRoleWithWebIdentity",
        ),
    ],
    ids=[
        "pod-identity-other-service",
        "pod-identity-no-tag-session",
        "pod-identity-deny",
        "irsa-no-oidc",
        "irsa-other-cluster",
    ],
)
def test_a_role_whose_trust_policy_the_gateway_cannot_use_is_refused_before_any_change(
    aws: AwsFixture,
    moto_aws: MotoAccount,
    identity: operations.Identity,
    statements: list[dict[str, Any]],
    says: str,
) -> None:
    """The pre-check only asked that the role exist: one that does not trust EKS Pod Identity (or, for
    IRSA, the cluster's OIDC provider) was bound, the add-on went ACTIVE, and the gateway's AWS calls
    failed at run time."""
    clients, stubber, _ = aws
    iam = moto_aws[1]
    name = f"untrusting-{len(iam.list_roles()['Roles'])}"
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=_trust(*statements))["Role"]["Arn"]
    _dependencies_installed(stubber, agent=identity == "pod-identity")
    with pytest.raises(operations.AddonOperationError) as caught:
        operations.create(
            clients=clients, cluster=CLUSTER, role_arn=role, values=GATEWAY_MODE, identity=identity
        )
    problems = str(caught.value).splitlines()[1:]
    assert len(problems) == 1
    assert problems[0].startswith(f"  - gateway IAM role {role} ")
    assert says in problems[0]


@pytest.mark.parametrize("action", ["update", "delete"])
def test_update_and_delete_name_a_missing_cluster_not_a_missing_addon(aws: AwsFixture, action: str) -> None:
    """EKS's ``DescribeAddon`` answers ResourceNotFoundException ("No cluster found for name: nope.") for a
    cluster that does not exist, as for a missing add-on; ``update``/``delete`` said the add-on "is not
    installed on nope", sending the operator to ``create``. The cluster is looked up (moto) to tell them
    apart; an existing cluster without the add-on still reads "not installed"."""
    clients, stubber, _ = aws
    for cluster, says in (
        ("nope", f"cluster 'nope' does not exist in {REGION}"),
        (CLUSTER, f"{pins.IGW_ADDON_NAME} is not installed on {CLUSTER}"),
    ):
        stubber.add_client_error(
            "describe_addon",
            "ResourceNotFoundException",
            f"No cluster found for name: {cluster}."
            if cluster == "nope"
            else "No addon: igw-inference-gateway",
            404,
            expected_params={"clusterName": cluster, "addonName": pins.IGW_ADDON_NAME},
        )
        call = (
            functools.partial(operations.update, values=None, version=None)
            if action == "update"
            else functools.partial(operations.delete, preserve=False)
        )
        with pytest.raises(operations.AddonOperationError) as caught:
            call(clients=clients, cluster=cluster)
        assert str(caught.value).splitlines() == [f"cannot {action}", f"  - {says}"]


def test_create_meeting_an_addon_installed_since_the_pre_checks_says_to_update(
    aws: AwsFixture, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pre-checks found no add-on, then ``CreateAddon`` answered ResourceInUseException "Addon already
    exists." (another ``igw addon create``, the CDK app or the console installed it in between): the
    bare API error was printed, exit 1, with no word of ``update``."""
    from igw.cli import addon as addon_cli

    clients, stubber, _ = aws
    monkeypatch.setattr(addon_cli, "_clients", lambda _args: clients)
    _dependencies_installed(stubber, agent=False)
    stubber.add_client_error("create_addon", "ResourceInUseException", "Addon already exists.", 409)
    assert cli.main(["addon", "create", "--cluster", CLUSTER, "--region", REGION]) == 1
    assert capsys.readouterr().err == (
        f"igw addon: {pins.IGW_ADDON_NAME} could not be created on {CLUSTER}: CreateAddon: "
        "ResourceInUseException: Addon already exists.\n"
        f"  - the add-on was installed on {CLUSTER} after the pre-checks read it absent (another igw addon "
        "create, the CDK app, the console): see it with aws eks describe-addon, change it with igw addon "
        "update\n"
    )
