"""Security-review probes of the synthesized templates (session s44): every service principal's trust
carries ``aws:SourceAccount`` unless AWS documents none for it; the TLS-certificate bucket grant is
the operator's object read/write and nothing more; and stateful resources survive a stack delete
(Retain/Snapshot) unless listed with a reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cdk.constructs.aws_inference_addon import TLS_BUCKET_ACTIONS, TLS_OBJECT_ACTIONS
from tests.cdk.support import Synthesized

FIXTURES = ("synthesized", "variant", "existing")

WITHOUT_SOURCE_ACCOUNT = {
    "lambda.amazonaws.com": "Lambda assumes a function's execution role with no aws:SourceAccount or "
    "aws:SourceArn in the request (AWS documents none for execution roles); these are aws-cdk-lib's "
    "own custom-resource provider roles",
    "ec2.amazonaws.com": "EC2 assumes an instance profile's role for the instance, with no source "
    "account or ARN in the request; the role is the EKS system node group's",
    "eks.amazonaws.com": "the EKS cluster role: AWS's cluster IAM role documentation gives its trust "
    "policy without source conditions, and aws-cdk-lib creates it with the cluster",
    "pods.eks.amazonaws.com": "EKS Pod Identity documents session-tag conditions instead, and every "
    "such role pins aws:RequestTag/eks-cluster-name, kubernetes-namespace and "
    "kubernetes-service-account (cdk/constructs/workload_role.py, test_pod_identity_trust.py)",
}
"""Service principals AWS documents no ``aws:SourceAccount`` trust condition for, each with why."""

IF_EXISTS_ONLY: dict[str, str] = {"sagemaker.amazonaws.com": "StringEqualsIfExists"}
"""Principals pinned with the ``IfExists`` form: AWS's HyperPod execution-role trust is documented
without a condition, so a strict one could refuse the service's own AssumeRole on a real deploy."""

STATEFUL = {
    "AWS::S3::Bucket",
    "AWS::Logs::LogGroup",
    "AWS::KMS::Key",
    "AWS::ElastiCache::ReplicationGroup",
    "AWS::ElastiCache::CacheCluster",
    "AWS::SecretsManager::Secret",
    "AWS::DynamoDB::Table",
    "AWS::RDS::DBInstance",
    "AWS::RDS::DBCluster",
    "AWS::EFS::FileSystem",
    "AWS::ECR::Repository",
}
"""Resource types holding data a stack delete would lose."""

SURVIVES = {"Retain", "Snapshot", "RetainExceptOnCreate"}

DELETED_WITH_THE_STACK = {
    "HyperPodLifecycleScripts": "the lifecycle scripts are the repository's lifecycle_scripts/, "
    "uploaded again by every deploy; the bucket's fixed name must be free for the next deploy "
    "(cdk/constructs/hyperpod_cluster.py)",
    "RedisAuthToken": "the AUTH token guards only the replication group of the same stack; a group "
    "restored from its final snapshot is created with a new token",
}
"""Logical-id prefixes of stateful resources deleted with their stack on purpose, each with why."""


@pytest.fixture(scope="module")
def global_router() -> dict[str, Any]:
    import aws_cdk as cdk

    from cdk.app_builder import feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import build_global_router_stack

    app = cdk.App(context=feature_flags())
    stack = build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
    template: dict[str, Any] = app.synth().get_stack_artifact(stack.artifact_id).template
    return template


def _templates(request: pytest.FixtureRequest, fixture: str) -> dict[str, dict[str, Any]]:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    return synthesized.templates


def _trust_statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                yield logical_id, statement


def _services(statement: dict[str, Any]) -> list[str]:
    service = statement.get("Principal", {}).get("Service", [])
    return [service] if isinstance(service, str) else list(service)


