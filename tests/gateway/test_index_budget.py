"""The prefix indexes' memory budget: from the container's memory limit and the worker count to every
scheduler's prefix index, kept across a hot reload (the sizing: docs/gateway.md, "Several workers")."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import orjson
import pytest
import yaml

from igw.config.build import build_gateway_config
from igw.config.loader import load_gateway_config
from igw.gateway.guards import OpenGuard
from igw.gateway.memory import (
    BODY_DEFAULT_BYTES,
    BODY_MIN_BYTES,
    INDEX_BYTES_PER_BLOCK,
    PARENT_BYTES,
    PROCESS_BASE_BYTES,
    QUEUE_DEFAULT_BYTES,
    RESIDENT_PER_COUNTED,
    memory_plan,
)
from igw.gateway.reload import ConfigReloader, file_digest
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.state import GatewayState
from igw.gateway.worker_count import memory_limit
from igw.scheduling.flow_control import FlowControlSettings
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from tests.gateway.support import config_doc, scheduler

MIB = 1024**2
GIB = 1024**3


@pytest.mark.parametrize("processes", [1, 2])
def test_one_plan_splits_the_share_and_its_parts_full_fit_it(processes: int) -> None:
    """Until session s48 each part was derived from the whole share on its own: the index took the
    share less the base, beside the bodies (twice their budget resident) and the queue - a 1 GiB,
    one-worker pod full came to about 1.6 GiB (896 MiB index, 128 base, 512 bodies, 128 queue)."""
    plan = memory_plan(GIB, processes)
    share = (GIB - (PARENT_BYTES if processes > 1 else 0)) // processes
    assert plan.share == share
    assert plan.total <= share
    assert plan.total > share - INDEX_BYTES_PER_BLOCK  # nothing left idle either
    assert plan.base == PROCESS_BASE_BYTES
    assert plan.queue_bytes == QUEUE_DEFAULT_BYTES
    rest = share - PROCESS_BASE_BYTES - QUEUE_DEFAULT_BYTES
    assert plan.body_resident == plan.body_bytes * RESIDENT_PER_COUNTED == rest // 3 // 2 * 2
    assert plan.index_blocks == (rest - plan.body_resident) // INDEX_BYTES_PER_BLOCK
    assert plan.overcommit_warning() is None


def test_the_default_pod_plan_in_numbers() -> None:
    plan = memory_plan(GIB, 1)
    assert (plan.base, plan.queue_bytes, plan.body_resident, plan.index_bytes) == (
        128 * MIB,
        128 * MIB,
        256 * MIB,
        512 * MIB,
    )
    assert plan.index_blocks == 512 * MIB // INDEX_BYTES_PER_BLOCK  # ~57 pods of 31,250 blocks
    assert plan.describe() == (
        "memory plan per process: share 1024 MiB of 1024 MiB over 1 process(es); base 128 MiB, "
        "prefix index 512 MiB (1789569 KV blocks), request bodies 256 MiB (128 MiB counted), "
        "queue 128 MiB; 1024 MiB when full"
    )


def test_four_workers_in_1_gib_are_below_the_floors_and_the_plan_says_so() -> None:
    """``--workers 4`` in 1 GiB (``auto``'s bound until s48's second round, now 2): 240 MiB each, less
    than the base and the default queue alone. The queue's default is not lowered to fit (the same
    file would queue differently on pods of different sizes); the warning names the field to set."""
    plan = memory_plan(GIB, 4)
    assert plan.share == (GIB - PARENT_BYTES) // 4
    assert plan.body_bytes == BODY_MIN_BYTES
    assert plan.index_blocks == 1
    warning = plan.overcommit_warning()
    assert warning is not None
    assert "the parts full come to 288 MiB, more than this process's share of 240 MiB" in warning
    assert (
        "set spec.extensions.flowControl.maxBytes below its default 128 MiB (reserved even with flow "
        "control off), run fewer workers or raise the memory limit (the other parts are at their floors)"
    ) in warning
    assert plan.queue_bytes == QUEUE_DEFAULT_BYTES  # kept, not shrunk to the share
    # without a queue (the global router) only the floors are left to name
    router = memory_plan(100 * MIB, 1, prefix_index=False, flow_queue=False)
    assert "(the parts are at their floors)" in (router.overcommit_warning() or "")


def test_configured_values_are_kept_and_a_sum_past_the_share_is_named() -> None:
    plan = memory_plan(GIB, 1, body_bytes=512 * MIB, queue_bytes=256 * MIB)
    assert (plan.body_bytes, plan.queue_bytes, plan.index_blocks) == (512 * MIB, 256 * MIB, 1)
    warning = plan.overcommit_warning()
    assert warning is not None
    assert "come to 1408 MiB, more than this process's share of 1024 MiB" in warning
    assert "lower spec.serverLimits.maxBodyBytesHeld or spec.extensions.flowControl.maxBytes" in warning
    # a configured body budget that fits: the index takes what it leaves
    fits = memory_plan(GIB, 1, body_bytes=64 * MIB)
    assert fits.index_bytes == GIB - 2 * 128 * MIB - 128 * MIB
    assert fits.overcommit_warning() is None


def test_without_a_limit_the_plan_bounds_only_the_bodies_and_the_queue() -> None:
    plan = memory_plan(None, 1)
    assert (plan.share, plan.index_blocks, plan.body_bytes) == (None, None, BODY_DEFAULT_BYTES)
    assert plan.overcommit_warning() is None
    assert plan.describe().startswith("memory plan per process: no memory limit; ")


def test_the_router_plan_has_no_index_and_no_queue() -> None:
    """The CDK stack's 2 GiB task: a quarter of it in counted bodies, as before the plan."""
    plan = memory_plan(2 * GIB, 1, prefix_index=False, flow_queue=False)
    assert (plan.index_bytes, plan.queue_bytes, plan.body_bytes) == (0, 0, 512 * MIB)
    assert memory_plan(256 * MIB, 1, prefix_index=False, flow_queue=False).body_bytes == 64 * MIB
    assert "queue 0 MiB;" in plan.describe()
    assert "prefix index none" in plan.describe()


