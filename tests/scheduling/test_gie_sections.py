"""GIE v1.3-v1.5 EndpointPickerConfig sections: the data layer, parser, flowControl and featureGates.

The documents are the shapes GIE's own releases ship (the v1.5 Helm chart's default config, the
v1.4/v1.5 model-servers guide, the v1.5 integration test data), written out here, not copied.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.picker_config import load_picker_config
from igw.scheduling.settings import RoutingSettings

HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

CHART_V1_5 = (
    HEAD
    + """
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
  parameters: {scheme: "http", path: "/metrics", insecureSkipVerify: true}
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
"""
)
"""What GIE v1.5's Helm chart writes with its default values (a vLLM pool over HTTP)."""


def load(text: str, *, strict: bool = False) -> tuple[Any, list[str]]:
    profile, _, warnings = load_picker_config(yaml.safe_load(text), settings=RoutingSettings(), strict=strict)
    return profile, warnings


def problems(text: str) -> list[str]:
    with pytest.raises(SchedulerConfigError) as exc:
        load(text)
    return list(exc.value.problems)


def test_the_gie_v1_5_chart_default_config_loads_with_its_weights_and_no_warning() -> None:
    profile, warnings = load(CHART_V1_5)
    assert profile.describe() == {
        "queue-scorer": 2.0,
        "kv-cache-utilization-scorer": 2.0,
        "prefix-cache-scorer": 3.0,
    }
    assert warnings == []


def test_a_v1_5_data_layer_section_wiring_the_metrics_source_and_extractor_loads() -> None:
    doc = (
        CHART_V1_5
        + "dataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n"
        + "    extractors: [{pluginRef: core-metrics-extractor}]\n"
    )
    _, warnings = load(doc)
    assert warnings == []


def test_the_v1_3_spelling_data_and_extractor_type_load() -> None:
    doc = (
        HEAD
        + """
featureGates: [dataLayer]
plugins:
- type: queue-scorer
- type: metrics-data-source
- type: model-server-protocol-metrics
  parameters: {queuedRequestsSpec: "vllm:num_requests_waiting", kvUsageSpec: "vllm:kv_cache_usage_perc"}
data:
  sources:
  - pluginRef: metrics-data-source
    extractors: [{pluginRef: model-server-protocol-metrics}]
"""
    )
    assert load(doc)[1] == []


def test_the_openai_parser_section_loads_and_a_grpc_parser_is_refused_naming_the_plugin() -> None:
    doc = CHART_V1_5.replace(
        "- type: core-metrics-extractor\n", "- type: core-metrics-extractor\n- type: openai-parser\n"
    )
    assert load(doc + "parser: {pluginRef: openai-parser}\n")[1] == []
    grpc = CHART_V1_5.replace(
        "- type: core-metrics-extractor\n", "- type: core-metrics-extractor\n- type: vllmgrpc-parser\n"
    )
    found = problems(grpc + "parser: {pluginRef: vllmgrpc-parser}\n")
    assert list(found) == [
        "plugins[5].type: 'vllmgrpc-parser' is not supported: igw speaks OpenAI-compatible HTTP to "
        "model servers, not vLLM's gRPC protocol"
    ]


def test_an_sglang_default_engine_loads_with_a_warning_naming_the_parameter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = CHART_V1_5.replace(
        "- type: core-metrics-extractor\n",
        "- type: core-metrics-extractor\n  parameters: {defaultEngine: sglang}\n",
    )
    with caplog.at_level(logging.WARNING, logger="igw.scheduling"):
        _, warnings = load(doc)
    assert len(warnings) == 1
    assert warnings[0].startswith("plugins[4].parameters.defaultEngine: ")
    assert "engineType" in warnings[0]
    assert "'sglang'" in warnings[0]
    assert warnings[0] in caplog.text  # the gateway's log says it too


