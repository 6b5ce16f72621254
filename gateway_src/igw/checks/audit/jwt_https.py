"""IGW-AU202: the JWT issuer and JWKS URI use https (a JWKS fetched over http can be swapped in transit).

The scheme is read as RFC 3986 says, case-insensitively: ``HTTPS://idp/jwks`` is fetched over https.
Until session s39 a prefix test failed it HIGH as "not https" (the configuration's schema refuses that
spelling; ``igw validate`` says so, and this check is about transport).
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._jwt_configs import jwt_configs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU202",
    title="JWT issuer and JWKS over https",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.HIGH,
    description="issuer must be an https URL matched against iss; remoteJWKS.uri must be https.",
    remediation="Use the IdP's https issuer URL and its https JWKS endpoint.",
)


HTTPS = "https://"


def _is_https(url: str) -> bool:
    """``https://`` in any case (the test it replaced, ``startswith("https://")``, otherwise unchanged)."""
    return url[: len(HTTPS)].lower() == HTTPS


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in (found.config for found in jwt_configs(ctx)):
        for provider in jwt_providers(config):
            resource = f"{ref(config)} provider {provider.get('name', '?')}"
            issuer = str(provider.get("issuer") or "")
            jwks = provider.get("remoteJWKS")
            uri = str(jwks.get("uri") or "") if isinstance(jwks, dict) else ""
            problems = []
            if not issuer:
                problems.append("no issuer")
            elif not _is_https(issuer):
                problems.append(f"issuer {issuer!r} is not https")
            if not uri:
                problems.append("no remoteJWKS.uri")
            elif not _is_https(uri):
                problems.append(f"JWKS {uri!r} is not https")
            if problems:
                yield r.fail(resource, "; ".join(problems))
            else:
                yield r.passed(resource, "issuer and JWKS are https")


CHECK = FunctionCheck(META, _run)
