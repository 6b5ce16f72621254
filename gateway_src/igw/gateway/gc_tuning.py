"""Set CPython's cyclic garbage collector up for a long-running gateway process (``igw serve``).

Two costs of the default set-up show under load (``gc.callbacks`` timing an ``igw serve`` at
concurrency 32, numbers in docs/gateway.md):

* **Young collections.** A collection of the youngest generation runs every 700 net container
  allocations - every few dozen requests here - and each traverses every young object still alive,
  which under load is mostly the in-flight requests' own state: about the same work whether the
  collection comes every 700 allocations or every :data:`YOUNG_THRESHOLD`, so a larger threshold
  makes the same traversal rarer. Reference counting frees almost everything a request allocates;
  only reference cycles wait for the collector, now for at most that many more allocations.
* **Full collections.** Each traverses every tracked object of the process, start-up's included
  (modules, configuration, the app: tens of thousands of objects, tens of ms per collection, on
  the event loop's thread). :func:`gc.freeze` moves what start-up made into the permanent
  generation, which collections skip; those objects live as long as the process anyway.

Only ``igw serve`` calls :func:`tune_collector` (the library never changes a process-wide setting
on import).
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 10_000
"""Net container allocations between collections of the youngest generation (CPython's default: 700)."""


def tune_collector(young_threshold: int = YOUNG_THRESHOLD) -> tuple[int, int, int]:
    """Collect once, freeze what survives (start-up's objects) and raise the youngest generation's
    threshold, keeping the older generations' (they count young collections); returns the
    thresholds now in force. Call it once the process has started serving."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
    return gc.get_threshold()
