"""What the hot reload takes for the running configuration's file, and when it looks again.

An edit made while the gateway starts is applied, not lost: ``igw serve`` loads the file, then spends
seconds starting (imports, the request guard, the listeners; with ``--workers`` every worker does,
and with ``--config-map`` worker 0's first ConfigMap read rewrites the file in that time). The
reloader took the file's digest only once the app was up, so such an edit counted as the running
configuration: it was never applied, by any worker, until the file changed again (a real ``igw serve
--workers 2`` edited after both workers loaded kept serving the old model for good while the file
named the new one).

A file that cannot be read for a while is reported once, and read again when it is back: the error
was logged and counted every interval, and stayed in ``/readyz`` for good once the file came back
with the running content.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import aiohttp
import yaml

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.guards import OpenGuard
from igw.gateway.inference import STATE_KEY
from igw.gateway.reload import ConfigReloader, file_digest
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.state import GatewayState
from tests.gateway.support import config_doc, scheduler, wait_for


def _write(path: Path, model: str) -> None:
    path.write_text(yaml.safe_dump(config_doc([scheduler("pool", model)])))  # reloads every 100 ms


async def test_an_edit_made_between_the_load_and_the_start_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "igwc.yaml"
    _write(path, "first")
    digest = file_digest(path)  # as igw serve does: before the load
    config = load_gateway_config(path)
    _write(path, "second")  # while the process starts
    app = create_app(config, config_path=path, config_digest=digest, rng=random.Random(0))
    state = app[STATE_KEY]
    async with (
        serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(stream_grace_s=1)) as url,
        aiohttp.ClientSession() as http,
    ):
        await wait_for(
            lambda: state.runtime.config.schedulers[0].model_name == "second", what="the edit applied"
        )
        models = await (await http.get(url + "/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["second"]


async def test_a_reloader_compares_with_the_digest_the_running_config_was_loaded_from(
    tmp_path: Path,
) -> None:
    path = tmp_path / "igwc.yaml"
    _write(path, "first")
    digest = file_digest(path)
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    _write(path, "second")
    assert await ConfigReloader(path, state=state, loaded_digest=digest).check() is True
    assert state.runtime.config.schedulers[0].model_name == "second"
    # without a digest, the file as it is now is taken for the running configuration
    _write(path, "third")
    assert await ConfigReloader(path, state=state).check() is None


async def test_a_file_missing_for_a_while_is_reported_once_and_cleared_when_it_is_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "igwc.yaml"
    _write(path, "first")
    running = path.read_text()
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    reloader = ConfigReloader(path, state=state, loaded_digest=file_digest(path))
    path.unlink()  # an editor or a deploy script that removes the file and writes it again
    assert [await reloader.check() for _ in range(3)] == [False, None, None]
    assert state.metrics.config_reloads.labels("rejected")._value.get() == 1
    error = state.readiness()[1]["config_reload_error"]
    assert str(path) in error
    assert "cannot be read" in error
    path.write_text(running)  # back, unchanged
    assert await reloader.check() is True
    assert "config_reload_error" not in state.readiness()[1]
    assert state.runtime.config.schedulers[0].model_name == "first"
    assert await reloader.check() is None


async def test_a_file_caught_while_written_in_place_is_not_rejected_and_is_applied_when_whole(
    tmp_path: Path,
) -> None:
    """An in-place write truncates the file, then writes it: a check between the two read an empty
    file and rejected it (an error logged, ``igw_config_reloads_total{result="rejected"}``, /readyz)
    although the file being written was valid - the first reload of the session s48 canary probe."""
    path = tmp_path / "igwc.yaml"
    _write(path, "first")
    digest = file_digest(path)
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    reloader = ConfigReloader(path, state=state, loaded_digest=digest)
    path.write_text("")  # truncated: the writer has not written yet
    check = asyncio.ensure_future(reloader.check())
    await asyncio.sleep(0)  # the check reads the empty file now
    _write(path, "second")  # the writer finishes
    assert await check is None  # not a rejection: the file changed while it was read
    assert state.metrics.registry.get_sample_value("igw_config_reloads_total", {"result": "rejected"}) is None
    assert state.config_error is None
    assert await reloader.check() is True
    assert state.runtime.config.schedulers[0].model_name == "second"


async def test_two_edits_of_the_same_size_in_the_same_second_are_both_applied(tmp_path: Path) -> None:
    """Changes are found by content digest, not by modification time or size."""
    path = tmp_path / "igwc.yaml"
    _write(path, "model-a")
    state = GatewayState(
        load_gateway_config(path), guard=OpenGuard(), clock=time.monotonic, rng=random.Random(0)
    )
    reloader = ConfigReloader(path, state=state, loaded_digest=file_digest(path))
    stamp = path.stat().st_mtime_ns
    for model in ("model-b", "model-c"):
        _write(path, model)
        os.utime(path, ns=(stamp, stamp))  # the same size and modification time as before
        assert await reloader.check() is True
        assert state.runtime.config.schedulers[0].model_name == model
