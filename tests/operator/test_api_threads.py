"""The operator's API calls run in its own pool of threads, sized by ``igw operator --api-threads``."""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from pathlib import Path

import pytest

from igw.cli import operator as operator_cli
from igw.operator.kube import API_THREAD_PREFIX, MAX_API_THREADS, Kube, default_api_threads
from tests.fakes.kube_api import FakeKubeApiServer


def test_api_calls_run_in_the_operators_own_pool(cluster: FakeKubeApiServer) -> None:
    """Every call runs in one of the client's ``threads`` named workers, not in asyncio's default
    pool, whose size (``min(32, cores + 4)``) the node the pod lands on set, and which every other
    ``asyncio.to_thread`` of the process shares."""
    seen: set[str] = set()
    kube = Kube(cluster.api_client(), threads=2)

    def name() -> None:
        seen.add(threading.current_thread().name)

    async def calls() -> None:
        await asyncio.gather(*(kube.outside(name) for _ in range(20)))

    try:
        asyncio.run(calls())
    finally:
        kube.close()
    assert all(thread.startswith(API_THREAD_PREFIX) for thread in seen), seen
    assert 1 <= len(seen) <= 2


def test_the_default_pool_is_as_large_as_asyncios(cluster: FakeKubeApiServer) -> None:
    kube = Kube(cluster.api_client())
    kube.close()
    assert kube.threads == default_api_threads()


def _cgroup_v2(root: Path, cpu_max: str) -> None:
    """A cgroup v2 container whose ``cpu.max`` is ``cpu_max`` (as tests/gateway/test_worker_count.py)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text("0::/kubepods/pod1/c1\n")
    leaf = root / "sys/fs/cgroup/kubepods/pod1/c1"
    leaf.mkdir(parents=True)
    (leaf / "cpu.max").write_text(cpu_max)


@pytest.mark.parametrize(
    ("cpu_max", "cores", "threads"),
    [
        ("100000 100000\n", 96, 5),  # a 1-core limit on a 96-core node: 1 + 4, not 32
        ("150000 100000\n", 96, 6),  # 1.5 cores round up to 2
        ("max 100000\n", 96, 32),  # no limit: the node's cores, capped at 32
        ("800000 100000\n", 2, 6),  # a limit above the node's cores: the cores
    ],
)
def test_the_default_pool_follows_the_pods_cpu_limit(
    tmp_path: Path, cpu_max: str, cores: int, threads: int
) -> None:
    _cgroup_v2(tmp_path, cpu_max)
    assert default_api_threads(root=tmp_path, cores=cores) == threads


def test_without_a_cgroup_the_default_pool_follows_the_cores(tmp_path: Path) -> None:
    assert default_api_threads(root=tmp_path, cores=3) == 7
    assert default_api_threads(root=tmp_path) == min(32, (os.cpu_count() or 1) + 4)


@pytest.mark.parametrize("threads", [0, MAX_API_THREADS + 1])
def test_a_pool_size_out_of_range_is_refused(cluster: FakeKubeApiServer, threads: int) -> None:
    with pytest.raises(ValueError, match=f"Kube threads: expected 1 to {MAX_API_THREADS}, got {threads}"):
        Kube(cluster.api_client(), threads=threads)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="igw operator", exit_on_error=False)
    operator_cli.add_arguments(parser)
    return parser


@pytest.mark.parametrize("value", ["0", "257", "many"])
def test_the_api_threads_option_refuses_a_bad_count_naming_it(value: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=r"argument --api-threads: expected a whole number"):
        _parser().parse_args(["--api-threads", value])


def test_the_api_threads_option_reaches_the_operator_options() -> None:
    """The option's bound is the operator's (the CLI does not import it to build its parser)."""
    assert operator_cli.API_THREAD_COUNT.maximum == MAX_API_THREADS
    assert operator_cli.operator_options(_parser().parse_args([])).api_threads is None
    assert operator_cli.operator_options(_parser().parse_args(["--api-threads", "4"])).api_threads == 4
