"""``flowControl.enginePriority``: the band -> engine value mapping per engine, which bands preempt
which, the schema and ``igw validate`` (path-named), and no kept slots where the engine preempts."""

from __future__ import annotations

from typing import Any

import pytest

from igw.config.validate import validate_document
from igw.scheduling.engine_priority import EnginePriority, EnginePriorityError, PriorityEngine
from igw.scheduling.flow_control import (
    CRITICAL,
    SHEDDABLE,
    STANDARD,
    EndpointLoad,
    FlowController,
    FlowControlSettings,
)
from tests.config.cases import base_document

WHERE = "spec.extensions.flowControl.enginePriority"


@pytest.mark.parametrize(
    ("engine", "values", "comment"),
    [
        (EnginePriority.sglang(), (11, 0, -11), "threshold 10 + 1: neighbours differ by more than it"),
        (EnginePriority.sglang(threshold=0), (1, 0, -1), "threshold 0"),
        (EnginePriority.sglang(scale=100), (100, 0, -100), "explicit scale"),
        (EnginePriority.sglang(low_values_first=True), (-11, 0, 11), "--schedule-low-priority-values-first"),
        (EnginePriority.vllm(), (-1, 0, 1), "vLLM: lower value first"),
        (EnginePriority.vllm(scale=5, values={CRITICAL: -1000}), (-1000, 0, 5), "explicit value wins"),
    ],
)
def test_band_to_engine_value(engine: EnginePriority, values: tuple[int, int, int], comment: str) -> None:
    assert (engine.value(CRITICAL), engine.value(STANDARD), engine.value(SHEDDABLE)) == values, comment


@pytest.mark.parametrize(
    ("engine", "higher", "lower", "preempts"),
    [
        (EnginePriority.sglang(), CRITICAL, STANDARD, True),
        (EnginePriority.sglang(), CRITICAL, SHEDDABLE, True),
        (EnginePriority.sglang(), STANDARD, SHEDDABLE, True),
        (EnginePriority.sglang(), STANDARD, CRITICAL, False),
        (EnginePriority.sglang(), STANDARD, STANDARD, False),
        (EnginePriority.sglang(scale=10), CRITICAL, STANDARD, False),  # differ by 10: not more than it
        (EnginePriority.sglang(scale=10), CRITICAL, SHEDDABLE, True),
        (EnginePriority.sglang(low_values_first=True), CRITICAL, STANDARD, True),
        (EnginePriority.sglang(preemption=False), CRITICAL, SHEDDABLE, False),
        (EnginePriority.vllm(), CRITICAL, SHEDDABLE, False),  # vLLM never preempts for a slot
    ],
)
def test_which_bands_the_engine_lets_preempt_which(
    engine: EnginePriority, higher: int, lower: int, preempts: bool
) -> None:
    assert engine.preempts(higher, lower) is preempts


def test_settings_read_entries_with_the_schedulers_engine() -> None:
    raw = {
        "enginePriority": [
            {"scheduler": "a"},
            {"scheduler": "b", "scale": 3},
            {"scheduler": "c", "engine": "sglang"},
        ]
    }
    s = FlowControlSettings.from_extension(
        raw, scheduler_engines={"a": "sglang", "b": "vllm", "c": "generic"}
    )
    assert s.engine_priority["a"] == EnginePriority.sglang()
    assert s.engine_priority["b"] == EnginePriority.vllm(scale=3)
    assert s.engine_priority["c"].engine is PriorityEngine.SGLANG
    assert s.engine_priority["a"].flag == "--enable-priority-scheduling"
    assert s.engine_priority["b"].flag == "--scheduling-policy priority"
    assert FlowControlSettings.from_extension({}).engine_priority == {}


