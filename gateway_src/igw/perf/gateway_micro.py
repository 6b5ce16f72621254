"""In-process micro-benchmarks of ``igw perf gateway``: scheduler decision time and /metrics parsing.

The decision benchmark drives the scheduler as the gateway does at 1,000 requests/s (virtual time):
scrapes land in turn and replace endpoint views, completions feed the measured TTFT and prefill
rates, so every default scorer works on live state; only ``pick`` itself is timed, on the thread's
CPU clock (``time.thread_time``), so other processes on a busy machine do not inflate the figures.

Each prints its own baseline measured in the same run: a uniformly random pick over the same
endpoint views (the floor any picker pays to look at the candidates), and ``prometheus_client``'s
full text parser on the same page.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from igw.bench.stats import percentile
from igw.config.model import LabelSelector, SchedulerSpec
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import EndpointView, EngineMetrics, RequestOutcome, RoutingRequest


@dataclass(frozen=True, slots=True)
class Timing:
    name: str
    p50_us: float
    p99_us: float
    mean_us: float
    baseline_mean_us: float
    baseline: str
    outcome_mean_us: float = 0.0
    """Thread CPU per pick spent in the scheduler's outcome path (``on_complete``) during the timed
    picks, for :func:`decision_time`: work a plugin does when a request completes is paid once per
    request like the pick, off the request's path, so the pick alone can look cheaper than it is."""

    @property
    def ratio(self) -> float:
        return self.mean_us / self.baseline_mean_us if self.baseline_mean_us else float("inf")


