"""TLS termination: version floor, cipher policy, TLS 1.3 preference and certificate reload, checked
with real handshakes against a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import signal
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import uvloop
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from igw.gateway.serving import ServerLimits, serve_app
from igw.security.tls import (
    CertificateReloader,
    EncryptedKeyError,
    build_server_ssl_context,
    build_server_tls,
)


def write_pair(ca: trustme.CA, folder: Path, *names: str) -> tuple[Path, Path]:
    cert = ca.issue_cert(*(names or ("127.0.0.1",)))
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key_file.write_bytes(cert.private_key_pem.bytes())
    return cert_file, key_file


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


class Server:
    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", _ok)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def handshake(self, client: ssl.SSLContext) -> tuple[str | None, str | None, bytes | None]:
        """(TLS version, cipher, peer certificate DER) of a fresh connection."""
        _reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=client, server_hostname="127.0.0.1"
        )
        try:
            obj = writer.get_extra_info("ssl_object")
            cipher = obj.cipher()
            return obj.version(), cipher[0] if cipher else None, obj.getpeercert(binary_form=True)
        finally:
            writer.close()
            await writer.wait_closed()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """An RSA CA, so RSA key-exchange cipher suites are possible at all (and must be refused)."""
    return trustme.CA(key_type=trustme.KeyType.RSA)


@pytest.fixture
async def tls_server(tmp_path: Path, ca: trustme.CA) -> AsyncIterator[tuple[Server, Path, Path]]:
    cert_file, key_file = write_pair(ca, tmp_path)
    server = Server(build_server_ssl_context(cert_file=cert_file, key_file=key_file))
    await server.start()
    yield server, cert_file, key_file
    assert server.runner is not None
    await server.runner.cleanup()


def client(
    ca: trustme.CA, *, max_version: ssl.TLSVersion | None = None, ciphers: str | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    if max_version is not None:
        ctx.maximum_version = max_version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    return ctx


async def test_tls13_is_preferred(tls_server: tuple[Server, Path, Path], ca: trustme.CA) -> None:
    server, _, _ = tls_server
    version, _, _ = await server.handshake(client(ca))
    assert version == "TLSv1.3"


async def test_tls12_uses_only_ecdhe_aead(tls_server: tuple[Server, Path, Path], ca: trustme.CA) -> None:
    server, _, _ = tls_server
    version, cipher, _ = await server.handshake(client(ca, max_version=ssl.TLSVersion.TLSv1_2))
    assert version == "TLSv1.2"
    assert cipher is not None
    assert cipher.startswith("ECDHE-")
    assert "GCM" in cipher or "CHACHA20" in cipher


@pytest.mark.parametrize(
    "ciphers",
    ["ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA"],
    ids=["ecdhe-cbc-sha1"],
)
async def test_weak_tls12_ciphers_are_refused(
    ciphers: str, tls_server: tuple[Server, Path, Path], ca: trustme.CA
) -> None:
    server, _, _ = tls_server
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await server.handshake(
            client(ca, max_version=ssl.TLSVersion.TLSv1_2, ciphers=ciphers + ":@SECLEVEL=0")
        )


def test_server_offers_only_ecdhe_aead_for_tls12(tls_server: tuple[Server, Path, Path]) -> None:
    server, _, _ = tls_server
    tls12 = [c for c in server.context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12
    for cipher in tls12:
        assert cipher["kea"] == "kx-ecdhe", cipher["name"]
        assert cipher["aead"], cipher["name"]


async def test_tls11_is_refused(tls_server: tuple[Server, Path, Path], ca: trustme.CA) -> None:
    server, _, _ = tls_server
    with pytest.warns(DeprecationWarning, match="TLSv1_1"):
        old = client(ca, max_version=ssl.TLSVersion.TLSv1_1)
    with contextlib.suppress(ssl.SSLError):
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await server.handshake(old)


async def test_min_version_13(tmp_path: Path, ca: trustme.CA) -> None:
    cert_file, key_file = write_pair(ca, tmp_path)
    server = Server(build_server_ssl_context(cert_file=cert_file, key_file=key_file, min_version="TLSv1.3"))
    await server.start()
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await server.handshake(client(ca, max_version=ssl.TLSVersion.TLSv1_2))
        assert (await server.handshake(client(ca)))[0] == "TLSv1.3"
    finally:
        assert server.runner is not None
        await server.runner.cleanup()


async def test_certificate_reload_when_files_change(
    tls_server: tuple[Server, Path, Path], ca: trustme.CA, tmp_path: Path
) -> None:
    server, cert_file, key_file = tls_server
    reloader = CertificateReloader(
        context=server.context, cert_file=cert_file, key_file=key_file, interval_s=0.05
    )
    _, _, before = await server.handshake(client(ca))
    assert not reloader.check_now()  # unchanged files: nothing to do
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new_cert, new_key = write_pair(ca, new_dir)
    cert_file.write_bytes(new_cert.read_bytes())
    key_file.write_bytes(new_key.read_bytes())
    await reloader.start()
    try:
        for _ in range(100):
            if reloader.reloads:
                break
            await asyncio.sleep(0.02)
    finally:
        await reloader.close()
    assert reloader.reloads == 1
    _, _, after = await server.handshake(client(ca))
    assert after != before
    assert after is not None
    assert after == ssl.PEM_cert_to_DER_cert(
        new_cert.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    )


async def test_bad_new_pair_keeps_the_old_certificate(
    tls_server: tuple[Server, Path, Path], ca: trustme.CA, tmp_path: Path
) -> None:
    server, cert_file, key_file = tls_server
    reloader = CertificateReloader(
        context=server.context, cert_file=cert_file, key_file=key_file, interval_s=1
    )
    _, _, before = await server.handshake(client(ca))
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = write_pair(ca, other)
    key_file.write_bytes(other_key.read_bytes())  # key no longer matches the certificate
    assert not reloader.check_now()
    assert reloader.last_error is not None
    _, _, after = await server.handshake(client(ca))
    assert after == before


def test_build_server_tls_from_extensions(tmp_path: Path, ca: trustme.CA) -> None:
    assert build_server_tls({}) is None
    cert_file, key_file = write_pair(ca, tmp_path)
    built = build_server_tls(
        {"tlsTermination": {"certFile": str(cert_file), "keyFile": str(key_file), "minVersion": "TLSv1.3"}}
    )
    assert built is not None
    context, _ = built
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(FileNotFoundError):
        build_server_tls(
            {"tlsTermination": {"certFile": str(tmp_path / "missing"), "keyFile": str(key_file)}}
        )


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(b"", id="nothing"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="half a ClientHello"),
    ],
)
async def test_a_tls_handshake_that_does_not_finish_is_ended_at_the_header_timeout(
    tmp_path: Path, ca: trustme.CA, sent: bytes
) -> None:
    """A connection still in its TLS handshake has no handler yet (no head timer, not counted for
    the connection cap's eviction): ``igw serve`` ends it at ``headerTimeout`` - asyncio's own 60 s
    applied before session s39 - while a client that completes its handshake is served."""
    cert_file, key_file = write_pair(ca, tmp_path)
    context = build_server_ssl_context(cert_file=cert_file, key_file=key_file)
    app = web.Application()
    app.router.add_get("/", _ok)
    limits = ServerLimits(header_timeout_s=0.5)
    async with serve_app(app, host="127.0.0.1", port=0, ssl_context=context, limits=limits) as url:
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(sent)
            assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # closed, well before 60 s
        finally:
            writer.close()
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusted)
        try:
            writer.write(b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), timeout=10)).startswith(b"HTTP/1.1 200 ")
        finally:
            writer.close()


async def _eof_within(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """Whether the server ended the connection within ``timeout_s``."""
    try:
        return await asyncio.wait_for(reader.read(), timeout=timeout_s) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_connections_still_in_their_tls_handshake_count_against_the_connection_cap(
    tmp_path: Path, ca: trustme.CA, loop: str
) -> None:
    """A TLS connection counts for ``maxConnections`` from its accept, not from the end of its
    handshake: before session s40 the loop ran the handshake out of the server's sight, and 40 TCP
    connections that sent nothing (or half a ClientHello) to a TLS listener capped at 5 were all held
    until the handshake timeout. Now the oldest such connections are closed to keep the count at the
    cap, well before the timeout, and a client that completes its handshake is still served (it takes
    the place of one); on asyncio and on uvloop (which ``igw serve`` runs)."""
    cert_file, key_file = write_pair(ca, tmp_path)
    context = build_server_ssl_context(cert_file=cert_file, key_file=key_file)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    cap, opened = 5, 40

    async def scenario() -> tuple[int, int, bytes]:
        app = web.Application()
        app.router.add_get("/", _ok)
        limits = ServerLimits(header_timeout_s=30, max_connections=cap)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=context, limits=limits) as url:
            port = int(url.rsplit(":", 1)[1])
            stalled = []
            for n in range(opened):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                if n % 2:
                    writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # half a ClientHello
                stalled.append((reader, writer))
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=trusted, server_hostname="127.0.0.1"
                )
                writer.write(b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
                answer = await asyncio.wait_for(reader.read(), timeout=10)
                writer.close()
                ended = await asyncio.gather(*(_eof_within(r, 2.0) for r, _ in stalled))
                return sum(ended), len(stalled) - sum(ended), answer
            finally:
                for _, w in stalled:
                    w.close()

    run = uvloop.run if loop == "uvloop" else asyncio.run
    closed, still_open, answer = run(scenario())
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
    assert still_open <= cap, (closed, still_open)  # held: 40 of 40 before session s40
    assert closed >= opened - cap


def _encrypt_key(key_file: Path) -> None:
    """Rewrite ``key_file``'s key passphrase-protected (as ``openssl pkcs8 -topk8 -v2 aes256`` does)."""
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )


