"""Settings every AWS service refuses at deploy time, or that ended synthesis in a traceback, are
refused by the deployment config with the field's path (session s41).

Before the fix, ``tags: {"aws:owner": x}``, an empty key or a ``*`` in a key synthesized and failed at
``cdk deploy`` on the first resource created (the VPC, then rolled back); a region without HyperPod's
health-monitoring agent image and an endpoint name over ACM's 64 characters ended ``app.py`` and
``make synth`` in a Python traceback (``ValueError``, jsii ``RuntimeError``) with no field named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cdk import config
from tests.cdk.test_app_entry import run_app


@pytest.fixture
def example() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(config.EXAMPLE_FILE.read_text(encoding="utf-8"))
    return document


def _problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document)
    return caught.value.problems


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        ({"aws:owner": "me"}, "tags.aws:owner: the key prefix 'aws:' is reserved for AWS"),
        ({"AWS:Owner": "me"}, "tags.AWS:Owner: the key prefix 'AWS:' is reserved for AWS"),
        ({"": "x"}, "tags: an empty tag key"),
        ({"cost*center": "a"}, "tags.cost*center: the key has '*'"),
        ({"team": "a<b>"}, "tags.team: the value has '<>'"),
    ],
)
def test_a_tag_aws_refuses_is_refused_naming_it(
    example: dict[str, Any], tags: dict[str, str], expected: str
) -> None:
    example["tags"] = tags
    assert any(problem.startswith(expected) for problem in _problems(example)), _problems(example)


def test_tags_aws_accepts_are_accepted(example: dict[str, Any]) -> None:
    example["tags"] = {
        "cost-center": "ml/llm@team_1",
        "Équipe": "données +=:.",
        "owner name": "",
        "aws-cdk-style:key": "ok",
    }
    assert dict(config.parse(example).tags) == example["tags"]


def test_a_region_without_the_health_agent_image_is_refused_naming_the_switch(
    example: dict[str, Any],
) -> None:
    text = yaml.safe_dump(example).replace("us-west-2", "ap-northeast-2")
    document = yaml.safe_load(text)
    assert _problems(document) == [
        "platform.hyperpodDependencies.healthMonitoringAgent: HyperPod's health-monitoring agent is not "
        "published in ap-northeast-2 (it is in ap-northeast-1, ap-south-1, ap-southeast-1, ap-southeast-2, "
        "eu-central-1, eu-north-1, eu-west-1, eu-west-2, sa-east-1, us-east-1, us-east-2, us-west-1, "
        "us-west-2); set it to false"
    ]
    document["platform"]["hyperpodDependencies"]["healthMonitoringAgent"] = False
    assert config.parse(document).region == "ap-northeast-2"


def test_an_endpoint_name_over_acms_64_characters_is_refused(example: dict[str, Any]) -> None:
    example["inference"]["endpoint"].update(recordName="r" * 40, zoneName="inference.example-corp.com")
    problems = _problems(example)
    assert problems == [
        f"inference.endpoint.recordName: {'r' * 40}.inference.example-corp.com is 67 characters, over the "
        "64 ACM allows in a certificate's domain name; use a shorter recordName or zoneName"
    ]
    example["inference"]["endpoint"].update(recordName="r" * 37)
    endpoint = config.parse(example).endpoint
    assert endpoint is not None
    assert len(endpoint.fqdn) == 64


def test_the_app_reports_the_region_problem_without_a_traceback(
    tmp_path: Path, example: dict[str, Any]
) -> None:
    source = tmp_path / "seoul.yaml"
    source.write_text(yaml.safe_dump(example).replace("us-west-2", "ap-northeast-2"), encoding="utf-8")
    done = run_app(tmp_path / "out", context=None, IGW_DEPLOYMENT_CONFIG=str(source))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "platform.hyperpodDependencies.healthMonitoringAgent: " in done.stderr


def test_an_ipv6_cluster_is_refused_with_the_reason(example: dict[str, Any]) -> None:
    example["cluster"]["ipFamily"] = "ipv6"
    assert _problems(example) == [
        "cluster.ipFamily: ipv6 is not supported: the stacks build an IPv4 VPC (no IPv6 block) and an IPv4 "
        'cluster, and the gateway\'s internal NLB is IPv4-only; use ipv4 (docs/infrastructure.md, "IPv6")'
    ]
    example["cluster"]["ipFamily"] = "ipv4"
    assert config.parse(example).cluster_name == "igw-inference"


def test_an_existing_ipv6_cluster_is_refused_with_the_reason() -> None:
    document: dict[str, Any] = yaml.safe_load(
        (config.EXAMPLE_FILE.parent / "existing-cluster.yaml").read_text(encoding="utf-8")
    )
    document["existingCluster"]["ipFamily"] = "ipv6"
    assert _problems(document) == [
        "existingCluster.ipFamily: ipv6 is not supported: an IPv6 cluster's pods have only IPv6 addresses, "
        'and the gateway\'s internal NLB is IPv4-only; use ipv4 (docs/infrastructure.md, "IPv6")'
    ]


def _aws_managed() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        (config.EXAMPLE_FILE.parent / "aws-managed-addon.yaml").read_text(encoding="utf-8")
    )
    return document


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"executionRoleArn": "arn:aws:iam::111111111111:role/mine"}, "executionRoleArn: set by the app"),
        ({"tlsCertificateS3Bucket": "my-bucket"}, "tlsCertificateS3Bucket: set by the app"),
        (
            {"hyperpodClusterArn": "arn:aws:sagemaker:us-west-2:111111111111:cluster/abc"},
            "hyperpodClusterArn: set by the app",
        ),
        (
            {"inferenceGateway": {"serviceAccount": {"roleArn": "arn:aws:iam::111111111111:role/mine"}}},
            "inferenceGateway.serviceAccount.roleArn: set by the app",
        ),
        ({"alb": {"enabled": True}}, "alb.enabled: the app sets it false"),
    ],
)
def test_aws_addon_values_the_app_overwrites_are_refused(values: dict[str, Any], expected: str) -> None:
    """Before session s41 each was accepted and replaced by the app's own value without a word."""
    document = _aws_managed()
    document["inference"]["addon"]["configurationValues"].update(values)
    problems = _problems(document)
    assert any(p.startswith(f"inference.addon.configurationValues.{expected}") for p in problems), problems


