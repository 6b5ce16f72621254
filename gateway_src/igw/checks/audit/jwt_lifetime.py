"""IGW-AU206: a JWT's lifetime is bounded by the gateway, not only by its issuer.

``spec.extensions.authorization.maxTokenLifetime`` is unset by default, as Envoy's ``max_lifetime``
is: a token is then accepted for as long as its own ``exp`` says, so a token an issuer minted (by
mistake or by a compromised client registration) to last 100 years stays valid for 100 years, and
nothing short of rotating the signing key revokes it. The runtime default stays unset (a gateway
cannot know its issuer's lifetimes, and refusing every token an issuer mints for 25 h would break
working deployments on upgrade); this check is where the choice is made visible. A warning, not a
failure: the issuer's own cap may suffice. A GlobalRouterConfig's ``spec.authorization`` is read the
same way (since session s41): tier 2 verifies its callers' tokens with the same settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from igw.checks.audit._jwt_configs import jwt_configs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.durations import parse_duration

MAX_LIFETIME_S: Final = 86_400.0
"""Longest ``maxTokenLifetime`` that passes: a day (access tokens usually live 5 to 60 minutes;
Envoy's documentation gives 24 h as its ``max_lifetime`` example)."""

FIELD: Final = "spec.extensions.authorization.maxTokenLifetime"
ROUTER_FIELD: Final = "spec.authorization.maxTokenLifetime"

META = CheckMeta(
    id="IGW-AU206",
    title="JWT lifetime bounded",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.MEDIUM,
    description="With spec.auth set, spec.extensions.authorization.maxTokenLifetime is set and at most 24h: "
    "unset, a token is accepted for as long as its own exp says (100 years if minted so), and a leaked "
    "long-lived token can only be revoked by rotating the issuer's key.",
    remediation=f"Set {FIELD} (a GlobalRouterConfig's: {ROUTER_FIELD}) to the longest lifetime your "
    "issuer mints access tokens for (for example 1h; "
    "at most 24h); tokens whose exp lies further in the future are then refused (401, reason "
    "lifetime_too_long).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for found in jwt_configs(ctx):  # those without spec.auth.jwt have no tokens to bound (IGW-AU201)
        config, authz = found.config, found.authorization
        field = f"{found.authorization_path}.maxTokenLifetime"
        text = authz.get("maxTokenLifetime")
        if text is None:
            yield r.warn(
                ref(config),
                f"{field} is not set: a token is accepted for as long as its own exp says "
                "(a token minted to last 100 years is valid for 100 years)",
            )
            continue
        try:
            seconds = parse_duration(text)
        except (TypeError, ValueError):
            yield r.fail(ref(config), f"{field} {text!r} is not a duration")
            continue
        if seconds > MAX_LIFETIME_S:
            yield r.warn(
                ref(config),
                f"{field} {text} is longer than 24h: tokens that long-lived are accepted",
                severity=Severity.LOW,
            )
        else:
            yield r.passed(ref(config), f"maxTokenLifetime {text}")


CHECK = FunctionCheck(META, _run)
