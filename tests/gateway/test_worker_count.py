"""``--workers auto``'s count from a laid-out ``/proc/self/cgroup`` and ``/sys/fs/cgroup`` (cgroup v1
and v2, limits on ancestors, namespaced containers, unreadable or malformed files) and the CPU request."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from igw.gateway.memory import (
    BODY_MIN_BYTES,
    INDEX_MIN_BYTES,
    PARENT_BYTES,
    PROCESS_MIN_BYTES,
    memory_plan,
)
from igw.gateway.worker_count import CPU_REQUEST_ENV, MAX_WORKERS, auto_workers

GIB = 1024**3
CHART_VALUES = Path(__file__).resolve().parents[2] / "addon/chart/inference-gateway/values.yaml"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _v2(root: Path, group: str = "/kubepods/pod1/c1") -> Path:
    _write(root, "proc/self/cgroup", f"0::{group}\n")
    leaf = root / "sys/fs/cgroup" / group.lstrip("/")
    leaf.mkdir(parents=True, exist_ok=True)
    return leaf


def _count(root: Path, cpus: int = 16, env: dict[str, str] | None = None) -> int:
    return auto_workers(root=root, environ=env or {}, affinity=lambda: cpus).workers


def test_without_cgroup_files_the_affinity_mask_decides(tmp_path: Path) -> None:
    assert _count(tmp_path, cpus=6) == 6
    budget = auto_workers(root=tmp_path, environ={}, affinity=lambda: 6)
    assert (budget.cpu_limit, budget.cpu_request, budget.memory_limit_bytes) == (None, None, None)
    assert budget.describe() == "--workers auto: 6 workers (6 CPUs in the affinity mask)"


def test_v2_quota_is_rounded_up_and_the_smallest_ancestor_wins(tmp_path: Path) -> None:
    leaf = _v2(tmp_path)
    (leaf / "cpu.max").write_text("250000 100000\n")  # 2.5 cores on the container
    assert _count(tmp_path) == 3
    (leaf.parent / "cpu.max").write_text("150000 100000\n")  # 1.5 on the pod above it
    assert _count(tmp_path) == 2
    (leaf / "cpu.max").write_text("max 100000\n")
    assert _count(tmp_path) == 2  # the pod's limit still applies
    budget = auto_workers(root=tmp_path, environ={}, affinity=lambda: 16)
    assert budget.cpu_limit == 1.5
    assert "cgroup CPU limit 1.5" in budget.describe()


def test_a_namespaced_container_reads_the_mount_root(tmp_path: Path) -> None:
    _v2(tmp_path, "/")
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "400000 100000")
    assert _count(tmp_path) == 4


def test_a_group_path_missing_under_the_mount_falls_back_to_the_mount(tmp_path: Path) -> None:
    _write(tmp_path, "proc/self/cgroup", "0::/elsewhere/not-mounted\n")
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "100000 100000")
    assert _count(tmp_path) == 1


def test_v1_cfs_quota_on_a_combined_mount(tmp_path: Path) -> None:
    _write(tmp_path, "proc/self/cgroup", "4:memory:/pod\n3:cpu,cpuacct:/pod\n0::/\n")
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us", "300000")
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us", "100000")
    _write(tmp_path, "sys/fs/cgroup/memory/pod/memory.limit_in_bytes", "9223372036854771712")
    assert _count(tmp_path) == 3  # the v1 "no limit" memory value is no bound
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us", "-1")
    assert _count(tmp_path) == 16


def test_memory_limit_allows_the_workers_whose_plan_fits(tmp_path: Path) -> None:
    leaf = _v2(tmp_path)
    (leaf / "memory.max").write_text(str(GIB))
    assert _count(tmp_path) == (GIB - PARENT_BYTES) // PROCESS_MIN_BYTES == 2
    (leaf / "memory.max").write_text(str(PROCESS_MIN_BYTES - 1))
    assert _count(tmp_path) == 1  # never fewer than one
    (leaf / "memory.max").write_text("max")
    assert _count(tmp_path) == 16


def test_the_cpu_request_bounds_a_pod_without_a_limit(tmp_path: Path) -> None:
    assert _count(tmp_path, env={CPU_REQUEST_ENV: "500"}) == 1
    assert _count(tmp_path, env={CPU_REQUEST_ENV: "2001"}) == 3
    assert _count(tmp_path, cpus=2, env={CPU_REQUEST_ENV: "8000"}) == 2  # not above the affinity mask
    budget = auto_workers(root=tmp_path, environ={CPU_REQUEST_ENV: "1500"}, affinity=lambda: 16)
    assert budget.cpu_request == 1.5
    assert f"CPU request 1.5 ({CPU_REQUEST_ENV})" in budget.describe()


@pytest.mark.parametrize("text", ["0", "", "-1000", "1.5", "2 cores", "\u00b2"])
def test_an_unset_or_unusable_request_is_no_bound(tmp_path: Path, text: str) -> None:
    """The downward API reports 0 for a container without a CPU request."""
    assert _count(tmp_path, env={CPU_REQUEST_ENV: text}) == 16


@pytest.mark.parametrize(
    "cpu_max", ["", "max", "garbage", "0 100000", "100000 0", "-5 100000", "1 2 3", "\xff\xfe", "\u00b2 1"]
)
def test_malformed_cgroup_files_are_no_bound(tmp_path: Path, cpu_max: str) -> None:
    leaf = _v2(tmp_path)
    (leaf / "cpu.max").write_bytes(cpu_max.encode("latin-1"))
    (leaf / "memory.max").write_text("lots")
    _write(tmp_path, "proc/self/cgroup", "garbage line\n0::/kubepods/pod1/c1\n")
    assert _count(tmp_path) == 16


def test_never_more_than_the_maximum(tmp_path: Path) -> None:
    assert _count(tmp_path, cpus=512) == MAX_WORKERS


def test_this_machine_is_read_without_error() -> None:
    """The real files: whatever they say, the count is within the affinity mask and the maximum."""
    import os

    budget = auto_workers()
    assert 1 <= budget.workers <= min(len(os.sched_getaffinity(0)), MAX_WORKERS)
    assert budget.describe().startswith(f"--workers auto: {budget.workers} worker")


@pytest.mark.parametrize("gib", [1, 2, 4])
@pytest.mark.parametrize("cpus", [1, 2, 4, 8, 16])
def test_auto_never_picks_a_count_whose_memory_plan_warns(tmp_path: Path, gib: int, cpus: int) -> None:
    """Until session s48's second round ``auto`` allowed 256 MiB per worker: four workers in 1 GiB,
    each share (240 MiB) below the plan's base and default queue (256 MiB), so that pod started with
    the overcommit WARNING every time. The count it picks now fits, every part at or above its
    minimum, and one more worker (where the CPUs allow it) would not."""
    leaf = _v2(tmp_path)
    (leaf / "memory.max").write_text(str(gib * GIB))
    workers = _count(tmp_path, cpus=cpus)
    plan = memory_plan(gib * GIB, workers)
    assert plan.overcommit_warning() is None
    assert plan.body_bytes >= BODY_MIN_BYTES
    assert plan.index_bytes is not None
    assert plan.index_bytes >= INDEX_MIN_BYTES
    assert workers == min(cpus, {1: 2, 2: 5, 4: 11}[gib])
    if workers < cpus:  # the memory bound decided: one more would go below the minimum
        share = memory_plan(gib * GIB, workers + 1).share
        assert share is not None
        assert share < PROCESS_MIN_BYTES
    assert (
        f"at {PROCESS_MIN_BYTES // 2**20} MiB per worker"
        in auto_workers(root=tmp_path, environ={}, affinity=lambda: cpus).describe()
    )


def test_the_charts_default_pod_starts_without_the_overcommit_warning(tmp_path: Path) -> None:
    """The chart's default resources (addon/chart values), as the pod's cgroup and downward API
    show them: the worker count ``auto`` picks there has a plan that fits."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert values["gateway"]["workers"] == "auto"
    requests, limits = values["resources"]["requests"], values["resources"]["limits"]
    memory = int(str(limits["memory"]).removesuffix("Gi")) * GIB
    millicores = int(str(requests["cpu"]).removesuffix("m"))
    leaf = _v2(tmp_path)
    (leaf / "memory.max").write_text(str(memory))
    (leaf / "cpu.max").write_text(f"{int(limits['cpu']) * 100000} 100000")
    budget = auto_workers(root=tmp_path, environ={CPU_REQUEST_ENV: str(millicores)}, affinity=lambda: 16)
    assert budget.memory_limit_bytes == memory
    assert memory_plan(memory, budget.workers).overcommit_warning() is None
