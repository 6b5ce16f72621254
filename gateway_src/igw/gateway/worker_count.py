"""How many processes ``igw serve --workers auto`` starts: the CPUs this pod may count on.

Each worker is one event loop, so one core's worth of requests (docs/gateway.md, "Several workers");
a pod whose CPU request was raised to four cores serves no more than one core's worth with one
worker. ``auto`` takes the smallest of these bounds, each one that is known:

- the CPUs the process may run on (its affinity mask: a ``taskset`` or a static CPU-manager pod);
- the cgroup's CPU limit (``cpu.max`` of cgroup v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of
  v1; the smallest along the cgroup's ancestors), rounded up: more workers than the quota allows
  only throttle each other;
- the container's CPU request, rounded up, when the pod tells it through the downward API in
  :data:`CPU_REQUEST_ENV` (millicores; the chart and the operator set it): the cores the scheduler
  reserved, so a pod without a CPU limit on a 192-core node does not start 192 workers;
- the cgroup's memory limit: as many workers as the memory plan gives each its minimum
  (:func:`igw.gateway.memory.processes_fitting`: the base, flow control's default queue, the body
  floor and a minimal prefix index, 352 MiB, after the parent's 64 MiB), so that raising the CPU
  request alone cannot get the pod OOM-killed nor start it with the plan's overcommit warning;

and at least one, at most :data:`MAX_WORKERS`. Written here because no maintained Python library reads
container CPU quotas (``os.cpu_count``/``os.sched_getaffinity`` know nothing of cgroups; the
standard library's ``os.process_cpu_count`` of 3.13 neither). The file system root is a parameter so
that tests can lay out a cgroup tree; the code reads only ``/proc/self/cgroup`` and ``/sys/fs/cgroup``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from igw.gateway.memory import PARENT_BYTES, PROCESS_MIN_BYTES, processes_fitting

AUTO: Final = "auto"
CPU_REQUEST_ENV: Final = "IGW_CPU_REQUEST_MILLICORES"
"""The container's CPU request in millicores (the downward API's ``requests.cpu`` with divisor ``1m``)."""
MAX_WORKERS: Final = 64
"""The chart's and the add-on schema's maximum for ``gateway.workers``."""
_UNLIMITED_V1_BYTES: Final = 1 << 62
"""cgroup v1 reports "no memory limit" as a page-rounded ``LONG_MAX``; anything this large is none."""


@dataclass(frozen=True, slots=True)
class WorkerBudget:
    """The number ``auto`` chose and every bound it was chosen from (``None``: that bound is unknown)."""

    workers: int
    affinity_cpus: int
    cpu_limit: float | None
    cpu_request: float | None
    memory_limit_bytes: int | None

    def describe(self) -> str:
        """One log line's worth: the choice and its bounds."""
        parts = [f"{self.affinity_cpus} CPUs in the affinity mask"]
        if self.cpu_limit is not None:
            parts.append(f"cgroup CPU limit {self.cpu_limit:g}")
        if self.cpu_request is not None:
            parts.append(f"CPU request {self.cpu_request:g} ({CPU_REQUEST_ENV})")
        if self.memory_limit_bytes is not None:
            mib, parent = PROCESS_MIN_BYTES // 2**20, PARENT_BYTES // 2**20
            parts.append(
                f"memory limit {self.memory_limit_bytes / 2**30:.2f} GiB at {mib} MiB per worker "
                f"beside the parent's {parent} MiB"
            )
        noun = "worker" if self.workers == 1 else "workers"
        return f"--workers auto: {self.workers} {noun} ({'; '.join(parts)})"


def auto_workers(
    *,
    root: Path = Path("/"),
    environ: Mapping[str, str] | None = None,
    affinity: Callable[[], int] | None = None,
) -> WorkerBudget:
    """The worker count for ``--workers auto`` in this process's container (see the module text)."""
    env = os.environ if environ is None else environ
    cpus = affinity() if affinity is not None else len(os.sched_getaffinity(0))
    groups = _cgroups(root)
    cpu_limit = _cpu_limit(root, groups)
    memory_limit = _memory_limit(root, groups)
    cpu_request = _cpu_request(env)
    bounds = [cpus]
    if cpu_limit is not None:
        bounds.append(math.ceil(cpu_limit))
    if cpu_request is not None:
        bounds.append(math.ceil(cpu_request))
    if memory_limit is not None:
        bounds.append(processes_fitting(memory_limit))
    workers = max(1, min(MAX_WORKERS, *bounds))
    return WorkerBudget(workers, cpus, cpu_limit, cpu_request, memory_limit)


