"""``lora-slot-filter``: an adapter request goes only where it can start without waiting for a slot."""

from __future__ import annotations

import pytest
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import profile_from_weights
from igw.scheduling.plugins.lora_slot_filter import LoraSlotFilter, factory
from igw.scheduling.types import EndpointView

from tests.scheduling.helpers import ctx, ep, req

A = frozenset({"a"})
OTHERS = frozenset({"x", "y"})


def lora_ep(key: str, *, active: frozenset[str], waiting: frozenset[str] = frozenset()) -> EndpointView:
    return ep(key, active=active, waiting_adapters=waiting, max_lora=2)


@pytest.mark.parametrize(
    ("endpoints", "adapter", "kept"),
    [
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("running", active=A)],
            "a",
            ["running"],
            id="slots-full-of-others-dropped-when-adapter-runs-elsewhere",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("free", active=frozenset({"x"}))],
            "a",
            ["free"],
            id="free-slot-beats-busy",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("queued", active=OTHERS, waiting=A)],
            "a",
            ["queued"],
            id="adapter-already-waiting-is-second-tier",
        ),
        pytest.param(
            [lora_ep("b1", active=OTHERS), lora_ep("b2", active=OTHERS)],
            "a",
            ["b1", "b2"],
            id="nothing-better-keeps-all",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), ep("no-lora-metrics")],
            "a",
            ["no-lora-metrics"],
            id="unknown-is-not-penalised",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("running", active=A)],
            None,
            ["busy", "running"],
            id="base-model-request-unfiltered",
        ),
    ],
)
def test_filter(endpoints: list[EndpointView], adapter: str | None, kept: list[str]) -> None:
    out = LoraSlotFilter().filter(ctx(req("q", adapter=adapter)), endpoints)
    assert [e.key for e in out] == kept


@pytest.mark.parametrize(
    ("weights", "has_filter"),
    [
        pytest.param({"queue": 2, "loraAffinity": 1}, True, id="lora-affinity-enables-it"),
        pytest.param({"queue": 2, "loraAffinity": 0}, False, id="lora-affinity-off"),
        pytest.param({"queue": 2}, False, id="no-adapters-configured"),
    ],
)
def test_weights_profile_includes_the_filter_with_lora_affinity(
    weights: dict[str, float], has_filter: bool
) -> None:
    filters = profile_from_weights(weights).filters
    assert [f.type_name for f in filters] == (["lora-slot-filter"] if has_filter else [])


def test_factory_takes_no_parameters() -> None:
    assert factory("f", {}, "plugins[0].parameters").name == "f"
    with pytest.raises(SchedulerConfigError, match=r"unknown"):
        factory("f", {"x": 1}, "plugins[0].parameters")
