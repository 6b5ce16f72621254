"""Which gateway the cluster runs: ours (the chart ``inference-gateway`` through Helm, or our EKS add-on
``igw-inference-gateway``) or AWS's add-on. Checks that only concern AWS's add-on (its version, its
gateway controller's ACM role) do not apply to ours."""

from __future__ import annotations

from igw.addon import pins
from igw.checks.framework import CheckContext
from igw.checks.inventory import Missing
from igw.checks.preflight._deployments import named


def ours_installed(ctx: CheckContext) -> str | None:
    """How our gateway is installed (for the message), or ``None`` when it is not found."""
    addons = ctx.inventory.aws.addons
    if not isinstance(addons, Missing) and pins.IGW_ADDON_NAME in addons:
        return f"EKS add-on {pins.IGW_ADDON_NAME}"
    deployments = ctx.inventory.kube.of("Deployment")
    if not isinstance(deployments, Missing) and any(named(pins.CHART_NAME)(d) for d in deployments):
        return f"Helm chart {pins.CHART_NAME}"
    return None


def awss_installed(ctx: CheckContext) -> bool:
    addons = ctx.inventory.aws.addons
    return not isinstance(addons, Missing) and pins.AWS_ADDON_NAME in addons
