"""A bad deployment config fails before synthesis, naming the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdk import config
from tests.config.hostile_documents import billion_laughs


@pytest.fixture
def example() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(config.EXAMPLE_FILE.read_text())
    return document


def test_example_is_valid(example: dict[str, Any]) -> None:
    parsed = config.parse(example)
    assert parsed.cluster.authentication_mode == "API"
    assert parsed.hyperpod is not None
    assert [g.instance_type for g in parsed.hyperpod.instance_groups] == ["ml.p5.48xlarge", "ml.g5.12xlarge"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["cluster"].update(authenticationMode="CONFIG_MAP"), "cluster.authenticationMode"),
        (
            lambda d: d["hyperpod"]["instanceGroups"][1].update(instanceType="p5.48xlarge"),
            "hyperpod.instanceGroups[1].instanceType",
        ),
        (lambda d: d.update(bogus=1), "(root): Additional properties are not allowed ('bogus'"),
        (
            lambda d: (
                d["inference"].update(
                    addon={"mode": "awsManaged", "version": "v1.5.0-eksbuild.1"}, endpoint=None
                )
                or d["inference"].pop("endpoint")
            ),
            "inference.addon.version: v1.5.0-eksbuild.1 is below",
        ),
        (
            lambda d: d["inference"]["addon"].update(mode="awsManaged"),
            'inference.addon.configurationValues.mode: unknown field "mode"',
        ),
        (
            lambda d: d["inference"]["addon"].update(mode="awsManaged", configurationValues={}),
            "inference.endpoint: only with mode igw",
        ),
        (
            lambda d: d["inference"]["addon"].update(version="v2.0.0-eksbuild.2"),
            "inference.addon.version: only with mode awsManaged",
        ),
        (  # session s42: accepted beside an imported VPC and read by nothing (no NAT gateway made)
            lambda d: d["network"].update(
                vpcId="vpc-0123456789abcdef0",
                privateSubnetIds=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
                natGateways=3,
            ),
            "network.natGateways: only for a new VPC",
        ),
        (  # session s42: accepted for a new VPC and read by nothing (the VPC made its own subnets)
            lambda d: d["network"].update(privateSubnetIds=["subnet-01234567", "subnet-01234568"]),
            "network.privateSubnetIds: only with network.vpcId",
        ),
        (  # session s43: accepted and read by nothing (AWS's add-on runs AWS's images)
            lambda d: (
                d["inference"].update(
                    addon={"mode": "awsManaged"}, image={"repository": "example.com/igw", "tag": "1"}
                )
                or d["inference"].pop("endpoint")
            ),
            "inference.image: only with mode igw",
        ),
        (  # session s42: it was accepted and read by nothing (our chart is a Helm release)
            lambda d: d["inference"]["addon"].update(conflictPolicy="PRESERVE"),
            "inference.addon.conflictPolicy: only with mode awsManaged",
        ),
        (
            lambda d: d["inference"]["addon"]["configurationValues"].update(executionRoleArn="x"),
            "inference.addon.configurationValues.executionRoleArn: unknown field",
        ),
        (lambda d: d.pop("hyperpod"), "hyperpod: required unless existingCluster is set"),
        (
            lambda d: d.update(
                existingCluster={"vpcId": "vpc-01234567", "privateSubnetIds": ["subnet-01234567"]}
            ),
            "existingCluster.oidcProviderArn: required",
        ),
        (
            lambda d: d["inference"]["addon"]["configurationValues"].update(replicaCount=1),
            "inference.addon.configurationValues.replicaCount",
        ),
        (
            lambda d: d["inference"]["gatewayConfig"]["spec"].update(bogus=True),
            "inference.gatewayConfig.spec",
        ),
        (
            lambda d: d["hyperpod"]["instanceGroups"][1].update(name="p5"),
            "hyperpod.instanceGroups[1].name: duplicates",
        ),
        (
            lambda d: d["cluster"].update(endpointAccess="publicAndPrivate"),
            "cluster.publicAccessCidrs: required",
        ),
        (
            lambda d: d["inference"]["addon"]["configurationValues"].update(replicaCount=3),
            "inference.addon.configurationValues.replicaCount: has no effect with the chart's mode operator",
        ),
        (
            lambda d: d["inference"]["addon"]["configurationValues"].update(
                serviceAccount={"roleArn": "arn:aws:iam::111111111111:role/gateway"}
            ),
            "inference.addon.configurationValues.serviceAccount: has no effect with the chart's mode",
        ),
        (
            lambda d: d["inference"]["gatewayConfig"]["spec"].update(
                tls={"acmArn": "arn:aws:acm:us-west-2:111111111111:certificate/abc"}
            ),
            "inference.gatewayConfig.spec.tls.acmArn: leave it empty with inference.endpoint",
        ),
    ],
    ids=[
        "auth-mode",
        "instance-type",
        "unknown-field",
        "addon-version",
        "aws-addon-gets-our-keys",
        "endpoint-with-aws-addon",
        "version-with-igw",
        "nat-gateways-with-imported-vpc",
        "subnets-without-vpc-id",
        "image-with-aws-addon",
        "conflictPolicy-with-igw",
        "igw-gets-aws-keys",
        "no-hyperpod",
        "existing-without-oidc",
        "addon-values",
        "igwc",
        "dup-group",
        "public-cidrs",
        "gateway-only-value-in-operator-mode",
        "stale-gateway-role-in-operator-mode",
        "second-certificate-with-endpoint",
    ],
)
def test_invalid_config_names_the_field(
    example: dict[str, Any], mutate: Callable[[dict[str, Any]], object], expected: str
) -> None:
    document = copy.deepcopy(example)
    mutate(document)
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["network"].update(cidr="999.0.0.0/16"),
            "network.cidr: '999.0.0.0/16' does not appear to be an IPv4",
        ),
        (lambda d: d["network"].update(cidr="10.0.0.1/16"), "network.cidr: 10.0.0.1/16 has host bits set"),
        (
            lambda d: d["network"].update(cidr="10.0.0.0/18"),
            "network.cidr: 10.0.0.0/18 cannot hold a public /24 and a private /19 subnet in each of 3 zones",
        ),
        (
            lambda d: d["cluster"].update(
                endpointAccess="publicAndPrivate", publicAccessCidrs=["203.0.113.0/24", "10.0.0.0/33"]
            ),
            "cluster.publicAccessCidrs[1]: '10.0.0.0/33' does not appear to be an IPv4",
        ),
        (
            lambda d: d["cluster"].update(endpointAccess="publicAndPrivate", publicAccessCidrs=["0.0.0.0/0"]),
            "cluster.publicAccessCidrs[0]: 0.0.0.0/0 opens the API endpoint to everyone",
        ),
        (
            lambda d: d["cluster"].update(publicAccessCidrs=["203.0.113.0/24"]),
            "cluster.publicAccessCidrs: only with cluster.endpointAccess publicAndPrivate",
        ),
        (
            lambda d: d.update(availabilityZones=["us-west-2a", "us-east-1b"]),
            "availabilityZones[1]: us-east-1b is not a zone of the region us-west-2",
        ),
        (
            lambda d: d["network"].update(maxAzs=2),
            "network.maxAzs: 2, but the new VPC spans the 3 availabilityZones listed",
        ),
        (
            lambda d: d["network"].update(natGateways=4),
            "network.natGateways: 4, but the new VPC has 3 zones",
        ),
    ],
    ids=[
        "cidr-octet",
        "cidr-host-bits",
        "cidr-too-small",
        "public-cidr-prefix",
        "public-cidr-everyone",
        "public-cidrs-private-endpoint",
        "zone-of-another-region",
        "max-azs-beside-zones",
        "nat-gateways-over-zones",
    ],
)
def test_network_settings_ec2_or_eks_would_refuse_are_named(
    example: dict[str, Any], mutate: Callable[[dict[str, Any]], object], expected: str
) -> None:
    """Found by probing (session s38): each of these passed the schema's patterns and then failed
    synthesis with a jsii traceback (``InvalidIpAddress``, ``1 of /19 exceeds remaining space``),
    failed at deploy time (EKS refusing ``/33``, subnets in another region's zones), or was silently
    changed (``10.0.0.1/16`` became the VPC ``10.1.0.0/16``; ``maxAzs`` and extra NAT gateways were
    dropped)."""
    document = copy.deepcopy(example)
    mutate(document)
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert expected in str(caught.value)


def test_a_new_vpc_just_large_enough_for_its_zones_is_accepted(example: dict[str, Any]) -> None:
    """A /17 holds three zones' subnets (CDK allocates the /24s, then the aligned /19s)."""
    document = copy.deepcopy(example)
    document["network"]["cidr"] = "10.0.0.0/17"
    assert config.parse(document).network.cidr == "10.0.0.0/17"


def test_a_default_hyperpod_name_over_63_characters_is_refused(example: dict[str, Any]) -> None:
    """Found by probing (session s38): a 55-to-63-character ``clusterName`` passed its own pattern, and
    the HyperPod cluster's default name ``<clusterName>-hyperpod`` went over ``AWS::SageMaker::Cluster``'s
    63 characters; CDK only printed a warning at synth and CloudFormation failed the cluster stack."""
    document = copy.deepcopy(example)
    document["clusterName"] = "c" * 55
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert (
        f"hyperpod.clusterName: the default '{'c' * 55}-hyperpod' is 64 characters, over HyperPod's 63"
        in str(caught.value)
    )
    document["clusterName"] = "c" * 54
    assert config.parse(document).hyperpod is not None
    document["clusterName"] = "c" * 63
    document["hyperpod"]["clusterName"] = "gpu-pool"
    parsed = config.parse(document)
    assert parsed.hyperpod is not None
    assert parsed.hyperpod.cluster_name == "gpu-pool"


@pytest.mark.parametrize(
    "script", ["custom.sh", "../lifecycle_scripts/../nag_ack.sh", "lifecycle_scripts/on_create.sh"]
)
def test_a_lifecycle_script_the_stack_does_not_upload_is_refused(
    example: dict[str, Any], script: str
) -> None:
    """Found by probing (session s38): ``hyperpod.lifecycleScriptOnCreate`` was accepted and ignored
    (every group ran ``on_create.sh``); it is used now, so it must name a script the stack uploads."""
    document = copy.deepcopy(example)
    document["hyperpod"]["lifecycleScriptOnCreate"] = script
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert (
        f"hyperpod.lifecycleScriptOnCreate: {script} is not among the lifecycle scripts the stack uploads "
        "(on_create.sh in cdk/constructs/lifecycle_scripts/)"
    ) in str(caught.value)
    document["hyperpod"]["lifecycleScriptOnCreate"] = "on_create.sh"
    parsed = config.parse(document)
    assert parsed.hyperpod is not None
    assert parsed.hyperpod.lifecycle_script_on_create == "on_create.sh"


def test_chart_mode_is_operator_unless_the_values_ask_for_gateway(example: dict[str, Any]) -> None:
    assert config.parse(example).addon.chart_mode == "operator"
    document = copy.deepcopy(example)
    document["inference"]["addon"]["configurationValues"] = {"mode": "gateway", "replicaCount": 3}
    parsed = config.parse(document)
    assert parsed.addon.chart_mode == "gateway"


def test_unreadable_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("account: '1'\nregion: [\n")
    with pytest.raises(config.DeploymentConfigError, match="line"):
        config.load(path)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("account: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 64 levels"),
        (
            billion_laughs(9),
            "more than 1,000,000 values",
        ),
        ("account: '1'\n---\nregion: us-west-2\n", "one document expected, got 2"),
    ],
    ids=["nested-100000-deep", "alias-bomb", "two-documents"],
)
def test_a_deployment_config_of_a_hostile_shape_is_refused_with_the_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    """A file nested 100,000 levels deep ended ``make synth`` (and ``cdk synth``) in a RecursionError
    traceback; it is read like every configuration file now."""
    path = tmp_path / "deployment.yaml"
    path.write_text(text)
    with pytest.raises(config.DeploymentConfigError, match=reason):
        config.load(path)


