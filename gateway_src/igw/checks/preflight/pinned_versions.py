"""IGW-PF030: every add-on version the CDK app pins is published for the cluster's Kubernetes version.

A pin EKS does not list for that version makes ``CreateAddon`` (and the stack) fail at deploy time; a pin
behind EKS's default is a warning to refresh the pins (docs/infrastructure.md, "Refreshing the pins").
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.addon import pin_check, pins
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-PF030",
    title="Pinned add-on versions published for the cluster's Kubernetes version",
    command=Command.PREFLIGHT,
    category="add-ons",
    severity=Severity.HIGH,
    description="Each add-on version in igw.addon.pins must appear in DescribeAddonVersions for the "
    "cluster's Kubernetes version, or creating it fails.",
    remediation="Run `igw addon versions --check-pins --kubernetes-version V`, then update "
    "gateway_src/igw/addon/pins.py to a compatible version.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    cluster = need(ctx.inventory.aws.cluster)
    published = need(ctx.inventory.aws.published_addon_versions)
    kubernetes = cluster.version or ""
    for name, pinned in pins.pinned_addons():
        status = pin_check.status_of(name, pinned, published.get(name, ()), kubernetes_version=kubernetes)
        resource = f"EKS add-on {name} (Kubernetes {kubernetes})"
        if status.verdict == "unpublished":
            yield r.fail(resource, status.message)
        elif status.verdict == "behind":
            yield r.warn(resource, status.message, severity=Severity.LOW)
        else:
            yield r.passed(resource, status.message)


CHECK = FunctionCheck(META, _run)
