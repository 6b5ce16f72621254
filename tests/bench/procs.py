"""Looking at live processes through ``/proc``, for the benchmark tests that check a run stopped every
process it started (routers, proxies, workers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie not yet reaped counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """``(pid, content)`` of ``/proc/<pid>/<name>`` (``cmdline``, ``stat``) for each live process; one
    that exits while being read is passed over, as it is no longer there to find."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                content = (entry / name).read_bytes()
            except OSError:
                continue
            yield int(entry.name), content


def children(ppid: int) -> list[int]:
    """PIDs of the live processes whose parent is ``ppid`` (field 4 of ``/proc/<pid>/stat``, read after
    the command name's closing parenthesis since the name itself may hold spaces)."""
    return [pid for pid, stat in proc_files("stat") if int(stat.rsplit(b")", 1)[1].split()[1]) == ppid]
