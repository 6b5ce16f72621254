"""IGW-PF015 (``--probe``): each JWT provider's JWKS is reachable over verified TLS and holds usable keys.

Uses the gateway's own fetcher and parser (``igw.security.fetch``/``igw.security.jwk``), so the probe
accepts exactly what the gateway would: https only, certificate verified, 5 s, no redirect to another
host, a JSON body; keys bound to asymmetric algorithms, RSA >= 2048 bits, unique ``kid``s. With OIDC
discovery published, its ``issuer`` must equal the configured one (a mismatch rejects every token).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers, section
from igw.checks.inventory import Missing, need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

MAX_JWKS_BYTES = 512 * 1024
MAX_KEYS = 100
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

META = CheckMeta(
    id="IGW-PF015",
    title="JWKS reachable over TLS with usable signing keys",
    command=Command.PREFLIGHT,
    category="jwt",
    severity=Severity.HIGH,
    description="Fetches remoteJWKS.uri (and the issuer's OIDC discovery document) the way the gateway "
    "will; an unreachable or unusable JWKS makes every request fail with 401.",
    remediation="Fix the URI, the IdP's certificate chain or the network path; publish RSA >= 2048 or EC "
    "signing keys with unique kids; make discovery's issuer equal spec.auth.jwt.provider.issuer.",
)


@dataclass(frozen=True, slots=True)
class _Probe:
    keys: int
    skipped: tuple[str, ...]
    error: str | None
    discovered_issuer: str | None


async def _probe(uri: str, issuer: str, *, timeout_s: float, context: ssl.SSLContext | None) -> _Probe:
    # deferred: optional dependency: aiohttp (ops extra) only for live probes; checks also run offline
    import aiohttp

    from igw.security.fetch import FetchError, fetch_json
    from igw.security.jwk import parse_jwks

    async with aiohttp.ClientSession() as session:
        try:
            document = await fetch_json(
                session, uri, timeout_s=timeout_s, max_bytes=MAX_JWKS_BYTES, ssl_context=context
            )
            keys = parse_jwks(document, allowed_algorithms=ASYMMETRIC, max_keys=MAX_KEYS)
        except (FetchError, ValueError) as exc:
            return _Probe(0, (), str(exc), None)
        discovered: str | None = None
        try:
            discovery = await fetch_json(
                session,
                issuer.rstrip("/") + "/.well-known/openid-configuration",
                timeout_s=timeout_s,
                max_bytes=MAX_JWKS_BYTES,
                ssl_context=context,
            )
            if isinstance(discovery, Mapping) and isinstance(discovery.get("issuer"), str):
                discovered = discovery["issuer"]
        except FetchError:
            discovered = None  # discovery is optional for the gateway (oidcDiscovery defaults to false)
        return _Probe(len(keys), keys.skipped, None, discovered)


def _context(ctx: CheckContext) -> ssl.SSLContext | None:
    return ssl.create_default_context(cafile=ctx.options.ca_bundle) if ctx.options.ca_bundle else None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    if not ctx.options.probe:
        yield r.skip("-", Missing("not requested: pass --probe to fetch each JWKS"))
        return
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        if section(config, "auth", "jwt") is None:
            continue
        for provider in jwt_providers(config):
            resource = f"{ref(config)} provider {provider.get('name', '?')}"
            jwks: Any = provider.get("remoteJWKS")
            uri = str(jwks.get("uri") or "") if isinstance(jwks, Mapping) else ""
            issuer = str(provider.get("issuer") or "")
            result = asyncio.run(
                _probe(uri, issuer, timeout_s=ctx.options.probe_timeout_s, context=_context(ctx))
            )
            if result.error is not None:
                yield r.fail(resource, f"JWKS {uri}: {result.error}")
            elif result.keys == 0:
                yield r.fail(resource, f"JWKS {uri} has no usable signing key ({'; '.join(result.skipped)})")
            elif result.discovered_issuer is not None and result.discovered_issuer != issuer:
                yield r.fail(
                    resource, f"discovery says issuer {result.discovered_issuer!r}, config says {issuer!r}"
                )
            elif result.skipped:
                yield r.warn(
                    resource,
                    f"{result.keys} usable key(s); ignored: {'; '.join(result.skipped)}",
                    severity=Severity.LOW,
                )
            else:
                yield r.passed(resource, f"{result.keys} usable signing key(s)")


CHECK = FunctionCheck(META, _run)
