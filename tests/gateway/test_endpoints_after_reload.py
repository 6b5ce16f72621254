"""The endpoints file after a reload removed a scheduler it still lists (``igw serve --endpoints``):
the key is skipped with a warning and the other schedulers' edits apply. Before session s40 the whole
file was refused ("previous endpoints kept") until someone removed the key, so every scheduler's
endpoint changes waited on it. A key that never named a scheduler is still refused as a whole: a
typo must not empty a scheduler's endpoints. Real HTTP, a real file watch and a real reload."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for


def _endpoints(gw: Any) -> dict[str, list[str]]:
    return {name: sorted(sr.pool.states) for name, sr in gw.state.runtime.schedulers.items()}


def _write(path: Path, schedulers: dict[str, list[str]]) -> None:
    path.write_text(yaml.safe_dump({"schedulers": schedulers}))


async def test_a_scheduler_a_reload_removed_does_not_hold_back_the_others_endpoints(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.gateway.discovery")
    both = config_doc([scheduler("llama", "llama"), scheduler("mistral", "mistral")])
    async with (
        running(FakeModelServer("p0"), FakeModelServer("p1")) as (p0, p1),
        gateway(both, {"llama": [p0.key], "mistral": [p1.key]}, reload=True) as gw,
    ):
        gw.config_path.write_text(yaml.safe_dump(config_doc([scheduler("llama", "llama")])))
        await wait_for(lambda: _endpoints(gw) == {"llama": [p0.key]}, what="the reload removing mistral")

        # llama's pods change; the file still lists mistral (edited on its own, after the config)
        _write(gw.endpoints_path, {"llama": [p0.key, p1.key], "mistral": [p1.key]})
        await wait_for(
            lambda: _endpoints(gw) == {"llama": sorted([p0.key, p1.key])},
            what="llama's new endpoint applied despite mistral's key",
        )
        assert (
            "schedulers.mistral no longer in the configuration (removed by a reload): ignored" in caplog.text
        )

        # a key that never named a scheduler (a typo) still refuses the file: llama keeps its endpoints
        _write(gw.endpoints_path, {"lama": [p0.key]})
        await wait_for(lambda: "no scheduler or modelName 'lama'" in caplog.text, what="the typo refused")
        assert "previous endpoints kept" in caplog.text
        assert _endpoints(gw) == {"llama": sorted([p0.key, p1.key])}

        # mistral back in the configuration: its key counts again
        gw.config_path.write_text(yaml.safe_dump(both))
        _write(gw.endpoints_path, {"llama": [p0.key], "mistral": [p1.key]})
        await wait_for(
            lambda: _endpoints(gw) == {"llama": [p0.key], "mistral": [p1.key]}, what="mistral back"
        )
