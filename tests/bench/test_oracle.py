from __future__ import annotations

import random

import pytest

from igw.bench.policies.oracle import OraclePolicy, PodSnapshot, predicted_ttft, step_time
from tests.bench.helpers import request, views


def snap(
    *,
    prefill_tokens_ahead: int = 0,
    decoding: int = 0,
    decode_context_tokens: int = 0,
    free_kv_tokens: int = 400_000,
    cached_tokens: int = 0,
    finishing: tuple[tuple[float, int], ...] = (),
    lora_load_s: float = 0.0,
    slowdown: float = 1.0,
) -> PodSnapshot:
    """An H100-like pod's snapshot: idle unless the arguments load it."""
    return PodSnapshot(
        t_ovh=0.0004, t_w0=0.0062, c_tok=25e-6, k_kv=0.056e-6, t_ar=0.0, max_num_batched_tokens=8192,
        prefill_tokens_ahead=prefill_tokens_ahead, decoding=decoding,
        decode_context_tokens=decode_context_tokens, free_kv_tokens=free_kv_tokens,
        cached_tokens=cached_tokens, finishing=finishing, lora_load_s=lora_load_s, slowdown=slowdown,
    )  # fmt: skip


def test_idle_pod_ttft_is_one_prefill_step() -> None:
    s = snap()
    assert predicted_ttft(s, prompt_tokens=1000) == pytest.approx(step_time(s, 1000))
    # docs/simulator.md, Presets: a 1k-token prefill alone on an H100 8B takes about 27 ms
    assert 0.020 < predicted_ttft(s, prompt_tokens=1000) < 0.035


def test_queued_prefill_cache_hits_kv_shortage_and_lora_all_count() -> None:
    idle = predicted_ttft(snap(), prompt_tokens=1000)
    assert predicted_ttft(snap(prefill_tokens_ahead=20_000), prompt_tokens=1000) > 3 * idle
    assert predicted_ttft(snap(cached_tokens=960), prompt_tokens=1000) < idle / 2
    short = snap(free_kv_tokens=100, finishing=((2.0, 500), (5.0, 5000)))
    assert predicted_ttft(short, prompt_tokens=1000) == pytest.approx(5.0 + step_time(short, 1000))
    assert predicted_ttft(snap(lora_load_s=0.1), prompt_tokens=1000) == pytest.approx(idle + 0.1)
    assert predicted_ttft(snap(slowdown=3.0), prompt_tokens=1000) == pytest.approx(3 * idle)


def test_oracle_refuses_to_run_without_the_des_hook() -> None:
    with pytest.raises(RuntimeError, match="bind_oracle"):
        OraclePolicy(rng=random.Random(0)).pick(request(), views(a=0), now=0.0)


@pytest.mark.parametrize(
    ("pod", "slo", "meets"),
    [
        (snap(), (1.0, 0.1), True),  # idle H100-like pod
        (snap(prefill_tokens_ahead=400_000), (1.0, 0.1), False),  # TTFT over its SLO
        (snap(decoding=900, decode_context_tokens=900_000), (1.0, 0.02), False),  # slow decode batch
        (snap(decoding=900, decode_context_tokens=900_000), (1.0, 0.2), True),
        (snap(slowdown=20.0), (1.0, 0.1), False),  # every step 20x slower: TPOT over 0.1 s
    ],
)
def test_slo_objective_needs_both_ttft_and_tpot(
    pod: PodSnapshot, slo: tuple[float, float], meets: bool
) -> None:
    from igw.bench.policies.oracle import meets_slo, predicted_tpot

    assert predicted_tpot(pod) == pytest.approx(step_time(pod, pod.decoding + 1))
    assert meets_slo(pod, prompt_tokens=500, slo=slo) is meets


def test_oracle_slo_runs_in_the_des_and_keeps_goodput_at_least_the_oracles() -> None:
    from igw.bench.capacity import fleet_capacity
    from igw.bench.des_runner import DesOptions, run_des
    from igw.bench.scenarios import DEMO

    options = DesOptions(policies=["round-robin", "oracle", "oracle-slo"], seeds=[1], duration_scale=0.05)
    run = run_des(DEMO, options=options, capacity=fleet_capacity(DEMO, seed=1))
    oracle, slo = run.policies["oracle"].summaries[0], run.policies["oracle-slo"].summaries[0]
    assert oracle.requests == slo.requests
    assert slo.goodput is not None
    assert oracle.goodput is not None
    assert slo.goodput >= oracle.goodput - 0.02
