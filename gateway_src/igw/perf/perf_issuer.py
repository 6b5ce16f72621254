"""A token issuer for the load benchmarks: the gateway under test checks a real JWT on every request.

Issue 16's targets are measured "with auth and full scoring on". :class:`PerfIssuer` makes that
possible on one machine without an identity provider: an RSA-2048 key (RS256, what Cognito and most
IdPs sign with), its JWKS served over HTTPS on loopback by a certificate from a throw-away CA (the
gateway fetches keys only over HTTPS and trusts the CA through ``SSL_CERT_FILE``), and one signed token
that every request of the run carries, as a client reusing its access token does. The gateway therefore
pays the whole authentication path of a real deployment: the ``Authorization`` header read, the
verified-token cache looked up, the claims' expiry checked, the principal and its metrics recorded.

The JWKS server is a ``http.server`` thread: it answers a handful of requests per run (start-up and
the cache's refreshes), so its cost is not on any measured path.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import ssl
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

AUDIENCE: Final = "igw-perf"
KEY_ID: Final = "igw-perf-1"
TOKEN_LIFETIME_S: Final = 4 * 3600
"""Longer than any benchmark run, so no request meets an expired token."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _loopback_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1 it signed: the CA's, the certificate's and its key's paths."""
    now = datetime.datetime.now(datetime.UTC)
    valid_from, valid_to = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("igw perf CA"))
        .issuer_name(_name("igw perf CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = (
        directory / "perf-ca.pem",
        directory / "jwks-cert.pem",
        directory / "jwks-key.pem",
    )
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_path, cert_path, key_path


class _JwksHandler(http.server.BaseHTTPRequestHandler):
    """``GET /jwks``: the issuer's key set; anything else 404."""

    body: bytes = b""

    def do_GET(self) -> None:
        found = self.path == "/jwks"
        payload = self.body if found else b"{}"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the benchmark's output is its table."""


class PerfIssuer:
    """An issuer with its JWKS on ``https://127.0.0.1:<port>/jwks`` while the context is open.

    ``auth_spec()`` is the gateway document's ``spec.auth``, ``ca_path`` the file ``SSL_CERT_FILE``
    must name for the gateway to trust the JWKS endpoint, ``token`` the bearer token every request sends.
    """

    def __init__(self, directory: Path) -> None:
        self.ca_path, cert_path, key_path = _loopback_tls(directory)
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        jwk.update({"kid": KEY_ID, "use": "sig", "alg": "RS256"})
        handler = type("JwksHandler", (_JwksHandler,), {"body": json.dumps({"keys": [jwk]}).encode()})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.issuer = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="perf-jwks", daemon=True)
        now = int(time.time())
        self.token = jwt.encode(
            {
                "iss": self.issuer, "aud": AUDIENCE, "sub": "perf-client", "tenant": "perf",
                "iat": now, "nbf": now - 60, "exp": now + TOKEN_LIFETIME_S,
            },
            self._key,
            algorithm="RS256",
            headers={"kid": KEY_ID},
        )  # fmt: skip

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    def auth_spec(self) -> dict[str, Any]:
        provider = {"name": "perf-idp", "issuer": self.issuer, "remoteJWKS": {"uri": self.jwks_uri}}
        return {"jwt": {"provider": {**provider, "audiences": [AUDIENCE]}}}

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def __enter__(self) -> PerfIssuer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
