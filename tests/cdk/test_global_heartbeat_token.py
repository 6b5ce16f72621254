"""``inference.globalHeartbeatToken``: the per-cluster stack syncs the global router's Redis AUTH token
into a Kubernetes Secret through the External Secrets Operator (``cdk/constructs/external_secret.py``).

One synthesis of the example app with the block set (Pod Identity, a customer-managed key, a secret in
another region than the stacks), the shared example assembly for "without the block", one bare stack for
IRSA; the config checks need no synthesis."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from cdk import config, nag
from igw.addon import pins
from igw.operator.placement import OFF_HYPERPOD_NODES
from tests.cdk.support import EXAMPLES, Synthesized, cfn_lint, resolve

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:igw-global-redis-AbCdEf"
"""The global router's secret: us-east-1, while the example's stacks deploy to us-west-2."""
KMS_KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TOKEN_ENV = "IGW_GLOBAL_REDIS_TOKEN"
PASSWORD_ENV_FIELD = "inference.gatewayConfig.spec.extensions.globalHeartbeat.redis.passwordEnv"


def _document(**token: Any) -> dict[str, Any]:
    """The example deployment config whose gateways publish heartbeats with the password from
    ``TOKEN_ENV``, read from the synced Secret, and ``inference.globalHeartbeatToken`` = ``token``."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text())
    spec = document["inference"]["gatewayConfig"]["spec"]
    spec["extensions"] = {
        "globalHeartbeat": {
            "cluster": "west-a",
            "region": "us-west-2",
            "redis": {"url": "rediss://master.igw-global.example.com:6380/0", "passwordEnv": TOKEN_ENV},
        }
    }
    spec["podDefaults"] = {
        "env": [
            {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": "igw-global-redis", "key": "token"}}}
        ]
    }
    document["inference"]["globalHeartbeatToken"] = {"secretArn": SECRET_ARN, **token}
    return document


@pytest.fixture(scope="module")
def with_token(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from cdk.app_builder import build_app

    outdir = tmp_path_factory.mktemp("cdk-heartbeat-token.out")
    built = build_app(config.parse(_document(kmsKeyArn=KMS_KEY_ARN, refreshInterval="30m")), outdir=outdir)
    assembly = built.app.synth()
    artifact = assembly.get_stack_artifact(built.inference.artifact_id)
    return Synthesized(
        outdir=outdir,
        templates={"inference": artifact.template},
        files={"inference": outdir / artifact.template_file},
    )


def _resources(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {logical: r for logical, r in template["Resources"].items() if r["Type"] == kind}


def _eso_chart(template: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical, r)
        for logical, r in _resources(template, "Custom::AWSCDK-EKS-HelmChart").items()
        if r["Properties"].get("Chart") == pins.EXTERNAL_SECRETS_CHART
    ]
    return found


def _eso_manifest(template: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    (found,) = [
        (logical, r, json.loads(resolve(r["Properties"]["Manifest"], {})))
        for logical, r in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").items()
        if "external-secrets.io" in json.dumps(r["Properties"]["Manifest"])
    ]
    return found


def _role_statements(template: Mapping[str, Any], role_id: str) -> list[dict[str, Any]]:
    """Every statement of every identity policy attached to ``role_id`` (list actions sorted)."""
    role = template["Resources"][role_id]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role
    statements = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return [{**s, "Action": sorted(s["Action"])} if isinstance(s["Action"], list) else s for s in statements]


def test_the_operator_is_installed_from_its_chart_at_the_pin_with_its_crds(with_token: Synthesized) -> None:
    _, chart = _eso_chart(with_token.templates["inference"])
    properties = chart["Properties"]
    assert properties["Repository"] == "https://charts.external-secrets.io"
    assert properties["Chart"] == "external-secrets"
    assert properties["Version"] == pins.EXTERNAL_SECRETS_CHART_VERSION
    assert properties["Namespace"] == pins.EXTERNAL_SECRETS_NAMESPACE
    values = json.loads(resolve(properties["Values"], {}))
    assert values["installCRDs"] is True
    assert values["serviceAccount"] == {"create": True, "name": pins.EXTERNAL_SECRETS_SERVICE_ACCOUNT}
    # The controller, its webhook and its cert controller keep off the GPU nodes when they can.
    for affinity in (values["affinity"], values["webhook"]["affinity"], values["certController"]["affinity"]):
        assert affinity == OFF_HYPERPOD_NODES
    # The controller (leader-elected) and the webhook (failurePolicy Fail) survive a node drain.
    assert values["leaderElect"] is True
    for part in (values, values["webhook"]):
        assert part["replicaCount"] == 2
        assert part["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}
        (spread,) = part["topologySpreadConstraints"]
        assert (spread["topologyKey"], spread["whenUnsatisfiable"]) == (
            "kubernetes.io/hostname",
            "ScheduleAnyway",
        )


def test_the_controller_role_reads_exactly_the_one_secret_and_decrypts_only_through_secrets_manager(
    with_token: Synthesized,
) -> None:
    template = with_token.templates["inference"]
    (association,) = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == pins.EXTERNAL_SECRETS_NAMESPACE
    ]
    assert association["ServiceAccount"] == pins.EXTERNAL_SECRETS_SERVICE_ACCOUNT
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    (trust,) = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    statements = sorted(_role_statements(template, role_id), key=lambda s: s["Sid"])
    assert statements == [
        {
            "Sid": "DecryptThroughSecretsManager",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": KMS_KEY_ARN,
            "Condition": {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}},
        },
        {
            "Sid": "ReadTheSyncedSecret",
            "Effect": "Allow",
            "Action": ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"],
            "Resource": SECRET_ARN,
        },
    ]


def test_the_secret_store_reads_the_secrets_region_and_the_external_secret_writes_the_configured_secret(
    with_token: Synthesized,
) -> None:
    _, _, objects = _eso_manifest(with_token.templates["inference"])
    store, external = objects
    assert store["apiVersion"] == external["apiVersion"] == "external-secrets.io/v1"
    assert (store["kind"], external["kind"]) == ("SecretStore", "ExternalSecret")
    assert store["metadata"]["namespace"] == external["metadata"]["namespace"] == "default"
    # the secret's region, not the stack's (us-west-2); the controller's own credentials (no auth)
    assert store["spec"] == {"provider": {"aws": {"service": "SecretsManager", "region": "us-east-1"}}}
    assert external["spec"] == {
        "refreshInterval": "30m",
        "secretStoreRef": {"kind": "SecretStore", "name": store["metadata"]["name"]},
        "target": {"name": "igw-global-redis", "creationPolicy": "Owner"},
        "data": [{"secretKey": "token", "remoteRef": {"key": SECRET_ARN}}],
    }


def test_the_objects_wait_for_the_chart_and_the_chart_for_its_role(with_token: Synthesized) -> None:
    template = with_token.templates["inference"]
    chart_id, chart = _eso_chart(template)
    manifest_id, manifest, _ = _eso_manifest(template)
    assert chart_id in manifest["DependsOn"], "the CRDs and the webhook come with the chart"
    (association_id,) = [
        logical
        for logical, r in _resources(template, "AWS::EKS::PodIdentityAssociation").items()
        if r["Properties"]["Namespace"] == pins.EXTERNAL_SECRETS_NAMESPACE
    ]
    policies = [
        logical
        for logical, r in _resources(template, "AWS::IAM::Policy").items()
        if "ReadTheSyncedSecret" in json.dumps(r)
    ]
    assert {association_id, *policies} <= set(chart["DependsOn"])
    (gateway_config,) = [
        r
        for r in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
        if "InferenceGatewayConfig" in json.dumps(r["Properties"]["Manifest"])
    ]
    assert manifest_id in gateway_config["DependsOn"], "the Secret is requested before the gateways start"


def test_without_the_block_nothing_of_it_is_synthesized(synthesized: Synthesized) -> None:
    text = json.dumps(synthesized.templates)
    assert "external-secrets" not in text
    assert "secretsmanager" not in text


def test_cdk_nag_and_cfn_lint_stay_clean_with_the_block(with_token: Synthesized) -> None:
    violations, _ = nag.read_report(with_token.outdir)
    assert violations == []
    assert cfn_lint(with_token.files["inference"]) == []


def test_with_irsa_the_chart_annotates_the_service_account_and_the_role_trusts_only_it() -> None:
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk import aws_iam as iam

    from cdk.constructs.external_secret import SyncedSecret

    stack = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account="111111111111", region="us-west-2"))
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Kubectl",
        service_token="arn:aws:lambda:us-west-2:111111111111:function:kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::111111111111:role/kubectl"),
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="igw", kubectl_provider=provider
    )
    oidc = eks.OidcProviderNative.from_oidc_provider_arn(
        stack, "Oidc", "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X"
    )
    token = config.GlobalHeartbeatTokenConfig(secret_arn=SECRET_ARN, namespace="models")
    SyncedSecret(stack, "Token", cluster=cluster, identity="irsa", oidc_provider=oidc, config=token)
    template = cdk.assertions.Template.from_stack(stack).to_json()
    assert _resources(template, "AWS::EKS::PodIdentityAssociation") == {}
    _, chart = _eso_chart(template)
    values = chart["Properties"]["Values"]
    assert isinstance(values, dict), f"no role ARN in the chart's values: {values}"
    (role_ref,) = [part for part in values["Fn::Join"][1] if isinstance(part, dict)]
    role_id = role_ref["Fn::GetAtt"][0]
    assert (
        '"serviceAccount":{"create":true,"name":"external-secrets","annotations":{'
        in values["Fn::Join"][1][0]
    )
    assert values["Fn::Join"][1][0].endswith('"eks.amazonaws.com/role-arn":"')
    (trust,) = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    (conditions,) = _resources(template, "Custom::AWSCDKCfnJson").values()
    namespace, account = pins.EXTERNAL_SECRETS_NAMESPACE, pins.EXTERNAL_SECRETS_SERVICE_ACCOUNT
    assert json.loads(conditions["Properties"]["Value"]) == {
        "oidc.eks.us-west-2.amazonaws.com/id/X:sub": f"system:serviceaccount:{namespace}:{account}",
        "oidc.eks.us-west-2.amazonaws.com/id/X:aud": "sts.amazonaws.com",
    }
    # no key given: no KMS permission at all
    assert _role_statements(template, role_id) == [
        {
            "Sid": "ReadTheSyncedSecret",
            "Effect": "Allow",
            "Action": ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"],
            "Resource": SECRET_ARN,
        }
    ]
    _, _, (store, external) = _eso_manifest(template)
    assert store["metadata"]["namespace"] == external["metadata"]["namespace"] == "models"
    assert external["spec"]["refreshInterval"] == "1h"


