"""The tier-2 router / tier-1 gateway pairs the audit can see together (IGW-AU207..209).

A GlobalRouterConfig names each cluster (``spec.clusters[].name``) by its tier-1 gateway's base URL;
nothing in the router's document names that gateway's InferenceGatewayConfig. The link the
deployment itself relies on runs the other way: a tier-1 gateway publishes its heartbeat to the
Redis hash ``<keyPrefix><cluster>`` from ``spec.extensions.globalHeartbeat`` (``cluster`` is "its name
in spec.clusters", ``keyPrefix`` must equal the router's ``spec.heartbeats.redis.keyPrefix``), and
the router reads that key for that cluster. So a pair is a router cluster and a gateway whose
``globalHeartbeat`` names it under the same key prefix. A gateway without ``globalHeartbeat`` (a
router with ``heartbeats.required: false``) is linked only by the user: ``igw audit --link
CLUSTER=NAMESPACE/NAME`` (:attr:`CheckOptions.tier_links`). Its endpoint URL and the gateway's host
names are not matched, since an Ingress, an alias or a load balancer's DNS name may stand between
them, so a match would be a guess. Such a gateway, and a ``--link`` naming nothing here, is named in
one SKIP row saying how to link it: before session s48 the checks skipped with no word of it, and a
router withholding tokens from two authenticating clusters (IGW-AU207) went unseen. The row is the
first of IGW-AU207..209 in the run's (:attr:`CheckContext.check_ids`); the others leave it out, or
refer to it when they have nothing else to say (until session s49 each of the three gave the same
row, three rows of one fact). The Redis URLs are not compared either: the router's is often joined
in by CDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers, section
from igw.checks.inventory import Manifest, Missing, MissingFact, need
from igw.checks.k8s import meta, name_of, ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity

DEFAULT_KEY_PREFIX: Final = "igw:hb:"
"""Both schemas' default heartbeat key prefix."""
DEFAULT_TENANT_CLAIM: Final = "tenant"
"""The authorization schema's default ``tenantClaim``."""
CALLER_IDENTITY_DOC: Final = 'docs/global-router.md "Caller identity at the clusters"'
TIER_CHECK_IDS: Final = ("IGW-AU207", "IGW-AU208", "IGW-AU209")


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
    """Every ``requiredClaims`` rule of its providers, by claim name as written: both tiers read a
    name alike (:func:`igw.security.claims.claim_at`: the top-level claim of that exact name, else a
    dotted path), and the schema has no other spelling of a claim (``/tenant`` is a claim of that
    name, not ``tenant``), so equal text is the same claim and other text another one."""
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


def gateway_key(gateway: Manifest) -> str:
    """``NAMESPACE/NAME`` (``NAME`` without a namespace): how ``--link`` names a gateway."""
    namespace = meta(gateway).get("namespace")
    return f"{namespace}/{name_of(gateway)}" if namespace else name_of(gateway)


def _cluster_names(router: Manifest) -> set[str]:
    clusters = spec(router).get("clusters")
    return {
        str(c["name"])
        for c in (clusters if isinstance(clusters, list) else [])
        if isinstance(c, Mapping) and c.get("name")
    }


@dataclass(slots=True)
class TierScope:
    """The pairs, and a note (resource, text) for each gateway or ``--link`` the audit could not link."""

    pairs: list[TierPair] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)


def _notes_go_to(ctx: CheckContext) -> str | None:
    """The check that reports the unlinked gateways in this run: the first of IGW-AU207..209 it holds
    (``None``: a check run alone, which reports them itself)."""
    return next((c for c in ctx.check_ids if c in TIER_CHECK_IDS), None)


def tier_scope(ctx: CheckContext, check_id: str) -> TierScope:
    """Every (router cluster, tier-1 gateway) pair, by heartbeat or ``--link`` (see the module
    docstring), and what stayed unlinked (for the check that reports it, :func:`_notes_go_to`; the
    others get no notes). Skips the check when the source has no pair."""
    routers = need(ctx.inventory.kube.of("GlobalRouterConfig"))
    gateways = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    links = ctx.options.tier_links
    scope = TierScope()
    for router in routers:
        names = _cluster_names(router)
        prefix = _key_prefix(section(router, "heartbeats"))
        for gateway in gateways:
            heartbeat = section(gateway, "extensions", "globalHeartbeat")
            cluster = heartbeat.get("cluster") if heartbeat is not None else None
            linked = {c for c, key in links if key == gateway_key(gateway) and c in names}
            if isinstance(cluster, str) and cluster in names and _key_prefix(heartbeat) == prefix:
                linked.add(cluster)
            scope.pairs += [TierPair(router, c, gateway) for c in sorted(linked)]
    if routers:
        known = {(p.cluster, gateway_key(p.gateway)) for p in scope.pairs}
        keys = {key for _, key in links}
        scope.notes += [
            (
                ref(gateway),
                "not linked to a router cluster, so IGW-AU207..209 do not check it: it has no "
                "spec.extensions.globalHeartbeat; if it serves a router's cluster, run igw audit --link "
                f"CLUSTER={gateway_key(gateway)} (or give it a globalHeartbeat naming that cluster)",
            )
            for gateway in gateways
            if section(gateway, "extensions", "globalHeartbeat") is None and gateway_key(gateway) not in keys
        ]
        scope.notes += [
            (
                f"--link {c}={key}",
                "links nothing: no GlobalRouterConfig cluster of that name with that "
                "InferenceGatewayConfig in this source",
            )
            for c, key in links
            if (c, key) not in known
        ]
    reporter = _notes_go_to(ctx)
    if reporter not in (None, check_id):
        seen = f" (what is not linked: see {reporter})" if scope.notes else ""
        scope.notes = []
    else:
        seen = "".join(f"; {resource} {text}" for resource, text in scope.notes)
    if not scope.pairs:
        raise MissingFact(
            Missing(
                "no GlobalRouterConfig together with an InferenceGatewayConfig whose "
                "spec.extensions.globalHeartbeat.cluster names one of its clusters, or that --link names"
                + seen
            )
        )
    return scope


Verdict = Callable[[TierPair, Reporter], Result]


def tier_check(
    check_id: str, title: str, severity: Severity, description: str, remediation: str, verdict: Verdict
) -> FunctionCheck:
    """An IGW-AU207..209 check: ``verdict`` judges each pair; each unlinked gateway is a SKIP row of
    the first of them in the run."""
    check_meta = CheckMeta(
        id=check_id,
        title=title,
        command=Command.AUDIT,
        category="jwt",
        severity=severity,
        description=description,
        remediation=f"{remediation} See {CALLER_IDENTITY_DOC}.",
    )

    def run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
        scope = tier_scope(ctx, check_id)
        yield from (verdict(pair, r) for pair in scope.pairs)
        yield from (r.skip(resource, Missing(text)) for resource, text in scope.notes)

    return FunctionCheck(check_meta, run)
