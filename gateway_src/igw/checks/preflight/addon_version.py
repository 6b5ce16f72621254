"""IGW-PF002: a gateway is installed. Ours (chart or our EKS add-on) passes; otherwise AWS's add-on must be
installed, healthy, and at least the first version with the gateway."""

from __future__ import annotations

from collections.abc import Iterator

from igw.addon.addon_version import AddonVersionError, at_least
from igw.addon.pins import ADDON_MINIMUM_VERSION, ADDON_NAME
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.preflight._gateway_install import awss_installed, ours_installed

HEALTHY = ("ACTIVE", "UPDATING")

META = CheckMeta(
    id="IGW-PF002",
    title=f"Gateway installed (ours, or add-on {ADDON_NAME} at >= {ADDON_MINIMUM_VERSION})",
    command=Command.PREFLIGHT,
    category="add-ons",
    severity=Severity.CRITICAL,
    description="The inference gateway ships from add-on version "
    f"{ADDON_MINIMUM_VERSION}; older versions do not know InferenceGatewayConfig.",
    remediation=f"aws eks create-addon (or update-addon) --addon-name {ADDON_NAME} "
    f"--addon-version {ADDON_MINIMUM_VERSION} or newer (igw addon install wraps this).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    ours = ours_installed(ctx)
    if ours is not None and not awss_installed(ctx):
        yield r.passed(ours, "our gateway is installed (AWS's add-on is not needed)")
        return
    addons = need(ctx.inventory.aws.addons)
    addon = addons.get(ADDON_NAME)
    resource = f"EKS add-on {ADDON_NAME}"
    if addon is None:
        yield r.fail(resource, "not installed")
        return
    if addon.version is None:
        yield r.warn(
            resource,
            "installed without a pinned version; EKS picks its default, which may be older "
            f"than {ADDON_MINIMUM_VERSION}",
            severity=Severity.MEDIUM,
        )
        return
    try:
        new_enough = at_least(addon.version, ADDON_MINIMUM_VERSION)
    except AddonVersionError as exc:
        yield r.warn(resource, f"version cannot be compared: {exc}", severity=Severity.MEDIUM)
        return
    if not new_enough:
        yield r.fail(resource, f"version {addon.version} is older than {ADDON_MINIMUM_VERSION} (no gateway)")
    elif addon.status is not None and addon.status not in HEALTHY:
        yield r.fail(resource, f"version {addon.version} but status {addon.status}", severity=Severity.HIGH)
    else:
        state = f", status {addon.status}" if addon.status else ""
        yield r.passed(resource, f"version {addon.version}{state}")


CHECK = FunctionCheck(META, _run)
