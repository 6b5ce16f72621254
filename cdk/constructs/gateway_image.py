"""The gateway image: built from ``gateway_src/Dockerfile`` as a CDK Docker image asset (pushed to the
bootstrap ECR repository by ``cdk deploy``), or an image the deployment config names.

Synthesis never runs Docker: the asset is only fingerprinted and recorded in the cloud assembly; the
CLI builds and pushes it during ``cdk deploy``. The build context is the repository root narrowed by
``.dockerignore`` to ``pyproject.toml``, ``README.md`` and ``gateway_src`` (what the Dockerfile copies).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from cdk.config import REPO_ROOT, ImageConfig
from igw.addon import pins

DOCKERFILE = "gateway_src/Dockerfile"


class GatewayImage(Construct):
    """Exposes ``repository`` and ``tag`` (chart values) and ``asset`` (``None`` for a named image)."""

    def __init__(self, scope: Construct, id_: str, *, config: ImageConfig) -> None:
        super().__init__(scope, id_)
        self.asset: ecr_assets.DockerImageAsset | None = None
        if config.repository is not None:
            self.repository = config.repository
            self.tag = config.tag or pins.APP_VERSION
            return
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(REPO_ROOT),
            file=DOCKERFILE,
            platform=ecr_assets.Platform.LINUX_AMD64,
            ignore_mode=cdk.IgnoreMode.DOCKER,
        )
        self.repository = self.asset.repository.repository_uri
        self.tag = self.asset.asset_hash
