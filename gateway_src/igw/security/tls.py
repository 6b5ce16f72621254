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

Every load works from one read of the two files (a :class:`PairSnapshot`): the reload's fingerprint,
its scratch load and its live load see the same bytes, handed to OpenSSL through private in-memory
files (:meth:`PairSnapshot.files`). Before session s42 each of the three read the files anew, and a
certificate replaced between the scratch load and the live one (a writer that rewrites ``tls.crt``
then ``tls.key``) made the live load fail half-way - OpenSSL had already taken the new certificate
and dropped the key - so every new handshake failed while the log said the previous certificate was
kept. The served certificate's validity is watched by :mod:`igw.security.tls_validity`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from prometheus_client import CollectorRegistry

from igw.errors import IgwSecurityError
from igw.security.settings import TlsTerminationSettings
from igw.security.tls_validity import CertificateValidity, ExpiryCollector, ValidityWatch

log = logging.getLogger("igw.security.tls")

TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!SHA1:!DSS:!PSK:!SRP"
_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class EncryptedKeyError(IgwSecurityError, ValueError):
    """The key file holds a passphrase-protected key, which the gateway cannot unlock (a
    :class:`ValueError` too, which the reloader and ``igw serve``'s start catch)."""


@dataclass(frozen=True, slots=True)
class PairSnapshot:
    """The certificate chain and key files' contents, read once: what one load uses throughout."""

    cert_file: Path
    key_file: Path
    cert: bytes
    key: bytes

    @classmethod
    def read(cls, cert_file: Path, key_file: Path) -> PairSnapshot:
        """Both files' bytes (raises ``OSError`` as reading does)."""
        return cls(cert_file, key_file, cert_file.read_bytes(), key_file.read_bytes())

    @property
    def fingerprint(self) -> bytes:
        digest = hashlib.sha256(self.cert)
        digest.update(b"\0")
        digest.update(self.key)
        return digest.digest()

    @contextlib.contextmanager
    def files(self) -> Iterator[tuple[Path, Path]]:
        """Paths OpenSSL can open that hold exactly these bytes, for as long as the block runs.

        ``load_cert_chain`` takes only paths. On Linux they are anonymous in-memory files
        (``memfd_create``, read through ``/proc/self/fd``): the key never touches a disk and a
        read-only root file system (the chart's pods) is no obstacle. Elsewhere: files in a private
        temporary directory (0700, files 0600), removed afterwards."""
        if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
            fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("igw-tls-crt", "igw-tls-key")]
            try:
                for fd, data in zip(fds, (self.cert, self.key), strict=True):
                    os.write(fd, data)
                yield Path(f"/proc/self/fd/{fds[0]}"), Path(f"/proc/self/fd/{fds[1]}")
            finally:
                for fd in fds:
                    os.close(fd)
            return
        with tempfile.TemporaryDirectory(prefix="igw-tls-") as folder:
            paths = (Path(folder) / "tls.crt", Path(folder) / "tls.key")
            for path, data in zip(paths, (self.cert, self.key), strict=True):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            yield paths


def _load_pair(context: ssl.SSLContext, pair: PairSnapshot) -> None:
    """``context.load_cert_chain`` from ``pair``'s bytes that never asks for a passphrase (see
    :func:`_no_passphrase`); messages name the configured files, not the in-memory copies."""
    key_file = pair.key_file

    def _no_passphrase() -> str:
        # OpenSSL calls this only for an encrypted key; without it, it prompts on the terminal.
        raise EncryptedKeyError(
            f"the private key in {key_file} is encrypted (passphrase-protected); give an unencrypted "
            "PEM key, as cert-manager writes it"
        )

    with pair.files() as (cert_copy, key_copy):
        context.load_cert_chain(certfile=str(cert_copy), keyfile=str(key_copy), password=_no_passphrase)


