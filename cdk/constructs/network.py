"""The VPC: a new one with subnets tagged for load balancers, or an existing one imported offline."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import NetworkConfig
from cdk.constructs import checkov_ack
from cdk.constructs.removal import removal_policy
from cdk.constructs.service_trust import pin_flow_log_role

INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
PUBLIC_ELB_TAG = "kubernetes.io/role/elb"


def import_zones(zones: Sequence[str], *, region: str, subnet_count: int) -> list[str]:
    """Zone names for importing ``subnet_count`` subnets with ``Vpc.from_vpc_attributes``.

    CDK refuses a subnet count that is not a multiple of the zone count (``Number of privateSubnetIds
    (2) must be a multiple of availability zones (3)``, and ``(0)`` zones with none listed) and pairs
    subnets with zones by position only; nothing the stacks build reads those zones (EKS, HyperPod and
    the kubectl handler take subnet IDs). So: the configured zones (else the region's ``a``, ``b``,
    ``c``), as many as the largest divisor of ``subnet_count`` that they have."""
    names = list(zones) or [f"{region}{letter}" for letter in "abc"]
    usable = max(d for d in range(1, min(len(names), subnet_count) + 1) if subnet_count % d == 0)
    return names[:usable]


class Network(Construct):
    """Exposes ``vpc`` and ``private_subnets`` (cluster, HyperPod nodes, internal load balancers)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: NetworkConfig,
        availability_zones: Sequence[str],
        cluster_name: str,
    ) -> None:
        super().__init__(scope, id_)
        if config.vpc_id is not None:
            # from_vpc_attributes needs no AWS lookup, so synthesis stays offline.
            self.vpc = ec2.Vpc.from_vpc_attributes(
                self,
                "Vpc",
                vpc_id=config.vpc_id,
                availability_zones=import_zones(
                    availability_zones,
                    region=cdk.Stack.of(self).region,
                    subnet_count=len(config.private_subnet_ids),
                ),
                private_subnet_ids=list(config.private_subnet_ids),
            )
        else:
            self.vpc = self._new_vpc(
                config=config, availability_zones=availability_zones, cluster_name=cluster_name
            )
        self.private_subnets: list[ec2.ISubnet] = list(self.vpc.private_subnets)

    def _new_vpc(
        self, *, config: NetworkConfig, availability_zones: Sequence[str], cluster_name: str
    ) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(config.cidr),
            availability_zones=list(availability_zones) or None,
            max_azs=None if availability_zones else config.max_azs,
            nat_gateways=config.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19
                ),
            ],
            flow_logs={"all": ec2.FlowLogOptions(traffic_type=ec2.FlowLogTrafficType.ALL)},
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
            },
        )
        flow_log = vpc.node.find_child("all")
        # The flow log service delivers with this role; CDK creates the role's policy beside the flow log,
        # so without this the flow log is created before it may write (its delivery starts in "Access
        # error") and, on destroy, outlives it.
        flow_log.node.find_child("FlowLog").node.add_dependency(flow_log.node.find_child("IAMRole"))
        flow_log_role = flow_log.node.find_child("IAMRole").node.default_child
        assert isinstance(flow_log_role, iam.CfnRole)
        pin_flow_log_role(self, flow_log_role)
        flow_log_group = flow_log.node.find_child("LogGroup").node.default_child
        assert isinstance(flow_log_group, cdk.CfnResource)
        flow_log_group.apply_removal_policy(removal_policy(self))
        checkov_ack.acknowledge(
            flow_log.node.find_child("LogGroup"),
            "CKV_AWS_158",
            reason="VPC flow logs hold addresses and ports, no secrets; CloudWatch Logs encrypts them at "
            "rest with its own keys, and a customer key would outlive the stack",
        )
        # The Load Balancer Controller discovers subnets by these tags; the gateway's NLB is internal.
        for subnet in vpc.private_subnets:
            cdk.Tags.of(subnet).add(INTERNAL_ELB_TAG, "1")
            cdk.Tags.of(subnet).add(f"kubernetes.io/cluster/{cluster_name}", "shared")
        for subnet in vpc.public_subnets:
            cdk.Tags.of(subnet).add(PUBLIC_ELB_TAG, "1")
        return vpc
