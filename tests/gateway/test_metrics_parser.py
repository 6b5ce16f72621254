from __future__ import annotations

import random
import tracemalloc

import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.metrics_parser import SGLANG, VLLM, parse_labels, parse_page, series
from igw.gateway.page_template import PageReader
from igw.sim.engine import Engine
from igw.sim.metrics_page import render_vllm
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from tests.gateway.sim_pages import page_context

L = 'engine="0",model_name="m"'


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        pytest.param(
            f"vllm:num_requests_waiting{{{L}}} 3.0\nvllm:num_requests_running{{{L}}} 7.0\n"
            f"vllm:kv_cache_usage_perc{{{L}}} 0.25\nvllm:gpu_cache_usage_perc{{{L}}} 0.99\n",
            {"waiting": 3, "running": 7, "kv_usage": 0.25, "kv_source": "vllm:kv_cache_usage_perc"},
            id="new-name-preferred-over-old",
        ),
        pytest.param(
            f"vllm:num_requests_waiting{{{L}}} 1\nvllm:gpu_cache_usage_perc{{{L}}} 0.5\n",
            {"waiting": 1, "running": None, "kv_usage": 0.5, "kv_source": "vllm:gpu_cache_usage_perc"},
            id="old-name-fallback",
        ),
        pytest.param(
            'vllm:num_requests_waiting{engine="0"} 2\nvllm:num_requests_waiting{engine="1"} 5\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.25\nvllm:kv_cache_usage_perc{engine="1"} 0.75\n',
            {"waiting": 7, "kv_usage": 0.5},
            id="data-parallel-engines-summed-kv-mean-without-capacities",
        ),
        pytest.param(
            "# HELP vllm:num_requests_waiting_total x\n"
            "vllm:num_requests_waiting_total 99\nvllm:num_requests_waiting 4\n",
            {"waiting": 4},
            id="exact-family-name-no-prefix-match-no-labels",
        ),
        pytest.param(
            f"vllm:num_requests_waiting{{{L}}} 3.0 1700000000000\n",
            {"waiting": 3},
            id="sample-timestamp-ignored",
        ),
        pytest.param(
            "", {"waiting": None, "running": None, "kv_usage": None, "kv_source": None}, id="empty-page"
        ),
    ],
)
def test_vllm_signals(page: str, expected: dict[str, object]) -> None:
    parsed = parse_page(page, VLLM)
    for field, value in expected.items():
        got = parsed.kv_source if field == "kv_source" else getattr(parsed.metrics, field)
        assert got == value, field


@pytest.mark.parametrize(
    ("lora_lines", "active", "waiting", "max_lora"),
    [
        pytest.param(
            [
                'max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="" 1.7e9',
                'max_lora="2",running_lora_adapters="c",waiting_lora_adapters="d" 1.8e9',
                'max_lora="2",running_lora_adapters="",waiting_lora_adapters="" 1.9e9',
            ],
            {"c"},
            {"d"},
            2,
            id="largest-value-non-empty-series",
        ),
        pytest.param(
            ['max_lora="4",running_lora_adapters="",waiting_lora_adapters="" 1.9e9'],
            set(),
            set(),
            4,
            id="idle-but-enabled",
        ),
    ],
)
def test_lora_info(lora_lines: list[str], active: set[str], waiting: set[str], max_lora: int) -> None:
    page = "".join(
        f"vllm:lora_requests_info{{{line.split(' ')[0]}}} {line.split(' ')[1]}\n" for line in lora_lines
    )
    m = parse_page(page, VLLM).metrics
    assert (m.active_adapters, m.waiting_adapters, m.max_lora) == (
        frozenset(active),
        frozenset(waiting),
        max_lora,
    )


@pytest.mark.parametrize(
    ("running", "waiting", "signal"),
    [
        (",".join(f"a{i}" for i in range(5000)), "", "running_lora_adapters"),
        ("ok", ",".join(f"w{i}" for i in range(1025)), "waiting_lora_adapters"),
        ("x" * 257, "", "running_lora_adapters"),
    ],
    ids=["5000-running", "1025-waiting", "257-character-name"],
)
def test_an_adapter_list_over_its_bounds_is_a_missing_signal_not_a_set(
    running: str, waiting: str, signal: str
) -> None:
    """A page listing more adapters than any engine runs (or a name no engine serves) is broken or
    hostile: no set of its names (and no exported series per name), the label reported instead."""
    page = (
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{running}",'
        f'waiting_lora_adapters="{waiting}"}} 1.9e9\n'
    )
    parsed = parse_page(page, VLLM)
    metrics = parsed.metrics
    assert (metrics.active_adapters, metrics.waiting_adapters, metrics.max_lora) == (None, None, None)
    assert f"vllm:lora_requests_info{{{signal}}}" in parsed.missing


