"""The engine catalogue (``igw.engines``) is what every engine-aware part reads.

Two kinds of test: the consumers are built from the catalogue (the schema's ``engineType`` enum,
the config model, the parser's families, the probe's signals, the pre-flight requirements and ports),
and a throwaway engine entry that exists only in this file is picked up by the parser, the
metrics probe, the model-server check and engine detection with no other change - which is what
"adding an engine is one entry plus its tests" means.
"""

from __future__ import annotations

import dataclasses
import random
from typing import get_args

import pytest
from packaging.version import Version

from igw import engines
from igw.checks import metrics_probe, model_servers
from igw.config.model import EngineType
from igw.config.schema import resolved_schema
from igw.config.versions import Verdict, check_model_server, load_requirements
from igw.engines import ENGINES, Engine, FlagRule, KvMetricRange, MetricFamilies
from igw.gateway import metrics_parser, scraper
from igw.sim.engine import Engine as SimEngine
from igw.sim.metrics_page import PageContext, render_sglang, render_vllm
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from igw.sim.spec import EngineKind

THROWAWAY = Engine(
    name="fakeserve",
    display_name="A throwaway engine",
    families=MetricFamilies(
        waiting="fake_queue_size",
        running="fake_batch_current_size",
        kv_usage=("fake_kv_usage_ratio", "fake_old_kv_usage"),
        lora=None,
        cache_config="fake_cache_info",
        block_size_label="block_tokens",
        num_blocks_label="blocks",
        combine_load="max",
    ),
    minimum_version="2.1.0",
    minimum_reason="the first release with fake_kv_usage_ratio",
    required_flags=(FlagRule("--enable-prometheus", "no page without it"),),
    forbidden_flags=(),
    kv_cache_metrics=(
        KvMetricRange(("fake_old_kv_usage",), before="2.1.0"),
        KvMetricRange(("fake_kv_usage_ratio",), since="2.1.0"),
    ),
    default_port=8080,
    detect_tokens=("fakeserve",),
)
WITH_THROWAWAY = {**ENGINES, THROWAWAY.name: THROWAWAY}


def test_schema_engine_type_enum_and_default_are_the_catalogue() -> None:
    scheduler = resolved_schema()["properties"]["spec"]["properties"]["schedulers"]["items"]
    prop = scheduler["properties"]["engineType"]
    assert prop["enum"] == list(engines.AWS_ENGINE_TYPES)  # AWS's enum, unchanged
    assert set(engines.AWS_ENGINE_TYPES) <= set(ENGINES)
    assert prop["default"] == engines.DEFAULT_ENGINE


def test_config_model_engine_type_is_aws_enum() -> None:
    assert get_args(EngineType) == engines.AWS_ENGINE_TYPES


def test_consumers_are_built_from_the_catalogue() -> None:
    assert {name: e.families for name, e in ENGINES.items()} == metrics_parser.ENGINES
    assert {name: e.signals() for name, e in ENGINES.items()} == metrics_probe.SIGNALS
    assert {name: e.default_port for name, e in ENGINES.items()} == model_servers.DEFAULT_PORTS
    assert set(load_requirements()) == set(ENGINES)
    for entry in ENGINES.values():
        for family, advice in entry.missing_advice.items():
            assert scraper.ADVICE[family] == advice
        if entry.families.cache_config is not None:
            assert entry.families.cache_config in scraper.ADVICE


def test_the_simulator_impersonates_only_catalogued_engines() -> None:
    assert {kind.value for kind in EngineKind} <= set(ENGINES)


def test_unknown_engine_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown engine 'nope'; known engines: sglang, tgi, vllm"):
        engines.engine("nope")
    with pytest.raises(ValueError, match="known engines: sglang, tgi, vllm"):
        metrics_probe.evaluate("nope", set())


