"""A1: every applicable bad-input case of the catalogue (J1-J25) against a real guard, real JWKS over
HTTPS and real signatures. Each case asserts the 401 and its RFC 6750 challenge, that the body
does not leak the reason, the *specific* reason counted in ``igw_auth_denied_total`` (so a case
cannot pass for an unrelated reason), and how many JWKS fetches it was allowed to cause."""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from multidict import CIMultiDict

from igw.gateway.guards import GuardDenied
from igw.security.guard import SecurityGuard
from tests.security.helpers import (
    DELETE,
    GuardMaker,
    JwksServer,
    Keys,
    TokenFactory,
    b64url,
    bearer,
    mint,
    segment,
    sign,
)

GENERIC_MESSAGE = "missing or invalid bearer token"


@dataclass(frozen=True)
class Ctx:
    tokens: TokenFactory
    keys: Keys
    server: JwksServer

    @property
    def now(self) -> int:
        return int(self.tokens.clock())


Builder = Callable[[Ctx], dict[str, str] | CIMultiDict[str]]


@dataclass(frozen=True)
class Case:
    id: str
    reason: str
    build: Builder
    fetch_budget: int = 0
    """JWKS fetches the case may cause (an unknown kid may trigger one refetch)."""


def header_token(ctx: Ctx, header: dict[str, Any], claims: dict[str, Any] | None = None) -> dict[str, str]:
    return bearer(mint(ctx.keys.rsa, claims or ctx.tokens.claims(), header=header))


def rsa_header(**extra: Any) -> dict[str, Any]:
    return {"alg": "RS256", "typ": "JWT", "kid": "rsa-1", **extra}


def unsigned(ctx: Ctx, alg: str) -> dict[str, str]:
    return bearer(f"{segment({'alg': alg, 'typ': 'JWT'})}.{segment(ctx.tokens.claims())}.")


def hmac_with_public_key(ctx: Ctx, form: str) -> dict[str, str]:
    pub = ctx.keys.rsa.private.public_key()
    if form == "pem":
        secret = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    elif form == "der":
        secret = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    elif form == "jwk":
        secret = json.dumps(ctx.keys.rsa.public_jwk()).encode()
    else:
        secret = ctx.keys.ec.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    signing_input = (
        f"{segment({'alg': 'HS256', 'typ': 'JWT', 'kid': 'rsa-1'})}.{segment(ctx.tokens.claims())}"
    )
    mac = hmac.new(secret, signing_input.encode(), "sha256").digest()
    return bearer(f"{signing_input}.{b64url(mac)}")


def raw_claims(ctx: Ctx, name: str, literal: str) -> dict[str, str]:
    """Claims whose ``name`` is the raw JSON ``literal`` (NaN, 1e400 ...), validly signed."""
    text = json.dumps(ctx.tokens.claims(**{name: "__RAW__"})).replace('"__RAW__"', literal)
    return bearer(mint(ctx.keys.rsa, text))


def with_segments(ctx: Ctx, edit: Callable[[list[str]], list[str]]) -> dict[str, str]:
    parts = ctx.tokens.token().split(".")
    return bearer(".".join(edit(parts)))


_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def non_canonical(segment_text: str) -> str:
    """The same bytes spelt with a nonzero unused bit in the last character (``...Q`` -> ``...R``):
    lax base64 decoders read it as the canonical segment; RFC 4648 §3.5 lets them refuse it."""
    assert len(segment_text) % 4 in (2, 3), "the segment's length leaves no unused bits"
    last = _B64URL.index(segment_text[-1])
    return segment_text[:-1] + _B64URL[last + 1]


def non_canonical_signature(parts: list[str]) -> list[str]:
    return [parts[0], parts[1], non_canonical(parts[2])]


def raw_payload(ctx: Ctx, payload: bytes) -> dict[str, str]:
    return bearer(mint(ctx.keys.rsa, payload))


def raw_header(ctx: Ctx, header: bytes) -> dict[str, str]:
    signing_input = f"{b64url(header)}.{segment(ctx.tokens.claims())}"
    return bearer(f"{signing_input}.{sign(signing_input, ctx.keys.rsa)}")


def two_headers(ctx: Ctx) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("Authorization", f"Bearer {ctx.tokens.token()}")
    headers.add("Authorization", "Bearer not.a.token")
    return headers