def test_adapter_lists_at_their_bounds_are_taken() -> None:
    names = [f"a{i}" for i in range(1024)]
    page = (
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{",".join(names)}",'
        f'waiting_lora_adapters="{"y" * 256}"}} 1.9e9\n'
    )
    parsed = parse_page(page, VLLM)
    assert parsed.metrics.active_adapters == frozenset(names)
    assert parsed.metrics.waiting_adapters == frozenset({"y" * 256})
    assert not any("lora" in signal for signal in parsed.missing)


def test_cache_config_and_missing_report() -> None:
    page = (
        'vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="None",sliding_window="None"} 1.0\n'
    )
    parsed = parse_page(page, VLLM)
    assert (parsed.metrics.block_size, parsed.metrics.num_gpu_blocks) == (32, None)
    assert parsed.missing == {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:lora_requests_info",
        "vllm:cache_config_info{num_gpu_blocks}",  # "None" is not a number: reported, not dropped
    }


@pytest.mark.parametrize(
    ("page", "signal"),
    [
        ('vllm:cache_config_info{block_size="x16",num_gpu_blocks="100"} 1\n', "block_size"),
        ('vllm:cache_config_info{block_size="16",num_gpu_blocks="-1"} 1\n', "num_gpu_blocks"),
        ('vllm:lora_requests_info{max_lora="four",running_lora_adapters="a"} 1\n', "max_lora"),
    ],
)
def test_unparseable_integer_labels_are_reported_as_missing_signals(page: str, signal: str) -> None:
    parsed = parse_page(page, VLLM)
    family = page.split("{")[0]
    assert f"{family}{{{signal}}}" in parsed.missing
    others = {"block_size", "num_gpu_blocks", "max_lora"} - {signal}
    assert not [s for s in parsed.missing if any(f"{{{o}}}" in s for o in others)]


def test_sglang_names_and_tp_ranks_not_double_counted() -> None:
    page = (
        'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 4.0\n'
        'sglang:num_queue_reqs{model_name="m",tp_rank="1"} 4.0\n'
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} 9.0\n'
        'sglang:token_usage{model_name="m",tp_rank="0"} 0.3\n'
        'sglang:cache_config_info{num_pages="100",page_size="1"} 1\n'
    )
    parsed = parse_page(page, SGLANG)
    m = parsed.metrics
    assert (m.waiting, m.running, m.kv_usage, m.block_size, m.num_gpu_blocks) == (4, 9, 0.3, 1, 100)
    assert parsed.missing == frozenset()


def _sglang_dp_page(queues: dict[tuple[int, int], int], running: dict[tuple[int, int], int]) -> str:
    """An SGLang page with one series per (dp_rank, tp_rank), labels sorted as SGLang prints them."""
    lines = []
    for family, by_rank in (("sglang:num_queue_reqs", queues), ("sglang:num_running_reqs", running)):
        lines += [f"# HELP {family} x", f"# TYPE {family} gauge"]
        lines += [
            f'{family}{{dp_rank="{dp}",engine_type="unified",model_name="m",pp_rank="0",'
            f'tp_rank="{tp}"}} {v}.0'
            for (dp, tp), v in sorted(by_rank.items())
        ]
    lines += [
        "# HELP sglang:token_usage x",
        "# TYPE sglang:token_usage gauge",
        'sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.3',
        'sglang:cache_config_info{num_pages="100",page_size="1"} 1.0',
    ]
    return "\n".join(lines) + "\n"


