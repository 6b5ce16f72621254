"""IGW-AU105: the certificate and key in each ``kubernetes.io/tls`` Secret of the source are usable and sound.

IGW-AU103/104 read cert-manager ``Certificate`` objects only; a TLS Secret written by hand (or by another
tool) was never looked at, so an expired certificate, a 1024-bit RSA key, a key belonging to another
certificate or a chain with the CA first passed without a word. This check parses ``tls.crt`` and
``tls.key`` (``data``, base64, or ``stringData``) and judges what a client or the server would meet:

- no parsable certificate, a key that does not parse or does not belong to the server certificate
  (the server cannot load the pair) → HIGH;
- the server certificate (the first that is not a CA) expired → CRITICAL, not yet valid → HIGH,
  expiring within ``--cert-warn-days`` → WARN MEDIUM;
- an RSA key under 2048 bits or an EC key on a curve under 256 bits → HIGH;
- the first certificate a CA while a later one is not (the chain written in the wrong order: servers
  send the first certificate as their own) → HIGH; another certificate not issued by the next → MEDIUM;
- a self-signed server certificate (clients trust it only when pinned) → MEDIUM;
- an Ingress ``spec.tls`` host naming the Secret that no subject alternative name covers → HIGH.

Messages name the Secret, subjects, names and dates only, never the Secret's data. Secrets are read
from manifests and cdk.out only: a live scan does not list the cluster's Secrets (an audit should not
need read access to every credential), so there the check is skipped.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from igw.checks.audit._hosts import listed_names
from igw.checks.audit.certificate_names import covers
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.k8s import namespace_of, ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU105",
    title="TLS Secrets hold a valid, strong certificate and its key",
    command=Command.AUDIT,
    category="tls",
    severity=Severity.HIGH,
    description="A kubernetes.io/tls Secret whose certificate is expired, weak, self-signed, out of order, "
    "for other hosts or not matched by its key breaks or weakens TLS for every client.",
    remediation="Reissue the certificate (cert-manager Certificate preferred): RSA >= 2048 bits or "
    "EC P-256 or stronger, leaf first then intermediates, names covering every served host, and the "
    "key generated with it.",
)

MAX_CERT_BYTES: Final = 1 << 20
"""Larger ``tls.crt`` values are not parsed: a serving chain is a few KiB."""

MIN_RSA_BITS: Final = 2048
MIN_EC_BITS: Final = 256

_PEM_CERT: Final = b"-----BEGIN CERTIFICATE-----"
EXPIRES_IN: Final = "expires in"
"""The one problem reported as a WARN (the certificate still works): the message's prefix."""


