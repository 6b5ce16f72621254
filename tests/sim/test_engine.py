"""Engine fidelity: TTFT, ITL, chunked prefill, KV exhaustion, prefix caching, LoRA, abort, determinism."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from igw.sim.engine import Engine, RequestRejected
from igw.sim.presets import get_preset
from tests.sim.support import make_request, quiet_engine, run_alone, run_until_idle

TextOf = Callable[[int], str]


def test_idle_ttft_equals_prefill_time_for_the_prompt(text_of: TextOf) -> None:
    e = quiet_engine()
    req = make_request("a", text=text_of(2000), out=4)
    run_alone(e, req)
    expected = e.step_time_estimate(num_tokens=2000, attn_pairs=2000 * 1000)
    assert req.first_token_at == pytest.approx(expected, rel=1e-9)
    assert 0.045 < expected < 0.06  # ~50 ms for 2k tokens on H100 (25 us/token + floor)


def test_itl_equals_decode_step_at_that_batch_size(text_of: TextOf) -> None:
    e = quiet_engine()
    reqs = [make_request(f"r{i}", text=text_of(200), out=50) for i in range(32)]  # one joint prefill step
    for r in reqs:
        e.add(r)
    run_until_idle(e)
    # after the joint prefill all 32 decode together; context grows from 200 to ~250 tokens
    ctx_mid = 32 * (200 + 25)
    expected = e.step_time_estimate(num_tokens=32, sum_ctx=ctx_mid)
    for r in reqs:
        assert r.mean_itl == pytest.approx(expected, rel=0.02)
    single = e.step_time_estimate(num_tokens=1, sum_ctx=225)
    assert expected > single  # batching costs something per step


def test_long_prompt_is_chunked_by_the_token_budget(text_of: TextOf) -> None:
    e = quiet_engine()
    req = make_request("long", text=text_of(20_000), out=1)
    e.add(req)
    steps = 0
    t = 0.0
    while e.has_work():
        b = e.schedule(t)
        assert b is not None
        assert b.num_tokens <= e.max_num_batched_tokens
        t += b.duration
        e.complete(b, t)
        steps += 1
    assert steps == math.ceil(20_000 / 8192)


def test_kv_exhaustion_queues_and_preempts(text_of: TextOf) -> None:
    e = quiet_engine("llama-3.1-8b/a10g")  # ~33k tokens of KV
    reqs = [make_request(f"r{i}", text=text_of(3000), out=1500) for i in range(12)]
    for r in reqs:
        e.add(r)
    t = 0.0
    max_waiting_while_full = 0
    while e.has_work():
        b = e.schedule(t)
        assert b is not None
        if e.pool.usage > 0.9:
            max_waiting_while_full = max(max_waiting_while_full, e.num_waiting)
        t += b.duration
        e.complete(b, t)
    assert max_waiting_while_full > 0  # requests queued behind a full cache
    assert e.counters.preemptions > 0
    assert any(r.preemptions for r in reqs)
    assert all(r.output_tokens == 1500 for r in reqs)  # recompute, nothing lost
    assert e.pool.usage == 0.0


def test_repeated_prefix_cuts_ttft_and_is_counted(text_of: TextOf) -> None:
    e = quiet_engine()
    system = text_of(1600)
    first = make_request("a", text=system + text_of(64), out=2)
    end = run_alone(e, first)
    second = make_request("b", text=system + text_of(64), out=2, arrival=end)
    run_alone(e, second, start=end)
    assert first.cached_tokens == 0
    assert second.cached_tokens == 1600
    assert (second.first_token_at or 0) - end < 0.5 * (first.first_token_at or 0)
    assert e.counters.prefix_hits == 1600
    assert e.counters.prefix_queries == 2 * 1664


def test_fully_cached_prompt_still_computes_its_last_token(text_of: TextOf) -> None:
    e = quiet_engine()
    text = text_of(320)
    end = run_alone(e, make_request("a", text=text, out=1))
    again = make_request("b", text=text, out=1)
    run_alone(e, again, start=end)
    assert again.cached_tokens == 320 - 16  # last block recomputed (vLLM caps hits at prompt-1)


def test_lora_slots_make_other_adapters_wait_and_loading_costs_time(text_of: TextOf) -> None:
    e = quiet_engine(max_loras=1)
    a = make_request("a", text=text_of(100), out=20, adapter="sql")
    b = make_request("b", text=text_of(100), out=20, adapter="chat")
    c = make_request("c", text=text_of(100), out=20, adapter="sql")
    for r in (a, b, c):
        e.add(r)
    batch = e.schedule(0.0)
    assert batch is not None
    assert {r.request_id for r in batch.requests} == {"a", "c"}  # b skipped, c passes it
    assert batch.duration > get_preset("llama-3.1-8b/h100").lora_cold_load_s
    assert e.waiting_adapters() == frozenset({"chat"})
    e.complete(batch, batch.duration)
    run_until_idle(e, start=batch.duration)
    assert (b.first_scheduled_at or 0) >= (a.finished_at or 0)


def test_lora_needs_lora_enabled(text_of: TextOf) -> None:
    with pytest.raises(RequestRejected, match="LoRA"):
        quiet_engine().add(make_request("a", text=text_of(10), out=1, adapter="x"))


def test_abort_frees_blocks_immediately(text_of: TextOf) -> None:
    e = quiet_engine()
    r = make_request("a", text=text_of(4000), out=100)
    e.add(r)
    b = e.schedule(0.0)
    assert b is not None
    e.complete(b, b.duration)
    assert e.pool.usage > 0
    assert e.abort("a", now=1.0)
    assert e.pool.usage == 0.0
    assert e.num_running == 0
    assert e.counters.finished_by_reason["abort"] == 1
    assert not e.abort("a", now=1.0)


def test_requests_that_can_never_fit_are_rejected(text_of: TextOf) -> None:
    e = quiet_engine("llama-3.1-8b/a10g")
    with pytest.raises(RequestRejected, match="maximum context length is 16384 tokens"):
        e.add(make_request("a", text=text_of(16_000), out=1000))


def test_max_num_seqs_caps_the_running_batch(text_of: TextOf) -> None:
    e = Engine(
        preset=get_preset("llama-3.1-8b/h100").with_overrides(max_num_seqs=4),
        rng=random.Random(0),
        jitter_sigma=0,
    )
    for i in range(10):
        e.add(make_request(f"r{i}", text=text_of(64), out=5))
    b = e.schedule(0.0)
    assert b is not None
    assert len(b.requests) == 4
    assert e.num_waiting == 6


def _trace(seed: int, text_of: TextOf) -> list[tuple[float | None, float | None]]:
    e = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(seed), jitter_sigma=0.05)
    reqs = [make_request(f"r{i}", text=text_of(200), out=30) for i in range(8)]
    for r in reqs:
        e.add(r)
    run_until_idle(e)
    return [(r.first_token_at, r.finished_at) for r in reqs]


def test_same_seed_same_timings_and_jitter_is_small(text_of: TextOf) -> None:
    a = _trace(1, text_of)
    b = _trace(1, text_of)
    c = _trace(2, text_of)
    assert a == b
    assert a != c
    for (_, fa), (_, fc) in zip(a, c, strict=True):
        assert fa == pytest.approx(fc, rel=0.05)


def test_slowdown_multiplies_step_time() -> None:
    e = quiet_engine()
    base = e.step_time_estimate(num_tokens=10)
    e.slowdown = 3.0
    assert e.step_time_estimate(num_tokens=10) == pytest.approx(3 * base)
