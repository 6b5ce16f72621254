"""The router's hot reload of its configuration file (:mod:`igw.global_router.reload`, since session
s50; before, ``igw global serve`` read the file once and ignored every edit without a word): an edit
that adds a cluster routes to it, a bad edit keeps the running configuration and is logged naming
its problems, a restart-only edit is applied but for the fields named in one WARNING."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from igw.gateway.serving import serve_app
from igw.global_router.config import CONFIG_ENV, GlobalRouterConfig, load_global_config
from igw.global_router.reload import GlobalConfigReloader
from igw.global_router.server import ROUTER_KEY, SESSION_KEY, ClusterPools, create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import MODEL, global_doc, global_serve

FAILOVER = {"failureThreshold": 3, "ejectionSeconds": 5, "slowStartSeconds": 30, "maxEjectionPercent": 100}
"""The failover settings the clock tests start with."""


class Clock:
    """The fleet's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _doc(*servers: FakeModelServer, **spec: Any) -> dict[str, Any]:
    clusters = [
        {"name": s.name, "region": "east", "endpoint": f"http://{s.key}", "models": [MODEL]} for s in servers
    ]
    return global_doc(clusters, heartbeats={"required": False}, **spec)


def _write(path: Path, doc: dict[str, Any]) -> None:
    """As a deploy script or ConfigMap does: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(yaml.safe_dump(doc))
    fresh.replace(path)


def _no_extra_checks(config: GlobalRouterConfig) -> Any:
    from igw.gateway.limits_config import server_limits

    return server_limits(config.server_limits, {}, path="spec.serverLimits")


def _reloads(record: logging.LogRecord) -> bool:
    return record.name == "igw.global_router.reload"


async def _send(http: aiohttp.ClientSession, url: str, n: int) -> None:
    for _ in range(n):
        async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
            assert resp.status == 200, await resp.text()
            await resp.read()


async def _reloaded_router(path: Path, clock: Clock | None = None) -> tuple[Any, GlobalConfigReloader]:
    config = load_global_config(path)
    app = create_global_app(config, read_heartbeats=False, clock=clock or time.monotonic)
    return app, GlobalConfigReloader(app, path, validate=_no_extra_checks)


def _failover_doc(**failover: Any) -> dict[str, Any]:
    """Three clusters serving :data:`MODEL` (none reached: the tests record outcomes)."""
    return global_doc(heartbeats={"required": False}, failover={**FAILOVER, **failover})


async def test_an_edit_that_adds_a_cluster_routes_to_it_and_one_that_removes_a_cluster_stops(
    tmp_path: Path,
) -> None:
    config = tmp_path / "global.yaml"
    async with running(FakeModelServer("a"), FakeModelServer("b")) as (a, b):
        _write(config, _doc(a))
        app, reloader = await _reloaded_router(config)
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            await _send(http, url, 4)
            assert (len(a.received), len(b.received)) == (4, 0)
            _write(config, _doc(b))  # b added, a removed
            assert await reloader.check() is True
            await _send(http, url, 4)
            assert (len(a.received), len(b.received)) == (4, 4)
            fleet = app[ROUTER_KEY].fleet
            assert list(fleet.health) == ["b"]
            metrics = await (await http.get(url + "/metrics")).text()
            assert 'igw_global_config_reloads_total{result="applied"} 1.0' in metrics
            assert 'igw_global_cluster_available{cluster="a"' not in metrics  # its series gone with it


async def test_a_bad_edit_keeps_the_running_config_and_logs_its_problems_by_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "global.yaml"
    async with running(FakeModelServer("a"), FakeModelServer("b")) as (a, b):
        _write(config, _doc(a))
        app, reloader = await _reloaded_router(config)
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            bad = _doc(b, routing={"policy": "cheapest"})
            bad["spec"]["clusters"][0]["endpoint"] = "ftp://b"
            _write(config, bad)
            with caplog.at_level(logging.ERROR, logger="igw.global_router.reload"):
                assert await reloader.check() is False
            (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert "configuration reload rejected, the running configuration stays" in line
            assert str(config) in line
            assert "spec.routing.policy" in line
            assert "spec.clusters[0].endpoint" in line
            await _send(http, url, 3)
            assert (len(a.received), len(b.received)) == (3, 0)
            metrics = await (await http.get(url + "/metrics")).text()
            assert 'igw_global_config_reloads_total{result="rejected"} 1.0' in metrics
            # as tier 1's: a gauge the alert reads (the counter's increase forgets), /readyz names why
            assert "igw_global_config_last_reload_successful 0.0" in metrics
            async with http.get(url + "/readyz") as resp:
                assert resp.status == 200  # still ready: it serves the running configuration
                assert "spec.routing.policy" in (await resp.json())["config_reload_error"]
            assert await reloader.check() is None  # the same bad file: reported once
            _write(config, _doc(b))  # fixed: applied
            assert await reloader.check() is True
            metrics = await (await http.get(url + "/metrics")).text()
            assert "igw_global_config_last_reload_successful 1.0" in metrics
            async with http.get(url + "/readyz") as resp:
                assert "config_reload_error" not in await resp.json()
            await _send(http, url, 1)
            assert len(b.received) == 1


async def test_a_restart_only_edit_warns_naming_each_field_and_applies_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "global.yaml"
    async with running(FakeModelServer("a")) as (a,):
        _write(config, _doc(a))
        app, reloader = await _reloaded_router(config)
        router = app[ROUTER_KEY]
        async with serve_app(app, host="127.0.0.1", port=0):
            edited = _doc(
                a,
                routing={"maxAttempts": 5},
                failover={"heartbeatStalenessSeconds": 9, "ejectionSeconds": 9},
                serverLimits={"keepAliveTimeout": "30s", "maxBodyBytesHeld": 1048576},
                accessLog={"enabled": False},
            )
            _write(config, edited)
            with caplog.at_level(logging.INFO, logger="igw.global_router.reload"):
                assert await reloader.check() is True
            (warning,) = [
                r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and _reloads(r)
            ]
            assert warning.startswith(
                "spec.accessLog.enabled, spec.failover.heartbeatStalenessSeconds, "
                "spec.serverLimits.keepAliveTimeout "
                "changed in "
            )
            assert "restart-only, the running values stay until igw global serve restarts" in warning
            # the live fields applied, the restart-only ones as the process started
            assert router.config.routing.max_attempts == 5
            assert router.body_budget.limit == 1048576
            assert router.config.failover.heartbeat_staleness_s == 3.0
            assert router.config.failover.ejection_s == 9.0  # live since round 3
            assert router.config.access_log.enabled is True
            assert "keepAliveTimeout" not in router.config.server_limits
            caplog.clear()
            _write(config, _doc(a))  # back as started: no warning
            with caplog.at_level(logging.INFO, logger="igw.global_router.reload"):
                assert await reloader.check() is True
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING and _reloads(r)]
            assert any("back to what this process runs with" in r.getMessage() for r in caplog.records)


async def test_igw_global_serve_reloads_its_file_and_routes_to_an_added_cluster(tmp_path: Path) -> None:
    """The real command: the file watched from the start, an edit applied within the interval."""
    lines: list[str] = []
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        global_serve(tmp_path, _doc(a), stderr_lines=lines) as url,
        aiohttp.ClientSession() as http,
    ):
        await _send(http, url, 2)
        _write(tmp_path / "global.yaml", _doc(a, b, failover={"heartbeatStalenessSeconds": 7}))

        async def applied() -> bool:
            async with http.get(url + "/metrics") as resp:
                return 'igw_global_config_reloads_total{result="applied"} 1.0' in await resp.text()

        deadline = asyncio.get_running_loop().time() + 15
        while not await applied():
            assert asyncio.get_running_loop().time() < deadline, "the edit was not applied"
            await asyncio.sleep(0.1)
        for _ in range(20):
            await _send(http, url, 1)
            if b.received:
                break
        assert b.received, "no request reached the added cluster"
    log = "".join(lines)
    assert "reloaded when it changes" in log
    assert "spec.failover.heartbeatStalenessSeconds changed in" in log


async def test_a_configuration_from_the_environment_is_not_watched_and_the_start_says_so(
    tmp_path: Path,
) -> None:
    """The CDK stack's case: the document in :data:`CONFIG_ENV` (the name the stack imports), written
    to the file ``--config`` names. That file is a copy, so an edit of it is not reloaded, and the
    start says where the configuration came from and how to change it."""
    lines: list[str] = []
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        global_serve(tmp_path, _doc(a), env={CONFIG_ENV: yaml.safe_dump(_doc(a))}, stderr_lines=lines) as url,
        aiohttp.ClientSession() as http,
    ):
        _write(tmp_path / "global.yaml", _doc(b))
        await asyncio.sleep(2.5)  # over two checks of the default interval: none is made
        await _send(http, url, 2)
        assert (len(a.received), len(b.received)) == (2, 0)
    log = "".join(lines)
    assert (
        f"configuration read from {CONFIG_ENV} (a new task definition deploys new tasks): not reloaded; "
        "restart the router to change it" in log
    )
    assert "reloaded when it changes" not in log


async def test_edits_adding_and_removing_clusters_leave_no_pool_of_a_removed_one_open(tmp_path: Path) -> None:
    """Since session s50 (round 2): a removed cluster's pool is closed once the requests in flight at
    its removal have ended; before, each stayed until the router stopped, one per name ever
    configured (20 edits each adding a cluster and removing the one before left 21 pools)."""
    config = tmp_path / "global.yaml"
    async with running(FakeModelServer("a")) as (a,):
        _write(config, _doc(a))
        app, reloader = await _reloaded_router(config)
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            pools = app[SESSION_KEY]
            for i in range(20):
                doc = _doc(a)
                doc["spec"]["clusters"].append(
                    {
                        "name": f"renamed-{i}",
                        "region": "east",
                        "endpoint": "http://127.0.0.1:9",
                        "models": [MODEL],
                    }
                )
                _write(config, doc)
                assert await reloader.check() is True
            await asyncio.sleep(0)  # the closers of the pools removed with no request in flight run
            assert len(pools) == 2  # a's and the last edit's
            _write(config, _doc(a))
            assert await reloader.check() is True
            await _send(http, url, 2)  # a's pool is the same one throughout
            assert len(pools) == 1
            with pytest.raises(KeyError):
                pools.of("renamed-19")


async def test_a_removed_clusters_pool_closes_when_the_requests_in_flight_at_its_removal_end() -> None:
    """The pool stays usable while a request that was in flight at the removal may still try the
    cluster (its plan named it), and closes when that request ends, or after ``within_s`` at most;
    a cluster brought back before then takes its pool back."""
    release = asyncio.Event()
    request = asyncio.create_task(release.wait())
    later = asyncio.create_task(asyncio.sleep(3600))
    pools = ClusterPools(["a", "b"])
    b = pools.of("b")
    pools.reconcile(["a"], in_flight=[request], within_s=3600)
    await asyncio.sleep(0)
    assert pools.of("b") is b
    assert len(pools) == 2
    pools.reconcile(["a", "b"], in_flight=[], within_s=3600)  # back before it closed: the same pool
    assert pools.of("b") is b
    pools.reconcile(["a"], in_flight=[request, later], within_s=3600)
    release.set()
    await request
    await asyncio.sleep(0)
    assert len(pools) == 2  # the other request is still running
    later.cancel()
    await asyncio.gather(later, return_exceptions=True)
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(pools) == 1
    assert b._closed
    stuck = asyncio.create_task(asyncio.sleep(3600))
    a_pool = pools.of("a")
    pools.reconcile(["c"], in_flight=[stuck], within_s=0.05)  # a request outliving maxRequestSeconds
    await asyncio.sleep(0.3)
    assert len(pools) == 1
    assert a_pool._closed
    stuck.cancel()
    await pools.close()


async def test_a_failover_edit_applies_to_the_next_drain_and_a_drain_under_way_keeps_its_end(
    tmp_path: Path,
) -> None:
    """Since session s50 (round 3) ``failureThreshold``, ``ejectionSeconds``, ``slowStartSeconds`` and
    ``maxEjectionPercent`` are live (before, restart-only: an edit was named in a WARNING and not
    applied). An ejection's end is set when it starts: one under way keeps it."""
    config = tmp_path / "global.yaml"
    clock = Clock()
    _write(config, _failover_doc())
    app, reloader = await _reloaded_router(config, clock)
    fleet = app[ROUTER_KEY].fleet
    for _ in range(3):
        fleet.record_outcome("east-a", ok=False, model=MODEL)
    assert fleet.health["east-a"].model_ejection_ends(MODEL) == 105.0
    _write(config, _failover_doc(failureThreshold=2, ejectionSeconds=20))
    assert await reloader.check() is True
    for _ in range(2):  # the new threshold: two failed answers drain the next cluster
        fleet.record_outcome("east-b", ok=False, model=MODEL)
    assert fleet.health["east-b"].model_ejection_ends(MODEL) == 120.0  # for the new ejectionSeconds
    assert fleet.health["east-a"].model_ejection_ends(MODEL) == 105.0  # the drain under way: its end
    clock.now = 105.0
    assert not fleet.health["east-a"].ejected(now=clock.now, model=MODEL)
    assert fleet.health["east-b"].ejected(now=clock.now, model=MODEL)


