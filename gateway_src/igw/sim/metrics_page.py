"""The ``/metrics`` page of each impersonated engine and version, as large and as ordered as real ones.

Pages are rendered by hand (not through a prometheus_client registry) because a fleet of pods is
scraped every 50 ms on a 2-core machine; the output follows prometheus_client's text format 0.0.4
exactly (sorted labels, Go-style floats, ``_created`` families) and the tests parse it with
``prometheus_client.parser``.

The families routing reads (queue, running, KV-cache usage, LoRA info, cache config) and which
KV-cache names a version exposes come from the engine catalogue (:mod:`igw.engines`), the same data
the gateway's parser and the pre-flight checks read. Version rules (vLLM): < 0.9.2 exposes only
``vllm:gpu_cache_usage_perc`` (and the ``gpu_prefix_cache_*`` counters); 0.9.2 - 0.10.x both the old
and the new names (old ones marked DEPRECATED); >= 0.11 only ``vllm:kv_cache_usage_perc`` /
``vllm:prefix_cache_*`` and the inter-token-latency histograms.
SGLang: a multiprocess-style page (no ``_created``, no runtime families, ``_sum`` first) only with
``--enable-metrics`` and version >= 0.3.5.post1 - callers check :attr:`PodSpec.exposes_metrics`;
its KV-cache capacity as ``sglang:cache_config_info{num_pages,page_size}`` from 0.5.8 and as the
``sglang:page_size`` / ``sglang:num_pages`` gauges from 0.5.12 (see :func:`sglang_cache_info`).
TGI: its router's short unlabelled page (queue, batch size, request counters; no KV-cache gauge).

vLLM and SGLang serve their page through prometheus_client's exposition app, which answers
``/metrics?name[]=...`` with only the named samples; :func:`restrict_page` does the same to a
rendered page (TGI's Rust router has no such filter).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from packaging.version import Version
from prometheus_client.utils import floatToGoString

from igw import engines
from igw.config.model_servers import load_requirements
from igw.sim.engine import Engine
from igw.sim.pod_stats import Histogram, PodStats

V_0_9_2: Final = Version("0.9.2")
V_0_11: Final = Version("0.11")
V_0_12: Final = Version("0.12")
V_0_13: Final = Version("0.13")
SG_0_4: Final = Version("0.4")
SG_0_5: Final = Version("0.5")
SG_CACHE_CONFIG: Final = Version("0.5.8")
"""First SGLang release with ``sglang:cache_config_info{page_size,num_pages}`` (sgl-project/sglang
PR #17273, merged 2026-01-17: a gauge set to 1 once at scheduler start-up; the first release after
the merge is assumed, not verified)."""
SG_CAPACITY_GAUGES: Final = Version("0.5.12")
"""SGLang replaced the info gauge with plain ``sglang:page_size`` / ``sglang:num_pages`` gauges
(sgl-project/sglang PR #24197; "v0.5.12 onwards" per llm-d/llm-d-router issue #2294)."""

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
NAME_FILTER: Final = "name[]"
"""prometheus_client's query parameter selecting samples by name (see :func:`restrict_page`)."""

VLLM_FAMILIES: Final = engines.VLLM.families
SGLANG_FAMILIES: Final = engines.SGLANG.families
TGI_FAMILIES: Final = engines.TGI.families
VLLM_KV_NAME, VLLM_OLD_KV_NAME = VLLM_FAMILIES.kv_usage
"""The current KV-cache usage name and the deprecated one it replaced."""


def vllm_kv_names(version: Version) -> tuple[str, ...]:
    """KV-cache usage names a vLLM version exposes, as the catalogue's version ranges say."""
    return load_requirements()[engines.VLLM.name].kv_cache_metric_names(version)


@dataclass(frozen=True, slots=True)
class PageContext:
    """Static facts about the pod that the page prints."""

    model_name: str
    version: Version
    max_model_len: int
    gpu_memory_utilization: float
    prefix_caching: bool
    created_unix: float
    max_lora: int


def _f(v: float) -> str:
    """prometheus_client's value formatting (Go-style: ``1.0``, ``+Inf``, ``1.5e+09``)."""
    text: str = floatToGoString(v)  # type: ignore[no-untyped-call]
    return text


def _esc(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Page:
    """Line builder implementing the exposition rules of prometheus_client's text format 0.0.4."""

    __slots__ = ("created", "lines", "with_created")

    def __init__(self, *, created: float, with_created: bool) -> None:
        self.lines: list[str] = []
        self.created = _f(created)
        self.with_created = with_created

    def gauge(self, name: str, help_: str, labels: str, value: float) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {_f(value)}"]

    def counter(self, name: str, help_: str, series: Sequence[tuple[str, float]]) -> None:
        """``name`` without ``_total``; one line per (labels, value) series, then the ``_created`` family."""
        lines = self.lines
        lines += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
        lines += [f"{name}_total{{{lab}}} {_f(v)}" for lab, v in series]
        if self.with_created:
            lines += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge"]
            lines += [f"{name}_created{{{lab}}} {self.created}" for lab, _ in series]

    def histogram(
        self,
        name: str,
        help_: str,
        labels: str,
        h: Histogram,
        *,
        sum_first: bool = False,
        header: bool = True,
    ) -> None:
        """One-series histogram; ``labels`` is the sorted label text before ``le`` is merged in.

        The rendered block is cached on the histogram until its next observation: most histograms do
        not change between two scrapes 50 ms apart, and rendering them dominates the page's cost.
        """
        key = (name, labels, sum_first, header, self.with_created)
        cached = h.rendered.get(key)
        if cached is not None and cached[0] == h.n:
            self.lines += cached[1]
            return
        lines: list[str] = []
        if header:
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        pre, post = _split_for_le(labels)
        buckets = [
            f'{name}_bucket{{{pre}le="{_f(b)}"{post}}} {_f(c)}'
            for b, c in zip((*h.bounds, float("inf")), h.cumulative(), strict=True)
        ]
        count_line = f"{name}_count{{{labels}}} {_f(h.n)}"
        sum_line = f"{name}_sum{{{labels}}} {_f(h.total)}"
        if sum_first:
            lines += [sum_line, *buckets, count_line]
        else:
            lines += [*buckets, count_line, sum_line]
        if self.with_created:
            lines += [
                f"# HELP {name}_created {help_}",
                f"# TYPE {name}_created gauge",
                f"{name}_created{{{labels}}} {self.created}",
            ]
        h.rendered[key] = (h.n, lines)
        self.lines += lines

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _split_for_le(labels: str) -> tuple[str, str]:
    """Split sorted label text so that ``le`` lands in alphabetical position."""
    parts = labels.split(",") if labels else []
    before = [p for p in parts if p.split("=", 1)[0] < "le"]
    after = [p for p in parts if p.split("=", 1)[0] > "le"]
    pre = ",".join(before) + ("," if before else "")
    post = ("," if after else "") + ",".join(after)
    return pre, post


def _runtime_families(page: _Page, *, created_unix: float, rss_bytes: float, cpu_seconds: float) -> None:
    """prometheus_client's default collectors (36 lines, always first on a default-registry page)."""
    lines = page.lines
    gc = (
        ("python_gc_objects_collected_total", "Objects collected during gc", (48211.0, 8713.0, 1422.0)),
        ("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", (0.0, 0.0, 0.0)),
        ("python_gc_collections_total", "Number of times this generation was collected", (1021.0, 92.0, 6.0)),
    )
    for name, help_, values in gc:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
        lines += [f'{name}{{generation="{g}"}} {_f(v)}' for g, v in enumerate(values)]
    lines += [
        "# HELP python_info Python platform information",
        "# TYPE python_info gauge",
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0',
    ]
    proc = (
        ("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", 2.9940645888e10),
        ("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge", rss_bytes),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            "gauge",
            created_unix,
        ),
        (
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            cpu_seconds,
        ),
        ("process_open_fds", "Number of open file descriptors.", "gauge", 93.0),
        ("process_max_fds", "Maximum number of open file descriptors.", "gauge", 1048576.0),
    )
    for name, help_, kind, value in proc:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {_f(value)}"]


def render_vllm(
    *, ctx: PageContext, engine: Engine, stats: PodStats, unix_now: float, uptime_s: float
) -> str:
    """A vLLM V1 default-registry page for ``ctx.version`` (see the module docstring for the rules)."""
    v = ctx.version
    page = _Page(created=ctx.created_unix, with_created=True)
    _runtime_families(
        page,
        created_unix=ctx.created_unix,
        rss_bytes=3.1e9 + 1e6 * stats.requests_received % 5e8,
        cpu_seconds=uptime_s,
    )
    lab = f'engine="0",model_name="{_esc(ctx.model_name)}"'
    c = engine.counters
    kv_names = vllm_kv_names(v)
    old_names = VLLM_OLD_KV_NAME in kv_names
    new_names = VLLM_KV_NAME in kv_names
    page.gauge(
        VLLM_FAMILIES.running, "Number of requests in model execution batches.", lab, engine.num_running
    )
    page.gauge(VLLM_FAMILIES.waiting, "Number of requests waiting to be processed.", lab, engine.num_waiting)
    if v >= V_0_11:
        help_sleep = (
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
        )
        page.lines += ["# HELP vllm:engine_sleep_state " + help_sleep, "# TYPE vllm:engine_sleep_state gauge"]
        for state, value in (("awake", 1.0), ("discard_all", 0.0), ("weights_offloaded", 0.0)):
            page.lines.append(f'vllm:engine_sleep_state{{{lab},sleep_state="{state}"}} {_f(value)}')
    usage = engine.pool.usage
    if new_names:
        page.gauge(VLLM_KV_NAME, "KV-cache usage. 1 means 100 percent usage.", lab, usage)
    if old_names:
        dep = f".DEPRECATED: Use {VLLM_KV_NAME} instead." if new_names else "."
        page.gauge(VLLM_OLD_KV_NAME, f"GPU KV-cache usage. 1 means 100 percent usage{dep}", lab, usage)
        qdep = " DEPRECATED: Use vllm:prefix_cache_queries instead." if new_names else ""
        hdep = " DEPRECATED: Use vllm:prefix_cache_hits instead." if new_names else ""
        page.counter(
            "vllm:gpu_prefix_cache_queries",
            f"GPU prefix cache queries, in terms of number of queriedtokens.{qdep}",
            [(lab, c.prefix_queries)],
        )
        page.counter(
            "vllm:gpu_prefix_cache_hits",
            f"GPU prefix cache hits, in terms of number of cached tokens.{hdep}",
            [(lab, c.prefix_hits)],
        )
    if new_names:
        page.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(lab, c.prefix_queries)],
        )
        page.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(lab, c.prefix_hits)],
        )
    if v >= V_0_12:
        page.counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
            [(lab, 0.0)],
        )
        page.counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
            [(lab, 0.0)],
        )
        page.counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
            [(lab, 0.0)],
        )
        page.counter(
            "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", [(lab, 0.0)]
        )
    page.counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(lab, c.preemptions)]
    )
    page.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [(lab, c.prompt_tokens)])
    if v >= V_0_13:
        computed = max(0, c.prompt_tokens - c.prefix_hits)
        page.counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [
                (f'{lab},source="external_kv_transfer"', 0.0),
                (f'{lab},source="local_cache_hit"', c.prefix_hits),
                (f'{lab},source="local_compute"', computed),
            ],
        )
        page.counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            [(lab, c.prefix_hits)],
        )
        page.counter(
            "vllm:prompt_tokens_recomputed",
            "Number of cached tokens recomputed for forward pass.",
            [(lab, 0.0)],
        )
    page.counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", [(lab, c.generation_tokens)]
    )
    reasons = ["stop", "length", "abort"]
    if v >= V_0_11:
        reasons.append("error")
    if v >= V_0_13:
        reasons.append("repetition")
    by_reason = c.finished_by_reason
    page.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [
            (f'engine="0",finished_reason="{r}",model_name="{_esc(ctx.model_name)}"', by_reason.get(r, 0))
            for r in reasons
        ],
    )
    page.histogram(
        "vllm:request_prompt_tokens", "Number of prefill tokens processed.", lab, stats.prompt_tokens
    )
    page.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        lab,
        stats.generation_tokens,
    )
    page.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        lab,
        stats.iteration_tokens,
    )
    page.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        lab,
        stats.max_generation_tokens,
    )
    page.histogram("vllm:request_params_n", "Histogram of the n request parameter.", lab, stats.params_n)
    page.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        lab,
        stats.params_max_tokens,
    )
    page.histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lab, stats.ttft
    )
    if v < V_0_11:
        page.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            lab,
            stats.itl,
        )
    else:
        page.histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lab, stats.itl
        )
        page.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            lab,
            stats.request_tpot,
        )
    page.histogram(
        "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lab, stats.e2e
    )
    page.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        lab,
        stats.queue,
    )
    page.histogram(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        lab,
        stats.inference,
    )
    page.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        lab,
        stats.prefill,
    )
    page.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        lab,
        stats.decode,
    )
    if v >= V_0_13:
        page.histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            lab,
            stats.prefill_kv_computed,
        )
    lora = VLLM_FAMILIES.lora
    if ctx.max_lora > 0 and lora is not None:
        page.lines += [f"# HELP {lora} Running stats on lora requests.", f"# TYPE {lora} gauge"]
        for (running, waiting), ts in stats.lora_series.items():
            page.lines.append(
                f'{lora}{{max_lora="{ctx.max_lora}",running_lora_adapters="{_esc(running)}",'
                f'waiting_lora_adapters="{_esc(waiting)}"}} {_f(ts)}'
            )
    _cache_config_info(page, ctx=ctx, engine=engine)
    _http_families(page, stats)
    return page.text()