def test_the_queue_default_is_flow_controls_own() -> None:
    assert FlowControlSettings().max_bytes == QUEUE_DEFAULT_BYTES


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


def _flow_config(path: Path, flow: dict[str, object] | None) -> None:
    doc = config_doc([scheduler("pool", "m")])
    if flow is not None:
        doc["spec"]["extensions"]["flowControl"] = flow
    path.write_text(yaml.safe_dump(doc))


async def test_a_reload_that_raises_the_queue_rechecks_the_plan_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Until s48's second round the plan was made at start only: a reload that set
    ``flowControl.maxBytes`` to 512 MiB on a 1 GiB pod (its parts full then 1408 MiB) said nothing.
    The queue is re-checked; the index and body budgets keep their start sizes."""
    path = tmp_path / "igwc.yaml"
    _flow_config(path, None)  # flow control off: its default queue is reserved all the same
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    start = memory_plan(GIB, 1)
    state.memory_plan = start
    reloader = ConfigReloader(path, state=state, loaded_digest=file_digest(path))

    _flow_config(path, {})  # turned on, maxBytes unset: the reserved default, nothing new to say
    with caplog.at_level(logging.INFO, logger="igw.gateway.reload"):
        assert await reloader.check() is True
    assert state.memory_plan is not None
    assert state.memory_plan.queue_bytes == start.queue_bytes
    assert not [r for r in caplog.records if "memory plan" in r.getMessage()]

    _flow_config(path, {"maxBytes": 512 * MIB})
    with caplog.at_level(logging.INFO, logger="igw.gateway.reload"):
        assert await reloader.check() is True
    plan = state.memory_plan
    assert plan is not None
    assert (plan.queue_bytes, plan.queue_configured) == (512 * MIB, True)
    assert (plan.index_bytes, plan.body_bytes) == (start.index_bytes, start.body_bytes)  # not resized
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "the parts full come to 1408 MiB, more than this process's share of 1024 MiB" in w
        and "lower spec.extensions.flowControl.maxBytes" in w
        for w in warnings
    ), warnings
    assert any("the prefix index keeps its size from the start" in r.getMessage() for r in caplog.records)

    caplog.clear()
    _flow_config(path, {"maxBytes": 64 * MIB})  # back within the share: logged, no warning
    with caplog.at_level(logging.INFO, logger="igw.gateway.reload"):
        assert await reloader.check() is True
    assert state.memory_plan is not None
    assert state.memory_plan.queue_bytes == 64 * MIB
    assert state.memory_plan.overcommit_warning() is None
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("flow", "configured"),
    [({}, False), ({"maxBytes": QUEUE_DEFAULT_BYTES}, False), ({"maxBytes": 96 * MIB}, True), (None, False)],
)
def test_the_start_plan_calls_max_bytes_configured_only_where_the_file_sets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flow: dict[str, object] | None, configured: bool
) -> None:
    """The loader fills ``flowControl.maxBytes`` in from the schema's default once ``flowControl`` is
    present: the start log and the WARNING called that default configured, and told the operator to
    lower a value the file never set (until session s48). In operator mode the API server writes the
    CRD's default (128 MiB) into the object: that value is not configured either (until session s49);
    a value other than the default is."""
    from igw import launch

    path = tmp_path / "igwc.yaml"
    _flow_config(path, flow)
    config = load_gateway_config(path)
    monkeypatch.setattr(launch, "memory_limit", lambda: GIB // 4)  # too small: the plan warns
    plan = launch._memory_plan(config, launch.LaunchOptions(config_path=str(path)), 1)
    stated = flow.get("maxBytes", QUEUE_DEFAULT_BYTES) if flow is not None else QUEUE_DEFAULT_BYTES
    assert (plan.queue_bytes, plan.queue_configured) == (stated, configured)
    assert ("(flowControl.maxBytes)" in plan.describe()) is configured
    warning = plan.overcommit_warning()
    assert warning is not None
    if configured:
        assert "lower spec.extensions.flowControl.maxBytes" in warning
    else:
        assert "set spec.extensions.flowControl.maxBytes below its default 128 MiB" in warning


def test_the_queue_default_the_plan_counts_is_the_schemas_default() -> None:
    """``configured_queue_bytes`` takes a value equal to :data:`QUEUE_DEFAULT_BYTES` for the API
    server's filled-in default: the two must stay equal."""
    schema = orjson.loads((Path(__file__).parents[2] / "addon" / "configuration-schema.json").read_bytes())
    flow = schema["definitions"]["InferenceGatewayConfigSpec"]["properties"]["extensions"]["properties"]
    assert flow["flowControl"]["properties"]["maxBytes"]["default"] == QUEUE_DEFAULT_BYTES
