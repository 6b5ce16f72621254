"""The JWT-verifying objects the audit reads: an InferenceGatewayConfig (tier 1) and a
GlobalRouterConfig (tier 2), each with its ``spec.auth.jwt`` and the path of its authorization
settings (IGW-AU202..206).

Why both: the global router verifies its callers' tokens with the same guard and the same settings
(``spec.authorization`` there, ``spec.extensions.authorization`` in a gateway), and it is the tier
clients reach first; before session s41 these checks read only InferenceGatewayConfig objects, so a
GlobalRouterConfig with ``clockSkew: 1h`` or no token lifetime bound passed every audit, and until
session s42 IGW-AU202..204 skipped it too (an http JWKS at 169.254.169.254 with no audience: "nothing
in scope", exit 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from igw.checks.framework import CheckContext
from igw.checks.igwc import section
from igw.checks.inventory import Manifest, need

AUTHORIZATION_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "InferenceGatewayConfig": ("extensions", "authorization"),
    "GlobalRouterConfig": ("authorization",),
}
"""Per kind, the spec path of its authorization settings (the shared schema's ``authorization``)."""


@dataclass(frozen=True, slots=True)
class JwtConfig:
    """One object with ``spec.auth.jwt`` set."""

    config: Manifest
    kind: str
    authorization: Mapping[str, Any]
    """Its authorization settings (empty when absent or not a mapping)."""

    @property
    def authorization_path(self) -> str:
        """``spec.extensions.authorization`` or ``spec.authorization``, for findings."""
        return "spec." + ".".join(AUTHORIZATION_PATHS[self.kind])


def jwt_configs(ctx: CheckContext) -> list[JwtConfig]:
    """Each object of either kind that verifies tokens (``spec.auth.jwt`` set). Skips the check
    (with the source's reason) when the source provides objects of neither kind."""
    kinds = {kind: ctx.inventory.kube.of(kind) for kind in AUTHORIZATION_PATHS}
    configs = [(kind, c) for kind, objects in kinds.items() if isinstance(objects, list) for c in objects]
    if not configs:
        need(kinds["InferenceGatewayConfig"])  # nothing of either kind: skipped with the source's reason
    return [
        JwtConfig(config=config, kind=kind, authorization=section(config, *AUTHORIZATION_PATHS[kind]) or {})
        for kind, config in configs
        if section(config, "auth", "jwt") is not None
    ]
