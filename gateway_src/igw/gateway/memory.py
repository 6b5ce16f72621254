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