def test_a_deployment_config_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_bytes(b"account: \xff\xfe\n")
    with pytest.raises(config.DeploymentConfigError, match="not UTF-8 text"):
        config.load(path)


def test_defaults_are_our_chart_with_image_built(example: dict[str, Any]) -> None:
    document = copy.deepcopy(example)
    del document["inference"]["addon"]["mode"]
    parsed = config.parse(document)
    assert parsed.addon.mode == "igw"
    assert parsed.image.repository is None
    assert parsed.endpoint is not None
    assert parsed.endpoint.fqdn == "llm.example.com"
    assert parsed.existing_cluster is None


def test_existing_cluster_mode_needs_no_hyperpod(example: dict[str, Any]) -> None:
    document = copy.deepcopy(example)
    del document["hyperpod"], document["network"], document["cluster"]
    document["existingCluster"] = {
        "vpcId": "vpc-01234567",
        "privateSubnetIds": ["subnet-01234567"],
        "oidcProviderArn": "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X",
        "installedAddons": ["vpc-cni"],
    }
    parsed = config.parse(document)
    assert parsed.hyperpod is None
    assert parsed.existing_cluster is not None
    assert parsed.existing_cluster.installed_addons == ("vpc-cni",)


def test_existing_cluster_mode_refuses_the_settings_of_a_cluster_it_does_not_create(
    example: dict[str, Any],
) -> None:
    """Found by probing (session s38): with ``existingCluster`` the ``hyperpod`` section and every
    ``cluster`` setting (admin access entries, endpoint access, authentication mode, system nodes) were
    accepted and silently changed nothing; a platform engineer adding ``cluster.adminRoleArns`` got no
    access entry."""
    document = copy.deepcopy(example)
    del document["network"]
    document["existingCluster"] = {
        "vpcId": "vpc-01234567",
        "privateSubnetIds": ["subnet-01234567"],
        "oidcProviderArn": "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X",
    }
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    problems = caught.value.problems
    assert any(p.startswith("hyperpod: not used with existingCluster") for p in problems), problems
    for key in ("kubernetesVersion", "authenticationMode", "endpointAccess", "adminRoleArns", "systemNodes"):
        assert any(p.startswith(f"cluster.{key}: not used with existingCluster") for p in problems), key
    del document["hyperpod"], document["cluster"]
    assert config.parse(document).existing_cluster is not None


