"""Assertions on the synthesized templates, by resource type and properties (never hashed logical IDs)."""

from __future__ import annotations

import json

from aws_cdk import assertions

from igw.addon import pins


def _template(synthesized, role: str) -> assertions.Template:
    return assertions.Template.from_json(synthesized.templates[role])


def test_network_tags_private_subnets_for_internal_load_balancers(synthesized):
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


def test_eks_cluster_is_private_with_api_authentication_and_all_logs(synthesized):
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


def test_hyperpod_cluster_uses_eks_orchestration_and_sagemaker_bucket(synthesized):
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


def test_platform_installs_dependency_addons_at_pinned_minimums(synthesized):
    platform = _template(synthesized, "platform")
    for dependency in pins.DEPENDENCY_ADDONS:
        platform.has_resource_properties(
            "AWS::EKS::Addon", {"AddonName": dependency.name, "AddonVersion": dependency.pinned}
        )
    platform.has_resource_properties(
        "AWS::EKS::Addon", {"AddonName": "cert-manager", "AddonVersion": "v1.18.2-eksbuild.2"}
    )
    platform.has_resource_properties("AWS::EKS::Addon", {"AddonName": pins.POD_IDENTITY_AGENT_ADDON})


def test_load_balancer_controller_chart_with_its_policy_file_and_pod_identity(synthesized):
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
    policy_file = json.loads(load_balancer_controller.POLICY_FILE.read_text())
    (policy,) = platform.find_resources("AWS::IAM::ManagedPolicy").values()
    assert _normalized(policy["Properties"]["PolicyDocument"]) == _normalized(policy_file)
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


def test_inference_addon_is_managed_with_validated_values_and_pod_identity(synthesized):
    inference = _template(synthesized, "inference")
    addons = inference.find_resources("AWS::EKS::Addon")
    assert len(addons) == 1
    ((logical, addon),) = addons.items()
    props = addon["Properties"]
    assert props["AddonName"] == pins.ADDON_NAME
    assert props["AddonVersion"] == pins.ADDON_VERSION
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert props["PodIdentityAssociations"][0]["ServiceAccount"] == pins.GATEWAY_SERVICE_ACCOUNT
    assert json.loads(props["ConfigurationValues"]) == {"replicaCount": 3, "service": {"scheme": "internal"}}
    manifests = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    assert len(manifests) == 1
    (manifest,) = manifests.values()
    assert logical in manifest["DependsOn"], "the InferenceGatewayConfig must wait for the add-on (its CRD)"
    document = json.loads(json.dumps(manifest["Properties"]["Manifest"]))
    assert "InferenceGatewayConfig" in str(document)


def test_gateway_role_is_limited_to_tagged_acm_certificates(synthesized):
    inference = _template(synthesized, "inference")
    policies = inference.find_resources("AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    actions = sorted(
        {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    )
    assert actions == [
        "acm:AddTagsToCertificate",
        "acm:DeleteCertificate",
        "acm:DescribeCertificate",
        "acm:ImportCertificate",
    ]
    for statement in statements:
        assert "Condition" in statement, statement
        assert statement["Resource"] != "*"


def test_stack_order_platform_before_inference(synthesized):
    manifest = json.loads((synthesized.outdir / "manifest.json").read_text())
    deps = {name: set(a.get("dependencies", [])) for name, a in manifest["artifacts"].items()}
    assert "IgwPlatform" in deps["IgwInference"]
    assert "IgwCluster" in deps["IgwPlatform"]
    assert "IgwNetwork" in deps["IgwCluster"]


def _normalized(document):
    """Statements by Sid with sorted actions and resources (CDK sorts both when it renders a policy)."""

    def listed(value):
        return sorted([value] if isinstance(value, str) else value)

    return {
        s["Sid"]: {**s, "Action": listed(s["Action"]), "Resource": listed(s["Resource"])}
        for s in document["Statement"]
    }


def test_hyperpod_waits_for_the_pinned_vpc_cni(synthesized):
    cluster = _template(synthesized, "cluster")
    cni = cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": pins.VPC_CNI_ADDON}})
    assert len(cni) == 1
    (cni_id, cni_resource) = next(iter(cni.items()))
    assert cni_resource["Properties"]["AddonVersion"] == pins.VPC_CNI_VERSION
    (hyperpod,) = cluster.find_resources("AWS::SageMaker::Cluster").values()
    assert cni_id in hyperpod["DependsOn"]