def test_sglang_data_parallel_ranks_are_summed_tp_ranks_are_not() -> None:
    """SGLang runs one scheduler per ``dp_rank``, each with its own waiting queue and running batch;
    the TP ranks of one DP rank repeat its numbers. The maximum across every series read a pod with
    two busy DP ranks (queues 5 and 7) as holding 7 requests, not 12. Both readings - the full
    parser and a small page's template - agree."""
    queues = {(0, 0): 5, (0, 1): 5, (1, 0): 7, (1, 1): 7}
    running = {(0, 0): 3, (0, 1): 3, (1, 0): 4, (1, 1): 4}
    m = parse_page(_sglang_dp_page(queues, running), SGLANG).metrics
    assert (m.waiting, m.running) == (12, 7)
    reader = PageReader()
    reader.read(_sglang_dp_page(queues, running), SGLANG, {})
    template = reader._template
    assert template is not None
    moved = reader.read(_sglang_dp_page({k: v + 1 for k, v in queues.items()}, running), SGLANG, {})
    assert reader._template is template  # read through the first page's template, not parsed again
    assert (moved.metrics.waiting, moved.metrics.running) == (14, 7)


SG_LABELS = 'engine_type="unified",model_name="m",pp_rank="0"'
"""The scheduler labels after ``dp_rank``, sorted as SGLang prints them (``tp_rank`` follows)."""


def _sglang_rank(family: str, dp: int, tp: int, value: str) -> str:
    return f'{family}{{dp_rank="{dp}",{SG_LABELS},tp_rank="{tp}"}} {value}'


def _data_parallel_page(kind: str, usage: tuple[str, str], pages: tuple[int, int]) -> str:
    """A pod of two data-parallel ranks (rank 0 with ``usage[0]`` of ``pages[0]`` 16-token pages,
    rank 1 likewise), as each engine prints it: SGLang >= 0.5.12 (plain gauges) and 0.5.8 - 0.5.11
    (``cache_config_info``) with two TP ranks per DP rank repeating its numbers, vLLM with one
    ``engine`` per rank."""
    lines = []
    if kind == "vllm":
        for family, values in (
            ("vllm:num_requests_waiting", ("1.0", "2.0")),
            ("vllm:num_requests_running", ("3.0", "4.0")),
            ("vllm:kv_cache_usage_perc", usage),
        ):
            lines += [f"# TYPE {family} gauge"]
            lines += [f'{family}{{engine="{e}",model_name="m"}} {values[e]}' for e in (0, 1)]
        lines += ["# TYPE vllm:cache_config_info gauge"]
        lines += [
            f'vllm:cache_config_info{{block_size="16",engine="{e}",num_gpu_blocks="{pages[e]}"}} 1.0'
            for e in (0, 1)
        ]
        return "\n".join(lines) + "\n"
    gauges = [
        ("sglang:num_queue_reqs", ("1.0", "2.0")),
        ("sglang:num_running_reqs", ("3.0", "4.0")),
        ("sglang:token_usage", usage),
    ]
    if kind == "sglang-gauges":
        counts = (f"{pages[0]}.0", f"{pages[1]}.0")
        gauges += [("sglang:page_size", ("16.0", "16.0")), ("sglang:num_pages", counts)]
    for family, values in gauges:
        lines += [f"# TYPE {family} gauge"]
        lines += [_sglang_rank(family, dp, tp, values[dp]) for dp in (0, 1) for tp in (0, 1)]
    if kind == "sglang-info":
        lines += ["# TYPE sglang:cache_config_info gauge"]
        lines += [
            f'sglang:cache_config_info{{dp_rank="{dp}",{SG_LABELS},num_pages="{pages[dp]}",page_size="16",'
            f'tp_rank="{tp}"}} 1.0'
            for dp in (0, 1)
            for tp in (0, 1)
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["sglang-gauges", "sglang-info", "vllm"])
def test_data_parallel_ranks_kv_capacity_is_summed_and_usage_weighted_by_it(kind: str) -> None:
    """Each data-parallel rank (SGLang's ``dp_rank``, vLLM's ``engine``) is an engine with its own KV
    pool, and the pod deals requests to all of them. Before, the capacity was the first series' (one
    rank's: 1,000 pages of a 4,000-page pod) and the usage the fullest rank's (0.8 on a pod whose
    tokens are 35 % used: the KV scorer ranked it last and the saturation check counted it full).
    Now the pages are summed and the usage is the pod's used tokens over its tokens; the TP ranks
    of one DP rank are counted once. A small page's template reads it the same way."""
    families = VLLM if kind == "vllm" else SGLANG
    page = _data_parallel_page(kind, ("0.8", "0.2"), (1000, 3000))
    parsed = parse_page(page, families)
    m = parsed.metrics
    assert (m.block_size, m.num_gpu_blocks) == (16, 4000)
    assert m.kv_usage == pytest.approx((0.8 * 1000 + 0.2 * 3000) / 4000)  # 0.35, not 0.8
    assert (m.waiting, m.running) == (3, 7)
    assert not [s for s in parsed.missing if "lora" not in s]
    reader = PageReader()
    assert reader.read(page, families, {}) == parsed
    template = reader._template
    assert template is not None
    moved = _data_parallel_page(kind, ("0.1", "0.9"), (1000, 3000))
    again = reader.read(moved, families, {})
    assert reader._template is template  # read through the first page's template
    assert again == parse_page(moved, families)
    assert again.metrics.kv_usage == pytest.approx((0.1 * 1000 + 0.9 * 3000) / 4000)


