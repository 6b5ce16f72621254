"""A3: hypothesis-generated Authorization headers, token structures and claim sets. The guard may
only ever accept (a genuinely valid token) or answer 401; no other exception may escape.

200 examples per test by default (fast CI); ``IGW_FUZZ_EXAMPLES=10000`` for the long run."""

from __future__ import annotations

import os
import string
import time
from typing import Any

import jwt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from igw.gateway.guards import GuardDenied
from igw.security.guard import SecurityGuard
from tests.security.helpers import AUDIENCE, GuardMaker, Keys, TokenFactory, b64url, mint, segment

FUZZ = settings(
    max_examples=int(os.environ.get("IGW_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

B64_ALPHABET = string.ascii_letters + string.digits + "-_"
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


async def run_all(guard: SecurityGuard, headers_list: list[dict[str, str]]) -> list[str]:
    """ "ok", or "401" for a refusal with the right challenge; anything else is recorded as is."""
    results = []
    for headers in headers_list:
        try:
            principal = await guard.authenticate(headers)
            results.append("ok" if principal.authenticated else "anonymous")
        except GuardDenied as exc:
            challenge = exc.headers == {"WWW-Authenticate": 'Bearer error="invalid_token"'}
            results.append(str(exc.status) if challenge else f"{exc.status} without challenge")
    return results


async def test_a3_random_authorization_headers(make_guard: GuardMaker) -> None:
    guard = await make_guard()
    samples: list[dict[str, str]] = []

    @FUZZ
    @given(
        st.one_of(
            st.text(max_size=300),
            st.builds(lambda s: "Bearer " + s, st.text(max_size=300)),
            st.builds(
                lambda parts: "Bearer " + ".".join(parts),
                st.lists(st.text(alphabet=B64_ALPHABET + "=+/ .", max_size=60), min_size=1, max_size=6),
            ),
        )
    )
    def collect(value: str) -> None:
        samples.append({"Authorization": value})

    collect()
    results = await run_all(guard, samples)
    assert set(results) == {"401"}


async def test_a3_random_structured_tokens(make_guard: GuardMaker, keys: Keys) -> None:
    guard = await make_guard()
    samples: list[dict[str, str]] = []

    @FUZZ
    @given(
        header=st.dictionaries(
            st.sampled_from(["alg", "kid", "typ", "crit", "cty", "b64", "zip", "jku", "jwk", "x"]),
            json_values | st.sampled_from(["RS256", "none", "HS256", "ES256", "rsa-1", "JWT"]),
            max_size=6,
        ),
        payload=st.binary(max_size=200)
        | st.dictionaries(st.text(max_size=6), json_values, max_size=6).map(segment),
        signature=st.text(alphabet=B64_ALPHABET, max_size=400),
    )
    def collect(header: dict[str, Any], payload: bytes | str, signature: str) -> None:
        body = payload if isinstance(payload, str) else b64url(payload)
        samples.append({"Authorization": f"Bearer {segment(header)}.{body}.{signature}"})

    collect()
    results = await run_all(guard, samples)
    assert set(results) == {"401"}


async def test_a3_validly_signed_random_claims(
    make_guard: GuardMaker, tokens: TokenFactory, keys: Keys
) -> None:
    """Real signatures over random claim sets: the verdict depends only on the claims, never crashes."""
    tokens.clock.now = time.time()  # PyJWT (the differential below) reads the real clock
    guard = await make_guard(
        extensions={"authorization": {"forwardClaims": [{"claim": "x", "header": "x-x"}]}}
    )
    samples: list[tuple[dict[str, str], bool]] = []
    base = tokens.claims()

    @FUZZ
    @given(
        overrides=st.dictionaries(
            st.sampled_from(["iss", "aud", "exp", "nbf", "iat", "sub", "tenant", "x"]),
            json_values,
            max_size=4,
        )
    )
    def collect(overrides: dict[str, Any]) -> None:
        claims = {**base, **overrides}
        samples.append(({"Authorization": f"Bearer {mint(keys.ec, claims)}"}, overrides == {}))

    collect()
    results = await run_all(guard, [headers for headers, _ in samples])
    public = keys.ec.private.public_key()
    for (headers, untouched), result in zip(samples, results, strict=True):
        if untouched:
            assert result == "ok"
        if result == "ok":
            # differential: we are never more lenient than PyJWT's own full validation
            token = headers["Authorization"].removeprefix("Bearer ")
            jwt.decode(
                token,
                public,
                algorithms=["ES256"],
                audience=AUDIENCE,
                issuer=tokens.issuer,
                leeway=60,
                options={"require": ["exp", "iss"]},
            )
    assert "401" in results
