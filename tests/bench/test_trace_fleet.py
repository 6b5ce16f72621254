"""A trace's fleet checks and capacity: requests too long for a pod must not distort either."""

from __future__ import annotations

import random

import pytest

from igw.bench.scenarios import SCENARIOS
from igw.bench.trace_fleet import UnservableTraceError, check_sizes, trace_capacity
from igw.bench.workload import fleet_pods
from igw.sim.request import SimRequest
from igw.sim.tokens import synthetic_text

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _request(i: int, prompt_tokens: int, output_tokens: int) -> SimRequest:
    text = synthetic_text(tokens=prompt_tokens, rng=random.Random(i))
    return SimRequest(request_id=f"r{i}", arrival=0.5 * i, prompt_text=text, prompt_tokens=prompt_tokens,
                      output_tokens=output_tokens, model=MODEL)  # fmt: skip


def test_capacity_is_measured_on_the_requests_each_pod_type_can_hold() -> None:
    """A 20k-token request fits an H100 pod (131k context) but not an A10G one (16k): the A10G's flood
    held it anyway, half the flood was refused at once, the other half finished in one step, and the
    20-80 % window of finish times collapsed: 1.5e11 req/s per A10G pod, "load: 0 %"."""
    pods = fleet_pods(SCENARIOS["mixed-fleet-8b"])
    cap = trace_capacity(pods, [_request(0, 10, 5), _request(1, 20_000, 5)], seed=1)
    rates = {c.preset: c.requests_per_s for c in cap.per_type}
    assert set(rates) == {"llama-3.1-8b/h100", "llama-3.1-8b/a10g"}
    # 10-token prompts, 5 tokens out: an A10G pod runs 256 at a time, ~5 decode steps of ~40 ms each
    assert 0 < rates["llama-3.1-8b/a10g"] < 10_000


def test_a_request_no_pod_can_hold_is_refused_before_the_run() -> None:
    pods = fleet_pods(SCENARIOS["mixed-fleet-8b"])
    expected = r"t.jsonl: 1 request longer .* request 2 of the trace, id r1: 200000 prompt \+ 5 output tokens"
    with pytest.raises(UnservableTraceError, match=expected + ", at most 131072 fit"):
        check_sizes(pods, [_request(0, 10, 5), _request(1, 200_000, 5)], source="t.jsonl")
    check_sizes(pods, [_request(0, 10, 5), _request(1, 20_000, 5)], source="t.jsonl")  # fits the H100s
