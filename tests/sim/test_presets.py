"""Presets reproduce the published KV capacities and step times (docs/simulator.md, Presets)."""

from __future__ import annotations

import pytest

from igw.sim.presets import PRESETS, get_preset
from tests.sim.support import quiet_engine

# KV tokens that fit at gpu_memory_utilization 0.9 (docs/simulator.md, Presets)
KV_TOKENS = {
    "llama-3.1-8b/h100": 440_000,
    "llama-3.1-8b/a10g": 33_000,
    "qwen3-32b/2xh100": 310_000,
    "qwen3-32b/4xa10g": 62_000,
    "llama-3.1-70b/8xh100": 1_300_000,
    "qwen3-235b-fp8/8xh100": 900_000,
}
# §8.2 rows: decode step at batch 1 / 32 with 1k context, prefill of a 1k prompt alone (ms)
STEP_MS = {
    "llama-3.1-8b/h100": (6.7, 8.5, 27),
    "llama-3.1-8b/a10g": (36, 47, 310),
    "qwen3-32b/2xh100": (15, 16.6, 65),
    "qwen3-32b/4xa10g": (41.5, 52, 665),
    "llama-3.1-70b/8xh100": (10, 10.9, 60),
    "qwen3-235b-fp8/8xh100": (5.6, 15, 32),
}


@pytest.mark.parametrize(
    ("key", "weights_ms", "token_us"),
    [
        # T_w0 = weight bytes per GPU / (bandwidth x 0.77); c_tok from the A100 profile (67 us) or
        # H100's compute (H200), scaled by the A100/H100 ratio for the 32B TP2 row.
        ("llama-3.1-8b/a100", 16.06e9 / (2.039e12 * 0.77) * 1e3, 67),
        ("llama-3.1-8b/h200", 16.06e9 / (4.8e12 * 0.77) * 1e3, 25),
        ("qwen3-32b/2xa100", 65.6e9 / 2 / (2.039e12 * 0.77) * 1e3, 60 * 67 / 25),
        ("qwen3-32b/h200", 65.6e9 / (4.8e12 * 0.77) * 1e3, 2 * 32.8e9 / (989e12 * 0.65) * 1e6),
    ],
)
def test_added_gpu_presets_follow_the_bandwidth_and_compute_arithmetic(
    key: str, weights_ms: float, token_us: float
) -> None:
    cost = PRESETS[key].cost
    assert cost.t_w0 * 1e3 == pytest.approx(weights_ms, rel=0.02)
    assert cost.c_tok * 1e6 == pytest.approx(token_us, rel=0.02)


def test_gpu_speed_order_of_the_8b_presets() -> None:
    """Decode (weight streaming) and prefill (token compute) order: H200 > H100 > A100 > A10G."""
    order = ["llama-3.1-8b/h200", "llama-3.1-8b/h100", "llama-3.1-8b/a100", "llama-3.1-8b/a10g"]
    engines = [quiet_engine(k) for k in order]
    decode = [e.step_time_estimate(num_tokens=1, sum_ctx=1000) for e in engines]
    prefill = [e.step_time_estimate(num_tokens=2048) for e in engines]
    assert decode == sorted(decode)
    assert prefill[1:] == sorted(prefill[1:])
    assert prefill[0] <= prefill[1] * 1.01  # the H200 has the H100's compute


@pytest.mark.parametrize("key", sorted(KV_TOKENS))
def test_kv_capacity_is_derived_close_to_reference(key: str) -> None:
    assert PRESETS[key].kv_capacity_tokens == pytest.approx(KV_TOKENS[key], rel=0.06)


@pytest.mark.parametrize("key", sorted(STEP_MS))
def test_step_times_match_reference_table(key: str) -> None:
    e = quiet_engine(key)
    b1, b32, prefill = STEP_MS[key]
    assert e.step_time_estimate(num_tokens=1, sum_ctx=1000) * 1e3 == pytest.approx(b1, rel=0.05)
    assert e.step_time_estimate(num_tokens=32, sum_ctx=32_000) * 1e3 == pytest.approx(b32, rel=0.05)
    assert e.step_time_estimate(num_tokens=1000, attn_pairs=1000 * 500) * 1e3 == pytest.approx(
        prefill, rel=0.06
    )


def test_a10g_is_slower_than_h100_by_the_reference_ratios() -> None:
    h100, a10g = quiet_engine("llama-3.1-8b/h100"), quiet_engine("llama-3.1-8b/a10g")
    decode = a10g.step_time_estimate(num_tokens=1) / h100.step_time_estimate(num_tokens=1)
    prefill = a10g.step_time_estimate(num_tokens=2048) / h100.step_time_estimate(num_tokens=2048)
    assert 5.0 <= decode <= 6.0  # §1.3: ~5.4x slower decode
    assert 8.0 <= prefill <= 13.0  # §1.3: 8-13x slower prefill
    assert 12 <= h100.pool.num_blocks / a10g.pool.num_blocks <= 14  # §1.3: ~13x less KV


def test_gpu_memory_utilization_changes_block_count() -> None:
    p = get_preset("llama-3.1-8b/h100")
    assert p.with_overrides(gpu_memory_utilization=0.8).num_gpu_blocks < p.num_gpu_blocks


def test_unknown_preset_lists_known_ones() -> None:
    with pytest.raises(KeyError, match=r"llama-3\.1-8b/h100"):
        get_preset("gpt-5/h100")


def test_every_preset_cites_sources() -> None:
    assert all(p.sources for p in PRESETS.values())
