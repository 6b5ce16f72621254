"""A hot reload keeps each scheduler whose inputs did not change - with its prefix index and the
speeds it learned - and rebuilds the ones whose inputs did; the data path's own routing settings
(timeouts, keep-alives, retries) are not a scheduler's inputs."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from igw.config.build import build_gateway_config
from igw.gateway.runtime import GatewayRuntime
from igw.scheduling.settings import RoutingSettings
from tests.gateway.support import config_doc, scheduler


def runtime(previous: GatewayRuntime | None = None, **routing: Any) -> GatewayRuntime:
    config = build_gateway_config(config_doc([scheduler("pool", "m1")], routing=routing))
    return GatewayRuntime(config, rng=random.Random(0), clock=lambda: 0.0, previous=previous)


@pytest.mark.parametrize(
    ("routing", "kept"),
    [
        pytest.param({"connectTimeout": "5s"}, True, id="connect-timeout"),
        pytest.param({"responseTimeout": "0s", "unresponsiveTimeout": "30s"}, True, id="timeouts"),
        pytest.param({"streamIdleTimeout": "2m", "sseKeepAliveInterval": "5s"}, True, id="streams"),
        pytest.param({"retry": {"attempts": 3, "retryOn": ["5xx"]}}, True, id="retry"),
        pytest.param({"configReloadInterval": "5s"}, True, id="reload-interval"),
        pytest.param({"staleThreshold": "2s"}, False, id="stale-threshold"),
        pytest.param({"saturation": {"queueDepthThreshold": 9}}, False, id="saturation"),
        pytest.param({"outlierDetection": {"consecutiveFailures": 2}}, False, id="outlier-detection"),
    ],
)
def test_a_reload_rebuilds_a_scheduler_only_when_its_inputs_change(
    routing: dict[str, Any], kept: bool
) -> None:
    before = runtime()
    after = runtime(before, **routing)
    assert after.settings != before.settings  # the reload did change a setting
    assert (after.schedulers["pool"].scheduler is before.schedulers["pool"].scheduler) is kept
    assert after.schedulers["pool"].pool is before.schedulers["pool"].pool


def test_every_setting_is_either_a_scheduler_input_or_named_as_the_data_paths() -> None:
    """A field left out of ``scheduling_inputs`` is compared: changing any field away from its default
    either shows there or is one of the data path's (listed here as the docs list them)."""
    data_path = {
        "connect_timeout_s",
        "stream_idle_timeout_s",
        "response_timeout_s",
        "unresponsive_timeout_s",
        "sse_keepalive_interval_s",
        "config_reload_interval_s",
        "retry",
    }
    defaults = RoutingSettings()
    for field in dataclasses.fields(RoutingSettings):
        changed = dataclasses.replace(defaults, **{field.name: _other_than(getattr(defaults, field.name))})
        differs = changed.scheduling_inputs() != defaults.scheduling_inputs()
        assert differs is (field.name not in data_path), field.name


def _other_than(value: Any) -> Any:
    """A value of the same type as ``value`` but different (the compiled build types its fields)."""
    if value is None:
        return 7.0
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        first = dataclasses.fields(value)[0].name
        return dataclasses.replace(value, **{first: _other_than(getattr(value, first))})
    return value + 1
