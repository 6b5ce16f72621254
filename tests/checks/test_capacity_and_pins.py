"""IGW-PF030 (pinned add-on versions published for the cluster's Kubernetes version) and IGW-PF031
(HyperPod Service Quotas): the AWS reads through botocore Stubbers in the services' response shapes,
the verdicts through the check runner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from igw.addon import pins
from igw.checks.framework import Check, CheckContext, run_check
from igw.checks.inventory import NOT_COLLECTED, AwsView, EksCluster, InstanceQuota, Inventory, Missing
from igw.checks.model import Result, Status
from igw.checks.preflight import instance_quotas, pinned_versions
from igw.checks.sources import aws_api
from igw.checks.sources.documents import static_view

EKS_ARN = "arn:aws:eks:us-west-2:111111111111:cluster/hp"
CLUSTER = EksCluster(name="hp", authentication_mode="API", subnet_ids=(), oidc_issuer=None, version="1.34")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _inventory(
    *,
    published_addon_versions: Mapping[str, Sequence[Mapping[str, Any]]] | Missing = NOT_COLLECTED,
    instance_quotas: Sequence[InstanceQuota] | Missing = NOT_COLLECTED,
) -> Inventory:
    view = replace(
        AwsView.absent("test"),
        cluster=CLUSTER,
        published_addon_versions=published_addon_versions,
        instance_quotas=instance_quotas,
    )
    return Inventory(kube=static_view([], source="test"), aws=view, source="test")


def _run(check: Check, inventory: Inventory) -> list[Result]:
    return run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))


def _compatible(version: str, *, default: bool = False, cluster: str = "1.34") -> dict[str, object]:
    return {
        "addonVersion": version,
        "compatibilities": [{"clusterVersion": cluster, "defaultVersion": default}],
    }


def test_pinned_versions_pass_warn_and_fail() -> None:
    published = {name: [_compatible(version, default=True)] for name, version in pins.pinned_addons()}
    published[pins.VPC_CNI_ADDON] = [_compatible("v1.99.0-eksbuild.1", default=True)]
    published["metrics-server"] = [
        _compatible("v0.8.0-eksbuild.1", default=True),
        _compatible("v0.7.2-eksbuild.4"),
    ]
    results = {
        r.resource: r for r in _run(pinned_versions.CHECK, _inventory(published_addon_versions=published))
    }
    assert results["EKS add-on vpc-cni (Kubernetes 1.34)"].status is Status.FAIL
    assert (
        "newest compatible is v1.99.0-eksbuild.1" in results["EKS add-on vpc-cni (Kubernetes 1.34)"].message
    )
    assert results["EKS add-on metrics-server (Kubernetes 1.34)"].status is Status.WARN
    assert results["EKS add-on cert-manager (Kubernetes 1.34)"].status is Status.PASS
    assert len(results) == len(pins.pinned_addons())


def test_pinned_versions_skip_when_not_collected() -> None:
    (result,) = _run(pinned_versions.CHECK, _inventory(published_addon_versions=Missing("denied")))
    assert result.status is Status.SKIP


@pytest.mark.parametrize(
    ("quota", "status"),
    [(2.0, Status.PASS), (0.0, Status.FAIL), (None, Status.WARN)],
)
def test_instance_quota_verdicts(quota: float | None, status: Status) -> None:
    quotas = [InstanceQuota(instance_type="ml.p5.48xlarge", requested=2, quota=quota)]
    (result,) = _run(instance_quotas.CHECK, _inventory(instance_quotas=quotas))
    assert result.status is status
    assert "ml.p5.48xlarge for cluster usage" in result.resource


def _stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(service, region_name="us-west-2")
    return client, Stubber(client)


def test_quotas_are_read_for_the_hyperpod_cluster_of_this_eks_cluster() -> None:
    eks, eks_stub = _stubbed("eks")
    sagemaker, sm_stub = _stubbed("sagemaker")
    quotas, sq_stub = _stubbed("service-quotas")
    eks_stub.add_response("describe_cluster", {"cluster": {"name": "hp", "arn": EKS_ARN}}, {"name": "hp"})
    summary = {
        "ClusterArn": "arn:aws:sagemaker:us-west-2:111111111111:cluster/abc",
        "ClusterStatus": "InService",
        "CreationTime": NOW,
    }
    sm_stub.add_response(
        "list_clusters",
        {
            "ClusterSummaries": [{**summary, "ClusterName": "hp-gpu"}, {**summary, "ClusterName": "other"}],
            "NextToken": "",
        },
        {},
    )

    def described(name: str, eks_arn: str, groups: list[dict[str, object]]) -> dict[str, object]:
        return {
            "ClusterArn": summary["ClusterArn"],
            "ClusterName": name,
            "ClusterStatus": "InService",
            "InstanceGroups": groups,
            "Orchestrator": {"Eks": {"ClusterArn": eks_arn}},
        }

    group = {"InstanceGroupName": "p5", "InstanceType": "ml.p5.48xlarge", "TargetCount": 2, "CurrentCount": 0}
    g5 = {"InstanceGroupName": "g5", "InstanceType": "ml.g5.12xlarge", "TargetCount": 1, "CurrentCount": 1}
    sm_stub.add_response(
        "describe_cluster", described("hp-gpu", EKS_ARN, [group, g5]), {"ClusterName": "hp-gpu"}
    )
    other = described("other", "arn:aws:eks:us-west-2:111111111111:cluster/other", [group])
    sm_stub.add_response("describe_cluster", other, {"ClusterName": "other"})
    sq_stub.add_response(
        "list_service_quotas",
        {
            "Quotas": [
                {"QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 0.0, "QuotaCode": "L-1"},
                {"QuotaName": "ml.g5.12xlarge for cluster usage", "Value": 4.0, "QuotaCode": "L-2"},
                {"QuotaName": "ml.p5.48xlarge for endpoint usage", "Value": 8.0, "QuotaCode": "L-3"},
            ]
        },
        {"ServiceCode": "sagemaker"},
    )
    account = aws_api.AwsAccount(clients={"eks": eks, "sagemaker": sagemaker, "service-quotas": quotas})
    with eks_stub, sm_stub, sq_stub:
        found = aws_api._instance_quotas(account, "hp")
    assert found == [
        InstanceQuota(instance_type="ml.g5.12xlarge", requested=1, quota=4.0),
        InstanceQuota(instance_type="ml.p5.48xlarge", requested=2, quota=0.0),
    ]
    results = _run(instance_quotas.CHECK, _inventory(instance_quotas=found))
    assert [r.status for r in results] == [Status.PASS, Status.FAIL]


def test_published_versions_are_read_per_pin_for_the_cluster_version() -> None:
    eks, stub = _stubbed("eks")
    for name, version in pins.pinned_addons():
        stub.add_response(
            "describe_addon_versions",
            {"addons": [{"addonName": name, "addonVersions": [_compatible(version)]}]},
            {"addonName": name, "kubernetesVersion": "1.34"},
        )
    with stub:
        published = aws_api._published_versions(aws_api.AwsAccount(clients={"eks": eks}), "1.34")
    assert set(published) == {name for name, _ in pins.pinned_addons()}
    stub.assert_no_pending_responses()


def test_injected_accounts_never_reach_unlisted_services() -> None:
    account = aws_api.AwsAccount(clients={"eks": object()})
    assert account.provides("eks")
    assert not account.provides("service-quotas")
    assert aws_api.AwsAccount().provides("service-quotas")
