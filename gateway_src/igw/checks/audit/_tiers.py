"""The tier-2 router / tier-1 gateway pairs the audit can see together (IGW-AU207..209).

A GlobalRouterConfig names each cluster (``spec.clusters[].name``) by its tier-1 gateway's base URL;
nothing in the router's document names that gateway's InferenceGatewayConfig. The link the
deployment itself relies on runs the other way: a tier-1 gateway publishes its heartbeat to the
Redis hash ``<keyPrefix><cluster>`` from ``spec.extensions.globalHeartbeat`` (``cluster`` is "its name
in spec.clusters", ``keyPrefix`` must equal the router's ``spec.heartbeats.redis.keyPrefix``), and
the router reads that key for that cluster. So a pair is a router cluster and a gateway whose
``globalHeartbeat`` names it under the same key prefix. A gateway without ``globalHeartbeat`` (a
router with ``heartbeats.required: false``) is linked to nothing: its endpoint URL and the gateway's
host names are not matched, since an Ingress, an alias or a load balancer's DNS name may stand
between them. The Redis URLs are not compared either: the router's is often joined in by CDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from igw.checks.framework import CheckContext
from igw.checks.igwc import jwt_providers, section
from igw.checks.inventory import Manifest, Missing, MissingFact, need
from igw.checks.k8s import ref, spec

DEFAULT_KEY_PREFIX: Final = "igw:hb:"
"""Both schemas' default heartbeat key prefix."""
DEFAULT_TENANT_CLAIM: Final = "tenant"
"""The authorization schema's default ``tenantClaim``."""
CALLER_IDENTITY_DOC: Final = 'docs/global-router.md "Caller identity at the clusters"'


@dataclass(frozen=True, slots=True)
class TierPair:
    """One router cluster and the tier-1 gateway configuration that publishes its heartbeat."""

    router: Manifest
    cluster: str
    gateway: Manifest

    @property
    def resource(self) -> str:
        """``GlobalRouterConfig <name> cluster <cluster>``: the router's side is what one changes
        first, and a gateway may serve under several routers."""
        return f"{ref(self.router)} cluster {self.cluster}"

    @property
    def gateway_ref(self) -> str:
        return ref(self.gateway)

    @property
    def router_verifies(self) -> bool:
        return verifies(self.router)

    @property
    def router_forwards(self) -> bool:
        """``spec.authorization.forwardAuthorization: true`` (the router's guard then keeps the caller's
        ``Authorization``; without ``spec.auth`` the router passes it on anyway)."""
        return (section(self.router, "authorization") or {}).get("forwardAuthorization") is True

    @property
    def gateway_verifies(self) -> bool:
        return verifies(self.gateway)


def verifies(config: Manifest) -> bool:
    """Whether the object authenticates callers (``spec.auth.jwt`` set, as the other JWT checks read it)."""
    return section(config, "auth", "jwt") is not None


def issuers(config: Manifest) -> frozenset[str]:
    return frozenset(str(p.get("issuer")) for p in jwt_providers(config) if p.get("issuer"))


def audiences(config: Manifest) -> frozenset[str] | None:
    """Every audience its providers accept; ``None`` when none sets any (any ``aud`` passes then)."""
    found: set[str] = set()
    for provider in jwt_providers(config):
        values = provider.get("audiences")
        if isinstance(values, list):
            found.update(str(v) for v in values)
    return frozenset(found) if found else None


@dataclass(frozen=True, slots=True)
class ClaimRule:
    """One ``requiredClaims`` rule: the claim is a ``String`` among ``values``, or a ``StringArray``
    with an element among them (:mod:`igw.security.claims`)."""

    value_type: str
    values: frozenset[str]

    def implies(self, other: ClaimRule) -> bool:
        """Whether every claim value this rule admits also passes ``other`` (same claim name)."""
        return self.value_type == other.value_type and self.values <= other.values

    def excludes(self, other: ClaimRule) -> bool:
        """Whether no claim value passes both: types differ (a string is no array), or two ``String``
        rules share no value."""
        return self.value_type != other.value_type or (
            self.value_type == "String" and not self.values & other.values
        )

    def __str__(self) -> str:
        return f"{self.value_type} in [{', '.join(sorted(self.values))}]"


def required_claims(config: Manifest) -> dict[str, list[ClaimRule]]:
    """Every ``requiredClaims`` rule of its providers, by claim name."""
    found: dict[str, list[ClaimRule]] = {}
    for provider in jwt_providers(config):
        rules = provider.get("requiredClaims")
        for rule in rules if isinstance(rules, list) else []:
            values = rule.get("values") if isinstance(rule, Mapping) else None
            if isinstance(rule, Mapping) and rule.get("name") and isinstance(values, list):
                found.setdefault(str(rule["name"]), []).append(
                    ClaimRule(str(rule.get("valueType")), frozenset(str(v) for v in values))
                )
    return found


def tenant_claim(config: Manifest, *authorization_path: str) -> str:
    value = (section(config, *authorization_path) or {}).get("tenantClaim")
    return str(value) if value else DEFAULT_TENANT_CLAIM


def _key_prefix(node: Mapping[str, Any] | None) -> str:
    redis = node.get("redis") if node is not None else None
    prefix = redis.get("keyPrefix") if isinstance(redis, Mapping) else None
    return str(prefix) if isinstance(prefix, str) else DEFAULT_KEY_PREFIX


def tier_pairs(ctx: CheckContext) -> list[TierPair]:
    """Every (router cluster, tier-1 gateway) pair (see the module docstring). Skips the check when
    the source has no router, or no gateway publishing a heartbeat for one of its clusters."""
    routers = need(ctx.inventory.kube.of("GlobalRouterConfig"))
    gateways = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    pairs: list[TierPair] = []
    for router in routers:
        clusters = spec(router).get("clusters")
        names = {
            str(c["name"])
            for c in (clusters if isinstance(clusters, list) else [])
            if isinstance(c, Mapping) and c.get("name")
        }
        prefix = _key_prefix(section(router, "heartbeats"))
        for gateway in gateways:
            heartbeat = section(gateway, "extensions", "globalHeartbeat")
            cluster = heartbeat.get("cluster") if heartbeat is not None else None
            if isinstance(cluster, str) and cluster in names and _key_prefix(heartbeat) == prefix:
                pairs.append(TierPair(router=router, cluster=cluster, gateway=gateway))
    if not pairs:
        raise MissingFact(
            Missing(
                "no GlobalRouterConfig together with an InferenceGatewayConfig whose "
                "spec.extensions.globalHeartbeat.cluster names one of its clusters (the audit links "
                "the tiers by that heartbeat only)"
            )
        )
    return pairs
