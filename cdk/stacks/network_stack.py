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
        self.network = Network(
            self,
            "Network",
            config=config.network,
            availability_zones=config.availability_zones,
            cluster_name=config.cluster_name,
        )
