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
    global_router = app.node.try_get_context("globalRouterConfig") or os.environ.get(
        "IGW_GLOBAL_ROUTER_CONFIG"
    )
    if global_router:
        from cdk import global_router_config
        from cdk.stacks.global_router_stack import build_global_router_stack

        build_global_router_stack(app, global_router_config.load(Path(global_router)), apply_nag=False)
    app.synth()


if __name__ == "__main__":
    main()