def _cache_config_info(page: _Page, *, ctx: PageContext, engine: Engine) -> None:
    fields = {
        VLLM_FAMILIES.block_size_label: str(engine.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_kvcache_space_bytes": "None",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(ctx.prefix_caching),
        "gpu_memory_utilization": str(ctx.gpu_memory_utilization),
        "is_attention_free": "False",
        "mamba_page_size_padded": "None",
        "num_cpu_blocks": "None",
        VLLM_FAMILIES.num_blocks_label: str(engine.pool.num_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256" if ctx.version >= V_0_11 else "builtin",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296.0",
    }
    if ctx.version >= V_0_9_2:
        fields["engine"] = "0"
    if ctx.version >= V_0_11:
        fields.update(
            kv_cache_memory_bytes="None",
            kv_sharing_fast_prefill="False",
            mamba_cache_dtype="auto",
            mamba_ssm_cache_dtype="auto",
        )
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(fields.items()))
    assert VLLM_FAMILIES.cache_config is not None  # vLLM publishes one (engine catalogue)
    page.gauge(VLLM_FAMILIES.cache_config, "Information of the LLMEngine CacheConfig", labels, 1.0)


def _http_families(page: _Page, stats: PodStats) -> None:
    """prometheus-fastapi-instrumentator's families (a subset: totals and the high-resolution histogram)."""
    lines = page.lines
    help_total = "Total number of requests by method, status and handler."
    lines += [f"# HELP http_requests_total {help_total}", "# TYPE http_requests_total counter"]
    items = sorted(stats.http_requests.items())
    lines += [
        f'http_requests_total{{handler="{h}",method="{m}",status="{s}"}} {_f(n)}' for (h, m, s), n in items
    ]
    if items:
        lines += [f"# HELP http_requests_created {help_total}", "# TYPE http_requests_created gauge"]
        lines += [
            f'http_requests_created{{handler="{h}",method="{m}",status="{s}"}} {page.created}'
            for (h, m, s), _ in items
        ]
    help_highr = (
        "Latency with many buckets but no API specific labels. "
        "Made for more accurate percentile calculations."
    )
    page.histogram("http_request_duration_highr_seconds", help_highr, "", stats.http_highr)


@dataclass(frozen=True, slots=True)
class SchedulerRank:
    """One SGLang scheduler as its page shows it: a data-parallel rank's engine, its scheduler-level
    statistics (queue time, stages, last prefill hit rate) and generation throughput."""

    engine: Engine
    stats: PodStats
    gen_throughput: float
    dp_rank: int | None = None
    """``None`` for a pod without data parallelism: SGLang adds the ``dp_rank`` label only when
    ``--dp-size`` is above 1."""


def _sglang_gauges(
    ctx: PageContext, engine: Engine, stats: PodStats, gen: float
) -> list[tuple[str, str, float]]:
    """One scheduler's gauge families in registration order: (name, HELP, value)."""
    pool = engine.pool
    used_tokens = (pool.num_blocks - pool.num_free) * engine.block_size
    gauges: list[tuple[str, str, float]] = [
        (SGLANG_FAMILIES.running, "The number of running requests.", float(engine.num_running)),
        ("sglang:num_used_tokens", "The number of used tokens.", float(used_tokens)),
        (SGLANG_FAMILIES.kv_usage[0], "The token usage.", pool.usage),
        ("sglang:gen_throughput", "The generation throughput (token/s).", gen),
        (SGLANG_FAMILIES.waiting, "The number of requests in the waiting queue.", float(engine.num_waiting)),
        ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0.0),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", stats.last_prefill_hit_rate),
        ("sglang:spec_accept_length", "The average acceptance length of speculative decoding.", 0.0),
        (
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            float(pool.num_blocks * engine.block_size),
        ),
        ("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 1.0),
    ]
    if ctx.version >= SG_0_4:
        running_tokens = float(sum(r.num_computed for r in engine.running))
        gauges += [
            ("sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode.", running_tokens),
            (
                "sglang:num_running_reqs_offline_batch",
                "The number of running low-priority offline batch requests.",
                0.0,
            ),
            ("sglang:utilization", "The utilization.", min(1.0, engine.num_running / engine.max_num_seqs)),
            ("sglang:new_token_ratio", "The new token ratio.", 0.0),
            ("sglang:pending_prealloc_token_usage", "The token usage for pending preallocated tokens.", 0.0),
            ("sglang:swa_token_usage", "The token usage for SWA layers.", 0.0),
            ("sglang:mamba_usage", "The token usage for Mamba layers.", 0.0),
            ("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.", 0.0),
            (
                "sglang:num_prefill_prealloc_queue_reqs",
                "The number of requests in the prefill prealloc queue.",
                0.0,
            ),
            (
                "sglang:num_prefill_inflight_queue_reqs",
                "The number of requests in the prefill inflight queue.",
                0.0,
            ),
            (
                "sglang:num_decode_prealloc_queue_reqs",
                "The number of requests in the decode prealloc queue.",
                0.0,
            ),
            (
                "sglang:num_decode_transfer_queue_reqs",
                "The number of requests in the decode transfer queue.",
                0.0,
            ),
            ("sglang:kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s.", 0.0),
            ("sglang:kv_transfer_latency_ms", "The transfer latency of the KV cache in ms.", 0.0),
            ("sglang:engine_startup_time", "The time taken for the engine to start up.", 31.5),
            ("sglang:engine_load_weights_time", "The time taken for the engine to load weights.", 12.25),
        ]
    if ctx.version >= SG_CAPACITY_GAUGES:
        gauges += [
            ("sglang:page_size", "KV cache page size in tokens.", float(engine.block_size)),
            ("sglang:num_pages", "Number of KV cache pages.", float(pool.num_blocks)),
        ]
    return gauges


def render_sglang(
    *,
    ctx: PageContext,
    stats: PodStats,
    engine: Engine | None = None,
    gen_throughput: float = 0.0,
    ranks: Sequence[SchedulerRank] = (),
) -> str:
    """An SGLang multiprocess-style page (only call when the pod exposes metrics).

    ``stats`` holds the tokenizer-level numbers (one tokenizer per pod); the schedulers are ``ranks``
    (one per data-parallel rank, each series labelled ``dp_rank``), or else the one ``engine``
    whose scheduler statistics are ``stats``. Each scheduler family lists one series per rank under
    a single HELP/TYPE, as prometheus_client's multiprocess collector merges the schedulers' files.
    """
    if not ranks:
        if engine is None:
            raise ValueError("render_sglang needs an engine or ranks")
        ranks = (SchedulerRank(engine=engine, stats=stats, gen_throughput=gen_throughput),)
    page = _Page(created=ctx.created_unix, with_created=False)
    name = _esc(ctx.model_name)

    def sched(rank: SchedulerRank, extra: str = "") -> str:
        """The scheduler labels, sorted (``dp_rank`` < ``engine_type`` < ``mode`` < ``model_name``
        < ``pp_rank`` < ``stage`` < ``tp_rank``); ``extra`` is ``mode``/``stage`` text."""
        dp = "" if rank.dp_rank is None else f'dp_rank="{rank.dp_rank}",'
        mode = f"{extra}," if extra.startswith("mode=") else ""
        stage = f"{extra}," if extra.startswith("stage=") else ""
        return f'{dp}engine_type="unified",{mode}model_name="{name}",pp_rank="0",{stage}tp_rank="0"'

    tok = f'model_name="{name}"'
    per_rank = [_sglang_gauges(ctx, r.engine, r.stats, r.gen_throughput) for r in ranks]
    for column, (g_name, help_, _) in enumerate(per_rank[0]):
        page.lines += [f"# HELP {g_name} {help_}", f"# TYPE {g_name} gauge"]
        page.lines += [
            f"{g_name}{{{sched(r)}}} {_f(rows[column][2])}" for r, rows in zip(ranks, per_rank, strict=True)
        ]
    v = ctx.version
    if sglang_cache_info(v):
        # labelled with the cache config only (no model/rank labels), multiprocess mode mostrecent:
        # every rank writes the same series, the page shows it once
        cache = SGLANG_FAMILIES.cache_config
        assert cache is not None  # the catalogue names SGLang's info gauge
        first = ranks[0].engine
        info = (
            f'{SGLANG_FAMILIES.num_blocks_label}="{first.pool.num_blocks}",'
            f'{SGLANG_FAMILIES.block_size_label}="{first.block_size}"'
        )
        page.gauge(cache, "Cache configuration information.", info, 1.0)
    engines_ = [r.engine for r in ranks]
    prompt_tokens = sum(e.counters.prompt_tokens for e in engines_)
    generation_tokens = sum(e.counters.generation_tokens for e in engines_)
    prefix_hits = sum(e.counters.prefix_hits for e in engines_)
    if v >= SG_0_4:
        series: list[tuple[str, float]] = []
        for r in ranks:
            c = r.engine.counters
            series += [
                (sched(r, 'mode="decode"'), float(c.generation_tokens)),
                (sched(r, 'mode="prefill_cache"'), float(c.prefix_hits)),
                (sched(r, 'mode="prefill_compute"'), float(max(0, c.prompt_tokens - c.prefix_hits))),
            ]
        page.counter(
            "sglang:realtime_tokens", "The number of tokens processed in real time, by mode.", series
        )
    if stats.requests_received:
        aborted = sum(e.counters.finished_by_reason.get("abort", 0) for e in engines_)
        counters = (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", prompt_tokens),
            ("sglang:generation_tokens", "Number of generation tokens processed.", generation_tokens),
            ("sglang:cached_tokens", "Number of cached prompt tokens.", prefix_hits),
            ("sglang:num_requests", "Number of requests processed.", stats.requests_received),
            ("sglang:num_aborted_requests", "Number of requests aborted.", aborted),
        )
        for c_name, help_, value in counters:
            page.counter(c_name, help_, [(tok, float(value))])
        page.histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            tok,
            stats.sg_ttft,
            sum_first=True,
        )
        page.histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            tok,
            stats.sg_itl,
            sum_first=True,
        )
        page.histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tok,
            stats.sg_e2e,
            sum_first=True,
        )
    for i, r in enumerate(ranks):
        page.histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            sched(r),
            r.stats.sg_queue,
            sum_first=True,
            header=i == 0,
        )
    if ctx.version >= SG_0_5 and stats.requests_received:
        help_stage = "The latency of each stage of requests."
        page.lines += [
            f"# HELP sglang:per_stage_req_latency_seconds {help_stage}",
            "# TYPE sglang:per_stage_req_latency_seconds histogram",
        ]
        for r in ranks:
            for stage, h in r.stats.sg_stage.items():
                page.histogram(
                    "sglang:per_stage_req_latency_seconds",
                    help_stage,
                    sched(r, f'stage="{stage}"'),
                    h,
                    sum_first=True,
                    header=False,
                )
        page.histogram(
            "sglang:num_retractions",
            "Histogram of the number of retractions of each request.",
            tok,
            stats.sg_retractions,
            sum_first=True,
        )
    return page.text()


