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
from collections.abc import Mapping
from dataclasses import dataclass, replace
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


BODY_DEFAULT_BYTES: Final = 256 * 1024 * 1024
"""The request-body budget without a container memory limit (``serverLimits.maxBodyBytesHeld: 0``)."""
BODY_MIN_BYTES: Final = 16 * 1024 * 1024
"""The smallest derived body budget (a tight memory limit shared by many workers)."""
RESIDENT_PER_COUNTED: Final = 2
"""Resident bytes per counted request-body byte: the reads' ``bytes`` objects, then the joined body
while both live, and the heap pages they leave until trimmed."""
QUEUE_DEFAULT_BYTES: Final = 128 * 1024 * 1024
"""Flow control's global ``maxBytes`` when the field is unset (``FlowControlSettings.max_bytes``):
one budget for every scheduler's queue in the process together (:class:`igw.gateway.flow_gate.FlowGates`),
so the plan reserves it once however many schedulers there are."""
BODY_PART_DIVISOR: Final = 3
"""With a prefix index, resident request bodies get a third of what the base and the queue leave,
the index the other two thirds: a full body budget answers 503 at once, a full index only forgets
its oldest prefixes."""
INDEX_MIN_BYTES: Final = BODY_MIN_BYTES * RESIDENT_PER_COUNTED * (BODY_PART_DIVISOR - 1)
"""The prefix index the plan gives where the bodies reach their floor (64 MiB, about 224 K KV blocks):
the smallest index a process ``--workers auto`` counts with."""
PROCESS_MIN_BYTES: Final = (
    PROCESS_BASE_BYTES + QUEUE_DEFAULT_BYTES + BODY_MIN_BYTES * RESIDENT_PER_COUNTED + INDEX_MIN_BYTES
)
"""The smallest share whose default plan fits with no part below its minimum (352 MiB): base, the
queue's default, the bodies' floor resident and :data:`INDEX_MIN_BYTES` (:func:`processes_fitting`)."""
ROUTER_BODY_SHARE_DIVISOR: Final = 4
"""Without a prefix index (the global router), the counted body budget is at most a quarter of the
share: a body being parsed briefly costs two to three times its bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPlan:
    """One process's memory, split between its parts (:func:`memory_plan`, the only place they are
    derived): the base, the prefix indexes, the request bodies being read, flow control's queue."""

    limit: int | None
    """The container's memory limit (``None``: none found)."""
    processes: int
    share: int | None
    """What one process may use: the limit less the group's parent (when several), divided."""
    base: int
    index_bytes: int | None
    """``None``: unbounded (no limit); ``0``: no prefix index (the global router)."""
    body_bytes: int
    """The counted request-body budget (``serverLimits.maxBodyBytesHeld``)."""
    queue_bytes: int
    body_configured: bool = False
    queue_configured: bool = False

    @property
    def index_blocks(self) -> int | None:
        """The KV blocks this process's prefix indexes may hold together (``None``: unbounded)."""
        if self.index_bytes is None:
            return None
        return max(1, self.index_bytes // INDEX_BYTES_PER_BLOCK)

    @property
    def body_resident(self) -> int:
        return self.body_bytes * RESIDENT_PER_COUNTED

    @property
    def total(self) -> int:
        """The process's resident bytes with every part full (an unbounded index counts 0)."""
        return self.base + (self.index_bytes or 0) + self.body_resident + self.queue_bytes

    def with_queue(self, queue_bytes: int | None) -> MemoryPlan:
        """This (gateway) plan with flow control's queue as a reloaded configuration sets it
        (``None``: its default). The other parts keep their sizes: the prefix index and body
        budgets are fixed at start and a reload does not resize them, so a larger queue only makes
        the parts full pass the share (:meth:`overcommit_warning`)."""
        return replace(
            self,
            queue_bytes=QUEUE_DEFAULT_BYTES if queue_bytes is None else queue_bytes,
            queue_configured=queue_bytes is not None,
        )

    def with_body(self, body_bytes: int | None) -> MemoryPlan:
        """This (gateway) plan with the request-body budget a reloaded configuration sets
        (``serverLimits.maxBodyBytesHeld``; ``None``: derived from the share as at start, with this
        plan's queue). The prefix index keeps its size (fixed at start): a larger budget only makes
        the parts full pass the share (:meth:`overcommit_warning`)."""
        if body_bytes is None:
            derived = memory_plan(
                self.limit,
                self.processes,
                prefix_index=self.index_bytes != 0,
                queue_bytes=self.queue_bytes if self.queue_configured else None,
            )
            body_bytes = derived.body_bytes
            return replace(self, body_bytes=body_bytes, body_configured=False)
        return replace(self, body_bytes=body_bytes, body_configured=True)

    def describe(self) -> str:
        """The plan in one line, for the start-up log."""
        share = (
            "no memory limit"
            if self.share is None or self.limit is None
            else f"share {_mib(self.share)} of {_mib(self.limit)} over {self.processes} process(es)"
        )
        index = (
            "unbounded"
            if self.index_bytes is None
            else "none"
            if self.index_bytes == 0
            else f"{_mib(self.index_bytes)} ({self.index_blocks} KV blocks)"
        )
        return (
            f"memory plan per process: {share}; base {_mib(self.base)}, prefix index {index}, "
            f"request bodies {_mib(self.body_resident)} ({_mib(self.body_bytes)} counted"
            f"{', serverLimits.maxBodyBytesHeld' if self.body_configured else ''}), "
            f"queue {_mib(self.queue_bytes)}{' (flowControl.maxBytes)' if self.queue_configured else ''}; "
            f"{_mib(self.total)} when full"
        )

    def overcommit_warning(self) -> str | None:
        """``None`` when the parts, full, fit the share; else why not, with the numbers."""
        if self.share is None or self.total <= self.share:
            return None
        configured = [
            name
            for name, is_set in (
                ("spec.serverLimits.maxBodyBytesHeld", self.body_configured),
                ("spec.extensions.flowControl.maxBytes", self.queue_configured),
            )
            if is_set
        ]
        if configured:
            fix = f"lower {' or '.join(configured)}, run fewer workers or raise the memory limit"
        elif self.queue_bytes:
            # The queue's default is not lowered to fit: the same file would then queue differently
            # on pods of different sizes, where the documented 128 MiB is what an operator reads.
            fix = (
                "set spec.extensions.flowControl.maxBytes below its default "
                f"{_mib(QUEUE_DEFAULT_BYTES)} (reserved even with flow control off), run fewer "
                "workers or raise the memory limit (the other parts are at their floors)"
            )
        else:
            fix = "run fewer workers or raise the memory limit (the parts are at their floors)"
        return (
            f"memory plan: the parts full come to {_mib(self.total)}, more than this process's share "
            f"of {_mib(self.share)} ({self.describe()}): the container may be OOM-killed; {fix}"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def memory_plan(
    memory_limit_bytes: int | None,
    processes: int,
    *,
    parent_bytes: int = PARENT_BYTES,
    prefix_index: bool = True,
    flow_queue: bool = True,
    body_bytes: int | None = None,
    queue_bytes: int | None = None,
) -> MemoryPlan:
    """Split one process's share of the container's memory limit between its parts, so that they
        fit together when all are full; ``body_bytes`` / ``queue_bytes``: the values the configuration
        sets (``None``: derived; the queue's default is its own, :data:`QUEUE_DEFAULT_BYTES`, reserved
        even with flow control off, which a reload may turn on). The global router has neither a prefix
    index nor a queue (``prefix_index=False, flow_queue=False``).

        The share is the limit (less ``parent_bytes`` when ``processes`` > 1) over ``processes``. The
    base (:data:`PROCESS_BASE_BYTES`) and the queue come off first; of the rest, the request bodies
    get :data:`BODY_PART_DIVISOR`'s part resident (counted at :data:`RESIDENT_PER_COUNTED`) and the
    prefix indexes what is left. Without an index the bodies are at most a quarter of the share.
    Floors: :data:`BODY_MIN_BYTES` of bodies, one KV block of index; where the floors or the
    configured values pass the share the plan says so (:meth:`MemoryPlan.overcommit_warning`).
    Without a limit: :data:`BODY_DEFAULT_BYTES` of bodies and unbounded indexes.

    Why one plan: derived one by one, each from the whole share, the index took the share less the
        base while the bodies and the queue took theirs from the same bytes - a 1 GiB, one-worker pod
        full came to about 1.6 GiB."""
    queue = 0 if not flow_queue else QUEUE_DEFAULT_BYTES if queue_bytes is None else queue_bytes
    queue_configured = flow_queue and queue_bytes is not None
    if memory_limit_bytes is None:
        return MemoryPlan(
            limit=None,
            processes=processes,
            share=None,
            base=PROCESS_BASE_BYTES,
            index_bytes=None if prefix_index else 0,
            body_bytes=BODY_DEFAULT_BYTES if body_bytes is None else body_bytes,
            queue_bytes=queue,
            body_configured=body_bytes is not None,
            queue_configured=queue_configured,
        )
    available = memory_limit_bytes - (parent_bytes if processes > 1 else 0)
    share = available // max(1, processes)
    rest = share - PROCESS_BASE_BYTES - queue
    if body_bytes is not None:
        bodies = body_bytes
    elif prefix_index:
        bodies = max(BODY_MIN_BYTES, rest // BODY_PART_DIVISOR // RESIDENT_PER_COUNTED)
    else:
        bodies = max(BODY_MIN_BYTES, min(share // ROUTER_BODY_SHARE_DIVISOR, rest // RESIDENT_PER_COUNTED))
    index = max(INDEX_BYTES_PER_BLOCK, rest - bodies * RESIDENT_PER_COUNTED) if prefix_index else 0
    return MemoryPlan(
        limit=memory_limit_bytes,
        processes=processes,
        share=share,
        base=PROCESS_BASE_BYTES,
        index_bytes=index,
        body_bytes=bodies,
        queue_bytes=queue,
        body_configured=body_bytes is not None,
        queue_configured=queue_configured,
    )


def processes_fitting(memory_limit_bytes: int, *, parent_bytes: int = PARENT_BYTES) -> int:
    """The most processes (at least one) whose default plan in ``memory_limit_bytes`` gives each a
    share of :data:`PROCESS_MIN_BYTES` or more: the memory bound of ``--workers auto``
    (:mod:`igw.gateway.worker_count`), taken from the plan so that the count it picks never starts
    with the overcommit warning (until session s48's second round it allowed 256 MiB per worker,
    below the base and the queue's default alone: a 1 GiB pod of four CPUs warned at every start)."""
    return max(1, (memory_limit_bytes - parent_bytes) // PROCESS_MIN_BYTES)


def configured_queue_bytes(flow_extension: object) -> int | None:
    """``spec.extensions.flowControl.maxBytes`` as the configuration sets it (``flow_extension``: the
    extension as the document states it, :attr:`~igw.config.model.GatewayConfig.stated_extensions`,
    not with the schema's defaults filled in), ``None`` when it is left to its default or flow
    control is absent. A value equal to the schema's default (:data:`QUEUE_DEFAULT_BYTES`) counts as
    left to it: in operator mode the API server writes the CRD's defaults into the object, so the
    stated document carries ``maxBytes: 134217728`` that nobody set, and the plan's log and WARNING
    called it configured (until session s49)."""
    if not isinstance(flow_extension, Mapping):
        return None
    value = flow_extension.get("maxBytes")
    return None if value is None or int(value) == QUEUE_DEFAULT_BYTES else int(value)
