"""The tier-2 global router stack: stateless ``igw global serve`` replicas, ElastiCache Redis, TLS + DNS.

- **Network**: its own VPC (two AZs, one NAT gateway, flow logs); the router reaches the clusters'
  gateway endpoints in any region over HTTPS through the NAT gateway.
- **Trust**: the flow-log role and the tasks' task and execution roles trust their service only for
  this account (``aws:SourceAccount``; see ``cdk/constructs/service_trust.py``).
- **Redis**: an ElastiCache replication group (Multi-AZ with automatic failover, encryption in
  transit and at rest, AUTH token from Secrets Manager, non-default port) shared by every replica
  for heartbeats and global rate limits. The tier-1 gateways publish heartbeats to it.
- **Tier-1 reachability**: the Redis security group admits ``tier1Networks`` (CIDRs reached over
  a Transit Gateway or peering made elsewhere, and same-region peer VPCs, which the stack peers with
  and routes from the Redis subnets).
- **Compute**: an ECS Fargate service of ``replicas`` tasks (the gateway image runs
  ``igw global serve``; built from ``gateway_src/Dockerfile`` as a Docker image asset unless
  ``image`` names an existing one), CPU-scaled, in private subnets; the GlobalRouterConfig is passed in the
  environment with the Redis URLs filled in (the AUTH token is injected as a secret, which the
  router reads through ``redis.passwordEnv``: never in the template, the configuration or a file).
- **Endpoint**: an Application Load Balancer (internal by default) with an ACM certificate
  validated in the given Route 53 zone, HTTPS only, access logs to an encrypted bucket, and an alias
  record ``domainName`` -> load balancer.
- **Metrics**: the tasks write fleet metrics as EMF (routing decisions, failovers, rate-limit hits);
  a CloudWatch dashboard draws them and alarms fire on failovers and sustained rate limiting.
"""

from __future__ import annotations

import copy
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_route53_targets as targets
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cdk.config import ImageConfig
from cdk.constructs import checkov_ack
from cdk.constructs.gateway_image import GatewayImage
from cdk.constructs.metric_dashboards import FleetMetricsDashboard
from cdk.constructs.nag_ack import acknowledge
from cdk.constructs.removal import (
    ROUTER_DESTROY_DATA_CONTEXT,
    bucket_removal,
    removal_policy,
)
from cdk.constructs.service_trust import ecs_task_source_arn, flow_log_source_arn, pin_role
from cdk.global_router_config import GlobalRouterDeployment
from igw.global_router.config import CONFIG_ENV

ROUTER_PORT = 8080
ROUTER_MEMORY_MIB = 2048
"""The router task's memory, and its container's hard limit (the cgroup limit the router's memory
plan reads)."""
MANAGEMENT_PORT = 9090
"""``/metrics`` and the detailed ``/readyz`` (every cluster's endpoint and state): on their own port,
which no security group rule opens, so the load balancer (possibly internet-facing) never reaches them.
Fleet metrics leave as CloudWatch EMF lines instead."""
REDIS_PORT = 6380
"""Not Redis's default 6379 (cdk-nag AwsSolutions-AEC5)."""
TOKEN_ENV = "IGW_REDIS_TOKEN"
EMF_INTERVAL_S = 60
"""Fleet metrics as CloudWatch EMF on stdout every minute: the awslogs driver sends them to CloudWatch
Logs, which extracts the metrics (namespace ``InferenceGateway/Global``)."""
START_COMMAND = (
    f'python -c \'import os; open("/tmp/global.yaml", "w").write(os.environ["{CONFIG_ENV}"])\' '
    f"&& exec igw global serve --config /tmp/global.yaml --host 0.0.0.0 --port {ROUTER_PORT} "
    f"--emf-interval {EMF_INTERVAL_S} --management-port {MANAGEMENT_PORT}"
)
"""Writes the configuration as the environment holds it: the Redis AUTH token stays in the task's
environment (``redis.passwordEnv``), out of the template and of the written file."""


DESTROY_DATA_CONTEXT = ROUTER_DESTROY_DATA_CONTEXT
"""The flag's name before session s45 (``-c globalRouterDestroyData=true``), still read by this stack;
:data:`cdk.constructs.removal.DESTROY_DATA_CONTEXT` (``destroyData``) is the one documented now."""


def redis_removal_policy(scope: Construct) -> cdk.RemovalPolicy:
    """``SNAPSHOT`` by default: deleting the stack (or replacing the group) leaves a final snapshot of
    the heartbeats and global rate-limit counters instead of losing them; ``DESTROY`` for a dev stack
    (:func:`cdk.constructs.removal.destroys_data`). Before session s44 the group had no deletion
    policy, so CloudFormation deleted it without a snapshot."""
    return removal_policy(scope, kept=cdk.RemovalPolicy.SNAPSHOT, legacy=True)