def _unpinned(name: str, template: dict[str, Any], if_exists: frozenset[str] = frozenset()) -> list[str]:
    """Trust statements of ``template`` whose service principal lacks ``aws:SourceAccount`` of the
    test account (``StringEqualsIfExists`` for :data:`IF_EXISTS_ONLY` principals and for the roles
    named in ``if_exists``)."""
    unpinned = []
    for logical_id, statement in _trust_statements(template):
        for service in _services(statement):
            if service in WITHOUT_SOURCE_ACCOUNT:
                continue
            condition = statement.get("Condition", {})
            operator = "StringEqualsIfExists" if logical_id in if_exists else "StringEquals"
            operator = IF_EXISTS_ONLY.get(service, operator)
            account = condition.get(operator, {}).get("aws:SourceAccount")
            if account != "111111111111":
                unpinned.append(f"{name}/{logical_id}: {service} {statement.get('Condition')}")
    return unpinned


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_service_principal_trust_carries_source_account(
    request: pytest.FixtureRequest, fixture: str
) -> None:
    unpinned = []
    for role, template in _templates(request, fixture).items():
        unpinned += _unpinned(role, template)
    assert unpinned == []


def _task_roles(template: dict[str, Any]) -> tuple[str, str]:
    """Logical ids of the router task definition's task role and execution role."""
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    props = task["Properties"]
    return props["TaskRoleArn"]["Fn::GetAtt"][0], props["ExecutionRoleArn"]["Fn::GetAtt"][0]


def test_every_service_principal_trust_of_the_global_router_carries_source_account(
    global_router: dict[str, Any],
) -> None:
    """Until session s44 the router's ``ecs-tasks`` task and execution roles and its flow-log role
    trusted their service with no condition at all."""
    _, execution_role = _task_roles(global_router)
    assert _unpinned("global-router", global_router, frozenset({execution_role})) == []


def _only_statement(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    (statement,) = template["Resources"][logical_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert isinstance(statement, dict)
    return statement


def test_the_router_task_role_is_pinned_to_this_accounts_ecs_tasks(global_router: dict[str, Any]) -> None:
    """AWS's task-role documentation: ``aws:SourceAccount`` and ``aws:SourceArn``
    ``arn:<partition>:ecs:<region>:<account>:*`` in the trust."""
    task_role, _ = _task_roles(global_router)
    statement = _only_statement(global_router, task_role)
    assert statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "111111111111"},
        "ArnLike": {
            "aws:SourceArn": {
                "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecs:us-east-1:111111111111:*"]]
            }
        },
    }


def test_the_router_execution_role_refuses_another_account(global_router: dict[str, Any]) -> None:
    """The execution-role trust is documented without a condition: ``IfExists``, as for SageMaker."""
    _, execution_role = _task_roles(global_router)
    statement = _only_statement(global_router, execution_role)
    assert statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert statement["Condition"] == {"StringEqualsIfExists": {"aws:SourceAccount": "111111111111"}}


def test_the_allow_list_names_only_principals_the_templates_use(request: pytest.FixtureRequest) -> None:
    used = {
        service
        for fixture in FIXTURES
        for template in _templates(request, fixture).values()
        for _, statement in _trust_statements(template)
        for service in _services(statement)
    }
    assert set(WITHOUT_SOURCE_ACCOUNT) <= used
    assert {"sagemaker.amazonaws.com", "vpc-flow-logs.amazonaws.com"} <= used


