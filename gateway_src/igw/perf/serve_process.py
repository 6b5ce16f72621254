"""``igw serve`` as a child process on a free loopback port, for endurance runs and tests.

The child's stdout and stderr (its log and access log) are passed line by line to ``on_line``;
the context manager yields once the gateway answers ``/readyz`` with 200 and stops it with SIGTERM
(then SIGKILL after a minute) on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiohttp

from igw.errors import IgwToolingError

START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 60.0
_SERVING: Final = re.compile(r"serving \d+ scheduler\(s\) at (https?://\S+)")


class ServeStartError(IgwToolingError, RuntimeError):
    """``igw serve`` exited, or did not become ready, during start-up."""


@dataclass(slots=True)
class ServeProcess:
    proc: asyncio.subprocess.Process
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self, *, within: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), timeout=within)


async def _pump(stream: asyncio.StreamReader, on_line: Callable[[str], object]) -> None:
    while line := await stream.readline():
        on_line(line.decode("utf-8", errors="replace"))


@contextlib.asynccontextmanager
async def serve_process(
    config: Path,
    endpoints: Path,
    *args: str,
    on_line: Callable[[str], object],
    ready: bool = True,
    reload: bool = False,
) -> AsyncIterator[ServeProcess]:
    """Run ``igw serve --config CONFIG --endpoints ENDPOINTS ARGS...`` on ``127.0.0.1``, port 0
    (``--no-reload`` unless ``reload``: the configuration file is then watched)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config), "--endpoints", str(endpoints),
        "--host", "127.0.0.1", "--port", "0", *([] if reload else ["--no-reload"]), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    if proc.stdout is None or proc.stderr is None:
        raise ServeStartError("igw serve has no output pipes")
    pumps = [asyncio.create_task(_pump(proc.stdout, on_line))]
    try:
        url = None
        while url is None:
            line = (await asyncio.wait_for(proc.stderr.readline(), timeout=START_TIMEOUT_S)).decode(
                errors="replace"
            )
            if not line:
                raise ServeStartError("igw serve exited before serving")
            on_line(line)
            found = _SERVING.search(line)
            url = found.group(1) if found else None
        pumps.append(asyncio.create_task(_pump(proc.stderr, on_line)))
        if ready:
            await _wait_ready(url)
        yield ServeProcess(proc=proc, url=url)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=STOP_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        for pump in pumps:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(pump, timeout=5)


async def _wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                # Released by the ``async with``: a bare ``await http.get`` left the connection to be
                # garbage-collected, which aiohttp reports as an unclosed connection.
                async with http.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise ServeStartError(f"igw serve at {url} did not become ready within {START_TIMEOUT_S:g}s")
