"""The prefix indexes' memory budget: from the container's memory limit and the worker count to every
scheduler's prefix index, kept across a hot reload (the sizing: docs/gateway.md, "Several workers")."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from igw.config.build import build_gateway_config
from igw.gateway.guards import OpenGuard
from igw.gateway.memory import (
    INDEX_BYTES_PER_BLOCK,
    PARENT_BYTES,
    PROCESS_BASE_BYTES,
    index_block_budget,
)
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.state import GatewayState
from igw.gateway.worker_count import memory_limit
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from tests.gateway.support import config_doc, scheduler

MIB = 1024**2
GIB = 1024**3


@pytest.mark.parametrize(
    ("limit", "processes", "blocks"),
    [
        (None, 1, None),
        (GIB, 1, (GIB - PROCESS_BASE_BYTES) // INDEX_BYTES_PER_BLOCK),
        (2 * GIB, 4, ((2 * GIB - PARENT_BYTES) // 4 - PROCESS_BASE_BYTES) // INDEX_BYTES_PER_BLOCK),
        (64 * MIB, 1, 1),  # less than a process's own base: at least one block, never zero
    ],
)
def test_each_process_gets_its_share_of_the_limit_less_its_base(
    limit: int | None, processes: int, blocks: int | None
) -> None:
    assert index_block_budget(limit, processes) == blocks


def test_the_default_pod_fits_about_a_hundred_pods_at_the_default_capacity() -> None:
    budget = index_block_budget(GIB, 1)
    assert budget is not None
    assert 90 < budget / 31_250 < 110  # the chart's 1 GiB, one worker (the measured sizing's figure)


def test_the_memory_limit_is_read_from_the_cgroup(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/kubepods/pod1/c1\n")
    leaf = tmp_path / "sys/fs/cgroup/kubepods/pod1/c1"
    leaf.mkdir(parents=True)
    assert memory_limit(tmp_path) is None
    (leaf / "memory.max").write_text(str(GIB))
    (leaf.parent / "memory.max").write_text(str(GIB // 2))  # a smaller limit on the pod
    assert memory_limit(tmp_path) == GIB // 2


def _scorers(runtime: GatewayRuntime) -> dict[str, list[PrefixCacheScorer]]:
    return {
        name: [p for p in sr.scheduler.plugins if isinstance(p, PrefixCacheScorer)]
        for name, sr in runtime.schedulers.items()
    }


def test_the_schedulers_share_the_budget_and_a_reload_keeps_it() -> None:
    config = build_gateway_config(config_doc([scheduler("a", "model-a"), scheduler("b", "model-b")]))
    state = GatewayState(
        config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0), index_blocks=1000
    )
    scorers = _scorers(state.runtime)
    assert {name: [s.block_budget for s in found] for name, found in scorers.items()} == {
        "a": [500],
        "b": [500],
    }
    reloaded = build_gateway_config(
        config_doc([scheduler("a", "model-a"), scheduler("b", "model-b"), scheduler("c", "model-c")])
    )
    state.apply_config(reloaded)
    assert state.runtime.index_blocks == 1000
    assert {name: [s.block_budget for s in found] for name, found in _scorers(state.runtime).items()} == {
        "a": [333],
        "b": [333],
        "c": [333],
    }


def test_without_a_limit_the_indexes_are_unbounded() -> None:
    config = build_gateway_config(config_doc([scheduler("a", "model-a")]))
    runtime = GatewayRuntime(config, rng=random.Random(0), clock=lambda: 0.0)
    assert [s.block_budget for s in _scorers(runtime)["a"]] == [None]