def two_api_keys(ctx: Ctx) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("x-api-key", ctx.tokens.token())
    headers.add("x-api-key", "not.a.token")
    return headers


def attacker_with_header(ctx: Ctx, **extra: Any) -> dict[str, str]:
    header = {"alg": "RS256", "typ": "JWT", "kid": "evil", **extra}
    return bearer(mint(ctx.keys.attacker, ctx.tokens.claims(), header=header))


CASES: list[Case] = [
    # J1: alg none in every spelling, empty signature
    *[
        Case(f"J1-{alg}", "alg_not_allowed", partial(unsigned, alg=alg))
        for alg in ("none", "None", "NONE", "nOnE")
    ],
    # J2: HS256 keyed with the issuer's public key in PEM, DER, JWK-JSON text; and an EC PEM
    *[
        Case(f"J2-hs256-{form}", "alg_not_allowed", partial(hmac_with_public_key, form=form))
        for form in ("pem", "der", "jwk", "ec-pem")
    ],
    # J3: algorithm allowed in general but not for the key named by kid
    Case(
        "J3-rs384-on-rs256-key",
        "no_matching_key",
        lambda c: bearer(mint(c.keys.rsa, c.tokens.claims(), alg="RS384")),
    ),
    Case(
        "J3-ps256-on-rs256-key",
        "no_matching_key",
        lambda c: bearer(mint(c.keys.rsa, c.tokens.claims(), alg="PS256")),
    ),
    Case(
        "J3-es256-header-rsa-kid",
        "no_matching_key",
        lambda c: bearer(mint(c.keys.ec, c.tokens.claims(), header={"alg": "ES256", "kid": "rsa-1"})),
    ),
    Case(
        "J3-eddsa-header-ec-kid",
        "no_matching_key",
        lambda c: bearer(mint(c.keys.ed, c.tokens.claims(), header={"alg": "EdDSA", "kid": "ec-1"})),
    ),
    # J4: unknown kid
    Case("J4-unknown-kid", "no_matching_key", lambda c: attacker_with_header(c), fetch_budget=1),
    # J5: hostile kids: map lookup only
    Case("J5-kid-path", "no_matching_key", lambda c: header_token(c, rsa_header(kid="../../dev/null")), 1),
    Case("J5-kid-sql", "no_matching_key", lambda c: header_token(c, rsa_header(kid="' OR 1=1--")), 1),
    Case("J5-kid-10kb", "token_too_large", lambda c: header_token(c, rsa_header(kid="k" * 10_240))),
    Case("J5-kid-300-chars", "bad_kid", lambda c: header_token(c, rsa_header(kid="k" * 300))),
    Case("J5-kid-int", "bad_kid", lambda c: header_token(c, rsa_header(kid=1))),
    Case("J5-kid-list", "bad_kid", lambda c: header_token(c, rsa_header(kid=["rsa-1"]))),
    Case("J5-kid-empty", "bad_kid", lambda c: header_token(c, rsa_header(kid=""))),
    # J6: keys or key URLs embedded in the header are ignored (no outbound request: checked below)
    Case("J6-jwk", "no_matching_key", lambda c: attacker_with_header(c, jwk=c.keys.attacker.public_jwk()), 1),
    Case("J6-jku", "no_matching_key", lambda c: attacker_with_header(c, jku=f"{c.server.base}/attacker"), 1),
    Case("J6-x5u", "no_matching_key", lambda c: attacker_with_header(c, x5u=f"{c.server.base}/attacker"), 1),
    Case("J6-x5c", "no_matching_key", lambda c: attacker_with_header(c, x5c=["MIIBfake"]), 1),
    Case(
        "J6-jwk-with-known-kid",
        "bad_signature",
        lambda c: bearer(
            mint(c.keys.attacker, c.tokens.claims(), header=rsa_header(jwk=c.keys.attacker.public_jwk()))
        ),
    ),
    # J7-J9: times beyond the default 60 s skew
    Case("J7-expired", "expired", lambda c: bearer(c.tokens.token(exp=c.now - 61, iat=c.now - 700))),
    Case("J8-nbf-future", "not_yet_valid", lambda c: bearer(c.tokens.token(nbf=c.now + 61))),
    Case("J9-iat-future", "issued_in_future", lambda c: bearer(c.tokens.token(iat=c.now + 61))),
    # J10: non-numeric / absurd times
    Case("J10-exp-string", "exp_not_numeric", lambda c: bearer(c.tokens.token(exp=str(c.now + 600)))),
    Case("J10-exp-bool", "exp_not_numeric", lambda c: bearer(c.tokens.token(exp=True))),
    Case("J10-exp-null", "exp_not_numeric", lambda c: bearer(c.tokens.token(exp=None))),
    Case("J10-exp-list", "exp_not_numeric", lambda c: bearer(c.tokens.token(exp=[c.now + 600]))),
    Case("J10-exp-nan", "malformed_json", lambda c: raw_claims(c, "exp", "NaN")),
    Case("J10-exp-infinity", "malformed_json", lambda c: raw_claims(c, "exp", "Infinity")),
    Case("J10-exp-1e400", "exp_out_of_range", lambda c: raw_claims(c, "exp", "1e400")),
    Case("J10-exp-huge-int", "exp_out_of_range", lambda c: raw_claims(c, "exp", "9" * 400)),
    Case("J10-exp-negative", "exp_out_of_range", lambda c: bearer(c.tokens.token(exp=-1))),
    Case("J10-nbf-string", "nbf_not_numeric", lambda c: bearer(c.tokens.token(nbf="soon"))),
    Case("J10-iat-1e400", "iat_out_of_range", lambda c: raw_claims(c, "iat", "1e400")),
    # J11: exp required
    Case("J11-no-exp", "exp_missing", lambda c: bearer(c.tokens.token(exp=DELETE))),
    # J13: issuer exact match only
    Case("J13-iss-wrong", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss="https://evil.example"))),
    Case("J13-iss-prefix", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss=c.server.issuer[:-1]))),
    Case("J13-iss-extended", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss=c.server.issuer + "0"))),
    Case(
        "J13-iss-trailing-slash",
        "issuer_mismatch",
        lambda c: bearer(c.tokens.token(iss=c.server.issuer + "/")),
    ),
    Case("J13-iss-case", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss=c.server.issuer.upper()))),
    Case("J13-iss-array", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss=[c.server.issuer]))),
    Case("J13-iss-missing", "issuer_mismatch", lambda c: bearer(c.tokens.token(iss=DELETE))),
    # J14: audience any-of
    Case("J14-aud-wrong", "audience_mismatch", lambda c: bearer(c.tokens.token(aud="other"))),
    Case("J14-aud-array-no-match", "audience_mismatch", lambda c: bearer(c.tokens.token(aud=["x", "y"]))),
    Case("J14-aud-empty-array", "audience_mismatch", lambda c: bearer(c.tokens.token(aud=[]))),
    Case("J14-aud-absent", "audience_mismatch", lambda c: bearer(c.tokens.token(aud=DELETE))),
    Case("J14-aud-number", "audience_mismatch", lambda c: bearer(c.tokens.token(aud=7))),
    Case("J14-aud-array-mixed", "audience_mismatch", lambda c: bearer(c.tokens.token(aud=["igw-test", 1]))),
    # J15: crit is never understood
    Case("J15-crit-unknown", "crit_unsupported", lambda c: header_token(c, rsa_header(crit=["x"], x=1))),
    Case("J15-crit-empty", "crit_unsupported", lambda c: header_token(c, rsa_header(crit=[]))),
    Case("J15-crit-standard", "crit_unsupported", lambda c: header_token(c, rsa_header(crit=["alg"]))),
    # J16: size cap before any parsing
    Case("J16-9kb", "token_too_large", lambda c: bearer(c.tokens.token(pad="p" * 9000))),
    Case("J16-10mb-segment", "token_too_large", lambda c: bearer("eyJ" + "A" * 10_000_000 + ".e.e")),
    # J17: malformed base64url / structure
    Case("J17-padding", "malformed", lambda c: with_segments(c, lambda p: [p[0] + "==", p[1], p[2]])),
    Case("J17-plus-slash", "malformed", lambda c: with_segments(c, lambda p: [p[0], p[1][:-2] + "+/", p[2]])),
    Case(
        "J17-whitespace",
        "malformed",
        lambda c: with_segments(c, lambda p: [p[0], p[1][:5] + "\t" + p[1][5:], p[2]]),
    ),
    Case("J17-non-ascii", "malformed", lambda c: with_segments(c, lambda p: [p[0], p[1] + "é", p[2]])),
    Case("J17-two-segments", "not_compact_jws", lambda c: with_segments(c, lambda p: p[:2])),
    Case("J17-four-segments", "not_compact_jws", lambda c: with_segments(c, lambda p: [*p, p[2]])),
    Case("J17-empty-header", "malformed", lambda c: with_segments(c, lambda p: ["", p[1], p[2]])),
    Case("J17-empty-payload", "malformed", lambda c: with_segments(c, lambda p: [p[0], "", p[2]])),
    Case("J17-empty-signature", "malformed", lambda c: with_segments(c, lambda p: [p[0], p[1], ""])),
    Case(
        "J17-impossible-length", "malformed", lambda c: with_segments(c, lambda p: [p[0], p[1] + "A", p[2]])
    ),
    # one signed token under another spelling (a signature of 256 or 64 bytes ends in a character
    # with 4 unused bits); lax decoding accepted each of its 16 spellings before session s40
    Case(
        "J17-non-canonical-rsa-signature",
        "malformed",
        lambda c: with_segments(c, non_canonical_signature),
    ),
    Case(
        "J17-non-canonical-ec-signature",
        "malformed",
        lambda c: bearer(".".join(non_canonical_signature(mint(c.keys.ec, c.tokens.claims()).split(".")))),
    ),
    # J18: not a JSON object
    Case("J18-header-array", "not_json_object", lambda c: raw_header(c, b'["RS256"]')),
    Case("J18-payload-string", "not_json_object", lambda c: raw_payload(c, b'"claims"')),
    Case("J18-payload-duplicate-keys", "malformed_json", lambda c: raw_payload(c, b'{"iss":"a","iss":"b"}')),
    Case(
        "J18-header-duplicate-alg",
        "malformed_json",
        lambda c: raw_header(c, b'{"alg":"RS256","kid":"rsa-1","alg":"none"}'),
    ),
    Case("J18-invalid-utf8", "malformed_json", lambda c: raw_payload(c, b'{"iss":"\xff\xfe"}')),
    Case(
        "J18-bom",
        "malformed_json",
        lambda c: raw_payload(c, b"\xef\xbb\xbf" + json.dumps(c.tokens.claims()).encode()),
    ),
    Case(
        "J18-utf16",
        "malformed_json",
        lambda c: raw_payload(c, json.dumps(c.tokens.claims()).encode("utf-16")),
    ),
    # J19: nested JWT
    *[
        Case(f"J19-cty-{cty}", "nested_jwt", partial(header_token, header=rsa_header(cty=cty)))
        for cty in ("JWT", "jwt", "application/jwt")
    ],
    # J20: JWE, JWS JSON serialization, compression
    Case("J20-jwe-5-segments", "not_compact_jws", lambda c: bearer("eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d")),
    Case(
        "J20-json-serialization",
        "not_compact_jws",
        lambda c: bearer(
            base64.b64encode(json.dumps({"payload": "e30", "signatures": []}).encode()).decode()
        ),
    ),
    Case("J20-zip", "unsupported_header", lambda c: header_token(c, rsa_header(zip="DEF"))),
    # J21: unencoded payload option
    Case(
        "J21-b64-false-crit",
        "crit_unsupported",
        lambda c: header_token(c, rsa_header(b64=False, crit=["b64"])),
    ),
    Case("J21-b64-false", "unsupported_header", lambda c: header_token(c, rsa_header(b64=False))),
    # J24: more than one credential
    Case("J24-two-authorization-headers", "multiple_authorization_headers", two_headers),
    # J25: scheme handling
    Case("J25-double-space", "not_bearer", lambda c: {"Authorization": f"Bearer  {c.tokens.token()}"}),
    Case("J25-trailing-space", "not_bearer", lambda c: {"Authorization": f"Bearer {c.tokens.token()} "}),
    Case("J25-basic", "not_bearer", lambda c: {"Authorization": "Basic dXNlcjpwYXNz"}),
    Case("J25-scheme-only", "not_bearer", lambda c: {"Authorization": "Bearer"}),
    Case("J25-empty", "not_bearer", lambda c: {"Authorization": ""}),
    Case("J25-missing", "missing_token", lambda c: {}),
    Case("J25-token-in-other-header", "missing_token", lambda c: {"X-Access-Token": c.tokens.token()}),
    # the Anthropic API's credential header (read without Authorization, since session s32): the
    # token itself, verified as a bearer token is, one header, no scheme and no spaces
    Case("K1-two-api-key-headers", "multiple_api_key_headers", two_api_keys),
    Case(
        "K1-api-key-with-scheme", "malformed_api_key", lambda c: {"x-api-key": f"Bearer {c.tokens.token()}"}
    ),
    Case("K1-api-key-trailing-space", "malformed_api_key", lambda c: {"x-api-key": f"{c.tokens.token()} "}),
    Case("K1-api-key-empty", "malformed_api_key", lambda c: {"x-api-key": ""}),
    Case("K1-api-key-forged", "bad_signature", lambda c: {"x-api-key": c.tokens.token()[:-4] + "AAAA"}),
    Case(
        "K1-bad-authorization-beside-a-good-api-key",
        "not_bearer",
        lambda c: {"Authorization": "Basic dXNlcjpwYXNz", "x-api-key": c.tokens.token()},
    ),
    # signature checks on otherwise perfect tokens
    Case(
        "sig-tampered-payload",
        "bad_signature",
        lambda c: with_segments(c, lambda p: [p[0], segment(c.tokens.claims(sub="admin")), p[2]]),
    ),
    # three bytes fewer, the final partial quantum kept: cutting the last four characters left a
    # last character with nonzero unused bits 15 times in 16 (refused as malformed, a flaky case)
    Case(
        "sig-truncated",
        "bad_signature",
        lambda c: with_segments(c, lambda p: [p[0], p[1], p[2][:-6] + p[2][-2:]]),
    ),
    Case(
        "sig-other-key-same-kid",
        "bad_signature",
        lambda c: bearer(mint(c.keys.rsa2, c.tokens.claims(), header=rsa_header())),
    ),
    Case(
        "sig-ec-wrong-length",
        "bad_signature",
        lambda c: bearer(
            ".".join(mint(c.keys.ec, c.tokens.claims()).split(".")[:2]) + "." + b64url(b"\x01" * 63)
        ),
    ),
]


