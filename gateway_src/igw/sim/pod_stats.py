"""Per-pod observations behind the histogram and counter families of a ``/metrics`` page.

The engine counts tokens and preemptions; what a real server additionally records per request
(TTFT, inter-token latencies, queue/prefill/decode phases, request parameters, HTTP traffic) is kept
here. Latencies are in *simulated* seconds (GPU time), so a page reads the same at any time scale.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from igw.sim.engine import EngineRequest

TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0,
)  # fmt: skip
REQ_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_BUCKETS: Final = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS: Final = (1, 2, 5, 10, 20)
HTTP_HIGHR_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60,
)  # fmt: skip
SGLANG_TTFT_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
)  # fmt: skip
SGLANG_ITL_BUCKETS: Final = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
    0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
SGLANG_E2E_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400,
)  # fmt: skip
SGLANG_QUEUE_BUCKETS: Final = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500,
    600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip

SGLANG_STAGE_BUCKETS: Final = tuple(0.001 * 1.62**i for i in range(30))
SGLANG_STAGES: Final = (
    "prefill_waiting",
    "request_process",
    "prefill_forward",
    "chunked_prefill",
    "decode_loop",
)
SGLANG_RETRACTION_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)

MAX_LORA_SERIES: Final = 64
"""vLLM never removes a ``lora_requests_info`` series; the simulator keeps the newest 64 label sets."""


def buckets_1_2_5(limit: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets(max_model_len)``: 1, 2, 5, 10, 20, 50, ... up to ``limit``."""
    out: list[float] = []
    mantissa = (1, 2, 5)
    exp = 0
    while True:
        for m in mantissa:
            v = m * 10**exp
            if v > limit:
                return tuple(float(x) for x in out)
            out.append(v)
        exp += 1


@dataclass(slots=True)
class Histogram:
    """Cumulative-on-render histogram (per-bucket counts, sum, count)."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0
    rendered: dict[tuple[str, str, bool, bool, bool], tuple[int, list[str]]] = field(default_factory=dict)
    """Text blocks rendered for ``n`` observations (owned by ``igw.sim.metrics_page``)."""

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def cumulative(self) -> list[int]:
        out: list[int] = []
        acc = 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


class PodStats:
    """Histograms and HTTP counters of one live pod."""

    def __init__(self, *, max_model_len: int) -> None:
        tok = buckets_1_2_5(max_model_len)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.request_tpot = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQ_BUCKETS)
        self.queue = Histogram(REQ_BUCKETS)
        self.inference = Histogram(REQ_BUCKETS)
        self.prefill = Histogram(REQ_BUCKETS)
        self.decode = Histogram(REQ_BUCKETS)
        self.prompt_tokens = Histogram(tok)
        self.generation_tokens = Histogram(tok)
        self.max_generation_tokens = Histogram(tok)
        self.params_max_tokens = Histogram(tok)
        self.prefill_kv_computed = Histogram(tok)
        self.params_n = Histogram(PARAMS_N_BUCKETS)
        self.iteration_tokens = Histogram(ITERATION_BUCKETS)
        self.sg_ttft = Histogram(SGLANG_TTFT_BUCKETS)
        self.sg_itl = Histogram(SGLANG_ITL_BUCKETS)
        self.sg_e2e = Histogram(SGLANG_E2E_BUCKETS)
        self.sg_queue = Histogram(SGLANG_QUEUE_BUCKETS)
        self.sg_stage = {stage: Histogram(SGLANG_STAGE_BUCKETS) for stage in SGLANG_STAGES}
        self.sg_retractions = Histogram(SGLANG_RETRACTION_BUCKETS)
        self.http_highr = Histogram(HTTP_HIGHR_BUCKETS)
        self.http_requests: dict[tuple[str, str, str], int] = {}
        """(handler, method, status class) -> count, like prometheus-fastapi-instrumentator."""
        self.lora_series: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.requests_received = 0
        self.last_prefill_hit_rate = 0.0

    def on_token(self, req: EngineRequest, *, previous_token_at: float | None, now: float) -> None:
        if previous_token_at is None:
            ttft = now - req.arrival
            self.ttft.observe(ttft)
            self.sg_ttft.observe(ttft)
        else:
            self.itl.observe(now - previous_token_at)
            self.sg_itl.observe(now - previous_token_at)

    def on_finish(self, req: EngineRequest, *, requested_max_tokens: int) -> None:
        end = req.finished_at if req.finished_at is not None else req.arrival
        scheduled = req.first_scheduled_at if req.first_scheduled_at is not None else end
        first = req.first_token_at if req.first_token_at is not None else end
        self.e2e.observe(end - req.arrival)
        self.sg_e2e.observe(end - req.arrival)
        self.queue.observe(scheduled - req.arrival)
        self.sg_queue.observe(scheduled - req.arrival)
        stages = self.sg_stage
        stages["prefill_waiting"].observe(scheduled - req.arrival)
        stages["request_process"].observe(0.0)
        stages["prefill_forward"].observe(first - scheduled)
        if req.prompt_tokens - req.cached_tokens > 8192:
            stages["chunked_prefill"].observe(first - scheduled)
        stages["decode_loop"].observe(end - first)
        self.sg_retractions.observe(req.preemptions)
        self.inference.observe(end - scheduled)
        self.prefill.observe(first - scheduled)
        self.decode.observe(end - first)
        self.prompt_tokens.observe(req.prompt_tokens)
        self.generation_tokens.observe(req.output_tokens)
        self.max_generation_tokens.observe(requested_max_tokens)
        self.params_max_tokens.observe(requested_max_tokens)
        self.params_n.observe(1)
        self.prefill_kv_computed.observe(max(0, req.prompt_tokens - req.cached_tokens))
        itl = req.mean_itl
        if itl is not None:
            self.request_tpot.observe(itl)

    def on_http(self, *, handler: str, method: str, status: int, duration_s: float) -> None:
        key = (handler, method, f"{status // 100}xx")
        self.http_requests[key] = self.http_requests.get(key, 0) + 1
        self.http_highr.observe(duration_s)

    def note_lora_state(self, *, running: str, waiting: str, unix_now: float) -> None:
        """Refresh the ``lora_requests_info`` series for this (running, waiting) combination."""
        key = (running, waiting)
        self.lora_series.pop(key, None)
        self.lora_series[key] = unix_now
        while len(self.lora_series) > MAX_LORA_SERIES:
            self.lora_series.popitem(last=False)
