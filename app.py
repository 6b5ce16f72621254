"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run this. It reads the deployment config named by the
``deploymentConfig`` context value (``cdk deploy -c deploymentConfig=my.yaml``) or the
``IGW_DEPLOYMENT_CONFIG`` environment variable, defaulting to ``cdk/examples/deployment.yaml``."""

from __future__ import annotations

import os
from pathlib import Path

import aws_cdk as cdk

from cdk import config
from cdk.app_builder import build_app


def main() -> None:
    app = cdk.App()
    chosen = app.node.try_get_context("deploymentConfig") or os.environ.get("IGW_DEPLOYMENT_CONFIG")
    path = Path(chosen) if chosen else config.EXAMPLE_FILE
    build_app(config.load(path), app=app)
    app.synth()


if __name__ == "__main__":
    main()