def test_every_example_config_is_valid_and_synthesized_by_a_fixture() -> None:
    """The examples are what users copy; each one is synthesized by a session fixture in conftest."""
    from tests.cdk.support import EXAMPLES

    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert names == ["aws-managed-addon.yaml", "deployment.yaml", "existing-cluster.yaml"]
    for name in names:
        config.load(EXAMPLES / name)


def test_quota_check_before_deploy_compares_the_instance_groups(
    example: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m cdk.synth_cli --check-quotas`: the config's groups against ListServiceQuotas (Stubber)."""
    import boto3
    from botocore.stub import Stubber

    from cdk import synth_cli

    client = boto3.client("service-quotas", region_name="us-west-2")
    stubber = Stubber(client)
    quotas = [
        {"QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 0.0, "QuotaCode": "L-1"},
        {"QuotaName": "ml.g5.12xlarge for cluster usage", "Value": 2.0, "QuotaCode": "L-2"},
    ]
    stubber.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "sagemaker"})
    with stubber:
        ok = synth_cli.quotas_ok(config.parse(example), service_quotas=client)
    assert not ok
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "PASS  quota sagemaker/ml.g5.12xlarge for cluster usage: quota 2 covers 2 instance(s)",
        "FAIL  quota sagemaker/ml.p5.48xlarge for cluster usage: quota 0 is below the 1 instance(s) the "
        "groups ask for",
    ]


def test_a_final_newline_is_refused_as_cloudformation_and_eks_refuse_it(example: dict[str, Any]) -> None:
    """The deployment config's patterns are matched by RE2, whose ``$`` is the end of the text. Before
    session s38 Python's ``re`` let ``$`` match before a final newline: ``clusterName: "igw\\n"``
    passed the check and reached the EKS API, which refuses such a name, in the middle of a deploy."""
    document = copy.deepcopy(example)
    document["clusterName"] = "igw-inference\n"
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert "clusterName" in str(caught.value)


def test_operator_mode_takes_the_gateway_values_its_operator_hands_on(example: dict[str, Any]) -> None:
    """``gateway.workers``, ``workerTimeoutSeconds`` and ``cloudWatch`` reach every gateway the operator
    runs: they were refused with the whole of ``gateway`` as having no effect; ``resources`` (a gateway
    pod setting the operator never reads) was accepted and changed nothing."""
    values = example["inference"]["addon"]["configurationValues"]
    values["gateway"] = {"workers": 2, "workerTimeoutSeconds": 10, "cloudWatch": {"emfIntervalSeconds": 30}}
    config.parse(example)
    values["resources"] = {"requests": {"cpu": "1"}}
    with pytest.raises(config.DeploymentConfigError) as refused:
        config.parse(example)
    assert (
        "inference.addon.configurationValues.resources: has no effect with the chart's mode operator"
        in str(refused.value)
    )


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        (
            ("hyperpod", "instanceGroups", 0, "instanceType"),
            "ml.p5.48xlarg",
            "hyperpod.instanceGroups[0].instanceType: ml.p5.48xlarg is not a HyperPod instance type "
            "(botocore ",
        ),
        (
            ("cluster", "systemNodes", "instanceType"),
            "m6i.huge",
            "cluster.systemNodes.instanceType: m6i.huge is not an EC2 instance type (botocore ",
        ),
    ],
)
def test_an_instance_type_no_aws_api_accepts_is_refused(
    example: dict[str, Any], where: tuple[Any, ...], value: str, expected: str
) -> None:
    """Session s50: a mistyped instance type matched the schema's shape, was synthesized, and failed
    only at deploy time (the HyperPod cluster's after the VPC and the EKS cluster existed). Checked
    against botocore's models of the two APIs, with the nearest known type suggested."""
    node: Any = example
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(config.DeploymentConfigError) as refused:
        config.parse(example, source="deploy.yaml")
    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(expected)
    assert "did you mean " in refused.value.problems[0]


@pytest.mark.parametrize("instance_type", ["ml.p6-b200.48xlarge", "ml.p6e-gb200.36xlarge"])
def test_hyperpod_instance_types_with_a_hyphenated_family_are_accepted(
    example: dict[str, Any], instance_type: str
) -> None:
    """HyperPod's B200 and GB200 types have a hyphen in their family; until session s50 the schema's
    ``ml.<family>.<size>`` pattern allowed none there and refused them."""
    example["hyperpod"]["instanceGroups"][0]["instanceType"] = instance_type
    parsed = config.parse(example)
    assert parsed.hyperpod is not None
    assert parsed.hyperpod.instance_groups[0].instance_type == instance_type


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"bad key": "x"}, "must be a Kubernetes label key"),
        ({"example.com/pool": "has space"}, "must be a Kubernetes label value"),
        ({"pool": "-dash"}, "must be a Kubernetes label value"),
        ({f"k{i}": "v" for i in range(51)}, "has too many properties"),
    ],
)
def test_instance_group_labels_hyperpod_refuses_are_refused(
    example: dict[str, Any], labels: dict[str, str], expected: str
) -> None:
    """Node labels go to HyperPod's ``KubernetesConfig.Labels`` as they are; until session s50 any key
    and any value of at most 63 characters was accepted and synthesized, and SageMaker refused the
    cluster at deploy time."""
    example["hyperpod"]["instanceGroups"][0]["labels"] = labels
    with pytest.raises(config.DeploymentConfigError) as refused:
        config.parse(example)
    (problem,) = refused.value.problems
    assert problem.startswith("hyperpod.instanceGroups[0].labels")
    assert expected in problem
    example["hyperpod"]["instanceGroups"][0]["labels"] = {"example.com/pool": "gpu-a", "tier": ""}
    config.parse(example)


@pytest.mark.parametrize(
    ("bucket", "why"),
    [
        ("a..b", "two adjacent periods"),
        ("192.168.1.1", "the form of an IP address"),
        ("xn--weights", "a prefix or suffix S3 reserves"),
        ("weights-s3alias", "a prefix or suffix S3 reserves"),
    ],
)
def test_model_buckets_no_bucket_can_be_named_are_refused(
    example: dict[str, Any], bucket: str, why: str
) -> None:
    """Session s50: these matched the schema's characters and were granted in the S3 CSI driver's role,
    a grant on a bucket that cannot exist, with no word."""
    example["platform"]["modelBuckets"] = ["my-model-weights", bucket]
    with pytest.raises(config.DeploymentConfigError) as refused:
        config.parse(example)
    assert refused.value.problems == [
        f"platform.modelBuckets[1]: {bucket!r} is not an S3 bucket name ({why})"
    ]
