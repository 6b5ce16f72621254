"""Routers as real child processes: start, wait until they serve, and always stop them.

Used for our gateway (``igw serve``), the round-robin proxy and the peer routers. Each child gets
its own process group so that stopping it also stops anything it spawned, and is stopped by PID in
``__aexit__`` whatever happened (error, timeout, Ctrl-C): SIGTERM, then SIGKILL after a grace period.
Output goes to a log file in the run's work directory, which the report points to on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import BinaryIO

import aiohttp

from igw.errors import IgwToolingError


class RouterStartError(IgwToolingError, RuntimeError):
    """A router process exited or never became ready; the message quotes the end of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port for routers that need ``--port`` up front (tiny race, documented)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(_read(path).splitlines()[-lines:]) or "(empty log)"


def _open_log(path: Path) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("wb")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


async def _stop(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout=grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


@contextlib.asynccontextmanager
async def router_process(
    *,
    name: str,
    argv: Sequence[str],
    log_path: Path,
    url: str | None = None,
    url_pattern: str | None = None,
    ready_probe: str | None = None,
    timeout_s: float = 60.0,
    grace_s: float = 5.0,
    env: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """Run ``argv``; yield its base URL once ready.

    The URL is either known (``url``) or read from the log with ``url_pattern`` (first group).
    Readiness: the URL is known and, with ``ready_probe`` (a path), a POST/GET to it answers 200.
    """
    if url is None and url_pattern is None:
        raise ValueError("router_process needs url or url_pattern")
    log = _open_log(log_path)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + timeout_s
        found = url
        pattern = re.compile(url_pattern) if url_pattern else None
        while True:
            if proc.returncode is not None:
                raise RouterStartError(f"{name} exited with {proc.returncode}:\n{_tail(log_path)}")
            if found is None and pattern is not None:
                match = pattern.search(_read(log_path))
                found = match.group(1) if match else None
            if found is not None and (ready_probe is None or await _ready(found + ready_probe)):
                break
            if time.monotonic() > deadline:
                raise RouterStartError(f"{name} not ready after {timeout_s:.0f}s:\n{_tail(log_path)}")
            await asyncio.sleep(0.1)
        yield found
    finally:
        await _stop(proc, grace_s)
        log.close()


async def _ready(url: str) -> bool:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
            session.get(url) as resp,
        ):
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