@pytest.mark.parametrize(
    ("entries", "engines", "message"),
    [
        ([{"scheduler": "x"}], {"a": "vllm"}, rf"{WHERE}\[0\]\.scheduler: no scheduler named 'x'"),
        (
            [{"scheduler": "a"}, {"scheduler": "a"}],
            {"a": "vllm"},
            rf"{WHERE}\[1\]\.scheduler: 'a' is listed twice",
        ),
        ([{"scheduler": "a"}], {"a": "tgi"}, rf"{WHERE}\[0\]\.engine: scheduler 'a' runs 'tgi'"),
        (
            [{"scheduler": "a", "lowValuesFirst": True}],
            {"a": "vllm"},
            rf"{WHERE}\[0\]\.lowValuesFirst: an SGLang",
        ),
        (
            [{"scheduler": "a", "values": [{"priority": 1, "value": 1}, {"priority": 1, "value": 2}]}],
            {"a": "sglang"},
            rf"{WHERE}\[0\]\.values\[1\]\.priority: 1 is listed twice",
        ),
    ],
)
def test_entries_that_cannot_work_are_refused_by_path(
    entries: list[dict[str, Any]], engines: dict[str, str], message: str
) -> None:
    with pytest.raises(EnginePriorityError, match=message):
        FlowControlSettings.from_extension({"enginePriority": entries}, scheduler_engines=engines)


def _doc(entries: list[dict[str, Any]], **extensions: Any) -> dict[str, Any]:
    doc = base_document()  # schedulers llama (vLLM) and qwen (SGLang)
    doc["spec"]["extensions"] = {"flowControl": {"enginePriority": entries}, **extensions}
    return doc


@pytest.mark.parametrize(
    ("entries", "extensions", "path"),
    [
        ([{"scheduler": "nope"}], {}, f"{WHERE}[0].scheduler"),
        ([{"scheduler": "qwen"}, {"scheduler": "qwen"}], {}, f"{WHERE}[1].scheduler"),
        ([{"scheduler": "llama", "preemptionThreshold": 3}], {}, f"{WHERE}[0].preemptionThreshold"),
        ([{"scheduler": "llama"}], {"engines": {"tgi": ["llama"]}}, f"{WHERE}[0].engine"),
        ([{"scheduler": "qwen", "scale": 0}], {}, f"{WHERE}[0].scale"),
        ([{"scheduler": "qwen", "engine": "tgi"}], {}, f"{WHERE}[0].engine"),
        ([{"scheduler": "qwen", "threshold": 3}], {}, f"{WHERE}[0].threshold"),
        ([{"engine": "sglang"}], {}, f"{WHERE}[0].scheduler"),
        ([{"scheduler": "qwen", "values": [{"priority": 1}]}], {}, f"{WHERE}[0].values[0].value"),
    ],
)
def test_igw_validate_names_the_entry_at_fault(
    entries: list[dict[str, Any]], extensions: dict[str, Any], path: str
) -> None:
    problems = validate_document(_doc(entries, **extensions))
    assert path in {p.path for p in problems}, problems


def test_igw_validate_accepts_both_engines() -> None:
    entries = [
        {"scheduler": "qwen", "preemptionThreshold": 5, "lowValuesFirst": False},
        {"scheduler": "llama", "scale": 2},
    ]
    assert validate_document(_doc(entries)) == []


LOAD = EndpointLoad(waiting=0, occupancy=7, batch=8, completion_rate=37.7, pool_completion_rate=37.7)


@pytest.mark.parametrize(
    ("engine", "kept"),
    [
        (None, 4),  # the defaults: slotWait keeps maxKeptShare (half) of 8 under this Critical load
        (EnginePriority.vllm(), 4),  # vLLM does not preempt for a slot: the same
        (EnginePriority.sglang(preemption=False), 4),
        (EnginePriority.sglang(), 0),  # the engine frees a lower band's slot: none kept idle
    ],
)
def test_no_slot_is_kept_where_the_engine_preempts_for_one(engine: EnginePriority | None, kept: int) -> None:
    fc = FlowController(FlowControlSettings(), engine_priority=engine)
    for i in range(120):  # Critical at 12/s for 10 s
        fc.arrived(CRITICAL, i / 12)
    assert fc.slots_kept(STANDARD, LOAD, now=10.0) == kept
    assert fc.slots_kept(SHEDDABLE, LOAD, now=10.0) == kept
    assert fc.admits_to(STANDARD, LOAD, now=10.0) is (kept == 0)
