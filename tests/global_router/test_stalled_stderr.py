"""``igw global serve`` whose stderr nobody reads (a stalled log shipper, a full pipe) keeps answering:
its diagnostic lines wait for the log writer thread instead of blocking the event loop."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import select
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from tests.gateway.fake_model_server import FakeModelServer
from tests.global_router.support import MODEL, global_doc, read_to_end, unread
from tests.security.helpers import RedisServer

MALFORMED = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"
"""A request head the router refuses with a 400 and one WARNING line on stderr."""


async def _refused(host: str, port: int) -> bytes:
    """Send :data:`MALFORMED` on a new connection; the answer (within 5 s)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(MALFORMED)
        return await asyncio.wait_for(reader.read(), timeout=5)
    finally:
        writer.close()


async def test_global_serve_answers_while_its_stderr_is_not_read(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Any client can make the router log (one warning per malformed request). With stderr a full pipe,
    each line used to be written on the event loop: the 272nd malformed request of a probe blocked it,
    and every request after it, for as long as nobody read. Now the requests keep being answered, and
    the lines come out once stderr is read again; SIGTERM ends the process with code 0."""
    server = FakeModelServer("east-a")
    await server.start()
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{server.key}", "models": [MODEL]}],
        heartbeats={"required": False, "redis": {"url": redis_server.url, "keyPrefix": "err:hb:"}},
    )
    (tmp_path / "global.yaml").write_text(yaml.safe_dump(doc))
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4 * select.PIPE_BUF)  # a small pipe: it fills at once
    full = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) - select.PIPE_BUF  # what a blocked writer left
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(tmp_path / "global.yaml"),
        "--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0",
        stdout=asyncio.subprocess.DEVNULL, stderr=write_end,
    )  # fmt: skip
    os.close(write_end)
    drained: asyncio.Future[bytes] | None = None
    try:
        printed = b""
        while not (found := re.search(rb"serving \d+ cluster\(s\) at http://([\d.]+):(\d+)", printed)):
            chunk = await asyncio.wait_for(asyncio.to_thread(os.read, read_end, 4096), timeout=60)
            assert chunk, "igw global serve exited before serving:\n" + printed.decode()
            printed += chunk
        host, port = found.group(1).decode(), int(found.group(2))
        loop = asyncio.get_running_loop()
        refused = 0
        full_since: float | None = None
        while full_since is None or loop.time() - full_since < 2:  # the pipe full, then 2 s more
            assert (await _refused(host, port)).startswith(b"HTTP/1.1 400 ")
            refused += 1
            if full_since is None and unread(read_end) >= full:
                full_since = loop.time()
            assert refused < 20_000, "the router's stderr never filled"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            url = f"http://{host}:{port}/v1/completions"
            async with http.post(url, json={"model": MODEL, "prompt": "x"}) as resp:
                assert resp.status == 200, await resp.text()
        drained = asyncio.ensure_future(asyncio.to_thread(read_to_end, read_end))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
        stderr = (printed + await asyncio.wait_for(drained, timeout=30)).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if drained is None:
            os.close(read_end)
        await server.stop()
    assert stderr.count("refused a malformed HTTP request") == refused
    assert "igw global router stopped" in stderr