def test_the_defaults_come_from_the_gateway_config() -> None:
    document = _document()
    document["inference"]["gatewayConfig"]["namespace"] = "inference"
    parsed = config.parse(document).global_heartbeat_token
    assert parsed == config.GlobalHeartbeatTokenConfig(
        secret_arn=SECRET_ARN,
        namespace="inference",
        secret_name="igw-global-redis",
        key="token",
        refresh_interval="1h",
        kms_key_arn=None,
    )
    assert parsed.region == "us-east-1"
    example: dict[str, Any] = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text())
    assert config.parse(example).global_heartbeat_token is None


def test_the_password_variable_may_come_from_the_secret_through_env_from() -> None:
    document = _document(key=TOKEN_ENV)
    document["inference"]["gatewayConfig"]["spec"]["podDefaults"] = {
        "envFrom": [{"secretRef": {"name": "igw-global-redis"}}]
    }
    assert config.parse(document).global_heartbeat_token is not None


@pytest.mark.parametrize(
    "pod_defaults",
    [["x"], {"env": {"name": TOKEN_ENV}}, {"env": [{"name": TOKEN_ENV, "valueFrom": "igw-global-redis"}]}],
)
def test_a_malformed_pod_defaults_is_reported_not_a_traceback(pod_defaults: Any) -> None:
    document = _document()
    document["inference"]["gatewayConfig"]["spec"]["podDefaults"] = pod_defaults
    with pytest.raises(config.DeploymentConfigError) as raised:
        config.parse(document)
    assert any(p.startswith("inference.gatewayConfig.spec.podDefaults") for p in raised.value.problems)
    assert any(p.startswith(f"{PASSWORD_ENV_FIELD}: {TOKEN_ENV} is not read") for p in raised.value.problems)


