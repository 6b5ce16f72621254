"""The kernel scheduling policy of a benchmark's load (load generator and backend), and what the
gateway's processes paid for sharing cores with it.

When ``igw perf workers`` runs the load generator and the backend on the cores its gateway workers
use, each time one of them wakes up (a response to read, a request to answer) it preempts a worker
in the middle of a request; the worker then pays for its cold caches, not for anything the gateway
does (docs/gateway.md, "Where the second worker's extra CPU goes"). Under ``SCHED_BATCH`` a task
that wakes up does not preempt the running one: the load still gets its fair share of the cores,
but at the end of the running task's slice rather than in the middle of a request. The policy is
set when a process is spawned (``preexec_fn``), so every thread it makes later inherits it.

The context-switch counts (``/proc/<pid>/task/*/status``) are the check: involuntary switches per
request show whether preemption is in a figure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

POLICIES: Final = {"batch": os.SCHED_BATCH, "normal": os.SCHED_OTHER}
"""``--load-policy`` names and the kernel policies they set."""
NAMES: Final = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_BATCH: "SCHED_BATCH", os.SCHED_IDLE: "SCHED_IDLE"}


def default_policy(gateway_cpus: Sequence[int], load_cpus: Sequence[int]) -> str:
    """``batch`` when the load may run on a core a gateway worker uses (either side unpinned, or the
    CPU sets overlap), else ``normal`` (nothing to preempt)."""
    shared = not gateway_cpus or not load_cpus or bool(set(gateway_cpus) & set(load_cpus))
    return "batch" if shared else "normal"


def set_policy(policy: str, pid: int = 0) -> None:
    """Give task ``pid`` (a thread id; 0: the calling thread) the policy named ``policy``."""
    os.sched_setscheduler(pid, POLICIES[policy], os.sched_param(0))


def at_spawn(policy: str) -> Callable[[], None]:
    """A ``preexec_fn`` that gives a child ``policy`` before it runs its program (its threads, made
    later, inherit it)."""

    def preexec() -> None:
        set_policy(policy)

    return preexec


@contextlib.contextmanager
def process_policy(policy: str) -> Iterator[None]:
    """Give every current thread of this process the policy (threads made later inherit it from the
    thread that makes them) and give each its own back afterwards: the benchmark may run inside a
    longer-lived process (a test session) whose later children must not inherit it."""
    before: dict[int, int] = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            before[tid] = os.sched_getscheduler(tid)
            set_policy(policy, tid)
    try:
        yield
    finally:
        for tid, previous in before.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setscheduler(tid, previous, os.sched_param(0))


def thread_policies(pid: int) -> set[str]:
    """The policies of ``pid``'s threads, by name (empty when the process is gone)."""
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                policy = os.sched_getscheduler(int(task.name))
                out.add(NAMES.get(policy, str(policy)))
    return out


def parse_switches(status: str) -> tuple[int, int]:
    """``(voluntary, involuntary)`` context switches from the text of a ``/proc/.../status``."""
    counts = {"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 0}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in counts:
            counts[name] = int(value)
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def context_switches(pid: int) -> tuple[int, int]:
    """``(voluntary, involuntary)`` context switches of all of ``pid``'s threads (``/proc/<pid>/status``
    counts only its main thread); ``(0, 0)`` when it is gone."""
    voluntary = involuntary = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                v, i = parse_switches((task / "status").read_text())
                voluntary += v
                involuntary += i
    return voluntary, involuntary