def _time(fn: Callable[[], object], n: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Microseconds per call of ``fn``, ``n`` calls, each timed on ``clock``."""
    out = []
    for _ in range(n):
        t0 = clock()
        fn()
        out.append((clock() - t0) * 1e6)
    return out


PICK_INTERVAL_S = 0.001
"""Virtual time between two picks: the gateway at 1,000 requests/s."""
SCRAPE_INTERVAL_S = 0.05
"""Every endpoint's metrics are replaced this often (the scraper's default interval), staggered."""
COMPLETION_LAG_PICKS = 200
"""A request completes (and its TTFT reaches the scheduler) this many picks after it was routed."""
WARM_SAMPLES_PER_ENDPOINT = 10
"""Completions per endpoint before the timed picks (more than the TTFT means' settling window)."""


def _metrics(rng: random.Random) -> EngineMetrics:
    return EngineMetrics(
        waiting=rng.randint(0, 4),
        running=rng.randint(0, 64),
        kv_usage=rng.uniform(0.0, 0.79),
        block_size=16,
        num_gpu_blocks=27_485,
    )


def _view(key: str, rng: random.Random, now: float) -> EndpointView:
    return EndpointView(
        key=key, metrics=_metrics(rng), scraped_at=now - rng.uniform(0.0, 0.05), inflight=rng.randint(0, 8)
    )


@dataclass(slots=True)
class _Fleet:
    """What the gateway hands the scheduler over time: views whose scrapes land in turn (staggered
    over the scrape interval) and completions that feed the scorers' TTFT and prefill-rate means."""

    views: list[EndpointView]
    rng: random.Random
    speeds: dict[str, float]
    """Mean TTFT per endpoint key (a mixed fleet: up to fourfold differences)."""
    next_scrape: int = 0
    routed: list[tuple[str, str]] = field(default_factory=list)
    """(request id, endpoint) per pick, in order; completed ``COMPLETION_LAG_PICKS`` picks later."""
    outcome_seconds: float = 0.0
    """Thread CPU time spent in ``scheduler.on_complete`` so far."""
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    """Prompt tokens per request id where not 300 (a request's TTFT grows with its prompt)."""

    def advance(self, scheduler: Scheduler, now: float) -> None:
        """Untimed between two picks: the scrapes due since the last pick and one completion."""
        n = len(self.views)
        due = n * PICK_INTERVAL_S / SCRAPE_INTERVAL_S
        count = int(due) + (1 if self.rng.random() < due - int(due) else 0)
        for _ in range(count):
            i = self.next_scrape
            self.views[i] = EndpointView(
                key=self.views[i].key,
                metrics=_metrics(self.rng),
                scraped_at=now,
                inflight=self.rng.randint(0, 8),
            )
            self.next_scrape = (i + 1) % n
        if len(self.routed) > COMPLETION_LAG_PICKS:
            request_id, key = self.routed[-COMPLETION_LAG_PICKS - 1]
            self.complete(scheduler, request_id, key, now)

    def complete(self, scheduler: Scheduler, request_id: str, key: str, now: float) -> None:
        """One request on ``key`` finished: its TTFT (the endpoint's speed, noisy) reaches the scorers."""
        tokens = self.prompt_tokens.pop(request_id, 300)
        # The endpoint's speed is its TTFT at 300 prompt tokens (x 1.0 exactly at 300: the same floats).
        ttft = self.speeds[key] * (tokens / 300) * self.rng.lognormvariate(0.0, 0.3)
        outcome = RequestOutcome(
            request_id=request_id, endpoint=key, ok=True, ttft_s=ttft, prompt_tokens=tokens, output_tokens=200
        )
        t0 = time.thread_time()
        scheduler.on_complete(outcome, now=now)
        self.outcome_seconds += time.thread_time() - t0


PROMPT_LENGTHS = ("fixed-300", "azure-conv")
"""Prompt lengths :func:`decision_time` can draw: every prompt 300 tokens (the default, as in every
earlier round), or the Azure conversation trace's input lengths (:data:`igw.sim.workloads.AZURE_CONV_INPUT`:
median 1,020 tokens, p90 2,735), whose longer prompts cost the prefix scorer more blocks to hash and
match (its cost grows with the prompt, up to ``maxPrefixBlocksToMatch`` blocks)."""
_SYSTEM_PROMPTS = 32
"""Shared openings (system prompts) the benchmark's prompts start with, in turn."""


def _prompts(picks: int, prompt_lengths: str, rng: random.Random) -> list[tuple[str, int]]:
    """``(prefix_text, prompt_tokens)`` per pick: one of :data:`_SYSTEM_PROMPTS` shared openings (about
    1 KB), then a question unique to the request. ``fixed-300``: that text as it always was, counted
    as 300 tokens. ``azure-conv``: a length drawn per request from the trace's distribution, the text
    cut or filled (with the request's question repeated) to 4 characters per token, the simulator's
    tokenisation (:data:`igw.sim.tokens.CHARS_PER_TOKEN`)."""
    systems = [f"You are assistant #{g}. " * 40 for g in range(_SYSTEM_PROMPTS)]  # ~1 KB shared prefixes
    if prompt_lengths == "fixed-300":
        return [(systems[i % _SYSTEM_PROMPTS] + f"user question number {i} " * 8, 300) for i in range(picks)]
    if prompt_lengths != "azure-conv":
        raise ValueError(f"prompt lengths {prompt_lengths!r}: not one of {', '.join(PROMPT_LENGTHS)}")
    # deferred: the simulator's length profiles load only for this workload
    from igw.sim.tokens import CHARS_PER_TOKEN
    from igw.sim.workloads import AZURE_CONV_INPUT

    out = []
    for i in range(picks):
        tokens = AZURE_CONV_INPUT.sample(rng)
        chars = tokens * CHARS_PER_TOKEN
        question = f"user question number {i} "
        text = systems[i % _SYSTEM_PROMPTS] + question * (chars // len(question) + 1)
        out.append((text[:chars], tokens))
    return out


def decision_time(
    *,
    endpoints: int,
    picks: int,
    seed: int = 1,
    instrument: Callable[[Scheduler], object] | None = None,
    prompt_lengths: str = "fixed-300",
) -> Timing:
    """Default scheduler (every default scorer) on realistic chat prompts, as the gateway runs it at
    1,000 requests/s: metrics re-scraped every 50 ms, completions feeding the measured TTFTs.

    ``instrument`` is called with the scheduler before the first pick (``igw perf decide`` wraps its
    plugins there to split the time by component). ``prompt_lengths``: one of
    :data:`PROMPT_LENGTHS` (:func:`_prompts`); drawn from their own random stream, so the fleet's
    draws, and thus the default workload, are what they always were."""
    prompts = _prompts(picks, prompt_lengths, random.Random(seed + 1))
    rng = random.Random(seed)
    spec = SchedulerSpec(name="bench", model_selector=LabelSelector(), model_name="m")
    scheduler = scheduler_from_spec(spec, rng=random.Random(seed))
    if instrument is not None:
        instrument(scheduler)
    now = 1000.0
    keys = [f"10.0.{i // 250}.{i % 250}:8000" for i in range(endpoints)]
    fleet = _Fleet(
        views=[_view(k, rng, now) for k in keys],
        rng=rng,
        speeds={k: rng.choice((0.05, 0.08, 0.2)) for k in keys},
    )
    requests = [
        RoutingRequest(request_id=str(i), model="m", base_model="m", prefix_text=text, prompt_tokens=tokens)
        for i, (text, tokens) in enumerate(prompts)
    ]
    for i in range(WARM_SAMPLES_PER_ENDPOINT):  # steady state: every endpoint has settled means
        for key in keys:
            fleet.complete(scheduler, f"warm-{i}", key, now)
    samples: list[float] = []
    fleet.outcome_seconds = 0.0  # the warm-up's completions are not part of the timed picks
    for request in requests:
        now += PICK_INTERVAL_S
        fleet.advance(scheduler, now)
        t0 = time.thread_time()
        decision = scheduler.pick(request, fleet.views, now=now)
        samples.append((time.thread_time() - t0) * 1e6)
        if decision.endpoint is not None:
            fleet.routed.append((request.request_id, decision.endpoint))
            if request.prompt_tokens != 300:
                fleet.prompt_tokens[request.request_id] = request.prompt_tokens
    views = fleet.views
    baseline = _time(lambda: views[rng.randrange(len(views))].key, picks, clock=time.thread_time)
    return Timing(
        name=f"scheduler decision, {endpoints} endpoints"
        + ("" if prompt_lengths == "fixed-300" else f", {prompt_lengths} prompts"),
        p50_us=percentile(samples, 50) or 0.0,
        p99_us=percentile(samples, 99) or 0.0,
        mean_us=sum(samples) / len(samples),
        baseline_mean_us=sum(baseline) / len(baseline),
        baseline="random pick over the same views",
        outcome_mean_us=fleet.outcome_seconds / len(requests) * 1e6,
    )


DECISION_SIZES: Final = ((16, 3000), (1000, 300))
"""(endpoints, picks) of ``igw perf gateway``'s decision rows."""


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