async def test_a_slow_start_under_way_keeps_its_window_and_the_next_ramps_over_the_new_one(
    tmp_path: Path,
) -> None:
    """``slowStartSeconds`` is read at each ramp's share: without its window pinned at the reload, an
    edit from 30 s to 300 s took a cluster 20 s into its slow start from 70 % of its traffic to 16 %
    (and one from 300 s to 30 s to full traffic at once)."""
    config = tmp_path / "global.yaml"
    clock = Clock()
    _write(config, _failover_doc())
    app, reloader = await _reloaded_router(config, clock)
    fleet = app[ROUTER_KEY].fleet
    a, b = fleet.health["east-a"], fleet.health["east-b"]
    for _ in range(3):
        fleet.record_outcome("east-a", ok=False, unreachable=True)  # the cluster out: its own ramp
        fleet.record_outcome("east-b", ok=False, model=MODEL)  # out for the model: the model's ramp
    clock.now = 105.0
    fleet.evaluate()  # both back, ramping over 30 s
    clock.now = 125.0
    assert a.ramp(now=clock.now) == pytest.approx(0.7)
    assert b.ramp(now=clock.now, model=MODEL) == pytest.approx(0.7)
    _write(config, _failover_doc(slowStartSeconds=300))
    assert await reloader.check() is True
    assert a.ramp(now=clock.now) == pytest.approx(0.7)  # under way: its 30 s
    assert b.ramp(now=clock.now, model=MODEL) == pytest.approx(0.7)
    clock.now = 135.0
    fleet.evaluate()
    assert a.ramp(now=clock.now) == 1.0
    assert b.ramp(now=clock.now, model=MODEL) == 1.0
    for _ in range(3):  # drained again: the next slow start is over the new 300 s
        fleet.record_outcome("east-a", ok=False, unreachable=True)
        fleet.record_outcome("east-b", ok=False, model=MODEL)
    clock.now = 140.0
    fleet.evaluate()
    clock.now = 160.0
    assert a.ramp(now=clock.now) == pytest.approx(0.16)
    assert b.model_ejection_ends(MODEL) == 145.0  # its second in a row: twice ejectionSeconds
    fleet.evaluate()
    clock.now = 165.0
    assert b.ramp(now=clock.now, model=MODEL) == pytest.approx(0.16)
