"""The ``amazon-cloudwatch-observability`` EKS add-on: CloudWatch agent and Fluent Bit on every node.

It turns on Container Insights (node, pod and container metrics) and ships container logs to
CloudWatch Logs. The agent's service account gets a role with ``CloudWatchAgentServerPolicy``:
through EKS Pod Identity (the add-on's ``podIdentityAssociations``, supported from add-on 3.1.0)
or IRSA, as the deployment's identity mode says. Pinned like every other add-on
(:data:`igw.addon.pins.CLOUDWATCH_OBSERVABILITY_VERSION`); skipped when the cluster already runs it.

The add-on's ``configurationValues`` give the agent a configuration (:data:`AGENT_CONFIG`) that keeps
Container Insights and adds the EMF listener (``logs.metrics_collected.emf``: TCP and UDP port
:data:`EMF_PORT` behind the add-on's ``cloudwatch-agent`` Service). The gateway sends its EMF
documents there (``igw serve --emf-endpoint``): EMF written to stdout reaches CloudWatch Logs only
inside Fluent Bit's envelope, where CloudWatch does not extract it as metrics. The documents name
their namespace themselves, so nothing else in the agent configuration is gateway-specific.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode
from cdk.constructs.nag_ack import attach_aws_managed_policy
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import pins

AGENT_POLICY = "CloudWatchAgentServerPolicy"

EMF_PORT: Final = 25888
"""The agent's EMF listener port (TCP and UDP), the port ``igw serve --emf-endpoint`` targets."""

AGENT_CONFIG: Final[dict[str, Any]] = {
    "logs": {
        "metrics_collected": {
            # Replacing the add-on's default agent configuration: Container Insights stays on.
            "kubernetes": {"enhanced_container_insights": True},
            "emf": {},
        }
    }
}
"""The CloudWatch agent configuration the add-on runs (``agent.config`` of its configuration values)."""


class CloudWatchObservability(Construct):
    """Exposes ``addon`` and ``role`` (the agent's :class:`WorkloadRole`)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        identity: IdentityMode,
        oidc_provider: iam.IOidcProvider | None,
        after: eks.CfnAddon | None = None,
    ) -> None:
        super().__init__(scope, id_)
        self.role = WorkloadRole(
            self,
            "AgentRole",
            cluster=cluster,
            identity=identity,
            namespace=pins.CLOUDWATCH_NAMESPACE,
            service_account=pins.CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            associate=False,  # the add-on creates the association itself (podIdentityAssociations)
            description="CloudWatch agent (amazon-cloudwatch-observability): Container Insights and logs",
        )
        attach_aws_managed_policy(
            self.role.role,
            AGENT_POLICY,
            reason="CloudWatchAgentServerPolicy is the policy AWS documents for this add-on's agent; it "
            "writes metrics and logs whose names exist only at run time; bound to its one service account",
        )
        pod_identity = identity == "podIdentity"
        self.addon = eks.CfnAddon(
            self,
            "Addon",
            cluster_name=cluster.cluster_name,
            addon_name=pins.CLOUDWATCH_OBSERVABILITY_ADDON,
            addon_version=pins.CLOUDWATCH_OBSERVABILITY_VERSION,
            resolve_conflicts="OVERWRITE",
            configuration_values=json.dumps({"agent": {"config": AGENT_CONFIG}}, sort_keys=True),
            service_account_role_arn=None if pod_identity else self.role.role.role_arn,
            pod_identity_associations=[
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=self.role.role.role_arn,
                    service_account=pins.CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
                )
            ]
            if pod_identity
            else None,
        )
        if after is not None:
            self.addon.add_resource_dependency(after)
