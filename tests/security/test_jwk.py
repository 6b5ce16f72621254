"""J22: JWKS members that must be skipped (never used), and per-key algorithm binding (J3)."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, x25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from igw.security.jwk import KeySkipped, parse_jwk, parse_jwks
from igw.security.settings import DEFAULT_ALGORITHMS
from tests.security.helpers import Keys, b64url

ALLOWED = DEFAULT_ALGORITHMS


def rsa_jwk(bits: int = 2048, e: int = 65537, **extra: Any) -> dict[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key()
    jwk = dict(RSAAlgorithm.to_jwk(key, as_dict=True))
    if e != 65537:
        jwk["e"] = b64url(e.to_bytes((e.bit_length() + 7) // 8 or 1, "big"))
    jwk.update(kid="k", **extra)
    return jwk


@pytest.fixture(scope="module")
def good_rsa() -> dict[str, Any]:
    return rsa_jwk()


BAD_KEYS: dict[str, Any] = {
    "rsa-1024": lambda good: rsa_jwk(1024),
    "rsa-e-1": lambda good: {**good, "e": b64url(b"\x01")},
    "rsa-e-even": lambda good: {**good, "e": b64url(b"\x01\x00\x00")},
    "oct-hmac": lambda good: {"kty": "oct", "kid": "h", "k": b64url(b"0123456789abcdef0123456789abcdef")},
    "use-enc": lambda good: {**good, "use": "enc"},
    "key-ops-sign-only": lambda good: {**good, "key_ops": ["sign"]},
    "private-member": lambda good: {**good, "d": "AQAB"},
    "alg-mismatch-es256-on-rsa": lambda good: {**good, "alg": "ES256"},
    "alg-hs256-on-rsa": lambda good: {**good, "alg": "HS256"},
    "alg-none": lambda good: {**good, "alg": "none"},
    "alg-not-a-string": lambda good: {**good, "alg": ["RS256"]},
    "malformed-n": lambda good: {**good, "n": "!!!"},
    "missing-e": lambda good: {k: v for k, v in good.items() if k != "e"},
    "not-an-object": lambda good: ["RSA"],
    "kid-not-string": lambda good: {**good, "kid": 1},
    "kty-unknown": lambda good: {**good, "kty": "XYZ"},
    "ec-secp256k1": lambda good: {
        **dict(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256K1()).public_key(), as_dict=True)),
        "kid": "k1",
    },
    "ec-point-off-curve": lambda good: {
        **dict(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key(), as_dict=True)),
        "y": b64url(b"\x01" * 32),
    },
    "okp-x25519": lambda good: {
        "kty": "OKP",
        "crv": "X25519",
        "x": b64url(x25519.X25519PrivateKey.generate().public_key().public_bytes_raw()),
    },
    "okp-crv-not-a-string": lambda good: {
        "kty": "OKP",
        "crv": ["Ed25519"],
        "x": b64url(ed25519.Ed25519PrivateKey.generate().public_key().public_bytes_raw()),
    },
    "okp-bad-length": lambda good: {"kty": "OKP", "crv": "Ed25519", "x": b64url(b"\x01" * 31)},
}


@pytest.mark.parametrize("name", list(BAD_KEYS), ids=[f"J22-{n}" for n in BAD_KEYS])
def test_j22_unusable_keys_are_skipped(name: str, good_rsa: dict[str, Any]) -> None:
    with pytest.raises(KeySkipped):
        parse_jwk(BAD_KEYS[name](good_rsa), allowed_algorithms=ALLOWED)
    keyset = parse_jwks(
        {"keys": [BAD_KEYS[name](good_rsa), {**good_rsa, "kid": "good"}]},
        allowed_algorithms=ALLOWED,
        max_keys=10,
    )
    assert list(keyset.by_kid) == ["good"]
    assert len(keyset.skipped) == 1


def test_j22_duplicate_kids_are_all_ignored(keys: Keys) -> None:
    a = keys.rsa.public_jwk()
    b = {**keys.rsa2.public_jwk(), "kid": a["kid"]}
    keyset = parse_jwks({"keys": [a, b, keys.ec.public_jwk()]}, allowed_algorithms=ALLOWED, max_keys=10)
    assert list(keyset.by_kid) == ["ec-1"]
    assert any("duplicate kid" in line for line in keyset.skipped)


@pytest.mark.parametrize(
    "document",
    [[], {"keys": {}}, {"nokeys": []}, "text", None],
    ids=["list", "keys-object", "no-keys", "string", "null"],
)
def test_jwks_document_shape(document: Any) -> None:
    with pytest.raises(ValueError, match="keys"):
        parse_jwks(document, allowed_algorithms=ALLOWED, max_keys=10)


def test_jwks_key_count_cap(good_rsa: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="more than the cap"):
        parse_jwks({"keys": [good_rsa] * 11}, allowed_algorithms=ALLOWED, max_keys=10)


def test_algorithm_binding_by_key_type(keys: Keys) -> None:
    rsa_key = parse_jwk(keys.rsa.public_jwk(with_alg=False), allowed_algorithms=ALLOWED)
    # RFC 8725 section 3.1: one algorithm per key. A key published without alg takes the first
    # allowed one its type fits (before s48 an RSA key verified all six RS*/PS* algorithms)
    assert rsa_key.algorithms == {"RS256"}
    ps_first = parse_jwk(keys.rsa.public_jwk(with_alg=False), allowed_algorithms=("ES256", "PS384", "RS256"))
    assert ps_first.algorithms == {"PS384"}
    stated = parse_jwk(keys.rsa.public_jwk(), allowed_algorithms=ALLOWED)
    assert stated.algorithms == {"RS256"}
    assert parse_jwk(keys.ec.public_jwk(with_alg=False), allowed_algorithms=ALLOWED).algorithms == {"ES256"}
    assert parse_jwk(keys.ed.public_jwk(), allowed_algorithms=ALLOWED).algorithms == {"EdDSA"}
    ed448_jwk = {
        **dict(OKPAlgorithm.to_jwk(ed448.Ed448PrivateKey.generate().public_key(), as_dict=True)),
        "kid": "x",
    }
    assert parse_jwk(ed448_jwk, allowed_algorithms=ALLOWED).algorithms == {"EdDSA"}
    only_ps = parse_jwk(keys.rsa.public_jwk(with_alg=False), allowed_algorithms=("PS256",))
    assert only_ps.algorithms == {"PS256"}
    with pytest.raises(KeySkipped, match="allowed"):
        parse_jwk(keys.ec.public_jwk(), allowed_algorithms=("RS256",))
