"""IGW-AU205: JWT verification settings in ``spec.extensions.authorization`` are not weakened.

Flags clock skew above 300 s (or not a duration), ``none`` (unsigned tokens) or HMAC algorithms
alongside a JWKS (key confusion), and forwarding the raw Authorization header upstream (model servers
then see bearer tokens in their logs). A GlobalRouterConfig's ``spec.authorization`` is read the same
way (since session s41), except ``forwardAuthorization``: there it hands the token to the tier-1
gateways, which may verify it themselves (IGW-AU307 grades where that travels in clear).
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._jwt_configs import jwt_configs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.durations import parse_duration

MAX_SKEW_S = 300.0

META = CheckMeta(
    id="IGW-AU205",
    title="JWT verification not weakened",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.MEDIUM,
    description="clockSkew <= 300s, no HS* algorithms with a JWKS, bearer tokens not forwarded to model "
    "servers.",
    remediation="Keep spec.extensions.authorization.clockSkew (a GlobalRouterConfig's "
    "spec.authorization.clockSkew) at 60s, algorithms asymmetric only, forwardAuthorization false.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for found in jwt_configs(ctx):
        config, authz = found.config, found.authorization
        problems: list[tuple[Severity, str]] = []
        skew_text = authz.get("clockSkew")
        if isinstance(skew_text, str):
            try:
                if parse_duration(skew_text) > MAX_SKEW_S:
                    problems.append((Severity.MEDIUM, f"clockSkew {skew_text} exceeds {int(MAX_SKEW_S)}s"))
            except ValueError:
                problems.append((Severity.MEDIUM, f"clockSkew {skew_text!r} is not a duration"))
        elif skew_text is not None:  # 86400 (seconds?) passed unread before session s50
            problems.append((Severity.MEDIUM, f"clockSkew {skew_text!r} is not a duration string"))
        algorithms = authz.get("algorithms") or []
        unsigned = [a for a in algorithms if str(a).strip().lower() == "none"]
        if unsigned:
            problems.append(
                (Severity.HIGH, f"algorithm {', '.join(map(str, unsigned))} accepts unsigned tokens")
            )
        hmac = [a for a in algorithms if str(a).upper().startswith("HS")]
        if hmac:
            problems.append(
                (Severity.HIGH, f"HMAC algorithms {', '.join(map(str, hmac))} accepted with a JWKS")
            )
        if authz.get("forwardAuthorization") is True and found.kind == "InferenceGatewayConfig":
            problems.append((Severity.LOW, "forwardAuthorization passes bearer tokens to model servers"))
        if problems:
            worst = max((s for s, _ in problems), key=lambda s: s.rank)
            yield r.fail(ref(config), "; ".join(m for _, m in problems), severity=worst)
        else:
            yield r.passed(ref(config), "defaults or stricter")


CHECK = FunctionCheck(META, _run)
