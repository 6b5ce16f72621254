"""The AWS Load Balancer Controller, from its Helm chart, with its own IAM role.

It reconciles the gateway's ``Service`` into an internal NLB. Its IAM policy is the JSON file beside this
module (``load_balancer_controller_iam_policy.json``): what the controller needs to manage the load
balancers, target groups and security groups it tags ``elbv2.k8s.aws/cluster``, and to describe the rest.
Without WAF, Shield or Cognito permissions: the gateway uses none of them. Its ARNs name the stack's
region and account, and every action that takes a resource names one (before session s45 the file
kept upstream's ``*:*`` and ``Resource: *`` on load balancer, target group, security group, certificate
and service-linked-role actions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode
from cdk.constructs import checkov_ack
from cdk.constructs.nag_ack import acknowledge
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import pins
from igw.operator.placement import OFF_HYPERPOD_NODES

POLICY_FILE = Path(__file__).resolve().parent / "load_balancer_controller_iam_policy.json"
DEFAULT_SSL_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"


AWS_PARTITION_PREFIX = "arn:aws:"
"""How the upstream policy file spells ARNs; the stack's partition replaces it (aws-cn, aws-us-gov)."""
ANY_REGION_AND_ACCOUNT = ":*:*:"
ANY_ACCOUNT_IAM = "iam::*:"
"""How the policy file spells "any region and account" (and IAM's "any account"): the stack's own
replace them, since the controller manages load balancers of its cluster's region and account only."""


def policy_json(partition: str, region: str, account: str) -> dict[str, Any]:
    """The policy file with its ARNs in ``partition``, ``region`` and ``account`` (literals or the
    pseudo-parameter tokens)."""
    text = (
        POLICY_FILE.read_text(encoding="utf-8")
        .replace(AWS_PARTITION_PREFIX, f"arn:{partition}:")
        .replace(ANY_REGION_AND_ACCOUNT, f":{region}:{account}:")
        .replace(ANY_ACCOUNT_IAM, f"iam::{account}:")
    )
    document: dict[str, Any] = json.loads(text)
    return document


def policy_document() -> iam.PolicyDocument:
    return iam.PolicyDocument.from_json(policy_json(cdk.Aws.PARTITION, cdk.Aws.REGION, cdk.Aws.ACCOUNT_ID))


WILDCARD_REASON: Final = (
    "the controller's upstream policy (kubernetes-sigs/aws-load-balancer-controller "
    "docs/install/iam_policy.json, without WAF, Shield and Cognito), limited to this stack's region and "
    "account: it creates load balancers, target groups, listeners and security groups at run time, so "
    "their ARNs are unknown. CreateLoadBalancer and CreateTargetGroup need an elbv2.k8s.aws/cluster "
    "request tag, and changing or deleting them or its security groups needs that tag on the resource "
    "(any value: any cluster's controller); as upstream has them, listener and rule changes, "
    "RegisterTargets/DeregisterTargets, ec2:CreateSecurityGroup (in any VPC of the account and region) "
    "and ingress rules on any security group (the nodes' own) carry no tag condition; only "
    "ec2:Describe*, elasticloadbalancing:Describe* and acm:ListCertificates, which take no resource, "
    "are on Resource *"
)
"""The AwsSolutions-IAM5 acknowledgement: what the wildcards allow, as the policy file has it
(``tests/cdk/test_iam_wildcards.py`` checks it names every unconditioned write on a wildcard)."""


def wildcard_resources() -> list[str]:
    """Every wildcard resource of the policy, as cdk-nag names the findings (pseudo parameters as
    cdk-nag prints them)."""
    found: list[str] = []
    document = policy_json("<AWS::Partition>", "<AWS::Region>", "<AWS::AccountId>")
    for statement in document["Statement"]:
        resources = statement["Resource"]
        for resource in [resources] if isinstance(resources, str) else resources:
            if "*" in resource and f"Resource::{resource}" not in found:
                found.append(f"Resource::{resource}")
    return found


class LoadBalancerController(Construct):
    """Exposes ``role`` (a :class:`WorkloadRole`) and ``chart`` (the ``HelmChart``)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        identity: IdentityMode,
        oidc_provider: iam.IOidcProvider,
    ) -> None:
        super().__init__(scope, id_)
        self.role = WorkloadRole(
            self,
            "Identity",
            cluster=cluster,
            identity=identity,
            namespace=pins.LOAD_BALANCER_CONTROLLER_NAMESPACE,
            service_account=pins.LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            description="AWS Load Balancer Controller",
        )
        self.policy = iam.ManagedPolicy(self, "Policy", document=policy_document())
        self.role.role.add_managed_policy(self.policy)
        checkov_ack.acknowledge(
            self.policy,
            "CKV_AWS_111",
            reason="the controller creates load balancers, target groups and security groups whose ARNs "
            "exist only at run time; upstream's policy file conditions most of its writes on the "
            "elbv2.k8s.aws/cluster tag (listed with the cdk-nag acknowledgement)",
        )
        acknowledge(self.policy, "AwsSolutions-IAM5", reason=WILDCARD_REASON, findings=wildcard_resources())
        service_account: dict[str, object] = {
            "create": True,
            "name": pins.LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT,
        }
        if identity == "irsa":
            service_account["annotations"] = {"eks.amazonaws.com/role-arn": self.role.role.role_arn}
        stack = cdk.Stack.of(self)
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart=pins.LOAD_BALANCER_CONTROLLER_CHART,
            repository=pins.LOAD_BALANCER_CONTROLLER_REPOSITORY,
            version=pins.LOAD_BALANCER_CONTROLLER_CHART_VERSION,
            namespace=pins.LOAD_BALANCER_CONTROLLER_NAMESPACE,
            release="aws-load-balancer-controller",
            wait=True,
            timeout=cdk.Duration.minutes(15),
            values={
                "clusterName": cluster.cluster_name,
                "region": stack.region,
                "vpcId": vpc.vpc_id,
                "replicaCount": 2,
                "serviceAccount": service_account,
                # A listener without an explicit policy gets TLS 1.2+, not ELBSecurityPolicy-2016-08.
                "defaultSSLPolicy": DEFAULT_SSL_POLICY,
                "podDisruptionBudget": {"maxUnavailable": 1},
                "affinity": OFF_HYPERPOD_NODES,
            },
        )
        if self.role.association is not None:
            self.chart.node.add_dependency(self.role.association)
