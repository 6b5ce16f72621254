"""Keep the C allocator from turning the gateway's large, rebuilt hash tables into resident memory.

The prefix index holds one hash-table entry per KV block of every endpoint (megabytes per table).
CPython rebuilds a dict that sees steady insert/delete churn every time its deleted slots use up
the table: a new table is allocated, the old one freed. glibc serves allocations of at least
``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with ``mmap`` and returns them to the system on free -
but its *dynamic* threshold rises to the size of every mmapped block freed, so after the first
rebuild the tables come from the ``brk`` heap instead, where each rebuild leaves a hole that only
partly refills: resident memory then grows in steps long after every structure has reached its
final size (the index alone, in a loop of inserts at constant size, steps +2.5 and +5 MiB at 6 and
8.5 turnovers of a 2 x 27,485-block index). Setting the threshold explicitly turns the dynamic
adjustment off (``mallopt(3)``), so those tables stay mmapped and a freed one leaves no residue.

Python has no binding for ``mallopt``; it is one ``ctypes`` call. Elsewhere than glibc (musl, macOS)
the call is absent or a no-op and nothing changes.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Final

M_MMAP_THRESHOLD: Final = -3
"""``mallopt`` parameter number (``<malloc.h>``)."""
MMAP_THRESHOLD_BYTES: Final = 128 * 1024
"""glibc's own starting threshold, kept fixed: allocations this large or larger are mmapped."""


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; ``True`` when the C library accepted it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def malloc_trim() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``: the free memory at
    the heap's top, and every whole free page inside it); ``True`` when something was released,
    ``False`` too elsewhere than glibc, where the call is absent (:mod:`igw.gateway.body_budget`
    calls it after a burst of request bodies)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


INDEX_BYTES_PER_BLOCK: Final = 300
"""Resident bytes a full prefix index spends per KV block of each endpoint (282 measured, rounded up:
docs/gateway.md, "Several workers", the sizing paragraph)."""
PROCESS_BASE_BYTES: Final = 128 * 1024 * 1024
"""What one gateway process holds besides its prefix indexes: about 75 MiB idle, plus the requests
in flight and their buffers."""
PARENT_BYTES: Final = 64 * 1024 * 1024
"""The parent of an ``igw serve --workers N`` group (about 55 MiB resident, idle)."""


def index_block_budget(memory_limit_bytes: int | None, processes: int) -> int | None:
    """The KV blocks one gateway process's prefix indexes may hold together: its equal share of the
    container's memory limit (less the group's parent when there are several), less
    :data:`PROCESS_BASE_BYTES`, at :data:`INDEX_BYTES_PER_BLOCK`; ``None`` without a limit.

    Why a bound: every worker keeps its own index of every endpoint's cached prefixes (each learns
    the others' picks), so memory grows with workers x pods x KV blocks; unbounded, a pool that grew
    after start-up got the container OOM-killed. Bounded, each endpoint's LRU holds its share of the
    budget: the index forgets old prefixes sooner than the model servers do (fewer prefix hits on
    the oldest prefixes), and the pod keeps running."""
    if memory_limit_bytes is None:
        return None
    available = memory_limit_bytes - (PARENT_BYTES if processes > 1 else 0)
    share = available // max(1, processes) - PROCESS_BASE_BYTES
    return max(1, share // INDEX_BYTES_PER_BLOCK)