async def assert_denied(guard: SecurityGuard, headers: Any) -> GuardDenied:
    with pytest.raises(GuardDenied) as info:
        await guard.authenticate(headers)
    denied = info.value
    assert denied.status == 401
    assert denied.headers == {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    assert denied.code == "invalid_token"
    return denied


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_catalogue_case_is_refused(
    case: Case, make_guard: GuardMaker, tokens: TokenFactory, keys: Keys, jwks_server: JwksServer
) -> None:
    guard = await make_guard()
    fetches_before = jwks_server.fetches
    ctx = Ctx(tokens=tokens, keys=keys, server=jwks_server)
    denied = await assert_denied(guard, case.build(ctx))
    assert denied.message == GENERIC_MESSAGE, "the reason must not leak to the client"
    assert make_guard.metric("igw_auth_denied_total", {"reason": case.reason}) == 1, case.reason
    assert jwks_server.fetches - fetches_before <= case.fetch_budget
    assert jwks_server.hits.get("/attacker", 0) == 0, "a URL from the token was fetched"
    # the same guard still accepts a good token afterwards (nothing was poisoned)
    principal = await guard.authenticate(bearer(tokens.token()))
    assert principal.authenticated


@pytest.mark.parametrize(
    ("key_name", "alg"),
    [("rsa", "RS256"), ("ec", "ES256"), ("ed", "EdDSA")],
    ids=["RS256", "ES256", "EdDSA"],
)
async def test_valid_tokens_of_each_key_type_are_accepted(
    key_name: str, alg: str, make_guard: GuardMaker, tokens: TokenFactory, keys: Keys
) -> None:
    guard = await make_guard()
    key = getattr(keys, key_name)
    principal = await guard.authenticate(bearer(tokens.token(key)))
    assert principal.authenticated
    assert principal.subject == "user-1"
    assert principal.tenant == "team-a"
    assert principal.forward_headers == {"x-igw-tenant": "team-a"}
    assert make_guard.metric("igw_auth_allowed_total") == 1


async def test_token_without_kid_is_verified_against_keys_of_its_algorithm(
    make_guard: GuardMaker, tokens: TokenFactory, keys: Keys
) -> None:
    guard = await make_guard()
    token = mint(keys.ec, tokens.claims(), header={"alg": "ES256", "typ": "JWT"})
    assert (await guard.authenticate(bearer(token))).authenticated
    forged = mint(keys.attacker, tokens.claims(), header={"alg": "RS256"})
    denied = await assert_denied(guard, bearer(forged))
    assert denied.message == GENERIC_MESSAGE


async def test_a_token_in_x_api_key_is_verified_as_a_bearer_token_and_never_forwarded(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    """The Anthropic SDK (and Claude Code's ``ANTHROPIC_API_KEY``) sends its key as ``x-api-key``."""
    guard = await make_guard()
    principal = await guard.authenticate({"x-api-key": tokens.token()})
    assert (principal.authenticated, principal.tenant) == (True, "team-a")
    assert {"authorization", "x-api-key"} <= guard.stripped_request_headers
    forwarding = await make_guard(extensions={"authorization": {"forwardAuthorization": True}})
    assert "x-api-key" not in forwarding.stripped_request_headers


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_j25_scheme_name_is_case_insensitive(
    scheme: str, make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    """RFC 9110 §11.1: auth-scheme names are case-insensitive (Envoy is stricter; we follow the RFC)."""
    guard = await make_guard()
    assert (await guard.authenticate({"Authorization": f"{scheme} {tokens.token()}"})).authenticated


async def test_j12_lifetime_cap(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard(extensions={"authorization": {"maxTokenLifetime": "24h"}})
    now = int(tokens.clock())
    assert (await guard.authenticate(bearer(tokens.token(exp=now + 86_400)))).authenticated
    await assert_denied(guard, bearer(tokens.token(exp=now + 86_400 + 61)))
    assert make_guard.metric("igw_auth_denied_total", {"reason": "lifetime_too_long"}) == 1


async def test_j23_typ_enforcement(make_guard: GuardMaker, tokens: TokenFactory, keys: Keys) -> None:
    guard = await make_guard(extensions={"authorization": {"allowedTokenTypes": ["at+jwt"]}})
    claims = tokens.claims()
    for typ in ("at+jwt", "application/at+JWT"):
        token = mint(keys.rsa, claims, header={"alg": "RS256", "kid": "rsa-1", "typ": typ})
        assert (await guard.authenticate(bearer(token))).authenticated
    for header in ({"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}, {"alg": "RS256", "kid": "rsa-1"}):
        await assert_denied(guard, bearer(mint(keys.rsa, claims, header=header)))
    assert make_guard.metric("igw_auth_denied_total", {"reason": "typ_not_allowed"}) == 2


async def test_j22_tokens_signed_by_rejected_jwks_keys_fail(
    make_guard: GuardMaker, tokens: TokenFactory, keys: Keys, jwks_server: JwksServer
) -> None:
    weak = keys.weak_rsa.public_jwk()
    hmac_key = {"kty": "oct", "kid": "hmac", "k": b64url(b"secret-secret-secret-secret-1234"), "alg": "HS256"}
    jwks_server.set_keys(keys.rsa, extra=[weak, hmac_key])
    guard = await make_guard()
    await assert_denied(guard, bearer(tokens.token(keys.weak_rsa)))
    hs = f"{segment({'alg': 'HS256', 'kid': 'hmac'})}.{segment(tokens.claims())}"
    mac = hmac.new(b"secret-secret-secret-secret-1234", hs.encode(), "sha256").digest()
    await assert_denied(guard, bearer(f"{hs}.{b64url(mac)}"))
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated


async def test_reason_is_shown_only_with_debug_logging(
    make_guard: GuardMaker, tokens: TokenFactory, caplog: pytest.LogCaptureFixture
) -> None:
    guard = await make_guard()
    with caplog.at_level(logging.DEBUG, logger="igw.security"):
        denied = await assert_denied(guard, bearer(tokens.token(aud="other")))
    assert "audience_mismatch" in denied.message
