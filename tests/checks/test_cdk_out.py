"""The cdk.out source: CloudFormation templates (AWS resources plus embedded manifests and charts)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from igw.checks.inventory import Missing
from igw.checks.model import Command, Status
from igw.checks.sources.cdk_out import SOURCE_PREFIX, load_cdk_out, render
from igw.checks.sources.manifests import inventory_from_documents
from igw.cli.main import main
from tests.checks.helpers import FIXTURES, find, findings, mutated, of, run

CDK = FIXTURES / "cdk"
AWS_SIDE = (
    "IGW-PF001",
    "IGW-PF002",
    "IGW-PF003",
    "IGW-PF004",
    "IGW-PF005",
    "IGW-PF006",
    "IGW-PF007",
    "IGW-PF008",
    "IGW-AU102",
    "IGW-AU301",
    "IGW-AU302",
    "IGW-AU303",
    "IGW-AU304",
    "IGW-AU501",
    "IGW-AU502",
)


def _aws_findings(path: Path) -> set[tuple[str, str, str]]:
    inventory = load_cdk_out(path)
    assert inventory.errors == []
    both = run(inventory, Command.PREFLIGHT) + run(inventory, Command.AUDIT)
    return {f for f in findings(both) if f[0] in AWS_SIDE}


def test_secure_stack_has_no_aws_side_findings() -> None:
    assert _aws_findings(CDK / "secure") == set()


def test_insecure_stack_findings() -> None:
    assert _aws_findings(CDK / "insecure") == {
        ("IGW-PF001", "FAIL", "HIGH"),  # authentication mode unset → CONFIG_MAP
        ("IGW-PF002", "FAIL", "CRITICAL"),  # add-on v1.5.0 < v2.0.0-eksbuild.2
        ("IGW-PF003", "FAIL", "HIGH"),  # cert-manager missing, metrics-server too old
        ("IGW-PF004", "FAIL", "HIGH"),  # role lacks acm actions
        ("IGW-PF005", "FAIL", "HIGH"),  # untagged subnets
        ("IGW-PF008", "WARN", "MEDIUM"),  # auto-issue, cert-manager not declared here (PF003 has it)
        ("IGW-AU102", "FAIL", "HIGH"),  # HTTPS listener without SslPolicy → 2016-08
        ("IGW-AU301", "WARN", "MEDIUM"),
        ("IGW-AU302", "FAIL", "HIGH"),
        ("IGW-AU303", "FAIL", "MEDIUM"),
        ("IGW-AU304", "FAIL", "MEDIUM"),
        ("IGW-AU501", "FAIL", "HIGH"),  # s3:*
        ("IGW-AU502", "FAIL", "HIGH"),  # wildcard :sub
    }


def test_embedded_manifests_and_charts_are_read() -> None:
    inventory = load_cdk_out(CDK / "secure")
    kube = inventory.kube.objects
    configs, deployment_objects = kube["InferenceGatewayConfig"], kube["Deployment"]
    assert not isinstance(configs, Missing)
    assert not isinstance(deployment_objects, Missing)
    assert [c["metadata"]["name"] for c in configs] == ["gateway"]
    deployments = {d["metadata"]["name"] for d in deployment_objects}
    assert deployments == {"llama", "aws-load-balancer-controller"}
    assert not isinstance(inventory.aws.roles, Missing)
    [role] = inventory.aws.roles
    assert role.trust_policy["Statement"][0]["Condition"]["StringEquals"] == {
        "${Fn::Select}:sub": "system:serviceaccount:hyperpod-inference-system:inference-gateway",
        "${Fn::Select}:aud": "sts.amazonaws.com",
    }


def test_render_intrinsics() -> None:
    assert render({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/X"]]}) == (
        "arn:${AWS::Partition}:iam::aws:policy/X"
    )
    assert render({"Fn::GetAtt": ["Role", "Arn"]}) == "${Role.Arn}"
    assert render({"Fn::GetAtt": "Role.Arn"}) == "${Role.Arn}"
    assert render({"Fn::GetAtt": ["Cond", "Value"]}, {"Cond": {"k": "v"}}) == {"k": "v"}
    assert render({"Fn::If": ["c", 1, 2]}) == "${Fn::If}"


def test_bad_templates_are_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "Broken.template.json").write_text("{not json")
    (tmp_path / "Odd.template.json").write_text(
        json.dumps(
            {
                "Resources": {
                    "X": {
                        "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                        "Properties": {"Manifest": "[not json"},
                    }
                }
            }
        )
    )
    inventory = load_cdk_out(tmp_path)
    assert len(inventory.errors) == 2
    assert "Broken.template.json" in inventory.errors[0]
    assert "X (Custom::AWSCDK-EKS-KubernetesResource)" in inventory.errors[1]


def test_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no \*\.template\.json files \(run cdk synth first\)"):
        load_cdk_out(tmp_path)


@pytest.mark.parametrize("command", ["preflight", "audit"])
@pytest.mark.parametrize(
    "content", [None, "root:x:0:0:root:/root:/bin/bash\n", "[1, 2]"], ids=["empty", "passwd", "list"]
)
def test_a_source_with_no_readable_template_is_a_usage_error_with_no_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, content: str | None
) -> None:
    """An empty folder, or a file that is no template, was checked as an account holding nothing:
    ``igw preflight`` reported CRITICAL "EKS add-on ... not installed" (exit 1), ``igw audit``
    exit 3 with a full table, about an account neither had read."""
    source = tmp_path
    if content is not None:
        source = tmp_path / "x.template.json"
        source.write_text(content)
    assert main([command, "--cdk-out", str(source)]) == 2
    captured = capsys.readouterr()
    assert f"{source}:no" in "".join(captured.err.split())  # rich wraps (even inside a path) at its width
    assert "not installed" not in captured.out + captured.err


@pytest.mark.parametrize(
    ("source", "expected"),
    [(f"{SOURCE_PREFIX}./cdk.out", Status.PASS), ("manifests ./deploy", Status.FAIL)],
    ids=["cdk-out", "manifests"],
)
def test_a_value_cloudformation_fills_in_is_not_a_config_problem_in_cdk_output_only(
    source: str, expected: Status
) -> None:
    """The project's own app sets ``spec.tls.acmArn`` to a ``Ref`` of the certificate it creates,
    rendered ``${CertificateBDDE2430}``: IGW-PF009 failed it (not an ACM ARN). In CDK output it is
    said, not failed; in manifests ``${X}`` is a template nobody rendered, still a failure."""
    docs = mutated(lambda d: find(d, "InferenceGatewayConfig", "gateway")["spec"].update(
        tls={"acmArn": "${CertificateBDDE2430}"}
    ))  # fmt: skip
    inventory = inventory_from_documents(docs, source=source)
    (result,) = of(run(inventory, Command.PREFLIGHT), "IGW-PF009")
    assert result.status == expected, result.message
    if expected == Status.PASS:
        assert result.message == "valid; set at deploy time, not checked: spec.tls.acmArn"
    else:
        assert "spec.tls.acmArn: must be an ACM certificate ARN" in result.message


def _secure_template_with(tmp_path: Path, **resources: object) -> Path:
    """The secure stack with ``resources`` added first (before the objects they refer to)."""
    template = json.loads((CDK / "secure" / "Platform.template.json").read_text())
    template["Resources"] = {**resources, **template["Resources"]}
    (tmp_path / "Platform.template.json").write_text(json.dumps(template))
    return tmp_path


@pytest.mark.parametrize(
    ("rule", "opened"),
    [
        ({"CidrIp": "0.0.0.0/0"}, "0.0.0.0/0"),
        ({"CidrIpv6": "::/0"}, "::/0"),
    ],
)
def test_a_separate_ingress_rule_opens_the_load_balancers_group(
    tmp_path: Path, rule: dict[str, str], opened: str
) -> None:
    """``AWS::EC2::SecurityGroupIngress`` (CDK's shape for a rule naming another stack's group) counts:
    the group it opens to the world read as "inbound 10.0.0.0/8" and the audit passed (s38)."""
    ingress = {
        "Type": "AWS::EC2::SecurityGroupIngress",
        "Properties": {
            "GroupId": {"Fn::GetAtt": ["LbSg", "GroupId"]},
            "IpProtocol": "tcp",
            "FromPort": 443,
            "ToPort": 443,
            **rule,
        },
    }
    inventory = load_cdk_out(_secure_template_with(tmp_path, LbSgOpenToTheWorld=ingress))
    [result] = of(run(inventory, Command.AUDIT), "IGW-AU302")
    assert result.status is Status.WARN  # the secure ALB is internal: open to every peer, LOW
    assert opened in result.message


def _role_allowing(*statements: Mapping[str, object]) -> dict[str, object]:
    """A Pod Identity role (trust scoped) with one inline policy of ``statements``."""
    trust = {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "AssumeRolePolicyDocument": {"Statement": [trust]},
            "Policies": [{"PolicyName": "probe", "PolicyDocument": {"Statement": list(statements)}}],
        },
    }


@pytest.mark.parametrize(
    ("statement", "severity", "said"),
    [
        ({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}, "CRITICAL", "every action"),
        ({"Effect": "Allow", "Action": ["*:*"], "Resource": "*"}, "CRITICAL", "every action"),
        (
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"},
            "HIGH",
            "iam:PassRole on every role",
        ),
        (
            {"Effect": "Allow", "Action": ["iam:Pass*"], "Resource": "arn:aws:iam::111122223333:role/*"},
            "HIGH",
            "iam:PassRole on every role",
        ),
    ],
)
def test_grants_as_broad_as_a_wildcard_action_fail(
    tmp_path: Path, statement: dict[str, object], severity: str, said: str
) -> None:
    """An Allow with NotAction, ``*:*`` and PassRole on every role passed IGW-AU501 or were graded
    below ``*`` ("explicit actions only", s38)."""
    inventory = load_cdk_out(_secure_template_with(tmp_path, ProbeRole=_role_allowing(statement)))
    [result] = [
        r for r in of(run(inventory, Command.AUDIT), "IGW-AU501") if r.resource == "IAM role ProbeRole"
    ]
    assert (result.status, result.severity.label) == (Status.FAIL, severity)
    assert said in result.message


def test_pass_role_on_named_roles_passes(tmp_path: Path) -> None:
    statement = {
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Resource": "arn:aws:iam::111122223333:role/sagemaker-execution",
    }
    inventory = load_cdk_out(_secure_template_with(tmp_path, ProbeRole=_role_allowing(statement)))
    [result] = [
        r for r in of(run(inventory, Command.AUDIT), "IGW-AU501") if r.resource == "IAM role ProbeRole"
    ]
    assert result.status is Status.PASS


def test_cdk_names_stay_readable_in_results(tmp_path: Path) -> None:
    """CDK's logical IDs (words and an 8-digit hash) and the ELBv2 type name read as tokens to the
    report's redaction: every role was ``IAM role [REDACTED]`` and every load balancer
    ``AWS::[REDACTED]::LoadBalancer`` (s38)."""
    role = _role_allowing({"Effect": "Allow", "Action": "acm:DescribeCertificate", "Resource": "*"})
    inventory = load_cdk_out(_secure_template_with(tmp_path, GatewayIdentityRoleD18DF32F=role))
    resources = {r.resource for r in run(inventory, Command.AUDIT)}
    assert "IAM role GatewayIdentityRoleD18DF32F" in resources
    assert "AWS::ElasticLoadBalancingV2::LoadBalancer Alb" in resources
