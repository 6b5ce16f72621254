"""The parser's fast path: family groups read in place, per-endpoint position hints, real simulator pages.

Every hinted parse must equal a parse without hints (and, on simulator pages, prometheus_client's
reading of the same page) whatever the hints say: stale, pointing into a family's group, or naming a
family the new page lacks.
"""

from __future__ import annotations

import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.engines import MetricFamilies
from igw.gateway.metrics_parser import (
    HINT_WINDOW,
    SGLANG,
    SMALL_PAGE,
    VLLM,
    FamilyStarts,
    ParsedPage,
    parse_page,
)
from igw.sim.engine import Engine
from igw.sim.metrics_page import PageContext, render_sglang, render_vllm
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from tests.gateway.sim_pages import page_context

L = 'engine="0",model_name="m"'


def _context(version: str) -> PageContext:
    return page_context(version)


def _busy_engine(seed: int) -> Engine:
    engine = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(seed))
    assert engine.pool.allocate(1000 + seed)  # a non-zero KV usage: a misread value cannot pass as 0.0
    return engine


def _reference(page: str) -> dict[str, float]:
    return {s.name: s.value for fam in text_string_to_metric_families(page) for s in fam.samples}


def _hinted_twice(page: str, families: MetricFamilies, previous: str) -> ParsedPage:
    starts: FamilyStarts = {}
    parse_page(previous, families, starts)
    return parse_page(page, families, starts)


@pytest.mark.parametrize("version", ["0.9.1", "0.10.1", "0.11.0", "0.12.0", "0.13.0"])
def test_every_simulated_vllm_version_parses_the_same_with_hints(version: str) -> None:
    ctx = _context(version)
    stats = PodStats(max_model_len=32768)
    first = render_vllm(ctx=ctx, engine=_busy_engine(1), stats=stats, unix_now=1.7e9, uptime_s=1.0)
    engine = _busy_engine(2)
    page = render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.7e9 + 5, uptime_s=6.0)
    cold, hinted = parse_page(page, VLLM), _hinted_twice(page, VLLM, first)
    assert hinted == cold
    reference = _reference(page)
    kv_name = VLLM.kv_usage[1] if version == "0.9.1" else VLLM.kv_usage[0]
    assert hinted.metrics.waiting == reference[VLLM.waiting]
    assert hinted.metrics.running == reference[VLLM.running]
    assert hinted.metrics.kv_usage == reference[kv_name] > 0
    assert hinted.kv_source == kv_name
    assert (VLLM.kv_usage[0] in hinted.missing) is (version == "0.9.1")
    assert hinted.metrics.num_gpu_blocks == engine.pool.num_blocks


@pytest.mark.parametrize("version", ["0.3.6", "0.4.6", "0.5.0"])
def test_every_simulated_sglang_version_parses_the_same_with_hints(version: str) -> None:
    ctx = _context(version)
    stats = PodStats(max_model_len=32768)
    first = render_sglang(ctx=ctx, engine=_busy_engine(1), stats=stats, gen_throughput=10.0)
    page = render_sglang(ctx=ctx, engine=_busy_engine(2), stats=stats, gen_throughput=12.5)
    cold, hinted = parse_page(page, SGLANG), _hinted_twice(page, SGLANG, first)
    assert hinted == cold
    reference = _reference(page)
    assert hinted.metrics.waiting == reference[SGLANG.waiting]
    assert hinted.metrics.running == reference[SGLANG.running]
    assert hinted.metrics.kv_usage == reference[SGLANG.kv_usage[0]] > 0


def _group(name: str, n: int, value: float) -> str:
    return "".join(f'{name}{{engine="{i}",model_name="m"}} {value}\n' for i in range(n))


