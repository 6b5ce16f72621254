"""One configuration change, applied by every worker of a group at once: worker 0's reloader checks the
file every interval and announces a change; the others check when told (and, as a safety net, every
``FOLLOWER_POLL_FACTOR`` intervals), so two workers no longer serve different configurations for up
to an interval after a change."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from igw.config.loader import load_gateway_config
from igw.gateway.guards import OpenGuard
from igw.gateway.reload import ConfigReloader
from igw.gateway.scrape_share import ScrapeFollower, share_config_reloads
from igw.gateway.state import GatewayState
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.gateway.worker_pair import Worker


def _write(path: Path, model: str) -> None:
    path.write_text(yaml.safe_dump(config_doc([scheduler("pool", model)])))  # reloads every 100 ms


def _model(state: GatewayState) -> str:
    return state.runtime.config.schedulers[0].model_name


def _reloader(tmp_path: Path) -> tuple[ConfigReloader, GatewayState, Path]:
    path = tmp_path / "igwc.yaml"
    _write(path, "first")
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    return ConfigReloader(path, state=state), state, path


async def test_worker_0_reloads_every_interval_and_announces_the_change(tmp_path: Path) -> None:
    reloader, state, path = _reloader(tmp_path)
    announced: list[str] = []
    reloader.on_changed = lambda: announced.append(_model(state))
    reloader.start()
    try:
        _write(path, "second")
        await wait_for(lambda: _model(state) == "second", what="the reload")
        await wait_for(lambda: announced == ["second"], what="the announcement, after applying")
        path.write_text("spec: [not, a, config")
        await wait_for(lambda: len(announced) == 2, what="a rejected change announced too")
        assert _model(state) == "second"
    finally:
        await reloader.stop()


async def test_a_following_worker_reloads_when_told_not_on_its_own(tmp_path: Path) -> None:
    reloader, state, path = _reloader(tmp_path)
    reloader.follows = True
    reloader.start()
    try:
        _write(path, "second")
        await asyncio.sleep(0.5)  # five reload intervals: worker 0 would have applied it by now
        assert _model(state) == "first"
        reloader.nudge()
        await wait_for(lambda: _model(state) == "second", what="the reload once nudged")
    finally:
        await reloader.stop()


class Nudges:
    """A reloader stand-in that counts nudges."""

    def __init__(self) -> None:
        self.follows = False
        self.on_changed: Callable[[], None] | None = None
        self.count = 0

    def nudge(self) -> None:
        self.count += 1


async def test_worker_0_s_announcement_nudges_the_other_workers(tmp_path: Path) -> None:
    leader, follower = Worker(0, tmp_path), Worker(1, tmp_path)
    await leader.start()
    await follower.start()
    try:
        assert isinstance(follower.service, ScrapeFollower)
        assert leader.service is not None
        await asyncio.wait_for(follower.service.connected.wait(), 10)
        leading, following = Nudges(), Nudges()
        share_config_reloads(leader.service, leading)
        share_config_reloads(follower.service, following)
        assert (leading.follows, following.follows) == (False, True)
        assert leading.on_changed is not None
        assert following.on_changed is None  # a follower announces nothing
        leading.on_changed()
        await wait_for(lambda: following.count == 1, what="the follower nudged")
        leading.on_changed()
        await wait_for(lambda: following.count == 2, what="nudged again")
        assert leading.count == 0
    finally:
        await follower.close()
        await leader.close()


async def test_the_gauge_says_whether_the_running_config_is_the_file_s(tmp_path: Path) -> None:
    """``igw_config_last_reload_successful``: 1 from the start, 0 from a rejected change until a change
    is applied - what a counter of rejections cannot say once its alert window has passed (each worker
    of a group exports its own, labelled by the merge)."""
    reloader, state, path = _reloader(tmp_path)

    def ok() -> float | None:
        return state.metrics.registry.get_sample_value("igw_config_last_reload_successful")

    assert ok() == 1.0
    path.write_text("spec: [not, a, config")
    assert await reloader.check() is False
    assert ok() == 0.0
    assert await reloader.check() is None  # unchanged: still the older configuration
    assert ok() == 0.0
    _write(path, "second")
    assert await reloader.check() is True
    assert ok() == 1.0
