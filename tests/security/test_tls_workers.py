"""TLS termination in an ``igw serve --workers 2`` group, real processes on loopback: every worker
serves the configured certificate, and each picks up a renewed one (cert-manager rewrites the files)
on its own within the reload interval - no worker keeps serving the old certificate."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from pathlib import Path

import trustme

from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import gateway_doc, write_config
from tests.security.test_tls import write_pair


async def _worker_and_certificate(url: str, client: ssl.SSLContext) -> tuple[int, bytes] | None:
    """(worker index, certificate DER) of a new TLS connection's ``/readyz``; ``None`` until ready."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    try:
        reader, writer = await asyncio.open_connection(host, int(port), ssl=client, server_hostname=host)
    except OSError:
        return None
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return None
    return int(json.loads(body)["worker"]["index"]), der


async def _certificates_per_worker(url: str, client: ssl.SSLContext, until: float) -> dict[int, bytes]:
    """New connections until both workers answered (the kernel hashes each to one of them)."""
    seen: dict[int, bytes] = {}
    while len(seen) < 2 and time.monotonic() < until:
        found = await _worker_and_certificate(url, client)
        if found is None:
            await asyncio.sleep(0.05)
            continue
        seen[found[0]] = found[1]
    return seen


async def test_both_workers_serve_the_certificate_and_both_pick_up_its_renewal(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert_file, key_file = write_pair(ca, tmp_path)
    first = cert_file.read_bytes()
    doc = gateway_doc()
    doc["spec"].setdefault("extensions", {})["tlsTermination"] = {
        "certFile": str(cert_file),
        "keyFile": str(key_file),
        "reloadInterval": "200ms",
    }
    client = ssl.create_default_context()
    ca.configure_trust(client)
    lines: list[str] = []
    async with running(FakeModelServer("pod")) as (pod,):
        config, eps = write_config(tmp_path, doc, [pod.key])
        async with serve_process(config, eps, "--workers", "2", on_line=lines.append, ready=False) as gw:
            assert gw.url.startswith("https://")
            before = await _certificates_per_worker(gw.url, client, time.monotonic() + 60)
            assert sorted(before) == [0, 1], lines[-20:]
            assert len(set(before.values())) == 1  # one certificate for the pod

            write_pair(ca, tmp_path)  # renewed: a new key and certificate in the same files
            assert cert_file.read_bytes() != first
            deadline = time.monotonic() + 30
            after: dict[int, bytes] = {}
            while time.monotonic() < deadline:
                after = await _certificates_per_worker(gw.url, client, deadline)
                if len(after) == 2 and not set(after.values()) & set(before.values()):
                    break
                await asyncio.sleep(0.1)
            assert sorted(after) == [0, 1]
            assert not set(after.values()) & set(before.values()), "a worker still serves the old certificate"
