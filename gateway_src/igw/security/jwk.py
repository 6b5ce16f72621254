"""JWK Set parsing: each usable key bound to exactly one algorithm its type allows (RFC 8725 §3.1).

A key that is unsafe or ambiguous is skipped and logged, never used (attack case J22): HMAC
(``oct``) keys, RSA moduli under 2048 bits or bad exponents, keys carrying private material,
``use`` other than ``sig``, an ``alg`` that does not fit the key type or is not allowed, curves
we do not verify, malformed members, and every key whose ``kid`` appears more than once.
The key objects are parsed by PyJWT/cryptography (which check that EC points lie on the curve).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from igw.errors import IgwSecurityError
from igw.security.token import MAX_KID_CHARS

log = logging.getLogger("igw.security.jwks")

MIN_RSA_BITS: Final = 2048
_RSA_ALGS: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGS_BY_CURVE: Final = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_OKP_CURVES: Final = frozenset({"Ed25519", "Ed448"})
_PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey


class KeySkipped(IgwSecurityError, ValueError):
    """One JWK is not usable; the reason is logged and the rest of the set is kept."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str | None
    algorithms: frozenset[str]
    """The only algorithm this key may verify (a set of one: :func:`parse_jwk`)."""
    key: PublicKey


@dataclass(frozen=True, slots=True)
class KeySet:
    by_kid: Mapping[str, VerificationKey] = field(default_factory=dict)
    without_kid: tuple[VerificationKey, ...] = ()
    skipped: tuple[str, ...] = ()
    """``"<index>: <reason>"`` for each JWK that was not used."""
    _every_by_alg: Mapping[str, tuple[VerificationKey, ...]] = field(init=False, repr=False, compare=False)
    _without_kid_by_alg: Mapping[str, tuple[VerificationKey, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # indexed once per fetch: a look-up for a token naming no key costs no scan of up to maxKeys keys
        object.__setattr__(self, "_every_by_alg", _by_alg((*self.by_kid.values(), *self.without_kid)))
        object.__setattr__(self, "_without_kid_by_alg", _by_alg(self.without_kid))

    def __len__(self) -> int:
        return len(self.by_kid) + len(self.without_kid)

    def candidates(self, *, kid: str | None, alg: str) -> tuple[VerificationKey, ...]:
        """Keys that may verify a token with this ``kid``/``alg``, each bound to ``alg``, in JWKS order:
        for a ``kid`` some key carries, that key alone; for a ``kid`` none carries, the keys
        published without one; for no ``kid``, every key. The last two are Envoy's matching
        (jwt_verify_lib skips a key only when both it and the token name a kid and they differ):
        before session s40 a token with a ``kid`` never matched a key published without one, so
        a JWKS written without kids refused every token of an issuer that stamps them, which
        Envoy (and so AWS's gateway) accepts. Unlike Envoy, a token whose ``kid`` names a key is
        not tried against the keys without one when that key fails: one check, not one per key."""
        if kid is not None:
            key = self.by_kid.get(kid)
            if key is not None:
                return (key,) if alg in key.algorithms else ()
            return self._without_kid_by_alg.get(alg, ())
        return self._every_by_alg.get(alg, ())

    def crowded(self, max_keys_per_token: int) -> dict[str, tuple[int, int]]:
        """Algorithm -> (its keys, those of them published without ``kid``) for each algorithm
        with more than ``max_keys_per_token`` keys: a token of it naming no key (no ``kid``, or, when
        the second number is over the cap too, a ``kid`` no key carries) has more candidates than
        the verifier tries, and is refused ``kid_required`` (:mod:`igw.security.verifier`)."""
        return {
            alg: (len(keys), len(self._without_kid_by_alg.get(alg, ())))
            for alg, keys in sorted(self._every_by_alg.items())
            if len(keys) > max_keys_per_token
        }


def _by_alg(keys: tuple[VerificationKey, ...]) -> dict[str, tuple[VerificationKey, ...]]:
    """``keys`` grouped by each algorithm they may verify, in their order."""
    grouped: dict[str, list[VerificationKey]] = {}
    for key in keys:
        for alg in sorted(key.algorithms):
            grouped.setdefault(alg, []).append(key)
    return {alg: tuple(group) for alg, group in grouped.items()}


def parse_jwks(document: Any, *, allowed_algorithms: Sequence[str], max_keys: int) -> KeySet:
    """Parse a JWKS document; raises ``ValueError`` only when the document as a whole is unusable."""
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise ValueError('JWKS document is not an object with a "keys" array')
    raw_keys: list[Any] = document["keys"]
    if len(raw_keys) > max_keys:
        raise ValueError(f"JWKS has {len(raw_keys)} keys, more than the cap of {max_keys}")
    allowed = tuple(allowed_algorithms)
    parsed: list[VerificationKey] = []
    skipped: list[str] = []
    for index, raw in enumerate(raw_keys):
        try:
            parsed.append(parse_jwk(raw, allowed_algorithms=allowed))
        except KeySkipped as exc:
            skipped.append(f"{index}: {exc}")
        except (TypeError, ValueError, LookupError, AttributeError) as exc:
            # a member of a shape no check above foresaw: that key is unusable, the rest of the
            # set still serves (before session s39 an "alg" given as a list raised TypeError out of
            # the fetch, so one odd key made the whole set unusable and every request refetched it)
            skipped.append(f"{index}: malformed key ({type(exc).__name__})")
    kid_counts: dict[str, int] = {}
    for key in parsed:
        if key.kid is not None:
            kid_counts[key.kid] = kid_counts.get(key.kid, 0) + 1
    by_kid: dict[str, VerificationKey] = {}
    without_kid: list[VerificationKey] = []
    for key in parsed:
        if key.kid is None:
            without_kid.append(key)
        elif kid_counts[key.kid] > 1:
            skipped.append(f"kid {key.kid!r}: duplicate kid, every copy ignored")
        else:
            by_kid[key.kid] = key
    for line in skipped:
        log.warning("JWKS key skipped: %s", line)
    return KeySet(by_kid=by_kid, without_kid=tuple(without_kid), skipped=tuple(skipped))


def still_listed(keys: KeySet, document: Any) -> tuple[KeySet, tuple[str, ...]]:
    """``keys`` less those a JWKS ``document`` no longer publishes, and the ``kid`` of each key dropped
    because the document reuses its ``kid`` for other key material. A key with a ``kid`` stays while
    every JWK of the document carrying that ``kid`` has its public value; a key without one stays while
    some JWK has its public value. Public values are compared as numbers (a modulus written with a
    leading zero byte is the same key).

    For a fetched document with no usable key (a failed fetch, so the last good keys keep serving):
    the issuer withdrawing a key is still honoured at once, as a successful fetch would, instead of
    the withdrawn key verifying for up to ``maxStale`` (24 h; before session s48). A ``kid`` naming
    new material means the old key was rotated out, however unusable the new one is to us (RSA
    under 2048 bits, another key type, ``use: enc``): before session s49 the old key kept verifying
    because a JWK still carried its ``kid``. A document whose ``keys`` is not an array says
    nothing, and ``keys`` comes back whole."""
    listed = document.get("keys") if isinstance(document, Mapping) else None
    if not isinstance(listed, list):
        return keys, ()
    jwks = [jwk for jwk in listed if isinstance(jwk, Mapping)]
    by_kid: dict[str, set[tuple[object, ...]]] = {}
    for jwk in jwks:
        kid = jwk.get("kid")
        if isinstance(kid, str):
            by_kid.setdefault(kid, set()).add(_members(jwk))
    materials = {_members(jwk) for jwk in jwks}
    kept: dict[str, VerificationKey] = {}
    replaced: list[str] = []
    for kid, key in keys.by_kid.items():
        published = by_kid.get(kid)
        if published is None:
            continue
        if published == {_members(_public_jwk(key.key))}:
            kept[kid] = key
        else:
            replaced.append(kid)
    return (
        KeySet(
            by_kid=kept,
            without_kid=tuple(key for key in keys.without_kid if _members(_public_jwk(key.key)) in materials),
            skipped=keys.skipped,
        ),
        tuple(replaced),
    )


def same_keys(a: KeySet, b: KeySet) -> bool:
    """Whether two key sets verify exactly the same tokens: the same keys (by ``kid``, algorithms and
    public value, DER SubjectPublicKeyInfo) and as many of each. A refetch of an unchanged JWKS
    then keeps the verdicts cached against it (:attr:`JwksCache.generation
    <igw.security.jwks.JwksCache.generation>` stays): before session s48 every successful fetch
    emptied every verified-token cache, so an unknown ``kid`` (anyone may send one) forced a
    signature check of every active token once per ``unknownKidCooldown``."""
    return len(a) == len(b) and _canonical(a) == _canonical(b)


def _canonical(keys: KeySet) -> list[tuple[str, tuple[str, ...], bytes]]:
    return sorted(
        (key.kid or "", tuple(sorted(key.algorithms)), _spki(key.key))
        for key in (*keys.by_kid.values(), *keys.without_kid)
    )


def _spki(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _public_jwk(key: PublicKey) -> Mapping[str, Any]:
    if isinstance(key, rsa.RSAPublicKey):
        return RSAAlgorithm.to_jwk(key, as_dict=True)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return ECAlgorithm.to_jwk(key, as_dict=True)
    return OKPAlgorithm.to_jwk(key, as_dict=True)


def _members(jwk: Mapping[str, Any]) -> tuple[object, ...]:
    """A public key's identifying JWK members (RFC 7638's, for a thumbprint), RSA and EC values as
    the integers they encode: a value that is no base64url string stays as it is (equal to no key's)."""
    kty = jwk.get("kty")
    numeric = kty in ("RSA", "EC")
    return (
        kty,
        jwk.get("crv"),
        *(_number(jwk.get(name)) if numeric else jwk.get(name) for name in ("n", "e", "x", "y")),
    )


def _number(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")
    except ValueError:  # binascii.Error is a ValueError
        return value


def parse_jwk(raw: Any, *, allowed_algorithms: Sequence[str]) -> VerificationKey:
    """One JWK as a key bound to exactly one algorithm: its ``alg`` when it states one (which must
    fit its type and be allowed), else the first of ``allowed_algorithms`` (ordered) its type fits."""
    if not isinstance(raw, Mapping):
        raise KeySkipped("not a JSON object")
    kid = raw.get("kid")
    if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS):
        raise KeySkipped("kid is not a short non-empty string")
    use = raw.get("use")
    if use is not None and use != "sig":
        raise KeySkipped(f"use is {use!r}, not 'sig'")
    key_ops = raw.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        raise KeySkipped("key_ops does not include 'verify'")
    if _PRIVATE_MEMBERS & raw.keys():
        raise KeySkipped("key carries private or symmetric key material")
    kty = raw.get("kty")
    key: PublicKey
    if kty == "RSA":
        compatible, key = _RSA_ALGS, _rsa_key(raw)
    elif kty == "EC":
        compatible, key = _ec_key(raw)
    elif kty == "OKP":
        compatible, key = _okp_key(raw)
    else:
        raise KeySkipped(f"kty {kty!r} is not an asymmetric signing key type")
    stated = raw.get("alg")
    if stated is not None:
        if not isinstance(stated, str) or stated not in compatible:
            raise KeySkipped(f"alg {stated!r} does not fit a {kty} key")
        compatible = frozenset({stated})
    # One algorithm per key (RFC 8725 section 3.1): a key without ``alg`` (Entra ID publishes none)
    # is bound to the first allowed algorithm its type fits, in ``authorization.algorithms`` order.
    # Before session s48 an RSA key without ``alg`` verified all six RS*/PS* algorithms.
    usable = next((alg for alg in allowed_algorithms if alg in compatible), None)
    if usable is None:
        raise KeySkipped("none of the key's algorithms is allowed")
    return VerificationKey(kid=kid, algorithms=frozenset({usable}), key=key)


def _rsa_key(raw: Mapping[str, Any]) -> rsa.RSAPublicKey:
    try:
        key = RSAAlgorithm.from_jwk(dict(raw))
    except Exception as exc:  # PyJWT raises several types for malformed members
        raise KeySkipped(f"malformed RSA key: {type(exc).__name__}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise KeySkipped("not an RSA public key")
    if key.key_size < MIN_RSA_BITS:
        raise KeySkipped(f"RSA modulus is {key.key_size} bits, under {MIN_RSA_BITS}")
    exponent = key.public_numbers().e
    if exponent < 3 or exponent % 2 == 0:
        raise KeySkipped(f"RSA public exponent {exponent} is unsafe")
    return key


def _ec_key(raw: Mapping[str, Any]) -> tuple[frozenset[str], ec.EllipticCurvePublicKey]:
    alg = _EC_ALGS_BY_CURVE.get(str(raw.get("crv")))
    if alg is None:
        raise KeySkipped(f"EC curve {raw.get('crv')!r} is not supported")
    try:
        key = ECAlgorithm.from_jwk(dict(raw))
    except Exception as exc:
        raise KeySkipped(f"malformed EC key: {type(exc).__name__}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise KeySkipped("not an EC public key")
    return frozenset({alg}), key


def _okp_key(
    raw: Mapping[str, Any],
) -> tuple[frozenset[str], ed25519.Ed25519PublicKey | ed448.Ed448PublicKey]:
    crv = raw.get("crv")
    if not isinstance(crv, str) or crv not in _OKP_CURVES:
        raise KeySkipped(f"OKP curve {raw.get('crv')!r} is not a signature curve")
    try:
        key = OKPAlgorithm.from_jwk(dict(raw))
    except Exception as exc:
        raise KeySkipped(f"malformed OKP key: {type(exc).__name__}") from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        raise KeySkipped("not an EdDSA public key")
    return frozenset({"EdDSA"}), key
