"""The discrete-event simulator: records, scrape semantics, rejections, faults, oracle hook, determinism."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import pytest

from igw.scheduling.factory import default_weights, scheduler_from_weights
from igw.scheduling.retry_policy import RetryPolicy
from igw.scheduling.settings import OutlierDetection, RoutingSettings
from igw.scheduling.types import DecisionKind, EndpointView, RoutingDecision, RoutingRequest
from igw.sim.des import SimulationError, simulate
from igw.sim.request import SimRequest
from igw.sim.spec import EngineKind, FaultKind, FaultSpec, PodSpec
from igw.sim.truth import PodTruth
from igw.sim.workloads import (
    AZURE_CONV_INPUT,
    AZURE_CONV_OUTPUT,
    SHAREGPT_INPUT,
    SHAREGPT_OUTPUT,
    gamma_arrivals,
    poisson_arrivals,
    shared_prefix,
    synthetic,
    take,
    with_lora_mix,
)
from tests.sim.support import RoundRobin

H100 = PodSpec(preset="llama-3.1-8b/h100", name="h")
A10G = PodSpec(preset="llama-3.1-8b/a10g", name="a")


def workload(n: int, *, rate: float = 20.0, seed: int = 5) -> list[SimRequest]:
    rng = random.Random(seed)
    return take(
        synthetic(
            count=n,
            arrivals=poisson_arrivals(rate=rate, rng=rng),
            prompt_lengths=SHAREGPT_INPUT,
            output_lengths=SHAREGPT_OUTPUT,
            model="m",
            rng=rng,
        ),
        n,
    )


def test_records_carry_latencies_and_tokens() -> None:
    reqs = workload(200)
    res = simulate(pods=[H100, H100], requests=reqs, policy=RoundRobin(), seed=1)
    assert len(res.records) == 200
    assert all(r.ok for r in res.records)
    r = res.records[0]
    assert r.pod is not None
    assert r.ttft is not None
    assert r.e2e is not None
    assert r.ttft <= r.e2e
    assert r.output_tokens == reqs[0].output_tokens
    assert r.prompt_tokens == reqs[0].prompt_tokens
    assert {rec.pod for rec in res.records} == set(res.pods)
    s = res.summary()
    assert s["served"] == 200
    assert s["ttft_p99"] >= s["ttft_p50"] > 0


def test_same_seed_same_records_other_seed_differs() -> None:
    def run(seed: int) -> list[tuple[float | None, float | None]]:
        res = simulate(pods=[H100, A10G], requests=workload(100), policy=RoundRobin(), seed=seed)
        return [(r.ttft, r.e2e) for r in res.records]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_policy_sees_scrapes_with_age_and_exact_inflight() -> None:
    policy = RoundRobin()
    simulate(
        pods=[H100, H100], requests=workload(300, rate=50), policy=policy, seed=1, scrape_interval_s=0.05
    )
    ages = []
    for now, views in policy.seen:
        for v in views:
            if v.scraped_at is not None:
                age = v.metrics_age(now)
                assert age is not None
                assert 0 <= age < 0.05 + 1e-9
                ages.append(age)
            assert v.inflight >= 0
    assert len(ages) > 100
    assert max(ages) > 0.02
    busy = [v for _, views in policy.seen for v in views if v.inflight > 0]
    assert busy
    assert any(v.metrics is not None and v.metrics.running for v in busy)


def test_scraped_state_lags_the_truth() -> None:
    # one pod, requests arriving faster than the scrape interval: the router's in-flight count runs
    # ahead of the scraped running+waiting numbers on some decisions.
    policy = RoundRobin()
    reqs = [
        SimRequest(
            request_id=f"r{i}",
            arrival=0.001 * i,
            prompt_text="x" * 400,
            prompt_tokens=100,
            output_tokens=50,
            model="m",
        )
        for i in range(20)
    ]
    simulate(pods=[H100], requests=reqs, policy=policy, seed=0, scrape_interval_s=0.05)
    lagging = 0
    for _, (v,) in policy.seen:
        seen = 0 if v.metrics is None else (v.metrics.running or 0) + (v.metrics.waiting or 0)
        if v.inflight > seen:
            lagging += 1
    assert lagging >= 10


def test_metrics_follow_engine_kind() -> None:
    policy = RoundRobin()
    pods = [
        PodSpec(preset="llama-3.1-8b/h100", name="v", lora_adapters=("x",)),
        PodSpec(preset="llama-3.1-8b/h100", name="s", engine=EngineKind.SGLANG, engine_version="0.4.6"),
        PodSpec(
            preset="llama-3.1-8b/h100",
            name="n",
            engine=EngineKind.SGLANG,
            engine_version="0.4.6",
            enable_metrics=False,
        ),
    ]
    simulate(pods=pods, requests=workload(30), policy=policy, seed=0)
    _, views = policy.seen[-1]
    vllm, sgl, none = views
    assert vllm.metrics is not None
    assert vllm.metrics.max_lora == 1
    assert vllm.metrics.block_size == 16
    assert sgl.metrics is not None
    assert sgl.metrics.max_lora is None
    assert sgl.metrics.num_gpu_blocks is None
    assert none.metrics is None
    assert none.scrape_failing


class Saturated(RoundRobin):
    name = "always-429"

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        self.seen.append((now, tuple(endpoints)))
        if self.i < 2:
            self.i += 1
            return RoutingDecision(kind=DecisionKind.SATURATED, retry_after_s=0.5)
        return super().pick(request, endpoints, now=now)


def test_429_is_recorded_and_optionally_retried_after_retry_after() -> None:
    reqs = workload(1)
    res = simulate(pods=[H100], requests=reqs, policy=Saturated(), seed=0)
    assert res.records[0].status == 429
    assert res.records[0].retry_after_s == 0.5
    assert res.records[0].rejected
    res = simulate(pods=[H100], requests=reqs, policy=Saturated(), seed=0, max_retries=3)
    rec = res.records[0]
    assert rec.ok
    assert rec.attempts == 3
    assert rec.ttft is not None
    assert rec.ttft >= 1.0


class NoEndpoints(RoundRobin):
    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        return RoutingDecision(kind=DecisionKind.NO_ENDPOINTS)


def test_503_is_recorded() -> None:
    res = simulate(pods=[H100], requests=workload(3), policy=NoEndpoints(), seed=0)
    assert [r.status for r in res.records] == [503, 503, 503]


def test_killed_pod_fails_over_to_fallbacks_and_error_rate_fails() -> None:
    class WithFallback(RoundRobin):
        def pick(
            self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
        ) -> RoutingDecision:
            return RoutingDecision(
                kind=DecisionKind.PICKED, endpoint=endpoints[0].key, fallbacks=(endpoints[1].key,)
            )

    dead = PodSpec(preset="llama-3.1-8b/h100", name="dead", faults=(FaultSpec(kind=FaultKind.KILL),))
    res = simulate(pods=[dead, H100], requests=workload(10), policy=WithFallback(), seed=0)
    assert all(r.ok and r.pod == list(res.pods)[1] for r in res.records)
    flaky = PodSpec(
        preset="llama-3.1-8b/h100", name="f", faults=(FaultSpec(kind=FaultKind.ERROR_RATE, rate=1.0),)
    )
    policy = RoundRobin()
    res = simulate(pods=[flaky], requests=workload(5), policy=policy, seed=0)
    assert all(r.status == 500 for r in res.records)
    assert not any(o.ok for o in policy.outcomes)
    assert all(o.pod_fault for o in policy.outcomes)  # a 5xx is the pod's fault (outlier detection)


@pytest.mark.parametrize(("consecutive", "most"), [(5, 5), (0, None)])
def test_the_gateway_scheduler_ejects_a_pod_that_fails_at_once(consecutive: int, most: int | None) -> None:
    """Four pods, one answering 500 at once: it looks idle, so without outlier detection it draws
    more than its share; with it, five failures eject it for the rest of the run."""
    failing = PodSpec(
        preset="llama-3.1-8b/h100", name="failing", faults=(FaultSpec(kind=FaultKind.ERROR_RATE, rate=1.0),)
    )
    pods = [dataclasses.replace(H100, name=f"h{i}") for i in range(3)] + [failing]
    routing = RoutingSettings(outlier_detection=OutlierDetection(consecutive_failures=consecutive))
    policy = scheduler_from_weights(
        default_weights(lora_adapters=False), routing=routing, rng=random.Random(1)
    )
    res = simulate(pods=pods, requests=workload(400, rate=40.0), policy=policy, seed=1)
    failed = [r for r in res.records if not r.ok]
    assert {r.status for r in failed} <= {500}
    if most is not None:
        assert len(failed) == most
    else:
        assert len(failed) > 400 / 4  # more than a fair quarter: the failing pod looks idle


@pytest.mark.parametrize(("attempts", "status"), [(2, 503), (1, 503), (2, 500)])
def test_the_gateway_retries_a_refusal_on_the_next_best_pod(attempts: int, status: int) -> None:
    """Four pods, one refusing every request at once: behind the gateway's default retry a 503 is
    answered by the next-best pod (no request fails); with one attempt, or for a 500 (not retried by
    default), the refusals reach the client until outlier detection ejects the pod (5 in a row)."""
    fault = FaultSpec(kind=FaultKind.ERROR_RATE, rate=1.0, status=status)
    pods = [dataclasses.replace(H100, name=f"h{i}") for i in range(3)]
    pods.append(PodSpec(preset="llama-3.1-8b/h100", name="refusing", faults=(fault,)))
    routing = RoutingSettings(retry=RetryPolicy(attempts=attempts))
    policy = scheduler_from_weights(
        default_weights(lora_adapters=False), routing=routing, rng=random.Random(1)
    )
    res = simulate(pods=pods, requests=workload(400, rate=40.0), policy=policy, seed=1)
    failed = [r for r in res.records if not r.ok]
    retried = sum(r.retried for r in res.records)
    if attempts == 2 and status == 503:
        assert (len(failed), retried) == (0, 5)  # each refusal retried until the pod was ejected
    else:
        assert (len(failed), retried) == (5, 0)
        assert {r.status for r in failed} == {status}


def test_live_only_faults_are_refused() -> None:
    cut = PodSpec(preset="llama-3.1-8b/h100", faults=(FaultSpec(kind=FaultKind.DIE_MID_STREAM),))
    with pytest.raises(SimulationError, match="die_mid_stream"):
        simulate(pods=[cut], requests=[], policy=RoundRobin(), seed=0)


def _steady(n: int, *, every: float = 0.1) -> list[SimRequest]:
    return [
        SimRequest(
            request_id=f"s{i}",
            arrival=i * every,
            prompt_text=f"{i:04d}" * 100,
            prompt_tokens=100,
            output_tokens=20,
            model="m",
        )
        for i in range(n)
    ]


def test_hang_window_stalls_the_pod_and_its_scrapes() -> None:
    hang = FaultSpec(kind=FaultKind.HANG, start_s=1.0, end_s=3.0)
    pods = [PodSpec(preset="llama-3.1-8b/h100", name="hung", faults=(hang,)), H100]
    policy = RoundRobin()
    res = simulate(pods=pods, requests=_steady(60), policy=policy, seed=0)
    hung_key = next(iter(res.pods))
    during = [r for r in res.records if r.pod == hung_key and 1.05 <= r.arrival < 2.9]
    assert during
    assert all(r.ok and r.arrival + (r.ttft or 0) >= 3.0 for r in during)  # answered only after the hang
    ages = [v.metrics_age(now) for now, views in policy.seen if 2.5 <= now < 3.0 for v in views[:1]]
    assert all(v.scrape_failing for now, views in policy.seen if 1.1 <= now < 3.0 for v in views[:1])
    assert min(a for a in ages if a is not None) > 1.4  # the router's last scrape of it grows old
    after = [views[0] for now, views in policy.seen if now >= 3.1]
    assert after
    assert not after[-1].scrape_failing


def test_kill_window_fails_inflight_and_restarts_empty() -> None:
    kill = FaultSpec(kind=FaultKind.KILL, start_s=1.02, end_s=2.0)
    pods = [PodSpec(preset="llama-3.1-8b/h100", name="k", faults=(kill,)), H100]
    policy = RoundRobin()
    res = simulate(pods=pods, requests=_steady(60, every=0.05), policy=policy, seed=0)
    key = next(iter(res.pods))
    failed = [r for r in res.records if r.status == 502]
    assert failed
    assert all(r.pod == key for r in failed)
    assert any(not o.ok for o in policy.outcomes)
    assert [r for r in res.records if r.pod == key and r.arrival > 2.0 and r.ok]  # back after the window


def test_slow_window_only_slows_inside_it() -> None:
    slow = FaultSpec(kind=FaultKind.SLOW, factor=5.0, start_s=1.0, end_s=2.0)
    pod = PodSpec(preset="llama-3.1-8b/h100", jitter_sigma=0.0, faults=(slow,))
    res = simulate(pods=[pod], requests=_steady(30), policy=RoundRobin(), seed=0)
    inside = [r.e2e or 0 for r in res.records if 1.0 <= r.arrival < 1.4]
    outside = [r.e2e or 0 for r in res.records if r.arrival >= 2.5]
    assert min(inside) > 3 * max(outside)


def test_a_step_running_when_a_slow_window_ends_finishes_at_the_normal_speed() -> None:
    """The step in progress when a ``slow`` window ends runs what is left of it at the normal speed
    (the part already run keeps the slowed one), as the live pod rescales it: the DES kept the slowed
    length, so a prefill started under factor 1000 ended ~7 s later although the window lasted 0.1 s."""
    one = [
        SimRequest(
            request_id="r", arrival=0.0, prompt_text="x", prompt_tokens=100, output_tokens=4, model="m"
        )
    ]
    plain = PodSpec(preset="llama-3.1-8b/h100", jitter_sigma=0.0)
    slow = FaultSpec(kind=FaultKind.SLOW, factor=1000.0, start_s=0.0, end_s=0.1)
    windowed = dataclasses.replace(plain, faults=(slow,))
    base = simulate(pods=[plain], requests=one, policy=RoundRobin(), seed=0).records[0]
    got = simulate(pods=[windowed], requests=one, policy=RoundRobin(), seed=0).records[0]
    assert base.ttft is not None
    assert base.e2e is not None
    assert got.e2e is not None
    assert got.ttft is not None
    prefill = base.ttft  # the first step, alone on the pod
    assert got.ttft == pytest.approx(0.1 + (prefill * 1000 - 0.1) / 1000, rel=1e-9)
    assert got.e2e - got.ttft == pytest.approx(base.e2e - base.ttft, rel=1e-9)  # decode at full speed


def test_fault_windows_keep_fast_forward_exact() -> None:
    faults = (
        FaultSpec(kind=FaultKind.SLOW, factor=2.0, start_s=0.5, end_s=1.5),
        FaultSpec(kind=FaultKind.HANG, start_s=2.0, end_s=2.5),
    )
    pods = [PodSpec(preset="llama-3.1-8b/h100", name="f", faults=faults), H100]
    reqs = workload(150, rate=40)
    a, b = (
        simulate(pods=pods, requests=reqs, policy=RoundRobin(), seed=2, fast_forward=ff)
        for ff in (False, True)
    )
    assert [dataclasses.astuple(r) for r in a.records] == [dataclasses.astuple(r) for r in b.records]
    assert a.series == b.series


def test_requests_on_a_pod_hung_to_the_end_are_504() -> None:
    pod = PodSpec(preset="llama-3.1-8b/h100", faults=(FaultSpec(kind=FaultKind.HANG, start_s=0.5),))
    res = simulate(pods=[pod], requests=_steady(10), policy=RoundRobin(), seed=0)
    assert {r.status for r in res.records if r.arrival > 0.6} == {504}
    assert res.end_time < 10  # the open-ended fault does not keep the simulation running


def test_slow_pod_is_slower() -> None:
    slow = PodSpec(
        preset="llama-3.1-8b/h100", jitter_sigma=0, faults=(FaultSpec(kind=FaultKind.SLOW, factor=3.0),)
    )
    fast = PodSpec(preset="llama-3.1-8b/h100", jitter_sigma=0)
    reqs = workload(1)
    a = simulate(pods=[fast], requests=reqs, policy=RoundRobin(), seed=0).records[0]
    b = simulate(pods=[slow], requests=reqs, policy=RoundRobin(), seed=0).records[0]
    assert b.e2e == pytest.approx(3 * (a.e2e or 0), rel=1e-6)


def test_bad_input_is_named() -> None:
    unsorted = [*workload(2)][::-1]
    with pytest.raises(SimulationError, match="sorted by arrival"):
        simulate(pods=[H100], requests=unsorted, policy=RoundRobin(), seed=0)
    with pytest.raises(SimulationError, match="at least one pod"):
        simulate(pods=[], requests=[], policy=RoundRobin(), seed=0)
    first = workload(1)[0]
    again = SimRequest(**{**{f: getattr(first, f) for f in first.__slots__}, "arrival": 100.0})
    with pytest.raises(SimulationError, match="duplicate"):
        simulate(pods=[H100], requests=[first, again], policy=RoundRobin(), seed=0)


class Oracle(RoundRobin):
    """Routes each request to the pod holding most of its prefix right now (exact state)."""

    name = "test-oracle"

    def __init__(self) -> None:
        super().__init__()
        self.lookup: object = None
        self.truths: list[PodTruth] = []

    def bind_oracle(self, lookup: object) -> None:
        self.lookup = lookup

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        assert callable(self.lookup)
        truths = [self.lookup(e.key) for e in endpoints]
        self.truths = truths
        best = max(
            range(len(endpoints)),
            key=lambda i: (
                truths[i].cached_prefix_tokens(request.prefix_text),
                -truths[i].running - truths[i].waiting,
            ),
        )
        return RoutingDecision(kind=DecisionKind.PICKED, endpoint=endpoints[best].key)


def test_oracle_hook_gives_exact_instantaneous_state() -> None:
    rng = random.Random(0)
    reqs = take(
        shared_prefix(
            groups=4,
            prompts_per_group=20,
            system_prompt_len=1024,
            question_len=64,
            output_len=32,
            arrivals=poisson_arrivals(rate=40, rng=rng),
            model="m",
            rng=rng,
        ),
        80,
    )
    oracle = Oracle()
    res = simulate(pods=[H100] * 4, requests=reqs, policy=oracle, seed=0)
    rr = simulate(pods=[H100] * 4, requests=reqs, policy=RoundRobin(), seed=0)
    assert oracle.truths
    assert isinstance(oracle.truths[0], PodTruth)
    t = oracle.truths[0]
    assert t.num_gpu_blocks == t.preset.num_gpu_blocks
    assert 0 <= t.kv_usage <= 1
    assert t.block_size == 16
    assert t.step_time(num_tokens=1) > 0
    assert res.summary()["cached_token_fraction"] > rr.summary()["cached_token_fraction"]


def test_queue_depth_series_is_sampled_regularly() -> None:
    res = simulate(
        pods=[A10G], requests=workload(300, rate=30), policy=RoundRobin(), seed=0, sample_interval_s=0.5
    )
    series = next(iter(res.series.values()))
    assert series.times[0] == 0.0
    gaps = {round(b - a, 6) for a, b in zip(series.times, series.times[1:], strict=False)}
    assert all(g > 0 and (g / 0.5) == pytest.approx(round(g / 0.5)) for g in gaps)
    assert max(series.waiting) > 0
    assert series.times[-1] <= res.end_time


def test_fast_forward_gives_identical_records_and_series() -> None:
    rng = random.Random(9)
    base = synthetic(
        count=600,
        arrivals=gamma_arrivals(rate=4, cv=3, rng=rng),
        prompt_lengths=AZURE_CONV_INPUT,
        output_lengths=AZURE_CONV_OUTPUT,
        model="m",
        rng=rng,
    )
    reqs = take(with_lora_mix(base, adapters={"x": 1, "y": 1}, base_weight=2, rng=rng), 600)
    pods = [
        PodSpec(preset="llama-3.1-8b/h100", name="h", lora_adapters=("x", "y")),
        PodSpec(preset="llama-3.1-8b/a10g", name="a", lora_adapters=("x", "y")),
        PodSpec(preset="qwen3-235b-fp8/8xh100", name="q", lora_adapters=("x", "y")),
    ]
    runs = [
        simulate(
            pods=pods, requests=reqs, policy=RoundRobin(), seed=4, fast_forward=ff, sample_interval_s=0.25
        )
        for ff in (False, True)
    ]
    slow, fast = runs
    assert sum(r.preemptions for r in slow.records) > 0  # KV pressure on the A10G is part of the check
    assert [dataclasses.astuple(r) for r in slow.records] == [dataclasses.astuple(r) for r in fast.records]
    assert slow.series == fast.series
    assert (slow.steps, slow.end_time) == (fast.steps, fast.end_time)