def test_the_kms_condition_names_the_partitions_endpoint() -> None:
    from cdk.constructs.external_secret import via_secrets_manager

    assert via_secrets_manager("eu-central-1") == "secretsmanager.eu-central-1.amazonaws.com"
    assert via_secrets_manager("cn-north-1") == "secretsmanager.cn-north-1.amazonaws.com.cn"


def _unwired(document: dict[str, Any]) -> None:
    document["inference"]["gatewayConfig"]["spec"].pop("podDefaults")


def _other_secret(document: dict[str, Any]) -> None:
    (entry,) = document["inference"]["gatewayConfig"]["spec"]["podDefaults"]["env"]
    entry["valueFrom"]["secretKeyRef"]["name"] = "hand-made"


def _other_key(document: dict[str, Any]) -> None:
    document["inference"]["globalHeartbeatToken"]["key"] = "password"


def _mode(**values: Any) -> Any:
    def mutate(document: dict[str, Any]) -> None:
        document["inference"]["addon"] = values

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(
                secretArn="arn:aws:ssm:us-east-1:123456789012:parameter/igw-global-redis"
            ),
            [
                "inference.globalHeartbeatToken.secretArn: must be a Secrets Manager secret's full ARN",
                "got 'arn:aws:ssm:",
            ],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(
                secretArn="arn:aws:secretsmanager:us-east-1:123456789012:secret:igw-global-redis"
            ),
            ["inference.globalHeartbeatToken.secretArn: "],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(
                secretArn=SECRET_ARN.replace("arn:aws:", "arn:aws-cn:")
            ),
            ["inference.globalHeartbeatToken.secretArn: partition aws-cn"],
        ),
        (
            _unwired,
            [
                f"{PASSWORD_ENV_FIELD}: {TOKEN_ENV} is not read from the Secret that "
                "inference.globalHeartbeatToken syncs (igw-global-redis, key token)",
                "inference.gatewayConfig.spec.podDefaults.env has no entry",
            ],
        ),
        (
            _other_secret,
            [
                f"{PASSWORD_ENV_FIELD}: {TOKEN_ENV} is not read",
                "inference.gatewayConfig.spec.podDefaults.env[0] (IGW_GLOBAL_REDIS_TOKEN) reads Secret "
                "hand-made key token",
            ],
        ),
        (_other_key, [f"{PASSWORD_ENV_FIELD}: {TOKEN_ENV} is not read", "key password"]),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(namespace="elsewhere"),
            [f"inference.globalHeartbeatToken.namespace: elsewhere, but {PASSWORD_ENV_FIELD}"],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(
                kmsKeyArn=KMS_KEY_ARN.replace("us-east-1", "us-west-2")
            ),
            ["inference.globalHeartbeatToken.kmsKeyArn: in us-west-2, but the secret is in us-east-1"],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(refreshInterval="0m"),
            ["inference.globalHeartbeatToken.refreshInterval: 0m would sync the token once"],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(refreshInterval="1d"),
            ["inference.globalHeartbeatToken.refreshInterval: must be a duration", "got '1d'"],
        ),
        (
            lambda d: d["inference"]["globalHeartbeatToken"].update(bogus=1),
            ["inference.globalHeartbeatToken: Additional properties are not allowed ('bogus'"],
        ),
        (
            lambda d: (d["inference"].pop("endpoint"), _mode(mode="awsManaged")(d)),
            ["inference.globalHeartbeatToken: only with inference.addon.mode igw"],
        ),
        (
            _mode(configurationValues={"mode": "gateway"}),
            ["inference.globalHeartbeatToken: only with the chart's mode operator"],
        ),
    ],
    ids=[
        "ssm-parameter-arn",
        "partial-arn",
        "other-partition",
        "password-env-not-set",
        "password-env-from-another-secret",
        "password-env-from-another-key",
        "secret-in-another-namespace",
        "key-in-another-region",
        "never-refreshed",
        "not-a-duration",
        "unknown-field",
        "aws-managed-addon",
        "chart-gateway-mode",
    ],
)
def test_a_bad_block_fails_synthesis_naming_the_field(mutate: Any, expected: list[str]) -> None:
    document = _document()
    config.parse(copy.deepcopy(document))  # the unmutated document is valid
    mutate(document)
    with pytest.raises(config.DeploymentConfigError) as raised:
        config.parse(document)
    (problem,) = raised.value.problems
    for text in expected:
        assert text in problem, problem


def test_the_example_documents_the_block() -> None:
    """The commented-out block in cdk/examples/deployment.yaml parses once uncommented."""
    lines = (EXAMPLES / "deployment.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # globalHeartbeatToken:"))
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append("  " + line[len("  # ") :])
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text())
    document["inference"].update(yaml.safe_load("\n".join(block)))
    token = config.parse(document).global_heartbeat_token
    assert token is not None
    assert token.secret_name == "igw-global-redis"
