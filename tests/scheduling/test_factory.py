from __future__ import annotations

import random

import pytest

from igw.config.model import ConfigMapRef, LabelSelector, SchedulerSpec, Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import effective_weights, scheduler_from_spec, scheduler_from_weights


def spec(**kwargs: object) -> SchedulerSpec:
    return SchedulerSpec(name="s", model_selector=LabelSelector(), model_name="m", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("weights", "adapters", "expected"),
    [
        pytest.param(
            None,
            (),
            {
                "queue-scorer": 2,
                "kv-cache-utilization-scorer": 2,
                "prefix-cache-scorer": 3,
                "predicted-ttft-scorer": 1,
                "prefill-collision-scorer": 2,
                "backlog-ttft-scorer": 4,
                "prefill-admission-scorer": 16,
                "decode-balance-scorer": 2,
                "output-affinity-scorer": 2,
            },
            id="defaults",
        ),
        pytest.param(
            None,
            ("lora-a",),
            {
                "queue-scorer": 2,
                "kv-cache-utilization-scorer": 2,
                "prefix-cache-scorer": 3,
                "lora-affinity-scorer": 1,
                "predicted-ttft-scorer": 1,
                "prefill-collision-scorer": 2,
                "backlog-ttft-scorer": 4,
                "prefill-admission-scorer": 16,
                "decode-balance-scorer": 2,
                "output-affinity-scorer": 2,
            },
            id="lora-adds-affinity",
        ),
        pytest.param(
            Weights(queue=1, prefix=0, lru=2, predicted_latency=0),
            (),
            {
                "queue-scorer": 1,
                "kv-cache-utilization-scorer": 2,
                "prefix-cache-scorer": 0,
                "no-hit-lru-scorer": 2,
            },
            id="user-weights-overlay-defaults-0-disables",
        ),
    ],
)
def test_weights_from_spec(
    weights: Weights | None, adapters: tuple[str, ...], expected: dict[str, float]
) -> None:
    s = scheduler_from_spec(spec(weights=weights, lora_adapters=adapters), rng=random.Random(0))
    assert s.profile.describe() == {k: float(v) for k, v in expected.items() if v}
    assert s.name == "s"


def test_config_map_ref_requires_the_document() -> None:
    with pytest.raises(SchedulerConfigError, match=r"configMapRef cm/default-plugins\.yaml was not provided"):
        scheduler_from_spec(spec(config_map_ref=ConfigMapRef(name="cm")), rng=random.Random(0))


def test_config_map_ref_uses_the_picker_config() -> None:
    s = scheduler_from_spec(
        spec(config_map_ref=ConfigMapRef(name="cm")),
        rng=random.Random(0),
        picker_config={"plugins": [{"type": "running-requests-size-scorer"}]},
    )
    assert s.profile.describe() == {"running-requests-size-scorer": 1.0}


def test_explicit_weights_accept_plugin_type_names() -> None:
    s = scheduler_from_weights({"queue": 1, "active-request-scorer": 4}, rng=random.Random(0))
    assert s.profile.describe() == {"queue-scorer": 1.0, "active-request-scorer": 4.0}


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        pytest.param({"kv": 1}, "weights.kv: unknown scorer", id="unknown"),
        pytest.param({"queue": -2}, "weights.queue: must be a non-negative number, got -2", id="negative"),
        pytest.param(
            {"max-score-picker": 1}, "weights.max-score-picker: max-score-picker is not a scorer", id="picker"
        ),
    ],
)
def test_bad_explicit_weights(weights: dict[str, float], problem: str) -> None:
    with pytest.raises(SchedulerConfigError) as err:
        scheduler_from_weights(weights, rng=random.Random(0))
    assert any(p.startswith(problem) for p in err.value.problems)


def test_effective_weights_keeps_unset_defaults() -> None:
    assert effective_weights(Weights(kv_cache=5), lora_adapters=False)["kvCache"] == 5.0
    assert effective_weights(Weights(kv_cache=5), lora_adapters=False)["prefix"] == 3.0
