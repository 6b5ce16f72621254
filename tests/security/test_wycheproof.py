"""A2: Project Wycheproof's JSON Web Signature vectors through our JWS layer.

The production path minus JWT claims (Wycheproof payloads are not JWTs): strict compact-JWS
parsing (:func:`parse_jws`), the JWK parsed and bound to its algorithms (:func:`parse_jwks`),
the key chosen by ``kid``/``alg`` and the signature checked (:func:`verify_signature`).

Every ``invalid`` vector must be refused and every ``valid`` one accepted, except where our policy
is deliberately stricter than plain JWS (each listed with its reason below).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from jwt.algorithms import get_default_algorithms

from igw.security.jwk import parse_jwks
from igw.security.settings import DEFAULT_ALGORITHMS
from igw.security.token import TokenRejected, parse_jws
from igw.security.verifier import verify_signature

VECTORS = Path(__file__).parent / "data" / "wycheproof_json_web_signature_test.json"


def stricter_than_jws(group: Mapping[str, Any], test: Mapping[str, Any]) -> str | None:
    """Why a Wycheproof-``valid`` vector is refused by design, or ``None``."""
    key = group.get("public") or group.get("private") or {}
    header_alg = json.loads(base64.urlsafe_b64decode(test["jws"].split(".")[0] + "==")).get("alg")
    if key.get("kty") == "oct":
        return "HMAC: a gateway verifying an issuer's tokens never accepts symmetric algorithms"
    if key.get("alg") == "ES521":
        return 'the JWK states alg "ES521", not a registered JWS name (RFC 7518 calls P-521 ES512)'
    if key.get("alg") and key["alg"] != header_alg:
        return "RFC 8725 §3.1: a key is used only with the algorithm its JWK states"
    if test["comment"] == "emptyPayload":
        return "a JWT payload is a JSON object, never empty: empty segments are refused"
    return None


def load_cases() -> list[Any]:
    data = json.loads(VECTORS.read_text())
    cases = []
    for group in data["testGroups"]:
        for test in group["tests"]:
            cases.append(
                pytest.param(group, test, id=f"tc{test['tcId']}-{group['comment']}-{test['comment']}")
            )
    return cases


def accepted(group: Mapping[str, Any], jws: str) -> bool:
    public = group.get("public")
    if not public:
        return False  # symmetric groups: we hold no key they could verify with
    keys = parse_jwks({"keys": [public]}, allowed_algorithms=DEFAULT_ALGORITHMS, max_keys=10)
    try:
        parsed = parse_jws(jws, max_bytes=65536, algorithms=DEFAULT_ALGORITHMS)
    except TokenRejected:
        return False
    algorithm = get_default_algorithms()[parsed.alg]
    return any(
        verify_signature(algorithm, key.key, parsed.signing_input, parsed.signature)
        for key in keys.candidates(kid=parsed.kid, alg=parsed.alg)
    )


@pytest.mark.parametrize(("group", "test"), load_cases())
def test_a2_wycheproof_jws_vector(group: Mapping[str, Any], test: Mapping[str, Any]) -> None:
    verdict = accepted(group, test["jws"])
    if test["result"] == "invalid":
        assert not verdict, "an invalid vector was accepted"
        return
    reason = stricter_than_jws(group, test)
    if reason is None:
        assert verdict, "a valid vector was refused"
    else:
        assert not verdict, reason


def test_vectors_cover_the_key_types_we_accept() -> None:
    """The exemptions stay narrow: most valid asymmetric vectors must be accepted outright."""
    data = json.loads(VECTORS.read_text())
    valid = [(g, t) for g in data["testGroups"] for t in g["tests"] if t["result"] == "valid"]
    exempt = [t["tcId"] for g, t in valid if stricter_than_jws(g, t)]
    accepted_valid = [t["tcId"] for g, t in valid if accepted(g, t["jws"])]
    assert len(accepted_valid) == len(valid) - len(exempt)
    # of 46 valid vectors: 26 accepted; exempt: 10 HMAC, 6 empty payloads, 2 alg-binding, 2 "ES521" JWKs
    assert (len(valid), len(accepted_valid)) == (46, 26)
    algs = {(g.get("public") or {}).get("alg") for g in data["testGroups"]}
    assert {"RS256", "PS256", "ES256"} <= algs
    assert data["numberOfTests"] == sum(len(g["tests"]) for g in data["testGroups"])
