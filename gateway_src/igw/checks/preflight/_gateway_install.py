"""Which gateway the cluster runs: ours (the chart ``inference-gateway`` through Helm, or our EKS add-on
``igw-inference-gateway``) or AWS's add-on. Checks that only concern AWS's add-on (its version, its
gateway controller's ACM role) do not apply to ours."""

from __future__ import annotations

from typing import Any

import yaml

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


def ours_values(ctx: CheckContext) -> dict[str, Any] | None:
    """The configuration values of our installed EKS add-on (``{}`` when it has none), or ``None``
    when they are not known here (no add-on of ours, no AWS side, values that are not a YAML mapping)."""
    addons = ctx.inventory.aws.addons
    addon = None if isinstance(addons, Missing) else addons.get(pins.IGW_ADDON_NAME)
    if addon is None:
        return None
    try:
        values: Any = yaml.safe_load(addon.configuration_values or "{}")
    except yaml.YAMLError:
        return None
    return values if isinstance(values, dict) else None


def ours_addon_unknown(ctx: CheckContext) -> bool:
    """True when our add-on's values cannot be read here (a Helm install, or no AWS side)."""
    addons = ctx.inventory.aws.addons
    return isinstance(addons, Missing) or pins.IGW_ADDON_NAME not in addons