def cpu_limit(root: Path = Path("/")) -> float | None:
    """This process's container CPU limit in cores (the smallest quota along its cgroup's ancestors,
    v2 or v1), or ``None`` when there is none. The operator sizes its API thread pool by it
    (:func:`igw.operator.kube.default_api_threads`)."""
    return _cpu_limit(root, _cgroups(root))


def memory_limit(root: Path = Path("/")) -> int | None:
    """This process's container memory limit in bytes (the smallest along its cgroup's ancestors,
    v2 or v1), or ``None`` when there is none."""
    return _memory_limit(root, _cgroups(root))


def _cpu_request(env: Mapping[str, str]) -> float | None:
    """Cores from :data:`CPU_REQUEST_ENV`; ``None`` when unset, not a positive integer (the downward
    API reports 0 for a container without a request)."""
    text = env.get(CPU_REQUEST_ENV, "").strip()
    if not text.isdecimal() or int(text) <= 0:
        return None
    return int(text) / 1000


def _cgroups(root: Path) -> dict[str, PurePosixPath]:
    """``/proc/self/cgroup``: controller → this process's cgroup path (``""`` for v2's unified line)."""
    try:
        text = (root / "proc/self/cgroup").read_text()
    except OSError:
        return {}
    groups: dict[str, PurePosixPath] = {}
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3 or not fields[2].startswith("/"):
            continue
        for controller in fields[1].split(",") if fields[1] else [""]:
            groups.setdefault(controller, PurePosixPath(fields[2]))
    return groups


def _levels(mount: Path, group: PurePosixPath) -> list[Path]:
    """The cgroup's directory and each ancestor's up to the mount (a limit anywhere above applies).
    In a container with its own cgroup namespace the path is ``/`` and the mount is the container's
    group; where the path does not exist under the mount, the mount itself is the best guess."""
    here = mount / group.relative_to("/")
    if not here.is_dir():
        return [mount]
    levels = [here]
    while here != mount:
        here = here.parent
        levels.append(here)
    return levels


def _v1_mount(root: Path, names: tuple[str, ...]) -> Path | None:
    """A cgroup v1 controller's mount under ``/sys/fs/cgroup`` (``cpu`` is often ``cpu,cpuacct``)."""
    mounts = [root / "sys/fs/cgroup" / name for name in names]
    return next((mount for mount in mounts if mount.is_dir()), None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_limit(root: Path, groups: Mapping[str, PurePosixPath]) -> float | None:
    """The smallest CPU quota in cores along the cgroup's ancestors, or ``None``."""
    limits: list[float] = []
    if "" in groups:  # cgroup v2: "max 100000" or "200000 100000"
        for level in _levels(root / "sys/fs/cgroup", groups[""]):
            limit = _v2_cpu(_read(level / "cpu.max"))
            if limit is not None:
                limits.append(limit)
    mount = _v1_mount(root, ("cpu", "cpu,cpuacct"))
    if "cpu" in groups and mount is not None:
        for level in _levels(mount, groups["cpu"]):
            limit = _v1_cpu(_read(level / "cpu.cfs_quota_us"), _read(level / "cpu.cfs_period_us"))
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None


def _v2_cpu(text: str | None) -> float | None:
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_cpu(quota: str | None, period: str | None) -> float | None:
    if quota is None or period is None or quota.strip() == "-1":
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    if not (quota.isdecimal() and period.isdecimal()) or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _memory_limit(root: Path, groups: Mapping[str, PurePosixPath]) -> int | None:
    """The smallest memory limit in bytes along the cgroup's ancestors, or ``None``."""
    limits: list[int] = []
    if "" in groups:
        for level in _levels(root / "sys/fs/cgroup", groups[""]):
            text = _read(level / "memory.max")
            if text is not None and text.isdecimal():
                limits.append(int(text))
    mount = _v1_mount(root, ("memory",))
    if "memory" in groups and mount is not None:
        for level in _levels(mount, groups["memory"]):
            text = _read(level / "memory.limit_in_bytes")
            if text is not None and text.isdecimal() and int(text) < _UNLIMITED_V1_BYTES:
                limits.append(int(text))
    return min(limits) if limits else None
