"""Deployment config -> CDK app with the four stacks, cdk-nag attached. Used by ``app.py``, ``make synth``
and the tests (which synthesize once per session)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk

from cdk import aws_tags, nag
from cdk.config import REPO_ROOT, DeploymentConfig
from cdk.constructs import checkov_ack
from cdk.stacks.cluster_handle import ClusterHandle
from cdk.stacks.cluster_stack import ClusterStack
from cdk.stacks.existing_cluster_stack import ExistingClusterStack
from cdk.stacks.inference_stack import InferenceStack
from cdk.stacks.network_stack import NetworkStack
from cdk.stacks.platform_stack import PlatformStack


def feature_flags() -> dict[str, object]:
    """The context of ``cdk.json`` and ``cdk.context.json``, for apps built outside the ``cdk`` CLI."""
    merged: dict[str, object] = {}
    for name in ("cdk.json", "cdk.context.json"):
        path = REPO_ROOT / name
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            merged.update(data.get("context", {}) if name == "cdk.json" else data)
    return merged


@dataclass(frozen=True, slots=True)
class IgwApp:
    app: cdk.App
    network: NetworkStack | None
    """``None`` when the VPC is imported (the cluster stack imports it) or the cluster exists."""
    cluster: ClusterStack | ExistingClusterStack
    """The cluster this app creates, or the existing one it imports (existing-cluster mode)."""
    platform: PlatformStack
    inference: InferenceStack

    @property
    def stacks(self) -> tuple[cdk.Stack, ...]:
        present = (self.network, self.cluster, self.platform, self.inference)
        return tuple(stack for stack in present if stack is not None)


def build_app(config: DeploymentConfig, *, outdir: Path | None = None, app: cdk.App | None = None) -> IgwApp:
    """Create the stacks for ``config`` in ``app`` (a new one writing to ``outdir`` by default)."""
    app = app or cdk.App(outdir=str(outdir) if outdir else None, context=feature_flags())
    env = cdk.Environment(account=config.account, region=config.region)
    prefix = config.stack_prefix
    network = None
    cluster: ClusterStack | ExistingClusterStack
    if config.existing_cluster is not None:
        cluster = ExistingClusterStack(
            app,
            f"{prefix}ClusterAccess",
            config=config,
            existing=config.existing_cluster,
            env=env,
            description="igw: kubectl access to an existing EKS cluster",
        )
    else:
        if config.network.vpc_id is None:
            network = NetworkStack(app, f"{prefix}Network", config=config, env=env, description="igw: VPC")
        cluster = ClusterStack(
            app,
            f"{prefix}Cluster",
            config=config,
            network=network.network if network else None,
            env=env,
            description="igw: EKS + HyperPod",
        )
    handle: ClusterHandle = cluster
    platform = PlatformStack(
        app,
        f"{prefix}Platform",
        config=config,
        cluster=handle,
        env=env,
        description="igw: dependency add-ons, the AWS Load Balancer Controller, HyperPod node plugins",
    )
    inference = InferenceStack(
        app,
        f"{prefix}Inference",
        config=config,
        cluster=handle,
        env=env,
        description="igw: the inference gateway",
    )
    if network is not None:
        cluster.add_stack_dependency(network)
    platform.add_stack_dependency(cluster)
    inference.add_stack_dependency(platform)
    built = IgwApp(app=app, network=network, cluster=cluster, platform=platform, inference=inference)
    for stack in built.stacks:
        for key, value in config.tags.items():
            # Above CDK's own Name tags (the VPC's resources, the certificate), which won there before.
            cdk.Tags.of(stack).add(key, value, priority=aws_tags.PRIORITY)
    cdk.Aspects.of(app).add(checkov_ack.CdkProviderFunctions())
    nag.apply_checks(app)
    return built
