"""The one-pass reading of small (filtered) pages gives what the per-family search gives.

Pages up to ``SMALL_PAGE`` characters - the answers to the scraper's ``name[]`` request - are read by
:func:`index_families`; larger ones by searching each family (:func:`series`). Both must find the same
samples on every simulated vLLM and SGLang version, filtered or whole, and on random pages with
groups interrupted by comments, other families, blank and malformed lines.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from igw.engines import MetricFamilies
from igw.gateway.metrics_parser import SGLANG, SMALL_PAGE, VLLM, index_families, parse_page, series
from igw.gateway.page_filter import filter_names
from igw.sim.engine import Engine
from igw.sim.metrics_page import PageContext, render_sglang, render_vllm, restrict_page
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from tests.gateway.sim_pages import page_context


def _context(version: str) -> PageContext:
    return page_context(version, max_lora=4)


def _engine() -> Engine:
    engine = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(3))
    assert engine.pool.allocate(1500)  # non-zero KV usage: a misread value cannot pass as 0.0
    return engine


def _pages() -> list[tuple[str, MetricFamilies, str]]:
    stats = PodStats(max_model_len=32768)
    out = [
        (v, VLLM, render_vllm(ctx=_context(v), engine=_engine(), stats=stats, unix_now=1.7e9, uptime_s=5.0))
        for v in ("0.9.1", "0.10.1", "0.11.0", "0.12.0", "0.13.0")
    ]
    out += [
        (v, SGLANG, render_sglang(ctx=_context(v), engine=_engine(), stats=stats, gen_throughput=3.0))
        for v in ("0.3.6", "0.4.6", "0.5.0")
    ]
    return out


def _names(families: MetricFamilies) -> frozenset[str]:
    return frozenset(filter_names(families))


@pytest.mark.parametrize(("version", "families", "page"), _pages(), ids=[p[0] for p in _pages()])
def test_filtered_page_reads_like_the_whole_page(version: str, families: MetricFamilies, page: str) -> None:
    trimmed = dataclasses.replace(families, lora=None)
    small = restrict_page(page, filter_names(trimmed))
    assert len(small) <= SMALL_PAGE
    assert len(small) < len(page) / 4
    whole, filtered = parse_page(page, trimmed), parse_page(small, trimmed)
    assert filtered == whole
    assert filtered.metrics.kv_usage is not None
    assert filtered.metrics.kv_usage > 0
    for reader_page in (page, small):
        index = index_families(reader_page, _names(families))
        for name in _names(families):
            assert index.get(name, []) == series(reader_page, name), (version, name)


def test_random_pages_read_the_same_by_both_readers() -> None:
    rng = random.Random(11)
    families = (VLLM.waiting, VLLM.running, *VLLM.kv_usage, VLLM.cache_config)
    wanted = [name for name in families if name is not None]
    noise = [
        "# HELP vllm:other x\n",
        "# TYPE vllm:other gauge\n",
        "\n",
        "vllm:num_requests_waiting_total 4.0\n",  # a longer name the wanted one prefixes
        "vllm:num_requests_waiting\n",  # no value: not a sample
        "vllm:num_requests_running{bad 1.0\n",
        'other{model_name="m"} 1.0\n',
    ]

    def sample(name: str) -> str:
        labels = f'engine="{rng.randint(0, 3)}",model_name="m"'
        if rng.random() < 0.2:
            return f"{name} {rng.choice(['1.0', '2.5', 'NaN', '+Inf'])}\n"
        return f"{name}{{{labels}}} {rng.choice(['0.25', '3.0', '7'])}\n"

    for _ in range(300):
        lines = [sample(rng.choice(wanted)) if rng.random() < 0.6 else rng.choice(noise) for _ in range(40)]
        text = "".join(lines)
        index = index_families(text, frozenset(wanted))
        for name in wanted:
            assert index.get(name, []) == series(text, name), text
