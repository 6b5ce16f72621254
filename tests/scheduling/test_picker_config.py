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
            {
                "plugins": [{"type": "token-load-scorer"}],
                "saturationDetector": {"pluginRef": "token-load-scorer"},
            },
            "saturationDetector.pluginRef: plugin 'token-load-scorer' is not a saturation detector",
            id="detector-ref-not-a-detector",
        ),
        pytest.param(
            {"saturationDetector": {"pluginRef": "ghost"}},
            "saturationDetector.pluginRef: references undefined plugin 'ghost'",
            id="detector-ref-undefined",
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


@pytest.mark.parametrize(
    ("parameters", "warning", "field", "default"),
    [
        ({"blockSize": 0}, "plugins[0].parameters.blockSize: must be >= 1, got 0; using the default instead",
         "block_chars", 64),
        ({"blockSize": "big"}, "plugins[0].parameters.blockSize: must be an integer, got 'big'",
         "block_chars", 64),
        ({"maxPrefixBlocksToMatch": -5}, "plugins[0].parameters.maxPrefixBlocksToMatch: must be >= 1",
         "max_blocks", 256),
        ({"lruCapacityPerServer": 1.5}, "plugins[0].parameters.lruCapacityPerServer: must be an integer",
         "lru_capacity", 31250),
        ({"blocksize": 32}, "plugins[0].parameters: unknown field 'blocksize' ignored",
         "block_chars", 64),
    ],
)  # fmt: skip
def test_invalid_plugin_parameters_fall_back_to_the_reference_defaults_with_a_warning(
    parameters: dict[str, Any], warning: str, field: str, default: int, caplog: pytest.LogCaptureFixture
) -> None:
    """As the reference endpoint picker does, so its config files load unchanged; strict mode rejects."""
    from igw.scheduling.picker_config import load_picker_config

    doc = {"plugins": [{"type": "prefix-cache-scorer", "parameters": parameters}]}
    with caplog.at_level("WARNING", logger="igw.scheduling"):
        profile, _, warnings = load_picker_config(doc, settings=RoutingSettings())
    assert any(w.startswith(warning) for w in warnings), warnings
    assert any(warning.split(";")[0] in r.getMessage() for r in caplog.records)
    assert getattr(profile.scorers[0].scorer, field) == default
    with pytest.raises(SchedulerConfigError) as err:
        load_picker_config(doc, settings=RoutingSettings(), strict=True)
    assert any(p.startswith(warning.split(";")[0].removesuffix(" ignored")) for p in err.value.problems)


def test_strict_mode_reports_a_refused_plugin_once_not_again_where_it_is_referenced() -> None:
    """A profile (or the saturation detector) naming a plugin whose parameters strict mode refused
    gets no second, misleading "references undefined plugin" problem: the plugin is declared."""
    from igw.scheduling.picker_config import load_picker_config

    doc: dict[str, Any] = {
        "plugins": [
            {"type": "queue-scorer"},
            {"type": "prefix-cache-scorer", "parameters": {"blockSize": 0}},
            {"type": "utilization-detector", "parameters": {"queueDepthThreshold": -1}},
        ],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [{"pluginRef": "queue-scorer"}, {"pluginRef": "prefix-cache-scorer"}],
            }
        ],
        "saturationDetector": {"pluginRef": "utilization-detector"},
    }
    with pytest.raises(SchedulerConfigError) as err:
        load_picker_config(doc, settings=RoutingSettings(), strict=True)
    assert [p.split(":")[0] for p in err.value.problems] == [
        "plugins[1].parameters.blockSize",
        "plugins[2].parameters.queueDepthThreshold",
    ]
    # A reference to a plugin never declared is still reported.
    doc["schedulingProfiles"][0]["plugins"].append({"pluginRef": "ghost"})
    with pytest.raises(SchedulerConfigError) as err:
        load_picker_config(doc, settings=RoutingSettings(), strict=True)
    assert (
        "schedulingProfiles[0].plugins[2].pluginRef: references undefined plugin 'ghost'"
        in err.value.problems
    )


@pytest.mark.parametrize("where", ["profile", "detector"])
def test_a_plugin_reference_that_is_not_a_name_is_a_problem_not_a_crash(where: str) -> None:
    """``pluginRef: [queue-scorer]`` (a list: YAML's flow sequence) was looked up in a dict and raised
    ``TypeError: unhashable type``; it is a path-named problem like any undefined reference."""
    from igw.scheduling.picker_config import load_picker_config

    doc: dict[str, Any] = {"plugins": [{"type": "queue-scorer"}, {"type": "utilization-detector"}]}
    if where == "profile":
        doc["schedulingProfiles"] = [{"name": "default", "plugins": [{"pluginRef": ["queue-scorer"]}]}]
        expected = "schedulingProfiles[0].plugins[0].pluginRef: references undefined plugin ['queue-scorer']"
    else:
        doc["saturationDetector"] = {"pluginRef": {"name": "utilization-detector"}}
        expected = (
            "saturationDetector.pluginRef: references undefined plugin {'name': 'utilization-detector'}"
        )
    with pytest.raises(SchedulerConfigError) as err:
        load_picker_config(doc, settings=RoutingSettings())
    assert expected in err.value.problems


def test_a_valid_file_loads_without_warnings() -> None:
    from igw.scheduling.picker_config import load_picker_config

    _, _, warnings = load_picker_config(yaml.safe_load(GIE_DEFAULT), settings=RoutingSettings(), strict=False)
    assert warnings == []


GIE_V15_TOKEN_LOAD = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: token-load-scorer
  parameters: {queueThresholdTokens: 286720}
- type: utilization-detector
  parameters:
    {queueDepthThreshold: 5, kvCacheUtilThreshold: 0.8, metricsStalenessThreshold: 200ms, headroom: 0.1}
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: utilization-detector}
  - {pluginRef: token-load-scorer, weight: 1}
  - {pluginRef: random-picker}
saturationDetector: {pluginRef: utilization-detector}
"""


def test_a_v1_5_file_with_the_new_plugins_loads_and_wires_the_detector() -> None:
    from igw.scheduling.picker_config import load_picker_config
    from igw.scheduling.plugins.random_picker import RandomPicker
    from igw.scheduling.plugins.token_load_scorer import TokenLoadScorer
    from igw.scheduling.plugins.utilization_detector import UtilizationDetector

    profile, _, warnings = load_picker_config(yaml.safe_load(GIE_V15_TOKEN_LOAD), settings=RoutingSettings())
    assert warnings == []
    assert isinstance(profile.picker, RandomPicker)
    assert isinstance(profile.scorers[0].scorer, TokenLoadScorer)
    assert profile.scorers[0].scorer.threshold_tokens == 286720
    assert isinstance(profile.detector, UtilizationDetector)
    assert profile.filters == (profile.detector,)
    assert profile.detector.headroom == pytest.approx(0.1)
    assert profile.detector.staleness_s == pytest.approx(0.2)
