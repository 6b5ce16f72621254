"""When the versions the CDK app pins stop being deployable: EKS Kubernetes versions and Lambda runtimes.

A default that passes every test can still fail ``cdk deploy`` once AWS retires it: EKS refuses to create
a cluster on a version past its end of extended support (and bills extended support, six times the
standard hourly price, from its end of standard support), and Lambda deprecates a runtime before it
refuses to create or update functions on it. ``tests/cdk/test_support_calendar.py`` checks
:data:`igw.addon.pins.KUBERNETES_VERSION`, :data:`igw.addon.pins.SUPPORTED_KUBERNETES_VERSIONS` and
every Lambda runtime in the synthesized templates (CDK's own providers included) against these tables
on :data:`AS_OF`, a fixed date, so the suite never starts failing by itself.

Updating (docs/infrastructure.md, "Version support calendar"): move :data:`AS_OF` to the day of the
review, add the new rows from the sources below, and bump the pins the tests then name.

Sources: the Amazon EKS Kubernetes release calendar (EKS User Guide, "Understand the Kubernetes version
lifecycle on EKS"), the SageMaker HyperPod EKS prerequisites page (its "Kubernetes version support"), and
the AWS Lambda runtimes page (its supported and deprecated runtime tables).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

AS_OF: Final = datetime.date(2026, 12, 7)
"""The day the tables were last reviewed; the tests judge every pin as of this day, never today."""


@dataclass(frozen=True, slots=True)
class KubernetesSupport:
    """One Kubernetes minor version's support window on EKS."""

    end_of_standard: datetime.date
    """From this day EKS bills extended support for a cluster on this version."""
    end_of_extended: datetime.date
    """From this day EKS creates no cluster on this version and upgrades existing ones."""


EKS_KUBERNETES: Final[dict[str, KubernetesSupport]] = {
    "1.30": KubernetesSupport(datetime.date(2025, 7, 23), datetime.date(2026, 7, 23)),
    "1.31": KubernetesSupport(datetime.date(2025, 11, 26), datetime.date(2026, 11, 26)),
    "1.32": KubernetesSupport(datetime.date(2026, 3, 23), datetime.date(2027, 3, 23)),
    "1.33": KubernetesSupport(datetime.date(2026, 7, 29), datetime.date(2027, 7, 29)),
    "1.34": KubernetesSupport(datetime.date(2026, 12, 2), datetime.date(2027, 12, 2)),
    "1.35": KubernetesSupport(datetime.date(2027, 3, 27), datetime.date(2028, 3, 27)),
}
"""The EKS Kubernetes release calendar (UTC dates)."""

HYPERPOD_KUBERNETES: Final = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35")
"""The EKS versions SageMaker HyperPod's EKS orchestration supports."""


@dataclass(frozen=True, slots=True)
class RuntimeSupport:
    """One Lambda runtime's deprecation dates."""

    deprecated: datetime.date
    """From this day Lambda no longer patches the runtime (and blocks creating functions soon after)."""
    block_update: datetime.date | None
    """From this day Lambda refuses to update a function on the runtime: a stack update fails
    (``None``: not recorded here; the runtime is refused from ``deprecated`` on anyway)."""


LAMBDA_RUNTIMES: Final[dict[str, RuntimeSupport]] = {
    "nodejs18.x": RuntimeSupport(datetime.date(2025, 9, 1), None),
    "nodejs20.x": RuntimeSupport(datetime.date(2026, 4, 30), None),
    "nodejs22.x": RuntimeSupport(datetime.date(2027, 4, 30), datetime.date(2027, 7, 1)),
    "nodejs24.x": RuntimeSupport(datetime.date(2028, 4, 30), datetime.date(2028, 7, 1)),
    "python3.9": RuntimeSupport(datetime.date(2025, 12, 15), None),
    "python3.10": RuntimeSupport(datetime.date(2026, 6, 30), datetime.date(2026, 8, 31)),
    "python3.11": RuntimeSupport(datetime.date(2026, 6, 30), datetime.date(2026, 8, 31)),
    "python3.12": RuntimeSupport(datetime.date(2028, 10, 31), datetime.date(2029, 1, 10)),
    "python3.13": RuntimeSupport(datetime.date(2029, 6, 30), datetime.date(2029, 8, 31)),
    "python3.14": RuntimeSupport(datetime.date(2029, 6, 30), datetime.date(2029, 8, 31)),
}
"""Lambda's runtime deprecation table, for the runtimes CDK's providers have used."""


def kubernetes_problem(version: str, *, on: datetime.date = AS_OF, default: bool = False) -> str | None:
    """Why ``version`` is no good for a new cluster on ``on`` (``None`` when it is fine).

    Every accepted version must still be creatable (before its end of extended support) and run
    HyperPod; the default must also be in standard support, so a plain ``cdk deploy`` is not billed
    for extended support.
    """
    support = EKS_KUBERNETES.get(version)
    if support is None:
        return f"Kubernetes {version} is not in the EKS release calendar (igw.addon.support_calendar)"
    if version not in HYPERPOD_KUBERNETES:
        supported = ", ".join(HYPERPOD_KUBERNETES)
        return f"Kubernetes {version} is not supported by SageMaker HyperPod ({supported})"
    if on >= support.end_of_extended:
        return f"Kubernetes {version}: EKS extended support ended {support.end_of_extended} (no new clusters)"
    if default and on >= support.end_of_standard:
        ended = support.end_of_standard
        return f"Kubernetes {version}: EKS standard support ended {ended} (extended support is billed)"
    return None


def runtime_problem(runtime: str, *, on: datetime.date = AS_OF) -> str | None:
    """Why a Lambda function on ``runtime`` should not be deployed on ``on`` (``None`` when it is fine)."""
    support = LAMBDA_RUNTIMES.get(runtime)
    if support is None:
        return f"Lambda runtime {runtime} is not in the deprecation table (igw.addon.support_calendar)"
    if on >= support.deprecated:
        blocked = f"; updates blocked from {support.block_update}" if support.block_update else ""
        return f"Lambda runtime {runtime} was deprecated {support.deprecated}{blocked}"
    return None
