"""``igw serve`` and ``igw global serve`` whose stderr nobody reads (a stalled log shipper, a full pipe)
keep answering: their diagnostic lines wait for the log writer thread instead of blocking the event
loop."""

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
import pytest
import yaml

from tests.global_router.support import global_doc, pipe_stalled, read_to_end
from tests.reliability.harness import gateway_doc, write_config

MALFORMED = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"
"""A request head both servers refuse with a 400 and one WARNING line on stderr."""


def _command(kind: str, tmp_path: Path) -> list[str]:
    if kind == "gateway":
        config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
        return ["serve", "--config", str(config), "--endpoints", str(eps), "--no-reload"]
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(global_doc()))
    return ["global", "serve", "--config", str(config)]


async def _start(kind: str, tmp_path: Path, *, stdout: int, stderr: int) -> asyncio.subprocess.Process:
    """Start ``kind``'s server on a free loopback port with no drain, its stdout and stderr on the given
    descriptors (pipes the test controls), so that every test here runs the same command line."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", *_command(kind, tmp_path),
        "--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0",
        stdout=stdout, stderr=stderr,
    )  # fmt: skip


async def _serving(err_read: int) -> tuple[bytes, str, int]:
    """Read the server's stderr (read end ``err_read``) until it says where it serves: what it printed
    so far, the host and the port. Fails if it exits first (within 60 s a read)."""
    printed = b""
    while not (found := re.search(rb"serving .* at http://([\d.]+):(\d+)", printed)):
        chunk = await asyncio.wait_for(asyncio.to_thread(os.read, err_read, 4096), timeout=60)
        assert chunk, "the server exited before serving:\n" + printed.decode()
        printed += chunk
    return printed, found.group(1).decode(), int(found.group(2))


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill ``proc`` if a failed test left it running, and wait for it: no server outlives its test."""
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def _refused(host: str, port: int) -> bytes:
    """Send :data:`MALFORMED` on a new connection; the answer (within 5 s)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(MALFORMED)
        return await asyncio.wait_for(reader.read(), timeout=5)
    finally:
        writer.close()


@pytest.mark.parametrize("kind", ["gateway", "global-router"])
async def test_it_answers_while_its_stderr_is_not_read(kind: str, tmp_path: Path) -> None:
    """Any client can make the server log (one warning per malformed request). With stderr a full pipe,
    each line used to be written on the event loop: in a probe the 272nd malformed request blocked
    ``igw global serve``, and every request after it, for as long as nobody read. Now requests keep
    being answered, the lines come out once stderr is read again, and SIGTERM ends it with code 0."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4 * select.PIPE_BUF)  # a small pipe: it fills at once
    full = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) - select.PIPE_BUF  # what a blocked writer left
    proc = await _start(kind, tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=write_end)
    os.close(write_end)
    drained: asyncio.Future[bytes] | None = None
    try:
        printed, host, port = await _serving(read_end)
        loop = asyncio.get_running_loop()
        refused = 0
        full_since: float | None = None
        while full_since is None or loop.time() - full_since < 2:  # the pipe full, then 2 s more
            assert (await _refused(host, port)).startswith(b"HTTP/1.1 400 ")
            refused += 1
            if full_since is None and pipe_stalled(read_end, full=full, pid=proc.pid, fd=2):
                full_since = loop.time()
            assert refused < 20_000, "the server's stderr never filled"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(f"http://{host}:{port}/healthz") as resp,
        ):
            assert resp.status == 200, await resp.text()
        drained = asyncio.ensure_future(asyncio.to_thread(read_to_end, read_end))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
        stderr = (printed + await asyncio.wait_for(drained, timeout=30)).decode()
    finally:
        await _reap(proc)
        if drained is None:
            os.close(read_end)
    assert stderr.count("refused a malformed HTTP request") == refused
    assert "Traceback" not in stderr


