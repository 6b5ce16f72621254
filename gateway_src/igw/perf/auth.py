"""``igw perf auth``: CPU cost of authenticating one request, against baselines from the same run.

For RS256 (RSA-2048) and ES256 (P-256) tokens with the issuer's keys already cached, it measures
CPU time per token (``time.process_time``) of:

- ``crypto-only``  the signature check alone (PyJWT algorithm object over ``cryptography``): the floor;
- ``pyjwt-decode`` ``jwt.decode`` with the key, algorithms, issuer and audience: the library baseline;
- ``igw-verify``   our full ``RequestGuard.authenticate`` with the verified-token cache disabled
                   (header parsing, strict JWS parsing, claims, key lookup, signature, principal, metrics);
- ``igw-cached``   the same with the verified-token cache on and the token repeated (a client reusing
                   its token, the common case).

The target is ≤ 50 µs of CPU per verified token; the command says which rows meet it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

HELP = "Authentication cost per request (cached RS256/ES256 keys) vs crypto-only and PyJWT baselines."
TARGET_US: Final = 50.0
ISSUER: Final = "https://issuer.perf.invalid"
AUDIENCE: Final = "perf"


def run(args: argparse.Namespace) -> int:
    rows = asyncio.run(_measure(iterations=max(1, args.iterations), repeats=max(1, args.repeats)))
    _print(rows, iterations=args.iterations)
    return 0


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the report: the algorithm, what was measured, and its cost per token."""

    alg: str
    name: str
    cpu_us: float
    wall_us: float


async def _measure(*, iterations: int, repeats: int) -> list[Row]:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm, get_default_algorithms

    rows: list[Row] = []
    keys: list[tuple[str, Any, dict[str, Any]]] = []
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys.append(("RS256", rsa_key, dict(RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True))))
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keys.append(("ES256", ec_key, dict(ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True))))
    for alg, private, jwk in keys:
        jwk.update({"kid": f"{alg}-perf", "alg": alg, "use": "sig"})
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "perf-user",
            "tenant": "perf",
            "iat": int(time.time()),
            "exp": int(time.time()) + 3600,
        }
        token = jwt.encode(claims, private, algorithm=alg, headers={"kid": jwk["kid"]})
        public = private.public_key()
        algorithm = get_default_algorithms()[alg]
        signing_input, _, signature_b64 = token.rpartition(".")
        signature = jwt.utils.base64url_decode(signature_b64)
        message = signing_input.encode()

        async def crypto_only(
            algorithm: Any = algorithm,
            public: Any = public,
            message: bytes = message,
            signature: bytes = signature,
        ) -> None:
            if not algorithm.verify(message, public, signature):
                raise AssertionError("signature did not verify")

        async def pyjwt_decode(token: str = token, public: Any = public, alg: str = alg) -> None:
            jwt.decode(token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER)

        headers = {"Authorization": f"Bearer {token}"}
        uncached = _guard(jwk, cache_entries=0)
        cached = _guard(jwk, cache_entries=10_000)

        async def igw_verify(headers: dict[str, str] = headers, guard: Any = uncached) -> None:
            await guard.authenticate(headers)

        async def igw_cached(headers: dict[str, str] = headers, guard: Any = cached) -> None:
            await guard.authenticate(headers)

        for name, func in (
            ("crypto-only", crypto_only),
            ("pyjwt-decode", pyjwt_decode),
            ("igw-verify", igw_verify),
            ("igw-cached", igw_cached),
        ):
            cpu, wall = await _best_of(func, iterations=iterations, repeats=repeats)
            rows.append(Row(alg=alg, name=name, cpu_us=cpu, wall_us=wall))
    return rows


def _guard(jwk: dict[str, Any], *, cache_entries: int) -> Any:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from prometheus_client import CollectorRegistry

    from igw.config.model import AuthSpec, BbrSpec, GatewayConfig, JwtProvider
    from igw.security.factory import build_request_guard

    config = GatewayConfig(
        name="perf",
        namespace="perf",
        bbr=BbrSpec(enabled=True),
        schedulers=(),
        auth=AuthSpec(
            jwt_provider=JwtProvider(
                name="perf", issuer=ISSUER, jwks_uri=f"{ISSUER}/jwks", audiences=(AUDIENCE,)
            )
        ),
        extensions={"authorization": {"verifiedTokenCache": {"maxEntries": cache_entries}}},
    )
    guard = build_request_guard(config, registry=CollectorRegistry())
    assert guard.jwks is not None
    guard.jwks.load_document({"keys": [jwk]})  # keys cached: no issuer involved
    return guard


async def _best_of(
    func: Callable[[], Awaitable[None]], *, iterations: int, repeats: int
) -> tuple[float, float]:
    await func()  # warm up (and prove it works)
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(iterations):
            await func()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        best_cpu = min(best_cpu, cpu / iterations * 1e6)
        best_wall = min(best_wall, wall / iterations * 1e6)
    return best_cpu, best_wall


def _print(rows: list[Row], *, iterations: int) -> None:
    print(f"igw perf auth: CPU per authenticated request, best of runs of {iterations} tokens")
    columns = f"{'alg':6} {'path':13} {'cpu µs':>8} {'wall µs':>8} {'×crypto':>8} {'×pyjwt':>7}"
    print(f"{columns}  target ≤{TARGET_US:.0f} µs")
    by_alg: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_alg.setdefault(row.alg, {})[row.name] = row
    for alg, named in by_alg.items():
        crypto = named["crypto-only"].cpu_us
        pyjwt = named["pyjwt-decode"].cpu_us
        for row in named.values():
            verdict = "meets" if row.cpu_us <= TARGET_US else "misses"
            print(
                f"{alg:6} {row.name:13} {row.cpu_us:8.1f} {row.wall_us:8.1f} "
                f"{row.cpu_us / crypto:8.2f} {row.cpu_us / pyjwt:7.2f}  {verdict}"
            )
