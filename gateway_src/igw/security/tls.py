"""TLS termination at the gateway from certificate/key files (as cert-manager mounts them).

Policy: TLS 1.2 minimum (``minVersion: TLSv1.3`` to require 1.3), TLS 1.3 negotiated whenever
the client offers it, and for TLS 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM,
ChaCha20-Poly1305) - forward secrecy, no CBC, no RSA key transport, no SHA-1 MACs. Compression
and renegotiation are off; the server's cipher order wins.

cert-manager renews certificates by replacing the Secret's files in place (an atomic symlink
swap), so :class:`CertificateReloader` polls the two files' *contents* and, when they change,
loads the new pair into the live context: new handshakes use the new certificate, established
connections are untouched. A pair that fails to load (half-written, mismatched key) is logged
and ignored; the previous certificate stays in service.

The key must be unencrypted (cert-manager writes it so): there is nobody to type a passphrase. Left
to itself OpenSSL asks for one on the controlling terminal, which blocked the event loop - and with
it every request - when ``igw serve`` ran in a terminal, and otherwise failed with a bare
``[Errno 22] Invalid argument``; :func:`_no_passphrase` turns both into an error that says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from igw.security.settings import TlsTerminationSettings

log = logging.getLogger("igw.security.tls")

TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!SHA1:!DSS:!PSK:!SRP"
_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class EncryptedKeyError(ValueError):
    """The key file holds a passphrase-protected key, which the gateway cannot unlock."""


def _load_pair(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
    """``context.load_cert_chain`` that never asks for a passphrase (see :func:`_no_passphrase`)."""

    def _no_passphrase() -> str:
        # OpenSSL calls this only for an encrypted key; without it, it prompts on the terminal.
        raise EncryptedKeyError(
            f"the private key in {key_file} is encrypted (passphrase-protected); give an unencrypted "
            "PEM key, as cert-manager writes it"
        )

    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file), password=_no_passphrase)


def build_server_ssl_context(
    *, cert_file: str | Path, key_file: str | Path, min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
) -> ssl.SSLContext:
    """A server context with our TLS policy and the given certificate chain and key loaded.

    Raises ``OSError``/``ssl.SSLError`` when the files are missing or do not form a pair, and
    :class:`EncryptedKeyError` (a ``ValueError``) when the key is passphrase-protected.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[min_version]
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= (
        ssl.OP_NO_COMPRESSION
        | ssl.OP_CIPHER_SERVER_PREFERENCE
        | ssl.OP_SINGLE_ECDH_USE
        | ssl.OP_NO_RENEGOTIATION
        | ssl.OP_NO_TICKET
    )
    context.set_alpn_protocols(["http/1.1"])
    _load_pair(context, Path(cert_file), Path(key_file))
    return context


class CertificateReloader:
    """Reloads ``context``'s certificate when the files' contents change (poll every ``interval_s``)."""

    def __init__(
        self, *, context: ssl.SSLContext, cert_file: str | Path, key_file: str | Path, interval_s: float
    ) -> None:
        self._context = context
        self._cert_file = Path(cert_file)
        self._key_file = Path(key_file)
        self._interval_s = interval_s
        self._fingerprint = self._read_fingerprint()
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.last_error: str | None = None

    def _read_fingerprint(self) -> bytes | None:
        try:
            digest = hashlib.sha256(self._cert_file.read_bytes())
            digest.update(b"\0")
            digest.update(self._key_file.read_bytes())
        except OSError:
            return None
        return digest.digest()

    def check_now(self) -> bool:
        """Reload if the files changed and the new pair loads; returns whether a reload happened."""
        fingerprint = self._read_fingerprint()
        if fingerprint is None or fingerprint == self._fingerprint:
            return False
        try:
            # Load into a scratch context first so a bad pair never touches the live one.
            scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            _load_pair(scratch, self._cert_file, self._key_file)
            _load_pair(self._context, self._cert_file, self._key_file)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; EncryptedKeyError
            if self.last_error != str(exc):
                log.error("TLS certificate reload failed (%s); keeping the previous certificate", exc)
            self.last_error = str(exc)
            return False
        self._fingerprint = fingerprint
        self.reloads += 1
        self.last_error = None
        log.info("TLS certificate reloaded from %s", self._cert_file)
        return True

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="igw-tls-reload")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.check_now()


def build_server_tls(
    extensions: Mapping[str, Any],
) -> tuple[ssl.SSLContext, CertificateReloader] | None:
    """From ``spec.extensions.tlsTermination``: the context and its reloader, or ``None`` (plain HTTP)."""
    settings = TlsTerminationSettings.from_mapping(extensions.get("tlsTermination"))
    if settings is None:
        return None
    context = build_server_ssl_context(
        cert_file=settings.cert_file, key_file=settings.key_file, min_version=settings.min_version
    )
    reloader = CertificateReloader(
        context=context,
        cert_file=settings.cert_file,
        key_file=settings.key_file,
        interval_s=settings.reload_interval_s,
    )
    return context, reloader