def test_aws_addon_values_agreeing_with_the_app_are_accepted() -> None:
    document = _aws_managed()
    document["inference"]["addon"]["configurationValues"].update(
        {"alb": {"enabled": False}, "inferenceGateway": {"enabled": True}}
    )
    assert config.parse(document).addon.mode == "awsManaged"


def test_aws_addon_with_its_gateway_switched_off_is_refused() -> None:
    """Before session s41 ``inferenceGateway.enabled: false`` was accepted: the stacks created the
    gateway controller's role and applied an InferenceGatewayConfig that no controller would act on."""
    document = _aws_managed()
    document["inference"]["addon"]["configurationValues"]["inferenceGateway"] = {"enabled": False}
    assert _problems(document) == [
        "inference.addon.configurationValues.inferenceGateway.enabled: false switches off the gateway of "
        "AWS's add-on, yet the stacks apply inference.gatewayConfig for it (an InferenceGatewayConfig "
        "nothing would act on); remove it (the app turns the gateway on)"
    ]


def _gateway_mode(example: dict[str, Any], **values: Any) -> dict[str, Any]:
    """The example with the chart in gateway mode and ``values`` added to its chart values."""
    example["inference"]["addon"]["configurationValues"] = {"mode": "gateway", **values}
    return example


def test_chart_values_the_app_fills_in_gateway_mode_are_refused(example: dict[str, Any]) -> None:
    """Before session s41 a ``gateway.config`` in the values was what the chart's gateway served (the
    dashboard, alarms and applied object followed ``inference.gatewayConfig``), and a certificate in
    ``service.tls.certificateArn`` was replaced by the endpoint's; both without a word."""
    served = {
        "name": "other",
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [{"name": "a", "modelName": "m", "modelSelector": {"matchLabels": {"app": "a"}}}],
        },
    }
    certificate = "arn:aws:acm:us-west-2:111111111111:certificate/11111111-2222-3333-4444-555555555555"
    document = _gateway_mode(
        example, gateway={"config": served}, service={"tls": {"certificateArn": certificate}}
    )
    assert _problems(document) == [
        "inference.addon.configurationValues.gateway.config: the app serves inference.gatewayConfig there; "
        "remove it and configure the gateway in inference.gatewayConfig",
        "inference.addon.configurationValues.service.tls.certificateArn: the app puts inference.endpoint's "
        "certificate there; remove it, or remove inference.endpoint",
    ]


def test_a_chart_certificate_without_an_endpoint_is_the_users(example: dict[str, Any]) -> None:
    certificate = "arn:aws:acm:us-west-2:111111111111:certificate/11111111-2222-3333-4444-555555555555"
    document = _gateway_mode(example, service={"tls": {"certificateArn": certificate}})
    del document["inference"]["endpoint"]
    assert config.parse(document).addon.chart_mode == "gateway"


