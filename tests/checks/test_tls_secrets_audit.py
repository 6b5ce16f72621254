"""IGW-AU105: the certificate and key of each kubernetes.io/tls Secret in the source.

Until session s50 no check read a TLS Secret: a Secret holding an expired certificate, a 1024-bit RSA
key, a key of another certificate or the CA first passed ``igw audit --manifests`` without a word
(IGW-AU103/104 read cert-manager Certificate objects only).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from igw.checks.framework import CheckContext, run_check
from igw.checks.model import Command, Result, Severity, Status
from igw.checks.registry import select
from igw.checks.sources.manifests import inventory_from_documents
from tests.checks.helpers import NOW, cli, write_docs

Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
HOST = "igw.example.com"
CA_KEY = ec.generate_private_key(ec.SECP256R1())
LEAF_KEY = ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _cert(
    key: Key,
    subject: str,
    *,
    signer: Key | None = None,
    issuer: str | None = None,
    ca: bool = False,
    names: tuple[str, ...] = (HOST,),
    days: tuple[int, int] = (-1, 90),
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer or subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW + timedelta(days=days[0]))
        .not_valid_after(NOW + timedelta(days=days[1]))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        san = x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
        builder = builder.add_extension(san, critical=False)
    signing = signer or key
    return builder.sign(signing, None if isinstance(signing, ed25519.Ed25519PrivateKey) else hashes.SHA256())


CA = _cert(CA_KEY, "Probe CA", ca=True, names=())


def _leaf(key: Key = LEAF_KEY, **kwargs: Any) -> x509.Certificate:
    return _cert(key, HOST, signer=CA_KEY, issuer="Probe CA", **kwargs)


def _pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _secret(crt: bytes, key: bytes, name: str = "gw-tls") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": "ml"},
        "data": {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()},
    }


def _ingress(hosts: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "gw", "namespace": "ml"},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": hosts, "secretName": "gw-tls"}]},
    }


def _audit(*docs: dict[str, Any]) -> Result:
    [check] = select(Command.AUDIT, only=["IGW-AU105"])
    inventory = inventory_from_documents(list(docs), source="t")
    [result] = run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))
    return result


def _rsa(bits: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(65537, bits)


def _own(key: Key, between: bytes = b"") -> dict[str, Any]:
    """A Secret of a certificate for ``key`` (then the CA, after ``between``) and ``key``."""
    return _secret(_pem(_leaf(key)) + between + _pem(CA), _key_pem(key))


Case = Callable[[], dict[str, Any]]
CASES: list[tuple[str, Case, Status, Severity, str]] = [
    ("expired", lambda: _secret(_pem(_leaf(days=(-90, -1)), CA), _key_pem(LEAF_KEY)), Status.FAIL,
     Severity.CRITICAL, "expired at 2026-11-28T12:00:00+00:00"),
    ("not-yet-valid", lambda: _secret(_pem(_leaf(days=(2, 90)), CA), _key_pem(LEAF_KEY)), Status.FAIL,
     Severity.HIGH, "not valid before 2026-12-01"),
    ("expiring", lambda: _secret(_pem(_leaf(days=(-80, 5)), CA), _key_pem(LEAF_KEY)), Status.WARN,
     Severity.MEDIUM, "expires in 5.0 days"),
    ("self-signed", lambda: _secret(_pem(_cert(LEAF_KEY, HOST)), _key_pem(LEAF_KEY)), Status.FAIL,
     Severity.MEDIUM, "self-signed (CN=igw.example.com)"),
    ("wrong-order", lambda: _secret(_pem(CA, _leaf()), _key_pem(LEAF_KEY)), Status.FAIL, Severity.HIGH,
     "chain in the wrong order: the first certificate (CN=Probe CA) is a CA"),
    ("key-of-another-cert", lambda: _secret(_pem(_leaf(), CA), _key_pem(CA_KEY)), Status.FAIL,
     Severity.HIGH, "tls.key is not the key of the certificate (CN=igw.example.com)"),
    ("rsa-1024", lambda: _own(_rsa(1024)), Status.FAIL,
     Severity.HIGH, "RSA key of 1024 bits (at least 2048)"),
    ("ec-p192", lambda: _own(ec.generate_private_key(ec.SECP192R1())), Status.FAIL, Severity.HIGH,
     "EC key on secp192r1 (192 bits; P-256 or stronger)"),
    ("not-pem", lambda: _secret(b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
     _key_pem(LEAF_KEY)), Status.FAIL, Severity.HIGH, "tls.crt does not parse as PEM certificates"),
    ("huge", lambda: _secret(_pem(_leaf()) * 2000, _key_pem(LEAF_KEY)), Status.FAIL, Severity.HIGH,
     "(not parsed; a chain is a few KiB)"),
    ("ed25519", lambda: _own(ed25519.Ed25519PrivateKey.generate()), Status.PASS, Severity.HIGH,
     "CN=igw.example.com, valid until 2027-02-27"),
    ("rsa-2048-garbage-between-blocks", lambda: _own(_rsa(2048), b"\nnot PEM \x00 text\n"), Status.PASS,
     Severity.HIGH, "valid until"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("secret", "status", "severity", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_tls_secret_findings(secret: Case, status: Status, severity: Severity, message: str) -> None:
    result = _audit(secret())
    assert (result.status, result.severity) == (status, severity), result.message
    assert message in result.message
    assert result.resource == "Secret ml/gw-tls"


def test_a_host_the_certificate_does_not_name_fails() -> None:
    secret = _secret(_pem(_leaf(names=("other.example.com",)), CA), _key_pem(LEAF_KEY))
    result = _audit(secret, _ingress([HOST]))
    assert (result.status, result.severity) == (Status.FAIL, Severity.HIGH)
    assert result.message == "igw.example.com served but not in the certificate's names ['other.example.com']"
    assert _audit(_secret(_pem(_leaf(), CA), _key_pem(LEAF_KEY)), _ingress([HOST])).status is Status.PASS


def test_hosts_that_are_not_a_list_are_not_read_letter_by_letter() -> None:
    ingress = _ingress([])
    ingress["spec"]["tls"][0]["hosts"] = HOST  # a YAML slip: a string, not a list
    assert _audit(_secret(_pem(_leaf(), CA), _key_pem(LEAF_KEY)), ingress).status is Status.PASS


def test_no_secret_data_reaches_any_report(tmp_path: Any) -> None:
    key = _key_pem(_rsa(1024))
    docs = [_secret(_pem(_leaf(), CA), key), _secret(b"-----BEGIN CERTIFICATE-----\nx\n", key, name="bad")]
    folder = write_docs(tmp_path / "m", docs)
    secrets = [docs[0]["data"]["tls.key"][40:80], key.decode().splitlines()[1][:40]]
    for output in ("table", "json", "sarif", "junit"):
        code, out = cli("audit", "--manifests", str(folder), "-o", output, "--check", "IGW-AU105")
        assert code == 1
        assert "Secret ml/bad" in out
        for secret in secrets:
            assert secret not in out, output


def test_a_live_scan_does_not_read_secrets() -> None:
    from igw.checks.sources.live_kube import LISTERS

    assert "Secret" not in {lister.kind for lister in LISTERS}
