"""IGW-PF003: the add-ons ours depends on are at their minimum versions (install fails otherwise)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.addon.addon_version import AddonVersionError, at_least
from igw.addon.pins import DEPENDENCY_ADDONS
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-PF003",
    title="Dependency add-ons at their minimum versions",
    command=Command.PREFLIGHT,
    category="add-ons",
    severity=Severity.HIGH,
    description="cert-manager, metrics-server and the S3/FSx CSI drivers must be installed first, at or "
    "above "
    "the versions the inference add-on requires.",
    remediation="Install or update each missing dependency with aws eks create-addon/update-addon before "
    "installing the inference add-on.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    addons = need(ctx.inventory.aws.addons)
    for dep in DEPENDENCY_ADDONS:
        resource = f"EKS add-on {dep.name}"
        addon = addons.get(dep.name)
        if addon is None:
            yield r.fail(resource, f"not installed; needed for: {dep.why}")
            continue
        if addon.version is None:
            yield r.warn(
                resource, f"no version pinned; cannot confirm >= {dep.minimum}", severity=Severity.MEDIUM
            )
            continue
        try:
            ok = at_least(addon.version, dep.minimum)
        except AddonVersionError as exc:
            yield r.warn(resource, f"version cannot be compared: {exc}", severity=Severity.MEDIUM)
            continue
        if ok:
            yield r.passed(resource, f"version {addon.version} >= {dep.minimum}")
        else:
            yield r.fail(resource, f"version {addon.version} is older than the required {dep.minimum}")


CHECK = FunctionCheck(META, _run)