@pytest.mark.parametrize("mode", ["operator", "gateway"])
def test_an_image_in_the_chart_values_is_refused_for_inference_image(
    example: dict[str, Any], mode: str
) -> None:
    """Before session s41 the chart ran the values' image while ``cdk deploy`` still built and pushed
    the gateway image (or ignored ``inference.image``)."""
    repository = "111111111111.dkr.ecr.us-west-2.amazonaws.com/mine"
    example["inference"]["addon"]["configurationValues"] = {
        "mode": mode,
        "image": {"repository": repository, "tag": "1.0", "pullPolicy": "Always"},
    }
    assert _problems(example) == [
        f"inference.addon.configurationValues.image.{key}: the app sets it from inference.image (default: "
        "the image it builds); set inference.image instead"
        for key in ("repository", "tag")
    ]
    del example["inference"]["addon"]["configurationValues"]["image"]["repository"]
    del example["inference"]["addon"]["configurationValues"]["image"]["tag"]
    example["inference"]["image"] = {"repository": repository, "tag": "1.0"}
    assert config.parse(example).image.repository == repository


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("kubernetes.io/role/internal-elb", "tags.kubernetes.io/role/internal-elb: a tag the stacks set"),
        ("kubernetes.io/role/elb", "tags.kubernetes.io/role/elb: a tag the stacks set"),
        ("kubernetes.io/cluster/igw-inference", "tags.kubernetes.io/cluster/igw-inference: a tag the stacks"),
        ("aws-cdk:auto-delete-objects", "tags.aws-cdk:auto-delete-objects: a tag the stacks set"),
        ("AWS-CDK:subnet-type", "tags.AWS-CDK:subnet-type: a tag the stacks set"),
    ],
)
def test_a_tag_the_stacks_set_per_resource_is_refused(
    example: dict[str, Any], key: str, expected: str
) -> None:
    """Session s42: such a user tag lost where the stacks set it (``internal-elb: "0"`` stayed off the
    private subnets) and landed on every other resource (the public subnets, the VPC, the buckets)."""
    example["tags"] = {key: "0"}
    assert [problem for problem in _problems(example) if problem.startswith(expected)], _problems(example)


@pytest.mark.parametrize(
    "key", ["igw.dev/inference-gateway-config-uid", "IGW.dev/Inference-Gateway-Config-UID", "igw.dev/cluster"]
)
def test_a_tag_key_of_the_operators_certificate_imports_is_refused(example: dict[str, Any], key: str) -> None:
    """Session s42: the config's tags land on the endpoint's ACM certificate, and the operator's role may
    re-import or delete a certificate carrying the owner tag (``aws:ResourceTag``, any letter case);
    ``igw.dev/cluster`` is what the orphan sweep deletes by. Such a key was accepted."""
    example["tags"] = {key: "0"}
    expected = f"tags.{key}: the key prefix {key[:8]!r} is the igw operator's"
    assert [problem for problem in _problems(example) if problem.startswith(expected)], _problems(example)


@pytest.mark.parametrize(
    ("node", "url"),
    [
        ("rateLimits", "rediss://default:Pl41nPassw0rd@cache.example:6379/0"),
        ("rateLimits", "redis://cache.example:6379/0?password=Pl41nPassw0rd"),
        ("globalHeartbeat", "rediss://:Pl41nPassw0rd@global.example:6379/0"),
    ],
)
def test_a_password_in_a_gateway_redis_url_is_refused_without_quoting_it(
    example: dict[str, Any], node: str, url: str
) -> None:
    """Session s42: it was synthesized into the inference stack's CloudFormation template as given."""
    redis: dict[str, Any] = {"url": url}
    extension: dict[str, Any] = {"redis": redis}
    if node == "rateLimits":
        extension["backend"] = "redis"
    example["inference"]["gatewayConfig"]["spec"].setdefault("extensions", {})[node] = extension
    problems = _problems(example)
    expected = f"inference.gatewayConfig.spec.extensions.{node}.redis.url: holds a password"
    assert [p for p in problems if p.startswith(expected)], problems
    assert not [p for p in problems if "Pl41nPassw0rd" in p], problems
    # the way it names: passwordEnv (a Secret in podDefaults.env) and the URL without a password
    redis["url"], redis["passwordEnv"] = "rediss://default@cache.example:6379/0", "REDIS_PASSWORD"
    assert not [p for p in _problems_or_none(example) if "holds a password" in p]


def _problems_or_none(document: dict[str, Any]) -> list[str]:
    """The problems of ``document``, or none when it is accepted."""
    try:
        config.parse(document)
    except config.DeploymentConfigError as exc:
        return list(exc.problems)
    return []


def test_a_token_in_a_tag_is_reported_once(example: dict[str, Any]) -> None:
    """Session s42: ``${Token[...]}`` in a tag value was reported twice, as a token and as characters
    AWS refuses; the characters beside the token are still checked."""
    example["tags"] = {"project": "${Token[AWS.Region.7]}", "team": "${Token[AWS.Region.7]}<x>"}
    problems = _problems(example)
    assert [p for p in problems if p.startswith("tags.project:")] == [
        "tags.project: '${Token[AWS.Region.7]}' is a CDK token marker: CDK would resolve it at synthesis "
        "instead of taking it literally (a known key becomes another value, an unknown one fails synthesis); "
        "write the literal value"
    ]
    team = [p for p in problems if p.startswith("tags.team:")]
    assert len(team) == 2, team
    assert team[0].startswith("tags.team: the value has '<>'"), team
