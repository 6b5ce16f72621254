"""The scraper reads the LoRA family only where adapter requests can arrive (a real scrape on loopback)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.scrape_support import scrape_rig


async def _scrape_once(key: str, bbr_adapters: dict[str, str], **extra: Any) -> Any:
    async with scrape_rig(key, model="base", bbr_adapters=bbr_adapters, **extra) as rig:
        await rig.scrape()
    return rig.state


@pytest.mark.parametrize(
    ("extra", "bbr", "adapters"),
    [
        ({}, {}, None),  # no adapter can reach this scheduler: the family is not read
        ({"loraAdapters": ["sql"]}, {}, frozenset({"sql"})),
        ({}, {"sql": "base"}, frozenset({"sql"})),  # a bbr-managed adapter of this model
        ({}, {"sql": "other-model"}, None),
    ],
)
async def test_lora_family_is_read_only_where_adapters_route(
    extra: dict[str, Any], bbr: dict[str, str], adapters: frozenset[str] | None
) -> None:
    async with running(FakeModelServer("p", max_lora=2, running_adapters="sql")) as (pod,):
        state = await _scrape_once(pod.key, bbr, **extra)
    assert state.metrics is not None
    assert state.metrics.waiting == 0
    assert state.metrics.active_adapters == adapters
    assert state.metrics.max_lora == (None if adapters is None else 2)
    assert not any("lora" in m for m in state.missing)
