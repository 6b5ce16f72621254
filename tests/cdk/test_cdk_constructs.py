"""One construct at a time, each in a bare stack (fast: no cluster, no kubectl layer)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from cdk.config import (
    AddonConfig,
    GatewayConfigManifest,
    HyperPodConfig,
    HyperPodDependenciesConfig,
    ImageConfig,
    InstanceGroupConfig,
    NetworkConfig,
)
from cdk.constructs.aws_inference_addon import AwsInferenceAddon
from cdk.constructs.gateway_config_manifest import GatewayConfig, InvalidGatewayConfigError
from cdk.constructs.gateway_image import GatewayImage
from cdk.constructs.hyperpod_cluster import HyperPodCluster, lifecycle_bucket_name
from cdk.constructs.hyperpod_dependencies import HyperPodDependencies, health_agent_image
from cdk.constructs.igw_chart import IgwChart
from cdk.constructs.network import Network
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import aws_addon, configuration, pins
from igw.operator.placement import HYPERPOD_NODE_LABEL

ENV = cdk.Environment(account="111111111111", region="us-west-2")


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Test", env=ENV)


def _imported_cluster(stack: cdk.Stack) -> eks.ICluster:
    """An existing cluster with a kubectl provider (what charts and manifests are applied through)."""
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Kubectl",
        service_token="arn:aws:lambda:us-west-2:111111111111:function:kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::111111111111:role/kubectl"),
    )
    return eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="igw", kubectl_provider=provider
    )


def test_new_network_tags_subnets_and_logs_flows() -> None:
    stack = _stack()
    Network(
        stack,
        "Net",
        config=NetworkConfig(cidr="10.1.0.0/16"),
        availability_zones=["us-west-2a", "us-west-2b"],
        cluster_name="igw",
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.1.0.0/16"})
    template.resource_count_is("AWS::EC2::Subnet", 4)
    template.resource_count_is("AWS::EC2::FlowLog", 1)
    template.has_resource_properties(
        "AWS::EC2::Subnet",
        {"Tags": assertions.Match.array_with([{"Key": "kubernetes.io/cluster/igw", "Value": "shared"}])},
    )


def test_imported_network_creates_nothing() -> None:
    stack = _stack()
    network = Network(
        stack,
        "Net",
        config=NetworkConfig(
            vpc_id="vpc-0123456789abcdef0",
            private_subnet_ids=("subnet-0123456789abcdef0", "subnet-0123456789abcdef1"),
        ),
        availability_zones=["us-west-2a", "us-west-2b"],
        cluster_name="igw",
    )
    assert [s.subnet_id for s in network.private_subnets] == [
        "subnet-0123456789abcdef0",
        "subnet-0123456789abcdef1",
    ]
    assert assertions.Template.from_stack(stack).to_json().get("Resources", {}) == {}


def test_pod_identity_role_trusts_eks_pods_with_session_tags() -> None:
    stack = _stack()
    role = WorkloadRole(
        stack,
        "Role",
        cluster=_imported_cluster(stack),
        identity="podIdentity",
        namespace="ns",
        service_account="sa",
        description="test",
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ],
                "Version": "2012-10-17",
            }
        },
    )
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"ClusterName": "igw", "Namespace": "ns", "ServiceAccount": "sa"}
    )
    assert role.association is not None


def test_irsa_role_needs_the_oidc_provider() -> None:
    stack = _stack()
    with pytest.raises(ValueError, match="OIDC provider"):
        WorkloadRole(
            stack,
            "Role",
            cluster=_imported_cluster(stack),
            identity="irsa",
            namespace="ns",
            service_account="sa",
            description="t",
        )


def _oidc(stack: cdk.Stack) -> iam.IOidcProvider:
    return eks.OidcProviderNative.from_oidc_provider_arn(
        stack, "Oidc", "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X"
    )


GATEWAY_CONFIG = GatewayConfigManifest(
    name="gw",
    namespace="models",
    spec={
        "bbr": {"enabled": True},
        "schedulers": [{"name": "a", "modelName": "m1", "modelSelector": {"matchLabels": {"app": "a"}}}],
    },
)


def _chart_stack(
    config: AddonConfig, *, image: ImageConfig | None = None, certificate_arn: str | None = None
) -> cdk.Stack:
    stack = _stack()
    gateway_image = GatewayImage(stack, "Image", config=image or ImageConfig(repository="r.example/igw"))
    IgwChart(
        stack,
        "Gateway",
        cluster=_imported_cluster(stack),
        config=config,
        gateway_config=GATEWAY_CONFIG,
        image=gateway_image,
        certificate_arn=certificate_arn,
        identity="podIdentity",
        oidc_provider=None,
    )
    return stack


def _chart_values(stack: cdk.Stack) -> dict[str, Any]:
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Addon", 0)
    (chart,) = template.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    props = chart["Properties"]
    assert props["Release"] == pins.CHART_NAME
    assert props["Namespace"] == pins.ADDON_NAMESPACE
    values: dict[str, Any] = json.loads(props["Values"])
    return values


def test_igw_chart_values_in_operator_mode_carry_the_image_and_nothing_per_config() -> None:
    stack = _chart_stack(
        AddonConfig(configuration_values={"operator": {"replicaCount": 3}}),
        image=ImageConfig(repository="111111111111.dkr.ecr.us-west-2.amazonaws.com/igw", tag="1.2.3"),
        certificate_arn="arn:aws:acm:us-west-2:111111111111:certificate/abc",
    )
    values = _chart_values(stack)
    assert values == {
        "mode": "operator",
        "operator": {"replicaCount": 3, "awsRegion": "us-west-2"},  # the stack's: its ACM calls
        "image": {"repository": "111111111111.dkr.ecr.us-west-2.amazonaws.com/igw", "tag": "1.2.3"},
        "gateway": {"cloudWatch": {"enabled": True}},  # the operator's gateway pods send EMF to the agent
    }, (
        "the served config and the certificate travel in the InferenceGatewayConfig; "
        "the operator's role is bound by Pod Identity"
    )


def test_igw_chart_values_in_gateway_mode_carry_image_served_config_and_certificate() -> None:
    stack = _chart_stack(
        AddonConfig(configuration_values={"mode": "gateway", "replicaCount": 4}),
        image=ImageConfig(repository="111111111111.dkr.ecr.us-west-2.amazonaws.com/igw", tag="1.2.3"),
        certificate_arn="arn:aws:acm:us-west-2:111111111111:certificate/abc",
    )
    values = _chart_values(stack)
    assert values["mode"] == "gateway"
    assert values["replicaCount"] == 4
    assert values["image"] == {
        "repository": "111111111111.dkr.ecr.us-west-2.amazonaws.com/igw",
        "tag": "1.2.3",
    }
    assert values["gateway"]["config"]["namespace"] == "models"
    assert values["gateway"]["config"]["spec"]["schedulers"][0]["modelName"] == "m1"
    assert values["service"]["tls"]["certificateArn"] == "arn:aws:acm:us-west-2:111111111111:certificate/abc"
    assert "serviceAccount" not in values, "the gateway calls no AWS API: no role"


def test_gateway_config_manifest_carries_the_certificate_and_validates_a_token_as_an_arn() -> None:
    stack = _stack()
    arn = cdk.CfnParameter(stack, "SomeCertificate").value_as_string
    GatewayConfig(stack, "Config", cluster=_imported_cluster(stack), config=GATEWAY_CONFIG, acm_arn=arn)
    (resource,) = (
        assertions.Template.from_stack(stack).find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    )
    parts = resource["Properties"]["Manifest"]["Fn::Join"][1]
    assert parts[parts.index({"Ref": "SomeCertificate"}) - 1].endswith('"tls":{"acmArn":"')
    other = _stack()
    with pytest.raises(InvalidGatewayConfigError, match="acmArn"):
        GatewayConfig(
            other, "Bad", cluster=_imported_cluster(other), config=GATEWAY_CONFIG, acm_arn="not-an-arn"
        )


def test_igw_chart_rejects_invalid_values_at_synth() -> None:
    with pytest.raises(configuration.ConfigurationValuesError, match=r"service\.scheme"):
        _chart_stack(AddonConfig(configuration_values={"service": {"scheme": "public"}}))


def test_igw_chart_rejects_aws_addon_keys() -> None:
    with pytest.raises(configuration.ConfigurationValuesError, match="executionRoleArn"):
        _chart_stack(AddonConfig(configuration_values={"executionRoleArn": "arn:aws:iam::1:role/x"}))


def test_gateway_image_is_a_docker_asset_from_the_gateway_dockerfile() -> None:
    stack = _stack()
    image = GatewayImage(stack, "Image", config=ImageConfig())
    assert image.asset is not None
    app = stack.node.root
    assert isinstance(app, cdk.App)
    assembly = app.synth()
    manifest = json.loads((Path(assembly.directory) / "Test.assets.json").read_text())
    (docker,) = manifest["dockerImages"].values()
    assert docker["source"]["dockerFile"] == "gateway_src/Dockerfile"
    assert docker["source"]["platform"] == "linux/amd64"
    staged = Path(assembly.directory) / docker["source"]["directory"]
    staged_names = sorted(p.name for p in staged.iterdir())
    assert staged_names == [
        ".dockerignore",
        "README.md",
        "build_backend",
        "gateway_src",
        "pyproject.toml",
        "setup.py",
    ]
    # every top-level path the Dockerfile copies from the context is in the staged context
    copied = {
        source.split("/")[0]
        for line in (Path(__file__).parents[2] / "gateway_src" / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    }
    assert copied <= set(staged_names), sorted(copied - set(staged_names))


def _aws_addon_stack(config: AddonConfig) -> assertions.Template:
    stack = _stack()
    AwsInferenceAddon(
        stack,
        "Addon",
        cluster=_imported_cluster(stack),
        oidc_provider=_oidc(stack),
        config=config,
        hyperpod_cluster_arn="arn:aws:sagemaker:us-west-2:111111111111:cluster/abc",
    )
    return assertions.Template.from_stack(stack)


def test_aws_addon_values_follow_aws_schema_with_irsa_roles() -> None:
    template = _aws_addon_stack(
        AddonConfig(
            mode="awsManaged", configuration_values={"keda": {"enabled": False}}, conflict_policy="PRESERVE"
        )
    )
    (addon,) = template.find_resources("AWS::EKS::Addon").values()
    props = addon["Properties"]
    assert props["AddonName"] == pins.AWS_ADDON_NAME
    assert props["ResolveConflicts"] == "PRESERVE"
    assert "PodIdentityAssociations" not in props
    values = json.dumps(props["ConfigurationValues"])
    for key in ("executionRoleArn", "tlsCertificateS3Bucket", "hyperpodClusterArn", "inferenceGateway"):
        assert key in values
    assert '\\"alb\\":{\\"enabled\\":false}' in values
    for ours in ("replicaCount", "gateway", "certManager", "service"):
        assert f'\\"{ours}\\":' not in values, ours
    managed = json.dumps(template.find_resources("AWS::IAM::Role"))
    assert "AmazonSageMakerHyperPodInferenceGatewayAccess" in managed
    assert "AmazonSageMakerHyperPodInferenceAccess" in managed
    trust = json.dumps(template.find_resources("Custom::AWSCDKCfnJson"))
    sa = f"system:serviceaccount:{pins.ADDON_NAMESPACE}:{pins.AWS_GATEWAY_CONTROLLER_SERVICE_ACCOUNT}"
    assert sa in trust
    template.resource_count_is("AWS::EKS::PodIdentityAssociation", 0)


def test_aws_addon_rejects_our_chart_keys() -> None:
    with pytest.raises(aws_addon.AwsAddonValuesError, match="replicaCount"):
        _aws_addon_stack(AddonConfig(mode="awsManaged", configuration_values={"replicaCount": 3}))


def test_hyperpod_dependencies_install_device_plugins_and_health_agent() -> None:
    stack = _stack()
    HyperPodDependencies(stack, "Deps", cluster=_imported_cluster(stack), config=HyperPodDependenciesConfig())
    template = assertions.Template.from_stack(stack)
    charts = {
        c["Properties"]["Chart"]: c["Properties"]
        for c in template.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    }
    assert charts["nvidia-device-plugin"]["Version"] == pins.NVIDIA_DEVICE_PLUGIN_VERSION
    assert charts["aws-efa-k8s-device-plugin"]["Version"] == pins.EFA_DEVICE_PLUGIN_VERSION
    assert HYPERPOD_NODE_LABEL in json.dumps(charts["nvidia-device-plugin"]["Values"])
    (manifest,) = template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    assert (
        "905418368575.dkr.ecr.us-west-2.amazonaws.com/hyperpod-health-monitoring-agent"
        in manifest["Properties"]["Manifest"]
    )


def test_hyperpod_dependencies_can_be_turned_off_and_refuse_unknown_regions() -> None:
    stack = _stack()
    HyperPodDependencies(
        stack,
        "Deps",
        cluster=_imported_cluster(stack),
        config=HyperPodDependenciesConfig(
            nvidia_device_plugin=False, efa_device_plugin=False, health_monitoring_agent=False
        ),
    )
    assert assertions.Template.from_stack(stack).to_json().get("Resources", {}) == {}
    with pytest.raises(ValueError, match="healthMonitoringAgent: false"):
        health_agent_image("mars-north-1")


def test_gateway_config_manifest_is_validated_at_synth() -> None:
    stack = _stack()
    bad = GatewayConfigManifest(
        name="gw",
        namespace="default",
        spec={
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": "a", "modelName": "m1", "modelSelector": {"matchLabels": {"app": "a"}}},
                {"name": "b", "modelName": "m2", "modelSelector": {"matchLabels": {"app": "b"}}},
            ],
        },
    )
    with pytest.raises(InvalidGatewayConfigError, match="bbr"):
        GatewayConfig(stack, "Config", cluster=_imported_cluster(stack), config=bad)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("igw-hyperpod", "sagemaker-igw-hyperpod-111111111111-us-west-2"),
        # 30 characters of the name fit: cut to 21 and a hash of the whole name
        ("A" * 63, "sagemaker-" + "a" * 21 + "-1b58d00f-111111111111-us-west-2"),
    ],
)
def test_lifecycle_bucket_name_is_a_sagemaker_bucket_within_s3_limits(name: str, expected: str) -> None:
    bucket = lifecycle_bucket_name(hyperpod_name=name, account="111111111111", region="us-west-2")
    assert bucket == expected
    assert len(bucket) <= 63


@pytest.mark.parametrize("region", ["us-west-2", "ap-southeast-5", "us-gov-west-1"])
def test_long_hyperpod_names_sharing_a_prefix_get_distinct_lifecycle_buckets(region: str) -> None:
    """S3 bucket names are global: cut to fit, two HyperPod clusters of one account and region whose
    names differ only past the cut were given one bucket, and the second deploy failed."""
    names = [f"inference-platform-production-{team}-hyperpod" for team in ("a", "b")]
    buckets = {lifecycle_bucket_name(hyperpod_name=n, account="111111111111", region=region) for n in names}
    assert len(buckets) == 2
    for bucket in buckets:
        assert len(bucket) <= 63
        assert re.fullmatch(r"sagemaker-[a-z0-9][a-z0-9-]*[a-z0-9]", bucket), bucket


def test_acknowledged_asset_bucket_follows_the_bootstrap_qualifier() -> None:
    from cdk.constructs.nag_ack import asset_bucket, partition_of

    default = cdk.Stack(cdk.App(), "Default", env=ENV)
    assert asset_bucket(default) == "cdk-hnb659fds-assets-111111111111-us-west-2"
    custom = cdk.Stack(cdk.App(context={"@aws-cdk/core:bootstrapQualifier": "igwprod1"}), "Custom", env=ENV)
    assert asset_bucket(custom) == "cdk-igwprod1-assets-111111111111-us-west-2"
    china = cdk.Stack(cdk.App(), "China", env=cdk.Environment(account="111111111111", region="cn-north-1"))
    assert partition_of(china) == "aws-cn"


def test_every_instance_group_runs_the_configured_lifecycle_script() -> None:
    """``hyperpod.lifecycleScriptOnCreate`` reaches every group's ``LifeCycleConfig.OnCreate`` (it was
    ignored for a fixed ``on_create.sh`` until session s38)."""
    stack = _stack()
    imported = eks.Cluster.from_cluster_attributes(
        stack, "Eks", cluster_name="igw", cluster_security_group_id="sg-0123456789abcdef0"
    )
    groups = (
        InstanceGroupConfig(name="p5", instance_type="ml.p5.48xlarge", instance_count=1),
        InstanceGroupConfig(name="g5", instance_type="ml.g5.12xlarge", instance_count=2),
    )
    HyperPodCluster(
        stack,
        "HyperPod",
        config=HyperPodConfig(
            cluster_name="igw-hyperpod", instance_groups=groups, lifecycle_script_on_create="setup/node.sh"
        ),
        eks_cluster=cast(eks.Cluster, imported),
        private_subnets=[ec2.Subnet.from_subnet_id(stack, "Subnet", "subnet-0123456789abcdef0")],
    )
    (cluster,) = assertions.Template.from_stack(stack).find_resources("AWS::SageMaker::Cluster").values()
    configs = [group["LifeCycleConfig"] for group in cluster["Properties"]["InstanceGroups"]]
    assert (
        configs
        == [
            {
                "OnCreate": "setup/node.sh",
                "SourceS3Uri": "s3://sagemaker-igw-hyperpod-111111111111-us-west-2/lifecycle/",
            }
        ]
        * 2
    )