def test_a_rank_without_its_capacity_leaves_the_pod_capacity_unknown_and_ranks_count_equally() -> None:
    """Half the pod's capacity is no capacity figure: a rank whose ``num_pages`` is absent leaves the
    total unknown (reported missing), and without every rank's capacity the ranks' shares count
    equally (they run the same model and flags)."""
    page = _data_parallel_page("sglang-gauges", ("0.8", "0.2"), (1000, 3000))
    page = "\n".join(line for line in page.split("\n") if not line.startswith('sglang:num_pages{dp_rank="1"'))
    parsed = parse_page(page, SGLANG)
    assert (parsed.metrics.block_size, parsed.metrics.num_gpu_blocks) == (16, None)
    assert parsed.metrics.kv_usage == pytest.approx(0.5)
    assert parsed.missing == {SGLANG.cache_config}


def test_a_page_whose_capacity_gauge_changed_is_not_read_with_the_old_capacity() -> None:
    """SGLang >= 0.5.12 prints its KV capacity as gauge values, not labels: a small page's template
    re-read only the queue, running and KV lines and kept the capacity of the page it was built from,
    so a restarted server with another ``--max-total-tokens`` and the same page shape kept its old
    capacity (and its prefix index size) for as long as the shape held."""
    reader = PageReader()
    reader.read(_data_parallel_page("sglang-gauges", ("0.5", "0.5"), (1000, 1000)), SGLANG, {})
    bigger = _data_parallel_page("sglang-gauges", ("0.5", "0.5"), (5000, 1000))
    assert reader.read(bigger, SGLANG, {}) == parse_page(bigger, SGLANG)
    assert parse_page(bigger, SGLANG).metrics.num_gpu_blocks == 6000