def test_a_new_entry_is_read_by_the_gateway_parser() -> None:
    page = (
        "# TYPE fake_queue_size gauge\n"
        'fake_queue_size{shard="0"} 4\n'
        'fake_queue_size{shard="1"} 4\n'
        "fake_batch_current_size 7\n"
        "fake_old_kv_usage 0.25\n"
        'fake_cache_info{block_tokens="16",blocks="900"} 1\n'
    )
    parsed = metrics_parser.parse_page(page, THROWAWAY.families)
    assert parsed.metrics.waiting == 4  # "max": every shard repeats the scheduler's numbers
    assert parsed.metrics.running == 7
    assert parsed.metrics.kv_usage == 0.25
    assert parsed.kv_source == "fake_old_kv_usage"
    assert parsed.missing == {"fake_kv_usage_ratio"}
    assert (parsed.metrics.block_size, parsed.metrics.num_gpu_blocks) == (16, 900)


def test_a_new_entry_is_read_by_the_metrics_probe() -> None:
    report = metrics_probe.evaluate("fakeserve", {"fake_queue_size", "fake_old_kv_usage"}, WITH_THROWAWAY)
    assert report.missing == ("running (fake_batch_current_size)",)
    assert report.fallbacks == ("kv-cache: only fake_old_kv_usage (expected fake_kv_usage_ratio)",)


def test_a_new_entry_is_read_by_the_model_server_check_and_detection() -> None:
    table = load_requirements(WITH_THROWAWAY)
    image = "example.com/fakeserve:2.0.4"
    check = check_model_server(
        engine="fakeserve", image=image, args=["--enable-prometheus"], env={}, requirements=table
    )
    assert check.verdict is Verdict.FAIL
    assert check.kv_cache_metrics == ("fake_old_kv_usage",)
    newer = check_model_server(
        engine="fakeserve", image=image.replace("2.0.4", "2.2.0"), args=[], env={}, requirements=table
    )
    assert [r.requirement for r in newer.results if r.verdict is Verdict.FAIL] == [
        "required-flag:--enable-prometheus"
    ]
    assert engines.detect_engine("fakeserve --port 8080", WITH_THROWAWAY) is THROWAWAY
    assert engines.detect_engine("python -m sglang.launch_server --model x", WITH_THROWAWAY) is engines.SGLANG


def _sim_page(engine_name: str, version: str) -> str:
    preset = get_preset("llama-3.1-8b/h100")
    engine = SimEngine(preset=preset, rng=random.Random(0), jitter_sigma=0)
    stats = PodStats(max_model_len=preset.max_model_len)
    ctx = PageContext(
        model_name="m",
        version=Version(version),
        max_model_len=preset.max_model_len,
        gpu_memory_utilization=0.9,
        prefix_caching=True,
        created_unix=1.7e9,
        max_lora=0,
    )
    if engine_name == "sglang":
        return render_sglang(ctx=ctx, engine=engine, stats=stats, gen_throughput=0.0)
    return render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.8e9, uptime_s=1.0)


@pytest.mark.parametrize(
    ("engine_name", "version"),
    [("vllm", "0.8.5"), ("vllm", "0.9.2"), ("vllm", "0.10.1"), ("vllm", "0.11.0"), ("sglang", "0.4.6")],
)
def test_simulator_pages_expose_exactly_the_kv_names_the_catalogue_gives_their_version(
    engine_name: str, version: str
) -> None:
    entry = ENGINES[engine_name]
    expected = load_requirements()[engine_name].kv_cache_metric_names(Version(version))
    assert expected
    page = _sim_page(engine_name, version)
    names = metrics_probe.metric_names(page)
    assert [n for n in entry.families.kv_usage if n in names] == [
        n for n in entry.families.kv_usage if n in expected
    ]
    parsed = metrics_parser.parse_page(page, entry.families)
    assert parsed.kv_source == expected[0]
    report = metrics_probe.evaluate(engine_name, names)
    assert report.missing == ()
    assert bool(report.fallbacks) == (expected[0] != entry.families.kv_usage[0])


def test_catalogue_entries_are_well_formed() -> None:
    for name, entry in ENGINES.items():
        assert entry.name == name
        assert entry.families.combine_load in ("sum", "max")
        Version(entry.minimum_version)
        for rng in entry.kv_cache_metrics:
            assert set(rng.names) <= set(entry.families.kv_usage), name
        assert dataclasses.replace(entry) == entry