def _field(secret: Mapping[str, Any], key: str) -> bytes | None:
    """``key`` of the Secret, from ``stringData`` (as written) or ``data`` (base64); ``None`` when absent
    or not valid base64."""
    string_data = secret.get("stringData")
    if isinstance(string_data, Mapping) and isinstance(string_data.get(key), str):
        return str(string_data[key]).encode("utf-8", "replace")
    data = secret.get("data")
    if isinstance(data, Mapping) and isinstance(data.get(key), str):
        try:
            return base64.b64decode(str(data[key]), validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def _is_tls(secret: Mapping[str, Any]) -> bool:
    if secret.get("type") == "kubernetes.io/tls":
        return True
    return any(
        isinstance(section, Mapping) and "tls.crt" in section
        for section in (secret.get("data"), secret.get("stringData"))
    )


def _subject(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string() or "(empty subject)"


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (x509.ExtensionNotFound, ValueError):
        return False


def _dns_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (x509.ExtensionNotFound, ValueError):
        return []
    return [str(name) for name in san.get_values_for_type(x509.DNSName)]


def _key_problem(key: Any) -> str | None:
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        return f"RSA key of {key.key_size} bits (at least {MIN_RSA_BITS})"
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.key_size < MIN_EC_BITS:
        return f"EC key on {key.curve.name} ({key.curve.key_size} bits; P-256 or stronger)"
    return None


def _public_bytes(key: Any) -> bytes:
    return bytes(
        key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _chain_problems(chain: list[x509.Certificate]) -> list[tuple[Severity, str]]:
    if len(chain) > 1 and _is_ca(chain[0]) and not all(_is_ca(c) for c in chain[1:]):
        return [
            (
                Severity.HIGH,
                f"chain in the wrong order: the first certificate ({_subject(chain[0])}) is a CA; "
                "the server's own certificate must come first, then its issuers",
            )
        ]
    for index, (child, parent) in enumerate(itertools.pairwise(chain), start=1):
        if child.issuer != parent.subject:
            return [
                (
                    Severity.MEDIUM,
                    f"chain out of order: certificate {index + 1} ({_subject(parent)}) did not issue "
                    f"certificate {index} (issuer {child.issuer.rfc4514_string()})",
                )
            ]
    return []


def _validity_problems(leaf: x509.Certificate, now: datetime, warn: timedelta) -> list[tuple[Severity, str]]:
    not_after, not_before = leaf.not_valid_after_utc, leaf.not_valid_before_utc
    if not_after <= now:
        return [(Severity.CRITICAL, f"expired at {not_after.isoformat()}")]
    if not_before > now:
        return [(Severity.HIGH, f"not valid before {not_before.isoformat()}")]
    if not_after - now < warn:
        days = (not_after - now).total_seconds() / 86400
        return [(Severity.MEDIUM, f"{EXPIRES_IN} {days:.1f} days ({not_after.isoformat()})")]
    return []


def _problems(
    secret: Mapping[str, Any], hosts: list[str], now: datetime, warn: timedelta
) -> tuple[list[tuple[Severity, str]], str]:
    """The Secret's problems (severity, message) and, when there are none, what passed."""
    crt = _field(secret, "tls.crt")
    if crt is None or _PEM_CERT not in crt:
        return [(Severity.HIGH, "tls.crt holds no PEM certificate")], ""
    if len(crt) > MAX_CERT_BYTES:
        return [(Severity.HIGH, f"tls.crt is {len(crt)} bytes (not parsed; a chain is a few KiB)")], ""
    try:
        chain = x509.load_pem_x509_certificates(crt)
    except ValueError:
        return [(Severity.HIGH, "tls.crt does not parse as PEM certificates")], ""
    # Written CA first, the server certificate is the first that is not a CA: the rest is judged on it.
    leaf = next((c for c in chain if not _is_ca(c)), chain[0])
    problems = _validity_problems(leaf, now, warn)
    key_problem = _key_problem(leaf.public_key())
    if key_problem:
        problems.append((Severity.HIGH, key_problem))
    problems.extend(_chain_problems(chain))
    if leaf.issuer == leaf.subject and not _is_ca(leaf):
        problems.append((Severity.MEDIUM, f"self-signed ({_subject(leaf)}): clients trust it only if pinned"))
    key_pem = _field(secret, "tls.key")
    if key_pem is not None:
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            problems.append((Severity.HIGH, "tls.key does not parse as an unencrypted PEM private key"))
        else:
            if _public_bytes(key.public_key()) != _public_bytes(leaf.public_key()):
                problems.append(
                    (Severity.HIGH, f"tls.key is not the key of the certificate ({_subject(leaf)})")
                )
    names = _dns_names(leaf)
    uncovered = [h for h in hosts if not any(covers(n, h) for n in names)]
    if uncovered:
        problems.append(
            (Severity.HIGH, f"{', '.join(uncovered)} served but not in the certificate's names {names}")
        )
    return problems, f"{_subject(leaf)}, valid until {leaf.not_valid_after_utc.isoformat()}"


def _served_hosts(ingresses: list[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    hosts: dict[tuple[str, str], list[str]] = {}
    for ingress in ingresses:
        for entry in spec(ingress).get("tls") or []:
            if isinstance(entry, Mapping) and entry.get("secretName"):
                key = (namespace_of(ingress), str(entry["secretName"]))
                hosts.setdefault(key, []).extend(listed_names(entry.get("hosts")))
    return hosts


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    secrets = need(ctx.inventory.kube.of("Secret"))
    ingresses = ctx.inventory.kube.of("Ingress")
    served = _served_hosts(ingresses if isinstance(ingresses, list) else [])
    now = ctx.clock()
    warn = timedelta(days=ctx.options.certificate_warn_days)
    for secret in secrets:
        if not _is_tls(secret):
            continue
        metadata = secret.get("metadata")
        name = str(metadata.get("name")) if isinstance(metadata, Mapping) else ""
        hosts = served.get((namespace_of(secret), name), [])
        problems, summary = _problems(secret, hosts, now, warn)
        if not problems:
            yield r.passed(ref(secret), summary)
            continue
        worst = max((s for s, _ in problems), key=lambda s: s.rank)
        message = "; ".join(m for _, m in problems)
        if len(problems) == 1 and message.startswith(EXPIRES_IN):
            yield r.warn(ref(secret), message, severity=worst)
        else:
            yield r.fail(ref(secret), message, severity=worst)


CHECK = FunctionCheck(META, _run)