@pytest.mark.parametrize("kind", ["gateway", "global-router"])
async def test_sigterm_ends_it_in_bounded_time_while_stdout_and_stderr_are_not_read(
    kind: str, tmp_path: Path
) -> None:
    """A pod whose log shipper stopped must still exit within its grace period. Until s43 the exit's
    flush waited for the writer threads, blocked in ``write()`` on full pipes: a probe's ``igw serve``
    and ``igw global serve`` were both still running 30 s after SIGTERM, and exited only once someone
    read. Now each stream's final flush waits at most ``DEFAULT_CLOSE_TIMEOUT_S`` (2 s)."""
    err_read, err_write = os.pipe()
    out_read, out_write = os.pipe()
    for end in (err_write, out_write):
        fcntl.fcntl(end, fcntl.F_SETPIPE_SZ, 4 * select.PIPE_BUF)  # small pipes: they fill at once
    proc = await _start(kind, tmp_path, stdout=out_write, stderr=err_write)
    os.close(err_write)
    os.close(out_write)
    try:
        _, host, port = await _serving(err_read)
        full = fcntl.fcntl(err_read, fcntl.F_GETPIPE_SZ) - select.PIPE_BUF
        refused = 0
        while not pipe_stalled(err_read, full=full, pid=proc.pid, fd=2):  # the writer blocked in write()
            assert (await _refused(host, port)).startswith(b"HTTP/1.1 400 ")
            refused += 1
            assert refused < 20_000, "the server's stderr never filled"
        for _ in range(50):  # and more lines queued behind the blocked write
            await _refused(host, port)
        loop = asyncio.get_running_loop()
        started = loop.time()
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout=20)
        except TimeoutError:
            pytest.fail("still running 20 s after SIGTERM with its stdout and stderr not read")
        assert code == 0
        assert loop.time() - started < 10  # the drain (0 s) and two bounded flushes of 2 s
    finally:
        await _reap(proc)
        os.close(err_read)
        os.close(out_read)


async def test_a_closed_stdout_costs_one_traceback_and_its_lines_are_counted(tmp_path: Path) -> None:
    """A log shipper that went away leaves stdout a broken pipe. Every batch's write raised
    ``BrokenPipeError`` and wrote a ``--- Logging error ---`` traceback on stderr (a probe: 10 in the
    2 s of 200 requests), and the access lines lost were counted nowhere. Now the first failure is
    reported, the rest counted in ``igw_log_lines_dropped_total{stream="stdout"}``, and it serves on."""
    err_read, err_write = os.pipe()
    out_read, out_write = os.pipe()
    os.close(out_read)  # nobody will ever read stdout: each write raises EPIPE
    proc = await _start("gateway", tmp_path, stdout=out_write, stderr=err_write)
    os.close(err_write)
    os.close(out_write)
    drained: asyncio.Future[bytes] | None = None
    try:
        printed, host, port = await _serving(err_read)
        drained = asyncio.ensure_future(asyncio.to_thread(read_to_end, err_read))
        url = f"http://{host}:{port}"
        requests = 200
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for _ in range(requests):  # one access line each (the endpoint refuses: a 5xx answer)
                async with http.post(url + "/v1/completions", json={"model": "llama", "prompt": "x"}) as resp:
                    await resp.read()
            dropped = 0.0
            for _ in range(100):  # the writer thread writes every 0.2 s
                async with http.get(url + "/metrics") as resp:
                    page = await resp.text()
                found_line = re.search(r'^igw_log_lines_dropped_total\{stream="stdout"\} (\S+)$', page, re.M)
                assert found_line, "no igw_log_lines_dropped_total{stream=stdout} on /metrics"
                dropped = float(found_line.group(1))
                if dropped >= requests:
                    break
                await asyncio.sleep(0.1)
            assert dropped == requests
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
        stderr = (printed + await asyncio.wait_for(drained, timeout=30)).decode()
    finally:
        await _reap(proc)
        if drained is None:
            os.close(err_read)
    assert stderr.count("--- Logging error ---") == 1, stderr[-3000:]
    assert "BrokenPipeError" in stderr
