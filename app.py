"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run this. It reads the deployment config named by the
``deploymentConfig`` context value (``cdk deploy -c deploymentConfig=my.yaml``) or the
``IGW_DEPLOYMENT_CONFIG`` environment variable, defaulting to ``cdk/examples/deployment.yaml``; a
``globalRouterConfig`` context value (or ``IGW_GLOBAL_ROUTER_CONFIG``) adds the global router's stack.

An invalid file ends the app with its problems, each naming its field, and exit status 1: the ``cdk``
CLI shows the app's stderr, and a Python traceback in front of the problems would bury them. So does an
unsuppressed cdk-nag finding, whether or not the CLI would stop on it (``cdk deploy --ignore-errors``
does not): see :func:`cdk.nag.synthesize`. A value CDK or a construct refuses while the stacks are
built or synthesized ends it the same way, in one line naming the file (:mod:`cdk.synth_errors`); any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk

from cdk import config, global_router_config, nag
from cdk.app_builder import build_app, feature_flags
from cdk.synth_errors import refusal


def _chosen(app: cdk.App, context_key: str, environment_variable: str) -> str | None:
    """A ``-c`` context value wins over the environment variable. ``cdk.json`` sets neither, so the
    variable is not shadowed by a default the CLI passes as context."""
    value = app.node.try_get_context(context_key) or os.environ.get(environment_variable)
    return str(value) if value else None


def main() -> int:
    # cdk.json's feature flags as the app's own context: the CLI passes them too (and its context wins),
    # so `python app.py` alone synthesizes what `cdk synth` does.
    app = cdk.App(context=feature_flags())
    chosen = _chosen(app, "deploymentConfig", "IGW_DEPLOYMENT_CONFIG")
    global_router = _chosen(app, "globalRouterConfig", "IGW_GLOBAL_ROUTER_CONFIG")
    try:
        deployment = config.load(Path(chosen) if chosen else config.EXAMPLE_FILE)
        router = global_router_config.load(Path(global_router)) if global_router else None
    except (config.DeploymentConfigError, global_router_config.GlobalRouterDeploymentError) as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        build_app(deployment, app=app)
        if router is not None:
            from cdk.stacks.global_router_stack import build_global_router_stack

            build_global_router_stack(app, router, apply_nag=False)
        violations = nag.synthesize(app)
    except Exception as exc:
        message = refusal(exc)
        if message is None:  # a bug: its traceback
            raise
        source = chosen or config.EXAMPLE_FILE
        print(f"{source}: synthesis failed: {message}", file=sys.stderr)
        return 1
    if violations:
        print(
            f"cdk-nag AwsSolutions: {len(violations)} unsuppressed finding(s); fix each, or acknowledge it "
            "beside its resource with a reason (cdk/constructs/nag_ack.py):",
            file=sys.stderr,
        )
        for finding in violations:
            print(f"  {finding.rule} {', '.join(finding.constructs)}: {finding.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
