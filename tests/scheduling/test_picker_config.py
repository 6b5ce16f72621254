from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import scheduler_from_picker_config
from igw.scheduling.plugins.weighted_random_picker import WeightedRandomPicker
from igw.scheduling.settings import RoutingSettings

GIE_DEFAULT = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: single-profile-handler
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
  parameters: {blockSize: 64, maxPrefixBlocksToMatch: 256, lruCapacityPerServer: 31250}
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
saturationDetector: {queueDepthThreshold: 3, kvCacheUtilThreshold: 0.9, metricsStalenessThreshold: 200ms}
"""


def build(doc: dict[str, Any]) -> Any:
    return scheduler_from_picker_config(doc, routing=RoutingSettings(), rng=random.Random(0))


def test_gie_default_config_loads_unchanged() -> None:
    s = build(yaml.safe_load(GIE_DEFAULT))
    assert s.profile.describe() == {
        "queue-scorer": 2.0,
        "kv-cache-utilization-scorer": 2.0,
        "prefix-cache-scorer": 3.0,
    }
    assert s.profile.picker.type_name == "max-score-picker"
    assert (s.settings.queue_depth_threshold, s.settings.kv_cache_util_threshold) == (3, 0.9)
    assert s.settings.stale_threshold_s == pytest.approx(0.2)


def test_no_profiles_synthesises_default_with_weight_1_and_named_instances() -> None:
    s = build(
        {
            "plugins": [
                {"name": "q", "type": "queue-scorer"},
                {"type": "weighted-random-picker", "parameters": {"maxNumOfEndpoints": 2}},
            ]
        }
    )
    assert s.profile.describe() == {"q": 1.0}
    assert isinstance(s.profile.picker, WeightedRandomPicker)
    assert s.profile.picker.max_endpoints == 2


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        pytest.param({"kind": "Foo"}, "kind: expected 'EndpointPickerConfig', got 'Foo'", id="kind"),
        pytest.param(
            {"plugins": [{"type": "nope"}]}, "plugins[0].type: unknown plugin type 'nope'", id="type"
        ),
        pytest.param(
            {"plugins": [{"type": "queue-scorer"}, {"type": "queue-scorer"}]},
            "plugins[1].name: duplicate plugin name 'queue-scorer'",
            id="duplicate",
        ),
        pytest.param(
            {"plugins": [], "schedulingProfiles": [{"name": "d", "plugins": [{"pluginRef": "x"}]}]},
            "schedulingProfiles[0].plugins[0].pluginRef: references undefined plugin 'x'",
            id="undefined-ref",
        ),
        pytest.param(
            {
                "plugins": [{"type": "queue-scorer"}],
                "schedulingProfiles": [
                    {"name": "d", "plugins": [{"pluginRef": "queue-scorer", "weight": -1}]}
                ],
            },
            "schedulingProfiles[0].plugins[0].weight: must be a non-negative number, got -1",
            id="negative-weight",
        ),
        pytest.param(
            {"schedulingProfiles": [{"name": "a"}, {"name": "b"}]},
            "schedulingProfiles: igw runs exactly one scheduling profile",
            id="two-profiles",
        ),
        pytest.param(
            {"saturationDetector": {"kvCacheUtilThreshold": 2}},
            "saturationDetector.kvCacheUtilThreshold: must be a number between 0 and 1, got 2",
            id="saturation",
        ),
        pytest.param({"plugin": []}, "plugin: unknown field", id="unknown-top-level"),
        pytest.param(
            {"plugins": [{"type": "prefix-cache-scorer", "parameters": {"hashBlockSize": 64}}]},
            "plugins[0].parameters: unknown field 'hashBlockSize'",
            id="unknown-parameter",
        ),
    ],
)
def test_invalid_configs_name_the_field(doc: dict[str, Any], problem: str) -> None:
    with pytest.raises(SchedulerConfigError) as err:
        build(doc)
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_all_problems_reported_at_once() -> None:
    with pytest.raises(SchedulerConfigError) as err:
        build({"kind": "X", "plugins": [{"type": "nope"}], "extra": 1})
    assert len(err.value.problems) == 3