def test_the_model_servers_guide_engine_configs_load_and_an_unknown_engine_is_a_warning() -> None:
    doc = (
        HEAD
        + """
featureGates: [dataLayer]
plugins:
- type: queue-scorer
- name: core-metrics-extractor
  type: core-metrics-extractor
  parameters:
    engineLabelKey: inference.networking.k8s.io/engine-type
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: vllm:num_requests_waiting
      runningRequestsSpec: vllm:num_requests_running
      kvUsageSpec: vllm:kv_cache_usage_perc
      loraSpec: vllm:lora_requests_info
      cacheInfoSpec: vllm:cache_config_info
    - name: sglang
      queuedRequestsSpec: sglang:num_queue_reqs
      runningRequestsSpec: sglang:num_running_reqs
      kvUsageSpec: sglang:token_usage
    - {name: triton, queuedRequestsSpec: "nv_trt_llm_request_metrics{request_type=waiting}"}
"""
    )
    _, warnings = load(doc)
    assert [w.split(":")[0] for w in warnings] == ["plugins[1].parameters.engineConfigs[2]"]
    assert "spec.extensions.engines.generic" in warnings[0]


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        (
            {"engineConfigs": [{"name": "vllm", "kvUsageSpec": "vllm:gpu_cache_usage"}]},
            "plugins[1].parameters.engineConfigs[0].kvUsageSpec: 'vllm:gpu_cache_usage' is not",
        ),
        (
            {"defaultEngine": "triton-tensorrt-llm"},
            "plugins[1].parameters.defaultEngine: igw has no engine 'triton-tensorrt-llm'",
        ),
        (
            {"queuedRequestsSpec": "my_queue"},
            "plugins[1].parameters.queuedRequestsSpec: 'my_queue' is not what igw reads",
        ),
    ],
)
def test_an_extractor_reading_other_metrics_than_igw_is_refused_naming_the_path(
    params: dict[str, Any], problem: str
) -> None:
    doc = yaml.safe_load(HEAD + "plugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n")
    doc["plugins"][1]["parameters"] = params
    with pytest.raises(SchedulerConfigError) as exc:
        load_picker_config(doc, settings=RoutingSettings())
    assert len(exc.value.problems) == 1
    assert exc.value.problems[0].startswith(problem)


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"scheme": "https"}, "plugins[1].parameters.scheme"),
        ({"path": "/stats"}, "plugins[1].parameters.path"),
    ],
)
def test_a_metrics_page_igw_would_not_scrape_is_refused(params: dict[str, Any], path: str) -> None:
    doc = yaml.safe_load(HEAD + "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n")
    doc["plugins"][1]["parameters"] = params
    with pytest.raises(SchedulerConfigError) as exc:
        load_picker_config(doc, settings=RoutingSettings())
    assert [p.split(": ")[0] for p in exc.value.problems] == [path]


def test_flow_control_without_its_gate_is_accepted_with_a_warning_and_with_it_refused() -> None:
    base = HEAD + "plugins:\n- type: queue-scorer\n- type: fcfs-ordering-policy\n"
    section = (
        "flowControl:\n  maxBytes: 1Gi\n"
        "  priorityBands: [{priority: 10, orderingPolicyRef: fcfs-ordering-policy}]\n"
    )
    _, warnings = load(base + section)
    assert [w.split(":")[0] for w in warnings] == ["flowControl", "plugins[1]"]
    assert all("spec.extensions.flowControl" in w for w in warnings)
    found = problems(base + section + "featureGates: [flowControl]\n")
    assert len(found) == 1
    assert found[0].startswith("featureGates[0]: 'flowControl' is not supported")


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        ("featureGates: [dataLayr]\n", "featureGates[0]: unknown feature gate 'dataLayr'"),
        ("featureGates: dataLayer\n", "featureGates: must be a list of gate names"),
        (
            "dataLayer: {sources: [{pluginRef: nope}]}\n",
            "dataLayer.sources[0].pluginRef: references undefined plugin 'nope'",
        ),
        (
            "dataLayer: {sources: [{pluginRef: queue-scorer}]}\n",
            "dataLayer.sources[0].pluginRef: plugin 'queue-scorer' is not a data-layer source",
        ),
        (
            "dataLayer: {sources: [{pluginRef: metrics-data-source,"
            " extractors: [{pluginRef: metrics-data-source}]}]}\n",
            "dataLayer.sources[0].extractors[0].pluginRef: plugin 'metrics-data-source' is not a data-layer",
        ),
        ("dataLayer: {sources: [], extra: 1}\n", "dataLayer.extra: unknown field"),
        (
            "parser: {pluginRef: queue-scorer}\n",
            "parser.pluginRef: plugin 'queue-scorer' is not a data-layer parser",
        ),
        ("data: {sources: []}\ndataLayer: {sources: []}\n", "dataLayer: give either data"),
    ],
)
def test_malformed_sections_are_refused_naming_the_path(tail: str, problem: str) -> None:
    found = problems(CHART_V1_5 + tail)
    assert len(found) == 1, found
    assert found[0].startswith(problem), found


def test_strict_loading_turns_the_section_warnings_into_problems() -> None:
    doc = CHART_V1_5.replace(
        "- type: core-metrics-extractor\n",
        "- type: core-metrics-extractor\n  parameters: {engineLabelKey: my/engine}\n",
    )
    assert len(load(doc)[1]) == 1
    with pytest.raises(SchedulerConfigError) as exc:
        load(doc, strict=True)
    assert [p.split(": ")[0] for p in exc.value.problems] == ["plugins[4].parameters.engineLabelKey"]
