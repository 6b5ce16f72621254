"""The soak's simulated fleet runs in its own process: its pods answer while this process's event
loop is blocked, their sockets belong to another process, and nothing is left running afterwards."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from pathlib import Path

from igw.perf.fleet_process import fleet_process

SPEC = {
    "time_scale": 1.0,
    "seed": 1,
    "pods": [{"name": "h100-0", "preset": "llama-3.1-8b/h100", "served_model_name": "m"}],
}


def listening_inode(port: int) -> str | None:
    """The socket inode listening on ``port`` (from ``/proc/net/tcp``), or ``None``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            return inode
    return None


def own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def status_while_this_loop_is_blocked(url: str) -> int:
    """GET ``url`` synchronously: the calling event loop runs nothing until the answer arrives."""
    with urllib.request.urlopen(url, timeout=60) as resp:
        status: int = resp.status
        return status


async def test_the_fleet_serves_from_another_process_and_stops_with_the_context(tmp_path: Path) -> None:
    async with fleet_process(SPEC, tmp_path) as endpoints:
        (key,) = endpoints
        port = int(key.rsplit(":", 1)[1])
        inode = listening_inode(port)
        assert inode is not None
        assert inode not in own_socket_inodes()
        assert status_while_this_loop_is_blocked(f"http://{key}/v1/models") == 200
    for _ in range(200):  # the child's listener closes as it exits
        if listening_inode(port) is None:
            break
        await asyncio.sleep(0.05)
    assert listening_inode(port) is None, f"port {port} still listening after the fleet stopped"
