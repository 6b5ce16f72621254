"""Assertions on the synthesized templates, by resource type and properties (never hashed logical IDs)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import assertions

from igw.addon import pins
from tests.cdk.support import CERTIFICATE_ARN, Synthesized, inference_kubernetes_inputs


def _template(synthesized: Synthesized, role: str) -> assertions.Template:
    return assertions.Template.from_json(synthesized.templates[role])


def test_network_tags_private_subnets_for_internal_load_balancers(synthesized: Synthesized) -> None:
    network = _template(synthesized, "network")
    network.resource_count_is("AWS::EC2::VPC", 1)
    private = network.find_resources(
        "AWS::EC2::Subnet",
        {
            "Properties": {
                "Tags": assertions.Match.array_with(
                    [{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}]
                )
            }
        },
    )
    public = network.find_resources(
        "AWS::EC2::Subnet",
        {
            "Properties": {
                "Tags": assertions.Match.array_with([{"Key": "kubernetes.io/role/elb", "Value": "1"}])
            }
        },
    )
    assert len(private) == 3
    assert len(public) == 3
    network.resource_count_is("AWS::EC2::FlowLog", 1)


def test_eks_cluster_is_private_with_api_authentication_and_all_logs(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    cluster.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": "igw-inference",
            "Version": pins.KUBERNETES_VERSION,
            "AccessConfig": assertions.Match.object_like({"AuthenticationMode": "API"}),
            "ResourcesVpcConfig": assertions.Match.object_like(
                {"EndpointPublicAccess": False, "EndpointPrivateAccess": True}
            ),
            "Logging": {
                "ClusterLogging": {
                    "EnabledTypes": [
                        {"Type": t}
                        for t in ("api", "audit", "authenticator", "controllerManager", "scheduler")
                    ]
                }
            },
            "EncryptionConfig": assertions.Match.any_value(),
        },
    )
    cluster.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    cluster.has_resource_properties(
        "AWS::EKS::Nodegroup", {"ScalingConfig": {"MinSize": 2, "DesiredSize": 2, "MaxSize": 4}}
    )


def test_hyperpod_cluster_uses_eks_orchestration_and_sagemaker_bucket(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    clusters = cluster.find_resources("AWS::SageMaker::Cluster")
    assert len(clusters) == 1
    props = next(iter(clusters.values()))["Properties"]
    assert props["ClusterName"] == "igw-inference-hyperpod"
    assert "Eks" in props["Orchestrator"]
    assert props["NodeRecovery"] == "Automatic"
    groups = {g["InstanceGroupName"]: g for g in props["InstanceGroups"]}
    assert groups["p5"]["InstanceType"] == "ml.p5.48xlarge"
    assert groups["g5"]["InstanceType"] == "ml.g5.12xlarge"
    assert groups["g5"]["InstanceCount"] == 2
    assert groups["p5"]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    uri = groups["p5"]["LifeCycleConfig"]["SourceS3Uri"]
    assert uri == "s3://sagemaker-igw-inference-hyperpod-111111111111-us-west-2/lifecycle/"
    buckets = cluster.find_resources(
        "AWS::S3::Bucket", {"Properties": {"BucketName": assertions.Match.any_value()}}
    )
    names = [b["Properties"]["BucketName"] for b in buckets.values()]
    assert names == ["sagemaker-igw-inference-hyperpod-111111111111-us-west-2"]
    assert all(b["DeletionPolicy"] == "Delete" for b in buckets.values())
    cluster.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": assertions.Match.object_like(
                {
                    "Statement": [
                        assertions.Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})
                    ]
                }
            )
        },
    )


def test_platform_installs_dependency_addons_at_pinned_minimums(synthesized: Synthesized) -> None:
    platform = _template(synthesized, "platform")
    for dependency in pins.DEPENDENCY_ADDONS:
        platform.has_resource_properties(
            "AWS::EKS::Addon", {"AddonName": dependency.name, "AddonVersion": dependency.pinned}
        )
    platform.has_resource_properties(
        "AWS::EKS::Addon", {"AddonName": "cert-manager", "AddonVersion": "v1.18.2-eksbuild.2"}
    )
    platform.has_resource_properties("AWS::EKS::Addon", {"AddonName": pins.POD_IDENTITY_AGENT_ADDON})


def test_load_balancer_controller_chart_with_its_policy_file_and_pod_identity(
    synthesized: Synthesized,
) -> None:
    from cdk.constructs import load_balancer_controller

    platform = _template(synthesized, "platform")
    charts = platform.find_resources("Custom::AWSCDK-EKS-HelmChart")
    lbc = [
        c["Properties"]
        for c in charts.values()
        if c["Properties"]["Chart"] == pins.LOAD_BALANCER_CONTROLLER_CHART
    ]
    assert len(lbc) == 1
    assert lbc[0]["Version"] == pins.LOAD_BALANCER_CONTROLLER_CHART_VERSION
    assert lbc[0]["Namespace"] == "kube-system"
    # Off the HyperPod (GPU) nodes when another node has room: preferred, so an imported cluster
    # without system nodes still runs it.
    separator, parts = lbc[0]["Values"]["Fn::Join"]  # the cluster's name and VPC come from imports
    values = json.loads(separator.join(part if isinstance(part, str) else "imported" for part in parts))
    (preferred,) = values["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["preference"]["matchExpressions"] == [
        {"key": "sagemaker.amazonaws.com/node-health-status", "operator": "DoesNotExist"}
    ]
    # The policy file, its ARNs in the stack's partition, region and account (since session s45).
    policy_file = load_balancer_controller.policy_json("aws", "REGION", "ACCOUNT")
    (policy,) = platform.find_resources("AWS::IAM::ManagedPolicy").values()
    rendered = _with_partition(policy["Properties"]["PolicyDocument"], "aws")
    assert _normalized(rendered) == _normalized(policy_file)
    assert ":*:*:" not in json.dumps(rendered)
    assert "arn:aws:" not in json.dumps(policy["Properties"]["PolicyDocument"]), "partition is the stack's"
    platform.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {"Namespace": "kube-system", "ServiceAccount": pins.LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT},
    )
    # The controller's chart waits for cert-manager (explicit ordering).
    lbc_resource = next(
        c for c in charts.values() if c["Properties"]["Chart"] == pins.LOAD_BALANCER_CONTROLLER_CHART
    )
    cert_manager_ids = [
        logical
        for logical, res in platform.find_resources("AWS::EKS::Addon").items()
        if res["Properties"]["AddonName"] == "cert-manager"
    ]
    assert set(cert_manager_ids) <= set(lbc_resource.get("DependsOn", []))


def test_default_installs_our_chart_with_our_image_not_awss_addon(synthesized: Synthesized) -> None:
    inference = _template(synthesized, "inference")
    inference.resource_count_is("AWS::EKS::Addon", 0)
    # the gateway calls no AWS API; the one role is the operator's, for ACM imports of auto-issued TLS
    # (tests/cdk/test_operator_role.py)
    inference.resource_count_is("AWS::IAM::Role", 1)
    charts = inference.find_resources("Custom::AWSCDK-EKS-HelmChart")
    ((logical, chart),) = charts.items()
    props = chart["Properties"]
    assert props["Release"] == pins.CHART_NAME
    assert props["Namespace"] == pins.ADDON_NAMESPACE
    assert "ChartAssetURL" in props
    values = json.dumps(props["Values"])
    _, helm = inference_kubernetes_inputs(synthesized.templates["inference"])
    assert helm["Values"]["mode"] == "operator"
    # operator mode: the applied InferenceGatewayConfig is served; of the gateway values only where
    # its CloudWatch EMF goes (the operator passes it to the data planes it renders)
    assert helm["Values"].get("gateway", {}) == {"cloudWatch": {"enabled": True}}
    assert "container-assets" in helm["Values"]["image"]["repository"], "the image is the CDK asset"
    assets = json.loads((synthesized.outdir / "IgwInference.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["dockerFile"] == "gateway_src/Dockerfile"
    assert image["destinations"]
    (tag,) = {d["imageTag"] for d in image["destinations"].values()}
    assert tag in values
    manifests = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    (manifest,) = manifests.values()
    assert logical in manifest["DependsOn"], "the InferenceGatewayConfig must wait for the chart (its CRD)"
    assert "InferenceGatewayConfig" in json.dumps(manifest["Properties"]["Manifest"])


def test_tls_listener_certificate_and_dns_record(synthesized: Synthesized) -> None:
    inference = _template(synthesized, "inference")
    inference.has_resource_properties(
        "AWS::CertificateManager::Certificate",
        {
            "DomainName": "llm.example.com",
            "ValidationMethod": "DNS",
            "DomainValidationOptions": [
                {"DomainName": "llm.example.com", "HostedZoneId": "Z0123456789ABCDEFGHIJ"}
            ],
        },
    )
    ((cert_id, _),) = inference.find_resources("AWS::CertificateManager::Certificate").items()
    ((chart_id, chart),) = inference.find_resources("Custom::AWSCDK-EKS-HelmChart").items()
    assert "certificateArn" not in json.dumps(chart["Properties"]["Values"]), "operator mode: in the object"
    ((manifest_id, manifest),) = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource").items()
    assert {"Ref": cert_id} in manifest["Properties"]["Manifest"]["Fn::Join"][1]
    (igwc,), _ = inference_kubernetes_inputs(synthesized.templates["inference"])
    assert igwc["spec"]["tls"] == {"acmArn": CERTIFICATE_ARN}, "the operator's TLS listener presents it"
    ((lookup_id, lookup),) = inference.find_resources("Custom::AWSCDK-EKS-KubernetesObjectValue").items()
    assert lookup["Properties"]["ObjectName"] == "llm-gateway-gateway", "the operator's Service"
    assert lookup["Properties"]["ObjectNamespace"] == "default"
    assert lookup["Properties"]["JsonPath"] == ".status.loadBalancer.ingress[0].hostname"
    assert {chart_id, manifest_id} <= set(lookup["DependsOn"]), "read once the operator can have made it"
    inference.has_resource_properties(
        "AWS::Route53::RecordSet",
        {
            "Name": "llm.example.com.",
            "Type": "CNAME",
            "HostedZoneId": "Z0123456789ABCDEFGHIJ",
            "ResourceRecords": [{"Fn::GetAtt": [lookup_id, "Value"]}],
        },
    )


def test_operator_service_for_the_apps_config_is_internal_with_a_tls13_listener(
    synthesized: Synthesized,
) -> None:
    """The Service the operator renders for the applied InferenceGatewayConfig: internal NLB, the
    endpoint's certificate on 443 with the TLS 1.3 policy."""
    from igw.operator import dataplane

    manifests, _ = inference_kubernetes_inputs(synthesized.templates["inference"])
    (igwc,) = manifests
    igwc["metadata"]["uid"] = "uid-of-the-applied-object"
    service = dataplane.service(igwc)
    assert service["metadata"]["name"] == "llm-gateway-gateway"
    assert service["metadata"]["namespace"] == "default"
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"] == CERTIFICATE_ARN
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy"].startswith(
        "ELBSecurityPolicy-TLS13"
    )
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("https", 443)]


