"""IGW-AU203: tokens are bound to this gateway - ``audiences`` or ``requiredClaims`` set.

Without either, any token the IdP issues for any application is accepted here.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._jwt_configs import jwt_configs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU203",
    title="JWT audiences or required claims set",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.HIGH,
    description="At least one of audiences / requiredClaims must restrict which tokens are accepted.",
    remediation="Set spec.auth.jwt.provider.audiences to the gateway's audience (or requiredClaims).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in (found.config for found in jwt_configs(ctx)):
        for provider in jwt_providers(config):
            resource = f"{ref(config)} provider {provider.get('name', '?')}"
            audiences = provider.get("audiences") or []
            claims = provider.get("requiredClaims") or []
            if audiences or claims:
                yield r.passed(resource, f"{len(audiences)} audience(s), {len(claims)} required claim(s)")
            else:
                yield r.fail(
                    resource, "neither audiences nor requiredClaims: any token from the issuer is accepted"
                )


CHECK = FunctionCheck(META, _run)
