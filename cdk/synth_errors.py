"""Which exceptions out of building and synthesizing the stacks are a refusal to report in one line,
and which are bugs whose traceback must stay.

A refusal: CDK (JavaScript, through jsii) refusing a value (jsii raises a ``RuntimeError`` caused by a
``JavaScriptError``), or one of the project's own typed errors for bad input. Anything else, including
a Python exception raised inside a callback from CDK (an aspect: jsii reraises it as that same
``RuntimeError``, with the Python exception as its context) and jsii's own faults (``JSIIError``), is a
bug: its traceback is what a developer needs.
"""

from __future__ import annotations

from jsii.errors import JavaScriptError

from cdk.config import DeploymentConfigError
from cdk.constructs.gateway_config_manifest import InvalidGatewayConfigError
from cdk.constructs.removal import DestroyDataContextError
from cdk.global_router_config import GlobalRouterDeploymentError
from igw.addon.aws_addon import AwsAddonValuesError

REFUSALS: tuple[type[Exception], ...] = (
    DeploymentConfigError,
    GlobalRouterDeploymentError,
    InvalidGatewayConfigError,
    AwsAddonValuesError,
    DestroyDataContextError,
)
"""The project's errors for input it refuses (each message names its field or context key)."""


def refusal(exc: BaseException) -> str | None:
    """The message to print for ``exc`` if it is a refusal, else ``None`` (re-raise it)."""
    if isinstance(exc, REFUSALS):
        return str(exc)
    from_cdk = type(exc) is RuntimeError and isinstance(exc.__cause__, JavaScriptError)
    if from_cdk and (exc.__context__ is None or exc.__context__ is exc.__cause__):
        return str(exc)
    return None