def _filler(chars: int) -> str:
    line = 'other_family_bucket{le="0.5",model_name="m"} 12.0\n'
    return line * (chars // len(line) + 1)


def test_a_family_that_moved_earlier_than_the_hint_window_is_still_read_whole() -> None:
    group = _group(VLLM.waiting, 300, 1.0)
    assert len(group) > 2 * HINT_WINDOW  # the stale hint's window starts inside the group
    previous = _filler(5 * HINT_WINDOW) + group
    page = _filler(3 * HINT_WINDOW) + group
    assert _hinted_twice(page, VLLM, previous).metrics.waiting == 300


@pytest.mark.parametrize("shift", [-3 * HINT_WINDOW, -10, 0, 7, 3 * HINT_WINDOW])
def test_a_moved_family_is_found_whichever_way_it_moved(shift: int) -> None:
    tail = f"{VLLM.running}{{{L}}} 5.0\n{VLLM.kv_usage[0]}{{{L}}} 0.5\n"
    previous = _filler(4 * HINT_WINDOW) + f"{VLLM.waiting}{{{L}}} 2.0\n" + tail
    page = _filler(4 * HINT_WINDOW + shift) + f"{VLLM.waiting}{{{L}}} 3.0\n" + tail
    parsed = _hinted_twice(page, VLLM, previous)
    assert (parsed.metrics.waiting, parsed.metrics.running, parsed.metrics.kv_usage) == (3, 5, 0.5)


def test_a_hinted_family_absent_from_the_new_page_is_reported_missing_and_forgotten() -> None:
    filler = _filler(SMALL_PAGE)  # hints serve the search over large pages, not the one-pass reading
    previous = filler + f"{VLLM.waiting}{{{L}}} 2.0\n{VLLM.running}{{{L}}} 1.0\n"
    page = filler + f"{VLLM.running}{{{L}}} 1.0\n"
    starts: FamilyStarts = {}
    parse_page(previous, VLLM, starts)
    assert VLLM.waiting in starts
    parsed = parse_page(page, VLLM, starts)
    assert parsed.metrics.waiting is None
    assert VLLM.waiting in parsed.missing
    assert VLLM.waiting not in starts


def test_a_group_ends_at_the_first_line_of_another_family() -> None:
    page = (
        f"{VLLM.waiting}{{{L}}} 2.0\n{VLLM.waiting}_total 50\n# HELP x y\n"
        f'{VLLM.waiting}{{engine="9"}} 100\n'  # not grouped: not part of the family (format violation)
    )
    assert parse_page(page, VLLM).metrics.waiting == 2


@pytest.mark.parametrize(
    ("page", "signal"),
    [
        ('vllm:cache_config_info{block_size="x16",num_gpu_blocks="100"} 1\n', "block_size"),
        ('vllm:lora_requests_info{max_lora="four",running_lora_adapters="a"} 1\n', "max_lora"),
    ],
)
def test_unparseable_labels_are_still_missing_signals_on_the_hinted_path(page: str, signal: str) -> None:
    previous = _filler(2 * HINT_WINDOW) + page
    parsed = _hinted_twice(page, VLLM, previous)
    family = page.split("{")[0]
    assert f"{family}{{{signal}}}" in parsed.missing


def test_random_pages_parse_the_same_with_stale_hints() -> None:
    rng = random.Random(7)
    families = (VLLM.waiting, VLLM.running, *VLLM.kv_usage, VLLM.cache_config)
    names = [name for name in families if name is not None]

    def page() -> str:
        blocks = [
            _group(name, rng.randint(1, 40), rng.choice([0.25, 3.0, 7.5]))
            if name != VLLM.cache_config
            else 'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0\n'
            for name in names
            if rng.random() < 0.8
        ]
        blocks += [_filler(rng.randint(0, 3 * HINT_WINDOW)) for _ in range(4)]
        rng.shuffle(blocks)
        return "".join(blocks)

    starts: FamilyStarts = {}
    for _ in range(60):
        text = page()
        assert parse_page(text, VLLM, starts) == parse_page(text, VLLM)