def build_server_ssl_context(
    *,
    cert_file: str | Path,
    key_file: str | Path,
    min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2",
    pair: PairSnapshot | None = None,
) -> ssl.SSLContext:
    """A server context with our TLS policy and the given certificate chain and key loaded (from
    ``pair`` when given: the bytes the caller already read).

    Raises ``OSError``/``ssl.SSLError`` when the files are missing or do not form a pair, and
    :class:`EncryptedKeyError` (a ``ValueError``) when the key is passphrase-protected.
    """
    if pair is None:
        pair = PairSnapshot.read(Path(cert_file), Path(key_file))
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
    _load_pair(context, pair)
    return context


class CertificateReloader:
    """Reloads ``context``'s certificate when the files' contents change (poll every ``interval_s``).

    ``loaded``: the pair ``context`` was built from (:func:`build_server_tls` passes it, so a change
    between that load and this constructor is still picked up); without it the files are read now.
    ``clock``: wall-clock seconds, for the served certificate's validity (injected by tests)."""

    def __init__(
        self,
        *,
        context: ssl.SSLContext,
        cert_file: str | Path,
        key_file: str | Path,
        interval_s: float,
        loaded: PairSnapshot | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._context = context
        self._cert_file = Path(cert_file)
        self._key_file = Path(key_file)
        self._interval_s = interval_s
        if loaded is None:
            loaded = self._read()
        self._fingerprint = None if loaded is None else loaded.fingerprint
        self.validity = ValidityWatch(clock=clock)
        """The served certificate's validity: logged when it is bad, read by :class:`ExpiryCollector`."""
        if loaded is not None:
            self.validity.loaded(CertificateValidity.from_pem(loaded.cert), str(self._cert_file))
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.last_error: str | None = None

    def _read(self) -> PairSnapshot | None:
        try:
            return PairSnapshot.read(self._cert_file, self._key_file)
        except OSError:
            return None

    def check_now(self) -> bool:
        """Reload if the files changed and the new pair loads; returns whether a reload happened."""
        pair = self._read()
        if pair is None or pair.fingerprint == self._fingerprint:
            self.validity.check(str(self._cert_file))
            return False
        try:
            # Load into a scratch context first so a bad pair never touches the live one; both loads
            # use the same bytes, so the live one cannot meet a pair the scratch one did not.
            scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            _load_pair(scratch, pair)
            _load_pair(self._context, pair)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; EncryptedKeyError
            if self.last_error != str(exc):
                log.error("TLS certificate reload failed (%s); keeping the previous certificate", exc)
            self.last_error = str(exc)
            self.validity.check(str(self._cert_file))
            return False
        self._fingerprint = pair.fingerprint
        self.reloads += 1
        self.last_error = None
        log.info("TLS certificate reloaded from %s", self._cert_file)
        self.validity.loaded(CertificateValidity.from_pem(pair.cert), str(self._cert_file))
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
    extensions: Mapping[str, Any], *, registry: CollectorRegistry | None = None
) -> tuple[ssl.SSLContext, CertificateReloader] | None:
    """From ``spec.extensions.tlsTermination``: the context and its reloader, or ``None`` (plain HTTP).

    With ``registry``, ``igw_tls_certificate_expiry_timestamp_seconds`` is registered on it (declared
    without a sample when TLS termination is off)."""
    settings = TlsTerminationSettings.from_mapping(extensions.get("tlsTermination"))
    if settings is None:
        if registry is not None:
            registry.register(ExpiryCollector(None))
        return None
    pair = PairSnapshot.read(Path(settings.cert_file), Path(settings.key_file))
    context = build_server_ssl_context(
        cert_file=settings.cert_file, key_file=settings.key_file, min_version=settings.min_version, pair=pair
    )
    reloader = CertificateReloader(
        context=context,
        cert_file=settings.cert_file,
        key_file=settings.key_file,
        interval_s=settings.reload_interval_s,
        loaded=pair,
    )
    if registry is not None:
        registry.register(ExpiryCollector(reloader.validity))
    return context, reloader
