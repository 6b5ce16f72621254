"""The network stack: one VPC (new or imported)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.network import Network


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, id_: str, *, config: DeploymentConfig, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        if config.availability_zones:
            # ec2.Vpc checks its zones against the stack's, and the stack's are an AWS lookup unless
            # the context holds them (cdk.context.json does, for the examples' account only): without
            # this `cdk synth` for any other account needs credentials ("Need to perform AWS calls for
            # account ..."). The configured zones are the answer the check needs.
            self.node.set_context(
                f"availability-zones:account={config.account}:region={config.region}",
                list(config.availability_zones),
            )
        self.network = Network(
            self,
            "Network",
            config=config.network,
            availability_zones=config.availability_zones,
            cluster_name=config.cluster_name,
        )