def test_admin_principals_get_cluster_admin_access_entries(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    entries = cluster.find_resources(
        "AWS::EKS::AccessEntry",
        {"Properties": {"PrincipalArn": "arn:aws:iam::111111111111:role/platform-admin"}},
    )
    (entry,) = entries.values()
    (policy,) = entry["Properties"]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


def test_vpc_cni_enforces_network_policies(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    cluster.has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": pins.VPC_CNI_ADDON,
            "ConfigurationValues": assertions.Match.serialized_json({"enableNetworkPolicy": "true"}),
        },
    )


def test_hyperpod_execution_role_can_pull_from_ecr(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    policies = cluster.find_resources("AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    pulls = [s for s in statements if s.get("Sid") == "PullContainerImages"]
    assert len(pulls) == 1
    assert set(pulls[0]["Action"]) >= {
        "ecr:GetAuthorizationToken",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    }


def test_no_retained_bucket_with_a_fixed_name(synthesized: Synthesized) -> None:
    for role, template in synthesized.templates.items():
        for logical, resource in template["Resources"].items():
            if resource["Type"] == "AWS::S3::Bucket" and "BucketName" in resource.get("Properties", {}):
                assert resource.get("DeletionPolicy") == "Delete", (role, logical)
                assert resource.get("UpdateReplacePolicy") == "Delete", (role, logical)
    cluster = _template(synthesized, "cluster")
    cluster.resource_count_is("Custom::S3AutoDeleteObjects", 1)


def test_no_literal_aws_partition_in_our_policies(synthesized: Synthesized) -> None:
    """Our own ARNs use the partition of the stack (a token or the region's literal), never `arn:aws:`
    typed by hand; what remains literal comes from CDK's partition literals for the known region."""
    from cdk.constructs import dependency_addons, hyperpod_cluster

    for module in (dependency_addons, hyperpod_cluster):
        assert module.__file__ is not None
        source = Path(module.__file__).read_text()
        assert '"arn:aws:' not in source


def test_hyperpod_dependencies_chart_parts_present(synthesized: Synthesized) -> None:
    platform = _template(synthesized, "platform")
    charts = {
        c["Properties"]["Chart"] for c in platform.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    }
    assert {pins.NVIDIA_DEVICE_PLUGIN_CHART, pins.EFA_DEVICE_PLUGIN_CHART} <= charts
    manifests = json.dumps(platform.find_resources("Custom::AWSCDK-EKS-KubernetesResource"))
    assert "hyperpod-health-monitoring-agent" in manifests


def test_csi_drivers_use_irsa_roles_not_pod_identity(synthesized: Synthesized) -> None:
    platform = _template(synthesized, "platform")
    for name in ("aws-mountpoint-s3-csi-driver", "aws-fsx-csi-driver"):
        (addon,) = platform.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": name}}).values()
        assert "PodIdentityAssociations" not in addon["Properties"], name
        assert "ServiceAccountRoleArn" in addon["Properties"], name
    associations = json.dumps(platform.find_resources("AWS::EKS::PodIdentityAssociation"))
    assert pins.S3_CSI_SERVICE_ACCOUNT not in associations
    conditions = json.dumps(platform.find_resources("Custom::AWSCDKCfnJson"))
    assert f"system:serviceaccount:kube-system:{pins.S3_CSI_SERVICE_ACCOUNT}" in conditions
    assert f"system:serviceaccount:kube-system:{pins.FSX_CSI_CONTROLLER_SERVICE_ACCOUNT}" in conditions


def test_stack_order_platform_before_inference(synthesized: Synthesized) -> None:
    manifest = json.loads((synthesized.outdir / "manifest.json").read_text())
    deps = {name: set(a.get("dependencies", [])) for name, a in manifest["artifacts"].items()}
    assert "IgwPlatform" in deps["IgwInference"]
    assert "IgwCluster" in deps["IgwPlatform"]
    assert "IgwNetwork" in deps["IgwCluster"]


def _with_partition(value: Any, partition: str) -> Any:
    """The template value with ``Fn::Join`` over ``AWS::Partition`` rendered for ``partition`` (and
    over ``AWS::Region`` and ``AWS::AccountId`` as ``REGION`` and ``ACCOUNT``)."""
    pseudo = {"AWS::Partition": partition, "AWS::Region": "REGION", "AWS::AccountId": "ACCOUNT"}
    if isinstance(value, list):
        return [_with_partition(item, partition) for item in value]
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(
            pseudo[part["Ref"]] if isinstance(part, dict) and set(part) == {"Ref"} else part for part in parts
        )
    if isinstance(value, dict):
        return {key: _with_partition(item, partition) for key, item in value.items()}
    return value


def _normalized(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Statements by Sid with sorted actions and resources (CDK sorts both when it renders a policy)."""

    def listed(value: str | list[str]) -> list[str]:
        return sorted([value] if isinstance(value, str) else value)

    return {
        s["Sid"]: {**s, "Action": listed(s["Action"]), "Resource": listed(s["Resource"])}
        for s in document["Statement"]
    }


def test_hyperpod_waits_for_the_pinned_vpc_cni(synthesized: Synthesized) -> None:
    cluster = _template(synthesized, "cluster")
    cni = cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": pins.VPC_CNI_ADDON}})
    assert len(cni) == 1
    (cni_id, cni_resource) = next(iter(cni.items()))
    assert cni_resource["Properties"]["AddonVersion"] == pins.VPC_CNI_VERSION
    (hyperpod,) = cluster.find_resources("AWS::SageMaker::Cluster").values()
    assert cni_id in hyperpod["DependsOn"]


def test_preflight_on_the_default_assembly_knows_our_gateway(synthesized: Synthesized) -> None:
    """`igw preflight --cdk-out`: our chart counts as the installed gateway (no AWS add-on, no role)."""
    from igw.checks.model import Command, Status
    from igw.checks.sources.cdk_out import load_cdk_out
    from tests.checks.helpers import run

    results = run(load_cdk_out(synthesized.outdir), Command.PREFLIGHT)
    by_check: dict[str, set[Status]] = {}
    for result in results:
        by_check.setdefault(result.check_id, set()).add(result.status)
    assert by_check["IGW-PF002"] == {Status.PASS}
    assert by_check["IGW-PF004"] == {Status.SKIP}
    assert by_check["IGW-PF006"] == {Status.PASS}
    assert by_check["IGW-PF003"] == {Status.PASS}
    assert by_check["IGW-PF009"] == {Status.PASS}  # acmArn is the certificate's Ref: set at deploy time


def test_preflight_on_the_aws_addon_assembly_still_checks_its_role(variant: Synthesized) -> None:
    from igw.checks.model import Command, Status
    from igw.checks.sources.cdk_out import load_cdk_out
    from tests.checks.helpers import run

    results = run(load_cdk_out(variant.outdir), Command.PREFLIGHT)
    statuses = {r.status for r in results if r.check_id == "IGW-PF002"}
    assert statuses == {Status.PASS}
    assert {r.status for r in results if r.check_id == "IGW-PF004"} == {Status.PASS}


def test_the_config_s_namespace_is_created_first_and_kept_when_the_stack_goes(
    own_namespace: Synthesized, synthesized: Synthesized
) -> None:
    """On a new cluster only the built-in namespaces exist: before session s38 a config in
    ``inference`` would fail ``cdk deploy`` (``namespaces "inference" not found``). The namespace is
    applied first, and retained: the model servers run there too, and a manifest's delete is a
    ``kubectl delete``."""
    inference = _template(own_namespace, "inference")
    manifests = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    namespace_ids = [logical for logical, r in manifests.items() if '"kind":"Namespace"' in _text(r)]
    (namespace_id,) = namespace_ids
    namespace = manifests[namespace_id]
    assert json.loads(namespace["Properties"]["Manifest"]) == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}}
    ]
    assert namespace["DeletionPolicy"] == "Retain"
    assert namespace["UpdateReplacePolicy"] == "Retain"
    (igwc_id,) = [
        logical
        for logical, r in manifests.items()
        if "InferenceGatewayConfig" in json.dumps(r["Properties"]["Manifest"])
    ]
    assert namespace_id in manifests[igwc_id]["DependsOn"]
    # ``default`` exists everywhere: nothing is applied (or retained) for it.
    default = _template(synthesized, "inference").find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    assert not [r for r in default.values() if '"kind":"Namespace"' in _text(r)]


def _text(manifest: Mapping[str, Any]) -> str:
    """A ``KubernetesManifest`` resource's manifest as text (a JSON string, or a join of parts)."""
    value = manifest["Properties"]["Manifest"]
    return value if isinstance(value, str) else json.dumps(value)
