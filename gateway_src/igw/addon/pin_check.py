"""Are the pinned add-on versions published for this Kubernetes version? (``igw addon versions
--check-pins`` and pre-flight check IGW-PF030.)

EKS answers ``DescribeAddonVersions(addonName, kubernetesVersion)`` with the versions it will install on
a cluster of that version, each with ``compatibilities[].clusterVersion`` and ``defaultVersion``. A pin
that is missing from that list makes ``CreateAddon`` (and the CDK stack) fail at deploy time; a pin
older than the default is reported so the pins can be refreshed (procedure: docs/infrastructure.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from igw.addon import addon_version

Verdict = Literal["ok", "behind", "unpublished"]


@dataclass(frozen=True, slots=True)
class PinStatus:
    name: str
    pinned: str
    verdict: Verdict
    default: str | None
    """The version EKS installs by default on this Kubernetes version (``None`` when it names none)."""
    newest: str | None
    """The newest compatible version EKS lists."""

    @property
    def message(self) -> str:
        if self.verdict == "unpublished":
            newest = f"; newest compatible is {self.newest}" if self.newest else "; none is compatible"
            return f"{self.name} {self.pinned} is not published for this Kubernetes version{newest}"
        if self.verdict == "behind":
            return f"{self.name} {self.pinned} is compatible; EKS's default is now {self.default}"
        return f"{self.name} {self.pinned} is compatible"


def _compatible(version: Mapping[str, Any], kubernetes_version: str) -> bool:
    return any(
        item.get("clusterVersion") == kubernetes_version for item in version.get("compatibilities") or []
    )


def _is_default(version: Mapping[str, Any], kubernetes_version: str) -> bool:
    return any(
        item.get("clusterVersion") == kubernetes_version and item.get("defaultVersion")
        for item in version.get("compatibilities") or []
    )


def _newest(names: Iterable[str]) -> str | None:
    readable = []
    for name in names:
        try:
            readable.append((addon_version.AddonVersion.parse(name), name))
        except addon_version.AddonVersionError:
            continue
    return max(readable)[1] if readable else None


def status_of(
    name: str, pinned: str, published: Sequence[Mapping[str, Any]], *, kubernetes_version: str
) -> PinStatus:
    """Judge one pin against the ``addonVersions`` EKS returned for ``name``."""
    compatible = [v for v in published if _compatible(v, kubernetes_version)]
    names = [str(v.get("addonVersion", "")) for v in compatible]
    default = next((str(v["addonVersion"]) for v in compatible if _is_default(v, kubernetes_version)), None)
    newest = _newest(names)
    if pinned not in names:
        return PinStatus(name, pinned, "unpublished", default, newest)
    behind = default is not None and default != pinned and _newest([default, pinned]) == default
    return PinStatus(name, pinned, "behind" if behind else "ok", default, newest)


def check_pins(
    pinned: Iterable[tuple[str, str]],
    versions_of: Callable[[str], Sequence[Mapping[str, Any]]],
    *,
    kubernetes_version: str,
) -> list[PinStatus]:
    """One :class:`PinStatus` per pin; ``versions_of(name)`` returns EKS's ``addonVersions`` list."""
    return [
        status_of(name, version, versions_of(name), kubernetes_version=kubernetes_version)
        for name, version in pinned
    ]
