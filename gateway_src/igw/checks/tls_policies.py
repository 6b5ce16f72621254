"""ELB TLS security policies as data: an allow-list, a deny-list, and everything else is unknown.

Trivy (AWS-0047) uses only a deny-list, so a policy AWS adds tomorrow passes silently; we grade
against an allow-list and *warn* on unknown names.
CLI, CloudFormation, CDK and the Load Balancer Controller all default to ELBSecurityPolicy-2016-08.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

AWS_DEFAULT_POLICY: Final = "ELBSecurityPolicy-2016-08"

ALLOWED: Final = frozenset(
    {
        "ELBSecurityPolicy-TLS13-1-3-2021-06",
        "ELBSecurityPolicy-TLS13-1-2-2021-06",
        "ELBSecurityPolicy-TLS13-1-2-Res-2021-06",
        "ELBSecurityPolicy-TLS13-1-3-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-2-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-2-Res-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-3-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-Res-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-3-FIPS-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-FIPS-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-Res-FIPS-PQ-2025-09",
        "ELBSecurityPolicy-FS-1-2-Res-2019-08",
        "ELBSecurityPolicy-FS-1-2-Res-2020-10",
    }
)
"""TLS 1.2+ with forward-secret AEAD ciphers only (TLS 1.3 policies, restricted FS policies)."""

DENIED: Final = frozenset(
    {
        "ELBSecurityPolicy-2015-05",
        "ELBSecurityPolicy-2016-08",
        "ELBSecurityPolicy-FS-2018-06",
        "ELBSecurityPolicy-FS-1-1-2019-08",
        "ELBSecurityPolicy-TLS-1-0-2015-04",
        "ELBSecurityPolicy-TLS-1-1-2017-01",
        "ELBSecurityPolicy-TLS13-1-0-2021-06",
        "ELBSecurityPolicy-TLS13-1-1-2021-06",
        "ELBSecurityPolicy-TLS13-1-2-Ext1-2021-06",
        "ELBSecurityPolicy-TLS13-1-2-Ext2-2021-06",
        "ELBSecurityPolicy-TLS13-1-0-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-1-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-2-Ext0-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-2-Ext1-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-2-Ext2-FIPS-2023-04",
        "ELBSecurityPolicy-TLS13-1-0-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-1-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-Ext1-PQ-2025-09",
        "ELBSecurityPolicy-TLS13-1-2-Ext2-PQ-2025-09",
    }
)
"""Policies that accept TLS 1.0/1.1 or weak (CBC/SHA-1) ciphers: Trivy's deny-list plus FIPS/PQ twins."""

LEGACY_TLS12: Final = frozenset(
    {
        "ELBSecurityPolicy-TLS-1-2-2017-01",
        "ELBSecurityPolicy-TLS-1-2-Ext-2018-06",
        "ELBSecurityPolicy-FS-1-2-2019-08",
    }
)
"""TLS 1.2 only, but still CBC/SHA-1 suites: acceptable to Checkov (TLS >= 1.2), not to us."""


class PolicyGrade(StrEnum):
    ALLOWED = "allowed"
    LEGACY = "legacy"
    DENIED = "denied"
    UNKNOWN = "unknown"


def grade(policy: str) -> PolicyGrade:
    if policy in ALLOWED:
        return PolicyGrade.ALLOWED
    if policy in DENIED:
        return PolicyGrade.DENIED
    if policy in LEGACY_TLS12:
        return PolicyGrade.LEGACY
    return PolicyGrade.UNKNOWN
