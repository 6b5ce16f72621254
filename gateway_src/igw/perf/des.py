"""``igw perf des``: how fast the discrete-event simulator runs (target: 100,000 requests, 64 pods, < 60 s).

Prints wall time, simulated requests per wall second and simulated seconds per wall second, plus two
ratios against baselines measured in the same run: against the 60 s target, and against the cost of
just generating the same workload (so the engine+routing cost is separated from prompt synthesis).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator

from packaging.version import Version

HELP = "Simulator speed: the DES (N requests, P pods) or, with --metrics-page, live /metrics rendering."


def run(args: argparse.Namespace) -> int:
    if args.metrics_page:
        return _metrics_page()
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.bench.policies.registry import PolicyContext, build_policy
    from igw.sim.des import simulate
    from igw.sim.request import SimRequest
    from igw.sim.spec import PodSpec
    from igw.sim.workloads import length_profile, poisson_arrivals, synthetic

    rate = args.pods * 12.5 * args.load
    prompt_lengths, output_lengths = length_profile(args.lengths)

    def workload() -> Iterator[SimRequest]:
        rng = random.Random(args.seed)
        return synthetic(
            count=args.requests,
            arrivals=poisson_arrivals(rate=rate, rng=rng),
            prompt_lengths=prompt_lengths,
            output_lengths=output_lengths,
            model="m",
            rng=rng,
        )

    t0 = time.perf_counter()
    n = sum(1 for _ in workload())
    gen_s = time.perf_counter() - t0

    pods = [PodSpec(preset=args.preset, name=f"pod-{i}") for i in range(args.pods)]
    policy = build_policy(args.policy, PolicyContext(rng=random.Random(args.seed + 1)))
    t1 = time.perf_counter()
    cpu0 = time.process_time()
    result = simulate(
        pods=pods, requests=workload(), policy=policy, seed=args.seed, fast_forward=not args.no_fast_forward
    )
    wall = time.perf_counter() - t1
    cpu = time.process_time() - cpu0
    s = result.summary()
    print(
        f"igw perf des: {n} requests, {args.pods} x {args.preset}, policy {args.policy},"
        f" {rate:.0f} req/s offered, fast-forward {'off' if args.no_fast_forward else 'on'}"
    )
    print(f"  workload generation alone (baseline): {gen_s:.2f} s")
    print(f"  simulation wall time:                 {wall:.2f} s  (CPU {cpu:.2f} s, one core)")
    print(f"  simulated time:                       {result.end_time:.1f} s, {result.steps} engine steps")
    print(f"  requests per wall second:             {n / wall:,.0f}")
    print(f"  simulated s per wall s:               {result.end_time / wall:.1f}x")
    print(f"  ratio to workload generation:         {wall / gen_s:.1f}x")
    print(
        f"  ratio to the {args.target_s:.0f} s target:            {wall / args.target_s:.2f} (< 1 meets it)"
    )
    # simulated seconds, printed in ms with the unit: the bare floats read "TTFT p50 0.011900136113251136"
    print(f"  served {s['served']}, TTFT p50 {_ms(s['ttft_p50'])}, p99 {_ms(s['ttft_p99'])} (simulated)")
    return 0


def _ms(seconds: object) -> str:
    """A latency of the summary in milliseconds, or ``-`` when nothing was served to measure it."""
    return f"{seconds * 1000:.3f} ms" if isinstance(seconds, (int, float)) else "-"


def _metrics_page(renders: int = 400) -> int:
    """Per-page render time: cold (every histogram re-rendered, the baseline) vs cached vs busy pod."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.sim.engine import Engine
    from igw.sim.metrics_page import PageContext, render_vllm
    from igw.sim.pod_stats import PodStats
    from igw.sim.presets import get_preset

    preset = get_preset("llama-3.1-8b/h100")
    engine = Engine(preset=preset, rng=random.Random(0))
    ctx = PageContext(
        model_name=preset.model.served_name,
        version=Version("0.10.1"),
        max_model_len=preset.max_model_len,
        gpu_memory_utilization=preset.gpu_memory_utilization,
        prefix_caching=True,
        created_unix=time.time(),
        max_lora=0,
    )
    stats = PodStats(max_model_len=preset.max_model_len)

    def timed(before_each: object) -> float:
        t0 = time.perf_counter()
        for _ in range(renders):
            if callable(before_each):
                before_each()
            render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=time.time(), uptime_s=1.0)
        return (time.perf_counter() - t0) / renders

    def forget() -> None:
        for value in vars(stats).values():
            if hasattr(value, "rendered"):
                value.rendered.clear()

    def traffic() -> None:
        stats.ttft.observe(0.05)
        stats.itl.observe(0.01)
        stats.iteration_tokens.observe(32)

    size = len(render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=time.time(), uptime_s=1.0))
    cold = timed(forget)
    cached = timed(None)
    busy = timed(traffic)
    print(f"igw perf des --metrics-page: vLLM 0.10.1 page, {size} bytes, {renders} renders each")
    print(f"  cold (baseline, nothing cached): {cold * 1e3:.3f} ms/page")
    print(f"  idle pod (all blocks cached):    {cached * 1e3:.3f} ms/page  ratio {cached / cold:.2f}")
    print(f"  busy pod (3 histograms change):  {busy * 1e3:.3f} ms/page  ratio {busy / cold:.2f}")
    print(f"  => pages/s per core when busy: {1 / busy:,.0f} (a 50 ms scrape interval needs 20 per pod)")
    return 0