def test_the_flow_log_role_is_pinned_to_this_accounts_flow_logs(synthesized: Synthesized) -> None:
    (statement,) = [
        s
        for _, s in _trust_statements(synthesized.templates["network"])
        if "vpc-flow-logs.amazonaws.com" in _services(s)
    ]
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-west-2:111111111111:vpc-flow-log/*"],
        ]
    }


def test_the_router_flow_log_role_is_pinned_to_this_accounts_flow_logs(global_router: dict[str, Any]) -> None:
    (statement,) = [
        s for _, s in _trust_statements(global_router) if "vpc-flow-logs.amazonaws.com" in _services(s)
    ]
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:111111111111:vpc-flow-log/*"],
        ]
    }


def _addon_execution_role_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    (role,) = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith("AwsInferenceAddonOperatorIdentityRole")
        and resource["Type"] == "AWS::IAM::Role"
    ]
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_tls_bucket_grant_is_object_read_write_and_list_only(variant: Synthesized) -> None:
    template = variant.templates["inference"]
    (bucket,) = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith("AwsInferenceAddonTlsCertificates") and resource["Type"] == "AWS::S3::Bucket"
    ]
    grants: dict[str, set[str]] = {}
    for statement in _addon_execution_role_statements(template):
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        for resource in resources:
            grants.setdefault(json.dumps(resource, sort_keys=True), set()).update(actions)
    objects = json.dumps({"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, "/*"]]}, sort_keys=True)
    whole = json.dumps({"Fn::GetAtt": [bucket, "Arn"]}, sort_keys=True)
    assert grants == {objects: set(TLS_OBJECT_ACTIONS), whole: set(TLS_BUCKET_ACTIONS)}
    assert set(TLS_OBJECT_ACTIONS) == {"s3:GetObject", "s3:PutObject"}


def _stateful_deleted(template: dict[str, Any]) -> list[str]:
    return [
        f"{logical_id} ({resource['Type']}): DeletionPolicy {resource.get('DeletionPolicy')}, "
        f"UpdateReplacePolicy {resource.get('UpdateReplacePolicy')}"
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in STATEFUL
        and not logical_id.startswith(tuple(DELETED_WITH_THE_STACK))
        and not (
            resource.get("DeletionPolicy") in SURVIVES and resource.get("UpdateReplacePolicy") in SURVIVES
        )
    ]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_stateful_resources_of_the_app_survive_a_stack_delete(
    request: pytest.FixtureRequest, fixture: str
) -> None:
    for role, template in _templates(request, fixture).items():
        assert _stateful_deleted(template) == [], role


def test_stateful_resources_of_the_global_router_survive_a_stack_delete(
    global_router: dict[str, Any],
) -> None:
    assert _stateful_deleted(global_router) == []
    (redis,) = [
        r for r in global_router["Resources"].values() if r["Type"] == "AWS::ElastiCache::ReplicationGroup"
    ]
    assert (redis["DeletionPolicy"], redis["UpdateReplacePolicy"]) == ("Snapshot", "Snapshot")


def test_every_allow_listed_deletion_matches_a_resource(
    request: pytest.FixtureRequest, global_router: dict[str, Any]
) -> None:
    logical_ids = [
        logical_id
        for template in [*_templates(request, "synthesized").values(), global_router]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in STATEFUL
    ]
    for prefix in DELETED_WITH_THE_STACK:
        assert any(logical_id.startswith(prefix) for logical_id in logical_ids), prefix


@pytest.mark.parametrize(("value", "policy"), [(True, "Delete"), ("true", "Delete"), ("false", "Snapshot")])
def test_the_dev_context_flag_deletes_redis_without_a_snapshot(value: object, policy: str) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from cdk.app_builder import feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import DESTROY_DATA_CONTEXT, build_global_router_stack

    app = cdk.App(context={**feature_flags(), DESTROY_DATA_CONTEXT: value})
    stack = build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
    (redis,) = Template.from_stack(stack).find_resources("AWS::ElastiCache::ReplicationGroup").values()
    assert redis.get("DeletionPolicy") == policy


def test_a_misspelt_flag_value_is_refused_naming_the_flag() -> None:
    import aws_cdk as cdk

    from cdk.app_builder import feature_flags
    from cdk.constructs.removal import DestroyDataContextError
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import DESTROY_DATA_CONTEXT, build_global_router_stack

    app = cdk.App(context={**feature_flags(), DESTROY_DATA_CONTEXT: "yes"})
    with pytest.raises(
        DestroyDataContextError, match=f"context {DESTROY_DATA_CONTEXT}: expected true or false"
    ):
        build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
