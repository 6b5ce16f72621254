"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run this. It reads the deployment config named by the
``deploymentConfig`` context value (``cdk deploy -c deploymentConfig=my.yaml``) or the
``IGW_DEPLOYMENT_CONFIG`` environment variable, defaulting to ``cdk/examples/deployment.yaml``; a
``globalRouterConfig`` context value (or ``IGW_GLOBAL_ROUTER_CONFIG``) adds the global router's stack.

An invalid file ends the app with its problems, each naming its field, and exit status 1: the ``cdk``
CLI shows the app's stderr, and a Python traceback in front of the problems would bury them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk

from cdk import config, global_router_config
from cdk.app_builder import build_app


def _chosen(app: cdk.App, context_key: str, environment_variable: str) -> str | None:
    """A ``-c`` context value wins over the environment variable. ``cdk.json`` sets neither, so the
    variable is not shadowed by a default the CLI passes as context."""
    value = app.node.try_get_context(context_key) or os.environ.get(environment_variable)
    return str(value) if value else None


def main() -> int:
    app = cdk.App()
    chosen = _chosen(app, "deploymentConfig", "IGW_DEPLOYMENT_CONFIG")
    global_router = _chosen(app, "globalRouterConfig", "IGW_GLOBAL_ROUTER_CONFIG")
    try:
        deployment = config.load(Path(chosen) if chosen else config.EXAMPLE_FILE)
        router = global_router_config.load(Path(global_router)) if global_router else None
    except (config.DeploymentConfigError, global_router_config.GlobalRouterDeploymentError) as exc:
        print(exc, file=sys.stderr)
        return 1
    build_app(deployment, app=app)
    if router is not None:
        from cdk.stacks.global_router_stack import build_global_router_stack

        build_global_router_stack(app, router, apply_nag=False)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
