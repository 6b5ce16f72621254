"""A small page re-read through its predecessor's template reads exactly as the full parser reads it.

Whenever :meth:`PageTemplate.read` answers, its answer must equal :func:`parse_page` on the same
text; when only values moved it must answer (or the template would never save anything); any change
of shape, a timestamp or a value that is not a number must send the page back to the full parser.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from igw.engines import MetricFamilies
from igw.gateway.metrics_parser import SGLANG, VLLM, parse_page
from igw.gateway.page_filter import filter_names
from igw.gateway.page_template import PageReader, build_template
from igw.sim.engine import Engine
from igw.sim.metrics_page import render_sglang, render_vllm, restrict_page
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from tests.gateway.sim_pages import page_context

VERSIONS = [("vllm", v) for v in ("0.9.1", "0.10.1", "0.11.0", "0.12.0", "0.13.0")] + [
    ("sglang", v) for v in ("0.3.6", "0.4.6", "0.5.0")
]


def _filtered_page(kind: str, version: str, blocks: int, families: MetricFamilies, *, lora: bool) -> str:
    engine = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(3))
    assert engine.pool.allocate(blocks)
    ctx = page_context(version, max_lora=4 if lora else 0)
    stats = PodStats(max_model_len=32768)
    if kind == "vllm":
        page = render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.7e9, uptime_s=5.0)
    else:
        page = render_sglang(ctx=ctx, engine=engine, stats=stats, gen_throughput=3.0)
    return restrict_page(page, filter_names(families))


@pytest.mark.parametrize(("kind", "version"), VERSIONS, ids=[f"{k}-{v}" for k, v in VERSIONS])
def test_simulated_pages_with_moving_values_are_read_through_the_template(kind: str, version: str) -> None:
    families = dataclasses.replace(VLLM if kind == "vllm" else SGLANG, lora=None)
    pages = [_filtered_page(kind, version, blocks, families, lora=False) for blocks in (100, 900, 1500, 900)]
    template = build_template(pages[0], families, parse_page(pages[0], families))
    assert template is not None
    reader = PageReader()
    for page in pages:
        expected = parse_page(page, families)
        assert reader.read(page, families) == expected
        through = template.read(page)
        assert through == expected  # answered (same shape), and the same reading
    assert reader.read(pages[2], families).metrics.kv_usage == pytest.approx(
        parse_page(pages[2], families).metrics.kv_usage
    )


def test_a_page_with_several_lora_series_has_no_template() -> None:
    text = (
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="a",waiting_lora_adapters=""} 10.0\n'
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="b",waiting_lora_adapters=""} 11.0\n'
        "vllm:num_requests_waiting 1.0\nvllm:num_requests_running 2.0\nvllm:kv_cache_usage_perc 0.5\n"
    )
    assert build_template(text, VLLM, parse_page(text, VLLM)) is None
    one = text.split("\n", 1)[1]
    template = build_template(one, VLLM, parse_page(one, VLLM))
    assert template is not None
    moved = one.replace("2.0", "3.0").replace("} 11.0", "} 12.0")
    assert template.read(moved) == parse_page(moved, VLLM)


def _random_page(rng: random.Random, names: list[str]) -> str:
    noise = [
        "# HELP vllm:other x",
        "# TYPE vllm:other gauge",
        "",
        "vllm:num_requests_waiting_total 4.0",  # a longer name the wanted one prefixes
        "vllm:num_requests_waiting",  # no value: not a sample
        'other{model_name="m"} 1.0',
    ]
    lines = []
    for _ in range(rng.randint(3, 25)):
        if rng.random() < 0.6:
            name = rng.choice(names)
            labels = (
                f'{{engine="{rng.randint(0, 2)}",model_name="{rng.choice("mn")}"}}'
                if rng.random() < 0.8
                else ""
            )
            if rng.random() < 0.05:  # a value the full parser does not take: no template from it
                value = rng.choice(["NaN", "-3", "1.5" if name in VLLM.kv_usage else "+Inf"])
            else:
                value = rng.choice(
                    ["0.25", "0", "1", "0.5"] if name in VLLM.kv_usage else ["0.25", "3.0", "7", "0"]
                )
            lines.append(f"{name}{labels} {value}")
        else:
            lines.append(rng.choice(noise))
    return "\n".join(lines) + "\n"


def _is_kv(line: str) -> bool:
    """Whether ``line`` is a sample of a KV-cache gauge (a fraction: above 1 is not a value for it)."""
    return line.startswith(VLLM.kv_usage)


def _mutate(rng: random.Random, text: str) -> tuple[str, bool]:
    """``text`` changed; True when only sample values changed (the template must answer)."""
    lines = text.split("\n")
    kind = rng.choice(
        ["values", "values", "values", "insert", "drop", "label", "timestamp", "word", "swap", "impossible"]
    )
    samples = [
        i for i, line in enumerate(lines) if line and line[0] != "#" and line.rsplit(" ", 1)[-1][:1].isdigit()
    ]
    if kind == "values" or not samples:
        for i in samples:
            head, _, _ = lines[i].rpartition(" ")
            choices = ["0.5", "0", "1", "0.25"] if _is_kv(lines[i]) else ["0.5", "12", "1e3", "2.0"]
            lines[i] = f"{head} {rng.choice(choices)}"
        return "\n".join(lines), True
    others = [i for i in range(len(lines) - 1) if i not in samples]
    if kind == "swap" and others:  # a comment or other line becomes a routing sample: same line count
        lines[rng.choice(others)] = "vllm:num_requests_running 5.0"
        return "\n".join(lines), False
    i = rng.choice(samples)
    if kind == "insert":
        lines.insert(i, lines[i])
    elif kind == "drop":
        del lines[i]
    elif kind == "label":
        lines[i] = lines[i].replace('engine="', 'engine="9', 1).replace(" ", '{engine="9"} ', 1)
    elif kind == "timestamp":
        lines[i] += " 1700000000000"
    elif kind == "impossible":  # valid in the format, not for these gauges: the full parser drops it
        head, _, _ = lines[i].rpartition(" ")
        impossible = ["NaN", "+Inf", "-Inf", "1e400", "-3", "-0.25"]
        lines[i] = f"{head} {rng.choice([*impossible, '1.5', '80'] if _is_kv(lines[i]) else impossible)}"
    else:
        head, _, _ = lines[i].rpartition(" ")
        lines[i] = f"{head} not-a-number"
    return "\n".join(lines), False


@pytest.mark.parametrize("spec_labels", [False, True])
def test_random_pages_and_changes_read_as_the_full_parser_reads_them(spec_labels: bool) -> None:
    rng = random.Random(17)
    families = dataclasses.replace(
        VLLM,
        lora=None,
        waiting='vllm:num_requests_waiting{model_name="m"}' if spec_labels else VLLM.waiting,
    )
    names = [
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        *VLLM.kv_usage,
        "vllm:cache_config_info",
    ]
    answered = 0
    for _ in range(400):
        text = _random_page(rng, names)
        template = build_template(text, families, parse_page(text, families))
        if template is None:
            continue
        for _ in range(4):
            changed, values_only = _mutate(rng, text)
            through = template.read(changed)
            if values_only:
                assert through is not None, changed
            if through is not None:
                answered += 1
                assert through == parse_page(changed, families), changed
            text = changed if through is not None else text
    assert answered > 500


@pytest.mark.parametrize(
    ("bad", "good"),
    [
        ("vllm:num_requests_waiting NaN", "vllm:num_requests_waiting 3"),
        ("vllm:num_requests_waiting -1", "vllm:num_requests_waiting 3"),
        ("vllm:kv_cache_usage_perc 75", "vllm:kv_cache_usage_perc 0.75"),
        ("vllm:kv_cache_usage_perc +Inf", "vllm:kv_cache_usage_perc 0.75"),
    ],
)
def test_a_page_read_after_an_impossible_value_lists_only_what_it_lacks(bad: str, good: str) -> None:
    """A template built from a page with an impossible value kept that page's missing signals (and KV
    source) for the pages after it: the signal stayed "missing" once the pod printed it again."""
    rest = "vllm:num_requests_running 2\nvllm:gpu_cache_usage_perc 0.25\n"
    reader = PageReader()
    first = reader.read(f"{bad}\n{rest}", VLLM)
    assert first == parse_page(f"{bad}\n{rest}", VLLM)
    for _ in range(2):  # the second page goes through whatever template the first one left
        page = f"{good}\n{rest}"
        assert reader.read(page, VLLM) == parse_page(page, VLLM)
    assert reader.read(f"{bad}\n{rest}", VLLM) == first  # and back
