"""In-process micro-benchmarks of ``igw perf gateway``: scheduler decision time and /metrics parsing.

Each prints its own baseline measured in the same run: a uniformly random pick over the same
endpoint views (the floor any picker pays to look at the candidates), and ``prometheus_client``'s
full text parser on the same page.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from igw.bench.stats import percentile
from igw.config.model import LabelSelector, SchedulerSpec
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.types import EndpointView, EngineMetrics, RoutingRequest


@dataclass(frozen=True, slots=True)
class Timing:
    name: str
    p50_us: float
    p99_us: float
    mean_us: float
    baseline_mean_us: float
    baseline: str

    @property
    def ratio(self) -> float:
        return self.mean_us / self.baseline_mean_us if self.baseline_mean_us else float("inf")


def _time(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _views(n: int, rng: random.Random, now: float) -> list[EndpointView]:
    return [
        EndpointView(
            key=f"10.0.{i // 250}.{i % 250}:8000",
            metrics=EngineMetrics(
                waiting=rng.randint(0, 4),
                running=rng.randint(0, 64),
                kv_usage=rng.uniform(0.0, 0.79),
                block_size=16,
                num_gpu_blocks=27_485,
            ),
            scraped_at=now - rng.uniform(0.0, 0.05),
            inflight=rng.randint(0, 8),
        )
        for i in range(n)
    ]


def decision_time(*, endpoints: int, picks: int, seed: int = 1) -> Timing:
    """Default-weights scheduler (queue 2, KV 2, prefix 3, speed 1) on realistic chat prompts."""
    rng = random.Random(seed)
    spec = SchedulerSpec(name="bench", model_selector=LabelSelector(), model_name="m")
    scheduler = scheduler_from_spec(spec, rng=random.Random(seed))
    now = 1000.0
    views = _views(endpoints, rng, now)
    systems = [f"You are assistant #{g}. " * 40 for g in range(32)]  # ~1 KB shared prefixes
    requests = [
        RoutingRequest(
            request_id=str(i),
            model="m",
            base_model="m",
            prefix_text=systems[i % len(systems)] + f"user question number {i} " * 8,
            prompt_tokens=300,
        )
        for i in range(picks)
    ]
    it = iter(requests)
    samples = _time(lambda: scheduler.pick(next(it), views, now=now), picks)
    baseline = _time(lambda: views[rng.randrange(len(views))].key, picks)
    return Timing(
        name=f"scheduler decision, {endpoints} endpoints",
        p50_us=percentile(samples, 50) or 0.0,
        p99_us=percentile(samples, 99) or 0.0,
        mean_us=sum(samples) / len(samples),
        baseline_mean_us=sum(baseline) / len(baseline),
        baseline="random pick over the same views",
    )


def page_parse_time(page: str, *, runs: int) -> Timing:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from prometheus_client.parser import text_string_to_metric_families

    samples = _time(lambda: parse_page(page, VLLM), runs)
    baseline = _time(lambda: list(text_string_to_metric_families(page)), max(10, runs // 20))
    return Timing(
        name=f"vLLM /metrics page parse ({len(page) / 1024:.0f} KB, {page.count(chr(10))} lines)",
        p50_us=percentile(samples, 50) or 0.0,
        p99_us=percentile(samples, 99) or 0.0,
        mean_us=sum(samples) / len(samples),
        baseline_mean_us=sum(baseline) / len(baseline),
        baseline="prometheus_client full parse",
    )