def test_a_long_cache_config_label_that_changes_every_page_is_not_kept() -> None:
    """A pod whose ``cache_config_info`` series carried a long label value that changed on every page
    (a broken or hostile exporter) had each page's label text and its parse remembered: 2 MB held
    for each 1 MB value, growing with every scrape (1,024 remembered; 16 MiB pages allowed). The
    parse is still right, and nothing of the pages stays."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(30):
            junk = f"{i}" + "x" * 1_000_000
            labels = f'block_size="16",engine="0",junk="{junk}",num_gpu_blocks="7"'
            page = f"vllm:cache_config_info{{{labels}}} 1\n"
            parsed = parse_page(page, VLLM)
            assert (parsed.metrics.block_size, parsed.metrics.num_gpu_blocks) == (16, 7)
        del page, parsed, junk, labels
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 4_000_000, kept  # 60 MB before


def test_labels_with_escapes_commas_and_braces() -> None:
    assert parse_labels(r'a="x,y",b="q\"uote}",c="",d="back\\slash"') == {
        "a": "x,y",
        "b": 'q"uote}',
        "c": "",
        "d": "back\\slash",
    }
    assert series('x{a="}"} 1\n', "x") == [('a="}"', "1")]


@pytest.mark.parametrize("version", ["0.9.1", "0.10.1", "0.12.0"])
def test_simulator_pages_parse_like_prometheus_client(version: str) -> None:
    engine = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(3))
    ctx = page_context(version)
    page = render_vllm(
        ctx=ctx, engine=engine, stats=PodStats(max_model_len=32768), unix_now=1.7e9, uptime_s=1.0
    )
    reference = {
        s.name: s.value
        for fam in text_string_to_metric_families(page)
        for s in fam.samples
        if not s.name.endswith("_created")
    }
    parsed = parse_page(page, VLLM)
    assert parsed.metrics.waiting == reference["vllm:num_requests_waiting"]
    assert parsed.metrics.running == reference["vllm:num_requests_running"]
    kv_name = "vllm:kv_cache_usage_perc" if version != "0.9.1" else "vllm:gpu_cache_usage_perc"
    assert parsed.metrics.kv_usage == reference[kv_name]
    assert parsed.kv_source == kv_name
    assert ("vllm:kv_cache_usage_perc" in parsed.missing) is (version == "0.9.1")
    assert parsed.metrics.num_gpu_blocks == engine.pool.num_blocks


NON_FINITE = ["NaN", "+Inf", "-Inf", "1e400", "-3", "-0.5"]
"""Values these gauges cannot take: not finite, or negative (only a broken exporter prints them)."""


@pytest.mark.parametrize("value", NON_FINITE)
def test_an_impossible_queue_or_running_count_is_a_missing_signal(value: str) -> None:
    """The exposition format allows NaN and the infinities; ``int()`` of them raised out of the parse
    (every scrape of that pod failed with a logged traceback), and a negative queue made its pod look
    the least loaded."""
    page = (
        f"vllm:num_requests_waiting {value}\nvllm:num_requests_running {value}\n"
        "vllm:kv_cache_usage_perc 0.5\n"
    )
    parsed = parse_page(page, VLLM)
    assert (parsed.metrics.waiting, parsed.metrics.running, parsed.metrics.kv_usage) == (None, None, 0.5)
    assert {"vllm:num_requests_waiting", "vllm:num_requests_running"} <= parsed.missing


def test_series_summing_past_the_largest_float_are_a_missing_signal() -> None:
    page = 'vllm:num_requests_waiting{engine="0"} 1e308\nvllm:num_requests_waiting{engine="1"} 1e308\n'
    parsed = parse_page(page, VLLM)
    assert parsed.metrics.waiting is None
    assert "vllm:num_requests_waiting" in parsed.missing


NOT_A_FRACTION = [*NON_FINITE, "1.0000001", "1.5", "75", "100"]
"""Values a KV cache's used share cannot take: above 1 is an exporter printing a percentage."""


@pytest.mark.parametrize("value", NOT_A_FRACTION)
def test_an_impossible_kv_gauge_falls_back_or_is_missing(value: str) -> None:
    """A NaN, infinite or negative KV gauge reached the scorers, and one above 1 (a percentage) made
    its pod read as full; now it is absent: the older name's value is used when the page has one,
    else the signal is missing."""
    page = f"vllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc {value}\n"
    parsed = parse_page(page, VLLM)
    assert parsed.metrics.kv_usage is None
    assert parsed.kv_source is None
    older = parse_page(page + "vllm:gpu_cache_usage_perc 0.25\n", VLLM)
    assert (older.metrics.kv_usage, older.kv_source) == (0.25, "vllm:gpu_cache_usage_perc")
    mixed = parse_page(
        f'vllm:kv_cache_usage_perc{{engine="0"}} {value}\nvllm:kv_cache_usage_perc{{engine="1"}} 0.75\n', VLLM
    )
    assert mixed.metrics.kv_usage == 0.75  # the family's possible values count


def test_zero_is_a_value_not_a_missing_signal() -> None:
    parsed = parse_page("vllm:num_requests_waiting -0.0\nvllm:kv_cache_usage_perc 0\n", VLLM)
    assert (parsed.metrics.waiting, parsed.metrics.kv_usage) == (0, 0.0)
    assert "vllm:num_requests_waiting" not in parsed.missing


def test_a_full_kv_cache_is_a_value_not_a_missing_signal() -> None:
    parsed = parse_page("vllm:kv_cache_usage_perc 1.0\n", VLLM)
    assert (parsed.metrics.kv_usage, parsed.kv_source) == (1.0, "vllm:kv_cache_usage_perc")
    assert "vllm:kv_cache_usage_perc" not in parsed.missing