def sglang_publishes_capacity(version: Version) -> bool:
    """Whether an SGLang version publishes its KV page size and page count in either form (the info
    gauge, or from 0.5.12 the two plain gauges): what the gateway reads for prefix auto-tuning."""
    return version >= SG_CACHE_CONFIG


def sglang_cache_info(version: Version) -> bool:
    """Whether an SGLang version publishes ``sglang:cache_config_info`` (KV page size and page
    count as labels, what the gateway reads for prefix auto-tuning): 0.5.8 up to before 0.5.12."""
    return SG_CACHE_CONFIG <= version < SG_CAPACITY_GAUGES


def render_tgi(*, ctx: PageContext, engine: Engine) -> str:
    """A Text Generation Inference page: its router's unlabelled families (the Rust ``metrics``
    exporter: counters without a ``_total`` suffix). TGI publishes queue and batch size but no
    KV-cache gauge, which is what the engine catalogue says the gateway can read from it."""
    del ctx
    finished = sum(engine.counters.finished_by_reason.values())
    aborted = engine.counters.finished_by_reason.get("abort", 0)
    max_tokens = sum(r.num_tokens + r.max_output_tokens - r.output_tokens for r in engine.running)
    rows: tuple[tuple[str, str, float], ...] = (
        ("tgi_batch_current_max_tokens", "gauge", float(max_tokens)),
        (TGI_FAMILIES.running, "gauge", float(engine.num_running)),
        (TGI_FAMILIES.waiting, "gauge", float(engine.num_waiting)),
        ("tgi_request_count", "counter", float(finished + engine.num_running + engine.num_waiting)),
        ("tgi_request_success", "counter", float(finished - aborted)),
        ("tgi_request_input_count", "counter", float(engine.counters.prompt_tokens)),
        ("tgi_request_generated_tokens_sum", "counter", float(engine.counters.generation_tokens)),
    )
    lines: list[str] = []
    for name, kind, value in rows:
        lines += [f"# TYPE {name} {kind}", f"{name} {_f(value)}"]
    return "\n".join(lines) + "\n"


def restrict_page(text: str, names: Collection[str]) -> str:
    """``text`` as prometheus_client answers ``/metrics?name[]=...``: only the samples whose name is
    in ``names``, each under its family's ``# HELP`` / ``# TYPE`` lines; a family with no such sample
    is left out entirely (so an unknown name gives an empty page). Sample names, not family names,
    select: a counter ``x`` is ``x_total``, a histogram's parts ``x_bucket`` / ``x_count`` / ``x_sum``.
    One difference: a counter's ``x_created`` samples asked for without ``x_total`` come without the
    counter's own HELP/TYPE lines, which prometheus_client prints before them (no caller asks that)."""
    wanted = frozenset(names)
    out: list[str] = []
    header: list[str] = []
    kept = in_samples = False
    for line in text.splitlines():
        if line.startswith("#"):
            if in_samples:  # comment lines after samples start the next family
                header, kept, in_samples = [], False, False
            header.append(line)
            continue
        in_samples = True
        if line.split("{", 1)[0].split(" ", 1)[0] in wanted:
            if not kept:
                out += header
                kept = True
            out.append(line)
    return "\n".join(out) + "\n" if out else ""