def router_document(deployment: GlobalRouterDeployment, redis_host: str) -> dict[str, Any]:
    """The GlobalRouterConfig the tasks run: the given one, its Redis URLs pointing at ElastiCache and
    its AUTH token read from the task's ``IGW_REDIS_TOKEN`` (``redis.passwordEnv``, filled from
    Secrets Manager)."""
    doc: dict[str, Any] = copy.deepcopy(dict(deployment.router_document))
    redis = {"url": f"rediss://{redis_host}:{REDIS_PORT}/0", "passwordEnv": TOKEN_ENV}
    spec = doc["spec"]
    heartbeats = spec.setdefault("heartbeats", {})
    heartbeats["redis"] = {**heartbeats.get("redis", {}), **redis}
    if "rateLimits" in spec or spec.get("modelRateLimits"):
        limits = spec.setdefault("rateLimits", {})
        limits["backend"] = "redis"
        limits["redis"] = {**limits.get("redis", {}), **redis}
    return doc


class GlobalRouterStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, deployment: GlobalRouterDeployment, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        d = deployment
        self.gateway_image: GatewayImage | None = None
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(d.vpc_cidr),
            availability_zones=list(d.availability_zones),
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
                ec2.SubnetConfiguration(
                    name="cache", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=26
                ),
            ],
        )
        flow_log = self.vpc.add_flow_log("FlowLog")
        assert flow_log.iam_role is not None  # CloudWatch Logs destination: CDK creates the role
        # CDK creates the role's policy beside the flow log: without this the flow log may be created
        # before it may write (delivery starts in "Access error") and, on destroy, outlive it.
        flow_log.node.find_child("FlowLog").node.add_dependency(flow_log.iam_role)
        pin_role(self, flow_log.iam_role, source_arn=flow_log_source_arn(self))
        flow_log_group = flow_log.node.find_child("LogGroup").node.default_child
        assert isinstance(flow_log_group, cdk.CfnResource)
        flow_log_group.apply_removal_policy(removal_policy(self, legacy=True))
        checkov_ack.acknowledge(
            flow_log.node.find_child("LogGroup"),
            "CKV_AWS_158",
            reason="VPC flow logs hold addresses and ports, no secrets; CloudWatch Logs encrypts them at "
            "rest with its own keys, and a customer key would outlive the stack",
        )
        # aws-cdk-lib's custom-resource provider (the default security group's restriction), as in the
        # per-cluster app: acknowledged here too, since this stack is also synthesized on its own.
        cdk.Aspects.of(self).add(checkov_ack.CdkProviderFunctions())

        # -- Redis ------------------------------------------------------------------------------
        self.redis_token = secretsmanager.Secret(
            self,
            "RedisAuthToken",
            description="AUTH token of the global router's Redis (heartbeats, global rate limits)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=64
            ),
        )
        checkov_ack.acknowledge(
            self.redis_token,
            "CKV_AWS_149",
            reason="the AUTH token is encrypted with the account's aws/secretsmanager key; this stack "
            "grants reading it to the task execution role alone, and a customer key would add a key "
            "policy and a kms:Decrypt grant to that same role",
        )
        acknowledge(
            self.redis_token,
            "AwsSolutions-SMG4",
            reason="ElastiCache AUTH tokens rotate through ModifyReplicationGroup (ROTATE then SET), "
            "which a Secrets Manager rotation Lambda cannot do without restarting every router; "
            "rotate in a maintenance window with the runbook in docs/global-router.md",
        )
        redis_sg = ec2.SecurityGroup(
            self,
            "RedisSecurityGroup",
            vpc=self.vpc,
            description="global router Redis",
            allow_all_outbound=False,
        )
        self._admit_tier1_networks(d, redis_sg)
        subnets = elasticache.CfnSubnetGroup(
            self,
            "RedisSubnets",
            description="global router Redis",
            subnet_ids=[s.subnet_id for s in self.vpc.isolated_subnets],
        )
        self.redis = elasticache.CfnReplicationGroup(
            self,
            "Redis",
            replication_group_description="igw global router: heartbeats and global rate limits",
            engine="redis",
            engine_version="7.1",
            cache_node_type=d.cache_node_type,
            num_cache_clusters=2,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            transit_encryption_enabled=True,
            at_rest_encryption_enabled=True,
            auth_token=self.redis_token.secret_value.unsafe_unwrap(),
            port=REDIS_PORT,
            cache_subnet_group_name=subnets.ref,
            security_group_ids=[redis_sg.security_group_id],
            snapshot_retention_limit=1,
        )
        self.redis.apply_removal_policy(redis_removal_policy(self))

        # -- Router service ---------------------------------------------------------------------
        cluster = ecs.Cluster(
            self, "Cluster", vpc=self.vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        task = ecs.FargateTaskDefinition(self, "Task", cpu=1024, memory_limit_mib=ROUTER_MEMORY_MIB)
        log_group = logs.LogGroup(
            self,
            "RouterLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=removal_policy(self, legacy=True),
        )
        checkov_ack.acknowledge(
            log_group,
            "CKV_AWS_158",
            reason="the router logs routing decisions and EMF metrics, never the Redis AUTH token or a "
            "client's credentials; CloudWatch Logs encrypts them at rest with its own keys",
        )
        document = router_document(d, self.redis.attr_primary_end_point_address)
        task.add_container(
            "router",
            image=self._image(d),
            entry_point=["sh", "-c"],
            command=[START_COMMAND],
            environment={CONFIG_ENV: yaml.safe_dump(document, sort_keys=False)},
            secrets={TOKEN_ENV: ecs.Secret.from_secrets_manager(self.redis_token)},
            logging=ecs.LogDrivers.aws_logs(stream_prefix="router", log_group=log_group),
            port_mappings=[ecs.PortMapping(container_port=ROUTER_PORT)],
            readonly_root_filesystem=False,
            # The task's memory as the container's own hard limit: on Fargate a task-level limit
            # alone leaves the container's cgroup at memory.max "max", so the router's memory plan
            # (igw.gateway.memory) would find no limit and fall back to its unlimited defaults.
            memory_limit_mib=ROUTER_MEMORY_MIB,
        )
        # Confused-deputy prevention on the two roles CDK creates for ecs-tasks.amazonaws.com: the task
        # role as AWS's task-role documentation gives it; the execution role with StringEqualsIfExists,
        # because AWS documents its trust without a condition (a request naming another account is
        # refused; whether ECS names one when it assumes the execution role is unverified, and a strict
        # condition it does not satisfy would stop every task from starting).
        pin_role(self, task.task_role, source_arn=ecs_task_source_arn(self))
        pin_role(self, task.obtain_execution_role(), if_exists=True)
        self._acknowledge_asset_pull(task)
        acknowledge(
            task,
            "AwsSolutions-ECS2",
            reason="the environment holds only the GlobalRouterConfig (cluster URLs, policies, limits); "
            "the Redis AUTH token comes from Secrets Manager as an ECS secret",
        )
        service_sg = ec2.SecurityGroup(
            self, "RouterSecurityGroup", vpc=self.vpc, description="global router tasks"
        )
        redis_sg.add_ingress_rule(service_sg, ec2.Port.tcp(REDIS_PORT), "routers to Redis")
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=cluster,
            task_definition=task,
            desired_count=d.replicas,
            min_healthy_percent=100,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[service_sg],
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        )
        scaling = self.service.auto_scale_task_count(
            min_capacity=d.replicas, max_capacity=max(10, d.replicas)
        )
        scaling.scale_on_cpu_utilization("Cpu", target_utilization_percent=60)

        # -- Endpoint: ALB with TLS, DNS ---------------------------------------------------------
        zone = route53.HostedZone.from_hosted_zone_attributes(
            self, "Zone", hosted_zone_id=d.hosted_zone_id, zone_name=d.hosted_zone_name
        )
        certificate = acm.Certificate(
            self,
            "Certificate",
            domain_name=d.domain_name,
            validation=acm.CertificateValidation.from_dns(zone),
        )
        alb_sg = ec2.SecurityGroup(
            self, "LoadBalancerSecurityGroup", vpc=self.vpc, description="global router LB"
        )
        for cidr in d.allowed_cidrs or (d.vpc_cidr,):
            alb_sg.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS clients")
        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=self.vpc,
            internet_facing=d.public,
            security_group=alb_sg,
            drop_invalid_header_fields=True,
            vpc_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC if d.public else ec2.SubnetType.PRIVATE_WITH_EGRESS
            ),
        )
        access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # Versioned like every bucket of the per-cluster app (checkov CKV_AWS_21): an overwritten or
            # deleted log keeps its earlier version; an expired one lapses a day after it expires.
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=cdk.Duration.days(90),
                    noncurrent_version_expiration=cdk.Duration.days(1),
                )
            ],
            **bucket_removal(self, legacy=True),
        )
        access_logs_reason = (
            "this bucket only receives the load balancer's access logs; logging access to the "
            "access-log bucket itself would need yet another bucket"
        )
        acknowledge(access_logs, "AwsSolutions-S1", reason=access_logs_reason)
        checkov_ack.acknowledge(access_logs, "CKV_AWS_18", reason=access_logs_reason)
        self.load_balancer.log_access_logs(access_logs, prefix="global-router")
        listener = self.load_balancer.add_listener(
            "Https",
            port=443,
            certificates=[certificate],
            ssl_policy=elbv2.SslPolicy.RECOMMENDED_TLS,
            open=False,
        )
        listener.add_targets(
            "Routers",
            port=ROUTER_PORT,
            protocol=elbv2.ApplicationProtocol.HTTP,
            targets=[self.service],
            health_check=elbv2.HealthCheck(path="/readyz", healthy_http_codes="200"),
            deregistration_delay=cdk.Duration.seconds(10),
        )
        service_sg.add_ingress_rule(alb_sg, ec2.Port.tcp(ROUTER_PORT), "load balancer to routers")
        route53.ARecord(
            self,
            "Alias",
            zone=zone,
            record_name=d.domain_name,
            target=route53.RecordTarget.from_alias(targets.LoadBalancerTarget(self.load_balancer)),
        )
        # Dashboard names are global to the account (a second router region must not take this one over).
        self.fleet_metrics = FleetMetricsDashboard(
            self, "FleetMetrics", dashboard_name=f"{d.stack_name}-{d.region}-fleet"
        )
        cdk.CfnOutput(self, "Endpoint", value=f"https://{d.domain_name}")
        cdk.CfnOutput(self, "RedisEndpoint", value=self.redis.attr_primary_end_point_address)
        cdk.CfnOutput(self, "RedisAuthTokenSecretArn", value=self.redis_token.secret_arn)

    def _admit_tier1_networks(self, d: GlobalRouterDeployment, redis_sg: ec2.SecurityGroup) -> None:
        """Tier-1 gateways publish heartbeats to the Redis: admit each configured network on the Redis
        port; peer each same-region tier-1 VPC and route its CIDR from the Redis subnets (the
        return path; the tier-1 side adds the route to ``vpcCidr`` and, across accounts, accepts)."""
        for cidr in d.tier1_cidrs:
            redis_sg.add_ingress_rule(
                ec2.Peer.ipv4(cidr), ec2.Port.tcp(REDIS_PORT), f"tier-1 heartbeats from {cidr}"
            )
        for i, peer in enumerate(d.tier1_peer_vpcs):
            peering = ec2.CfnVPCPeeringConnection(
                self,
                f"Tier1Peering{i}",
                vpc_id=self.vpc.vpc_id,
                peer_vpc_id=peer.vpc_id,
                peer_owner_id=peer.account,
            )
            for j, subnet in enumerate(self.vpc.isolated_subnets):
                ec2.CfnRoute(
                    self,
                    f"Tier1Route{i}x{j}",
                    route_table_id=subnet.route_table.route_table_id,
                    destination_cidr_block=peer.cidr,
                    vpc_peering_connection_id=peering.ref,
                )
            redis_sg.add_ingress_rule(
                ec2.Peer.ipv4(peer.cidr),
                ec2.Port.tcp(REDIS_PORT),
                f"tier-1 heartbeats from {peer.vpc_id} ({peer.cidr})",
            )
            cdk.CfnOutput(self, f"Tier1PeeringId{i}", value=peering.ref)

    def _image(self, d: GlobalRouterDeployment) -> ecs.ContainerImage:
        """The named image, else the gateway image built as an asset (the per-cluster app's
        construct, so both tiers run the same build of ``gateway_src/Dockerfile``)."""
        if d.image is not None:
            return ecs.ContainerImage.from_registry(d.image)
        self.gateway_image = GatewayImage(self, "GatewayImage", config=ImageConfig())
        assert self.gateway_image.asset is not None  # no repository given: always an asset
        return ecs.ContainerImage.from_docker_image_asset(self.gateway_image.asset)

    def _acknowledge_asset_pull(self, task: ecs.FargateTaskDefinition) -> None:
        if self.gateway_image is None:
            return
        acknowledge(
            task.obtain_execution_role(),
            "AwsSolutions-IAM5",
            reason="pulling the asset image needs ecr:GetAuthorizationToken, which has no resource-level "
            "permission; the repository actions are scoped to the bootstrap asset repository",
            findings=("Resource::*",),
        )


def build_global_router_stack(
    app: cdk.App, deployment: GlobalRouterDeployment, *, apply_nag: bool = True
) -> GlobalRouterStack:
    """Add the stack to ``app``; ``apply_nag=False`` when the app already runs cdk-nag (``app.py``)."""
    from cdk import nag

    stack = GlobalRouterStack(
        app,
        deployment.stack_name,
        deployment=deployment,
        env=cdk.Environment(account=deployment.account, region=deployment.region),
        description="igw: tier-2 global inference router",
    )
    if apply_nag:
        nag.apply_checks(app)
    return stack