def test_an_encrypted_key_is_refused_at_start_with_a_message_that_says_so(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """A passphrase-protected key stops ``igw serve`` (``LaunchError`` from this ``ValueError``) with
    a message naming the file and the cause: before session s42 it was ``[Errno 22] Invalid argument``."""
    cert_file, key_file = write_pair(ca, tmp_path)
    _encrypt_key(key_file)
    with pytest.raises(EncryptedKeyError, match=r"tls\.key is encrypted \(passphrase-protected\)"):
        build_server_tls({"tlsTermination": {"certFile": str(cert_file), "keyFile": str(key_file)}})


def test_a_renewed_encrypted_key_never_asks_for_a_passphrase_on_the_terminal(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """A reload that meets a passphrase-protected key keeps the old certificate and says why, also
    when ``igw serve`` runs in a terminal: before session s42 OpenSSL prompted ``Enter PEM pass
    phrase:`` there and the reload - on the event loop - waited for an answer, and every request with
    it. The reload runs in a child with a pseudo-terminal as its controlling terminal."""
    cert_file, key_file = write_pair(ca, tmp_path)
    context = build_server_ssl_context(cert_file=cert_file, key_file=key_file)
    reloader = CertificateReloader(context=context, cert_file=cert_file, key_file=key_file, interval_s=1)
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    new_cert, new_key = write_pair(ca, renewed)
    _encrypt_key(new_key)
    cert_file.write_bytes(new_cert.read_bytes())
    key_file.write_bytes(new_key.read_bytes())
    pid, terminal = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pseudo-terminal
        try:
            reloaded = reloader.check_now()
            os.write(1, f"reloaded={reloaded} error={reloader.last_error}\n".encode())
        finally:
            os._exit(0)
    seen = b""
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 0.1)
            if not ready:
                if b"pass phrase" in seen:
                    break  # prompting, and waiting for an answer
                continue
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # EIO: the child exited and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(terminal)
    assert b"pass phrase" not in seen, seen
    assert b"reloaded=False error=the private key in" in seen, seen
    assert b"is encrypted (passphrase-protected)" in seen, seen


async def test_a_certificate_replaced_between_the_scratch_and_the_live_load_never_breaks_the_live_context(
    tls_server: tuple[Server, Path, Path], ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload loads the scratch and the live context from one read of the files. Before session s42
    each load read them again, and a writer replacing ``tls.crt`` (then ``tls.key``) between the two
    left the live context half-loaded - the new certificate, no key - so every new handshake failed
    (``ConnectionResetError``) while the log said the previous certificate was kept."""
    server, cert_file, key_file = tls_server
    reloader = CertificateReloader(
        context=server.context, cert_file=cert_file, key_file=key_file, interval_s=1
    )
    renewed, later = tmp_path / "renewed", tmp_path / "later"
    renewed.mkdir()
    later.mkdir()
    new_cert, new_key = write_pair(ca, renewed)
    later_cert, _ = write_pair(ca, later)
    cert_file.write_bytes(new_cert.read_bytes())
    key_file.write_bytes(new_key.read_bytes())
    real = ssl.SSLContext.load_cert_chain
    loads: list[str] = []

    def load_then_swap(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        real(context, *args, **kwargs)
        loads.append("loaded")
        if len(loads) == 1:  # a writer mid-update: the next certificate is written, its key not yet
            cert_file.write_bytes(later_cert.read_bytes())

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", load_then_swap)
    reloaded = reloader.check_now()
    _, _, served = await server.handshake(client(ca))  # ConnectionResetError before session s42
    assert reloaded, reloader.last_error  # the pair read first: consistent, loaded
    assert len(loads) == 2
    assert served == ssl.PEM_cert_to_DER_cert(new_cert.read_text().split("\n-----BEGIN")[0] + "\n")
    assert not reloader.check_now()  # now a certificate without its key: refused, nothing touched
    assert reloader.last_error is not None
    assert (await server.handshake(client(ca)))[2] == served
