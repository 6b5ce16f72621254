"""The engine catalogue: what the gateway knows about each model-server engine, as data.

One entry per ``spec.schedulers[].engineType`` value. Everything engine-specific that more than one
part of igw needs lives here, so the parts cannot drift apart:

* the metric families routing reads, new and old names (the gateway's metrics parser, the
  pre-flight metrics probe, the simulator's ``/metrics`` pages);
* the lowest supported version, flags that must or must not be set, and which KV-cache metric names
  each version range exposes (the pre-flight model-server check, the simulator's version rules);
* the HTTP paths of its metrics page, readiness probe and model list, its default port and how to
  recognise it in a container's argv or image (pre-flight checks, the simulator's servers);
* AWS's ``engineType`` enum of the InferenceGatewayConfig schema (:data:`AWS_ENGINE_TYPES`, a subset
  of :data:`ENGINES`, checked by a test); the other engines (TGI, and a ``generic`` engine whose
  families are metric specs from the config, :func:`generic_engine`) are chosen per scheduler under
  ``spec.extensions.engines``, so AWS's enum stays exactly as AWS documents it.

Families may carry label filters, as GIE's metric specs do: ``name{label="value",other="x"}`` reads
only the series with those labels (:func:`parse_metric_spec`). An engine that does not publish a
signal at all (TGI has no KV-cache gauge) lists no family for it: the scheduler then leaves that
scorer out for its pods, and nobody is told to fix what cannot be fixed.

Adding an engine is one :class:`Engine` entry in :data:`ENGINES` plus its tests. Versions are PEP 440
strings compared with plain ordering, so a pre-release of a minimum (``0.9.2rc1``) is *below* it.
This module is pure data and imports nothing from igw.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal


@dataclass(frozen=True, slots=True)
class MetricFamilies:
    """Prometheus families an engine publishes for the signals routing scores on."""

    waiting: str
    """Requests queued, not yet scheduled (a metric spec: a family name, optionally with labels)."""
    running: str
    """Requests in the running batch."""
    kv_usage: tuple[str, ...]
    """KV-cache utilisation (fraction 0..1): preferred name first, deprecated fallbacks after; empty
    when the engine publishes no such gauge."""
    lora: str | None
    """LoRA info gauge with ``running_lora_adapters``/``waiting_lora_adapters``/``max_lora`` labels."""
    cache_config: str | None
    """Info gauge carrying the KV block size and the number of KV blocks as labels (``None``: none)."""
    block_size_label: str
    num_blocks_label: str
    combine_load: Literal["sum", "max"]
    """How several series of one queue/running gauge combine within one :attr:`rank_label` value:
    ``sum`` when each series is a separate engine, ``max`` when every rank repeats the same scheduler
    numbers (SGLang's TP ranks with ``--enable-metrics-for-all-schedulers``)."""
    rank_label: str | None = None
    """A label whose values name separate engines in one pod, each with its own scheduler (queue and
    batch) and its own KV cache: SGLang's ``dp_rank`` and vLLM's ``engine`` (one per data-parallel
    rank). Queue/running series are combined by :attr:`combine_load` within each value of it and
    summed across them; the KV capacity is summed across them and the KV usage is their
    capacity-weighted mean (:func:`igw.gateway.metrics_parser.kv_share` says why). ``None``: one
    engine per pod."""
    cache_gauges: tuple[str, str] | None = None
    """Plain gauges carrying the KV block size and the number of KV blocks, read when the page has no
    :attr:`cache_config` info gauge (``None``: none). SGLang replaced its ``cache_config_info`` gauge
    with ``sglang:page_size`` and ``sglang:num_pages`` (PR #24197); reading only the info gauge, every
    current SGLang pod was reported missing the signal and lost prefix auto-tuning."""
    name_filter: bool = False
    """The server renders ``/metrics`` with prometheus_client's exposition, which honours
    ``?name[]=<sample name>`` (only those samples, with their families' HELP/TYPE lines): the scraper
    may ask for the routing families alone instead of the whole page."""
    activity: tuple[str, ...] = ()
    """Sample names that move with every request the server works on (token counters), asked for
    together with the routing families so that a filtered page still changes while requests run
    (frozen-page detection)."""


@dataclass(frozen=True, slots=True)
class FlagRule:
    """A command-line flag that must (or must not) be present, and why."""

    flag: str
    reason: str


@dataclass(frozen=True, slots=True)
class KvMetricRange:
    """KV-cache metric names exposed by versions in ``[since, before)`` (open ends allowed)."""

    names: tuple[str, ...]
    since: str | None = None
    before: str | None = None


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    """The ``engineType`` value."""
    display_name: str
    families: MetricFamilies
    minimum_version: str
    minimum_reason: str
    """Shown to the user when a server is older than ``minimum_version``."""
    required_flags: tuple[FlagRule, ...]
    forbidden_flags: tuple[FlagRule, ...]
    """Flags that silently disable a signal the scheduler depends on."""
    kv_cache_metrics: tuple[KvMetricRange, ...]
    default_port: int
    """Port the server listens on when ``--port`` is not given."""
    detect_tokens: tuple[str, ...]
    """Lower-case substrings that identify the engine in a container's argv or image repository."""
    detect_first: bool = False
    """Try this engine before the others: its argv or image may also mention another engine's token
    (an SGLang container can mention its optional vLLM dependency; not the other way round)."""
    metrics_path: str = "/metrics"
    readiness_path: str = "/health"
    """Answers 200 once the model is loaded (what a readiness probe should call)."""
    model_info_path: str = "/v1/models"
    """OpenAI-compatible model list (served model names, LoRA adapters)."""
    missing_advice: Mapping[str, str] = field(default_factory=dict)
    """Family name -> what to do when a page lacks it (the gateway logs it with the missing signal)."""

    def signals(self) -> Mapping[str, tuple[str, ...]]:
        """Routing signal -> accepted family names, preferred first (what a page must carry; a signal
        the engine does not publish at all is absent)."""
        f = self.families
        out: dict[str, tuple[str, ...]] = {"queue": (f.waiting,), "running": (f.running,)}
        if f.kv_usage:
            out["kv-cache"] = f.kv_usage
        return {k: tuple(metric_family(n) for n in v) for k, v in out.items()}


VLLM: Final = Engine(
    name="vllm",
    display_name="vLLM",
    families=MetricFamilies(
        waiting="vllm:num_requests_waiting",
        running="vllm:num_requests_running",
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        lora="vllm:lora_requests_info",
        cache_config="vllm:cache_config_info",
        block_size_label="block_size",
        num_blocks_label="num_gpu_blocks",
        # one engine per data-parallel rank (--data-parallel-size), each series labelled engine
        combine_load="sum",
        rank_label="engine",
        name_filter=True,
        activity=("vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
    ),
    minimum_version="0.9.2",
    minimum_reason=(
        "vLLM before 0.9.2 publishes KV-cache usage only as vllm:gpu_cache_usage_perc; 0.9.2 is the first "
        "release with vllm:kv_cache_usage_perc and the prefix-cache counters the scheduler scores on."
    ),
    required_flags=(),
    forbidden_flags=(
        FlagRule(
            "--disable-log-stats",
            "--disable-log-stats turns off vLLM's stat loggers, so /metrics stops updating queue depth and "
            "KV-cache usage and the scheduler routes on stale zeros.",
        ),
    ),
    kv_cache_metrics=(
        KvMetricRange(("vllm:gpu_cache_usage_perc",), before="0.9.2"),
        KvMetricRange(
            ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), since="0.9.2", before="0.11.0"
        ),
        KvMetricRange(("vllm:kv_cache_usage_perc",), since="0.11.0"),
    ),
    default_port=8000,
    detect_tokens=("vllm",),
    missing_advice={
        "vllm:kv_cache_usage_perc": "vLLM < 0.9.2 publishes KV-cache usage only as the deprecated "
        "vllm:gpu_cache_usage_perc (used as a fallback; removed in vLLM 0.12): upgrade to vLLM >= 0.9.2",
        "vllm:lora_requests_info": "LoRA affinity cannot be scored: start vLLM with --enable-lora",
    },
)

SGLANG: Final = Engine(
    name="sglang",
    display_name="SGLang",
    families=MetricFamilies(
        waiting="sglang:num_queue_reqs",
        running="sglang:num_running_reqs",
        kv_usage=("sglang:token_usage",),
        lora=None,
        cache_config="sglang:cache_config_info",
        block_size_label="page_size",
        num_blocks_label="num_pages",
        cache_gauges=("sglang:page_size", "sglang:num_pages"),
        # one scheduler per data-parallel rank, each with its own waiting queue and running batch
        # (series labelled dp_rank); within one rank the TP/PP ranks repeat the same numbers when
        # every scheduler logs (--enable-metrics-for-all-schedulers)
        combine_load="max",
        rank_label="dp_rank",
        name_filter=True,
        activity=("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
    ),
    minimum_version="0.3.5.post1",
    minimum_reason=(
        "SGLang 0.3.5.post1 is the first release with a Prometheus /metrics endpoint (sglang:token_usage, "
        "sglang:num_queue_reqs); older releases fail to start with --enable-metrics."
    ),
    required_flags=(
        FlagRule(
            "--enable-metrics",
            "SGLang exposes /metrics only when started with --enable-metrics; without it the scheduler "
            "has no queue or KV-cache signal for these pods.",
        ),
    ),
    forbidden_flags=(),
    kv_cache_metrics=(KvMetricRange(("sglang:token_usage",), since="0.3.5.post1"),),
    default_port=30000,
    detect_tokens=("sglang",),
    detect_first=True,
)

TGI: Final = Engine(
    name="tgi",
    display_name="Text Generation Inference",
    families=MetricFamilies(
        waiting="tgi_queue_size",
        running="tgi_batch_current_size",
        kv_usage=(),
        lora=None,
        cache_config=None,
        block_size_label="",
        num_blocks_label="",
        combine_load="max",
    ),
    minimum_version="2.0.0",
    minimum_reason=(
        "igw forwards OpenAI-style /v1/completions and /v1/chat/completions; TGI serves the completions "
        "route from 2.0 on (1.4 added only the chat Messages API)."
    ),
    required_flags=(),
    forbidden_flags=(),
    kv_cache_metrics=(),
    default_port=80,
    detect_tokens=("text-generation-inference", "text-generation-launcher"),
    detect_first=True,
    model_info_path="/v1/models",
    missing_advice={},
)
"""Hugging Face TGI: queue and batch size only (no KV-cache or LoRA gauge on its /metrics page), one
router per server, so one series per family. The container image listens on port 80."""

ENGINES: Final[Mapping[str, Engine]] = {e.name: e for e in (VLLM, SGLANG, TGI)}
"""By engine name: AWS's ``engineType`` values first, in the order the schema's enum lists them."""

AWS_ENGINE_TYPES: Final[tuple[str, ...]] = (VLLM.name, SGLANG.name)
"""AWS's ``engineType`` enum, unchanged; other engines are selected under ``spec.extensions.engines``."""

GENERIC: Final = "generic"
"""The engine whose families are metric specs given in the config (:func:`generic_engine`)."""

_SPEC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_SPEC_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"?([^",]*)"?\s*(?:,|$)')


def parse_metric_spec(spec: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``name{label=value,...}`` -> (family name, required label pairs); quotes around values are
    optional, as in GIE's metric-spec flags. ``ValueError`` naming the spec when it is malformed."""
    m = _SPEC.match(spec.strip())
    if m is None:
        raise ValueError(f"invalid metric spec {spec!r}: expected name or name{{label=value,...}}")
    name, body = m.group(1), m.group(2)
    if body is None or not body.strip():
        return name, ()
    labels: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        lm = _SPEC_LABEL.match(body, pos)
        if lm is None or lm.end() == pos:
            raise ValueError(f"invalid metric spec {spec!r}: labels must be label=value pairs")
        labels.append((lm.group(1), lm.group(2)))
        pos = lm.end()
    return name, tuple(labels)


def metric_family(spec: str) -> str:
    """The family name of a metric spec (its labels dropped)."""
    return parse_metric_spec(spec)[0]


def generic_engine(*, queue: str, running: str, kv_usage: str | None = None) -> Engine:
    """An engine known only by the metric specs a config gives for its signals (any OpenAI-compatible
    server with a Prometheus page). No version or flag requirements: pre-flight cannot know them."""
    for spec in (queue, running, *(() if kv_usage is None else (kv_usage,))):
        parse_metric_spec(spec)
    return Engine(
        name=GENERIC,
        display_name="generic OpenAI-compatible server",
        families=MetricFamilies(
            waiting=queue,
            running=running,
            kv_usage=() if kv_usage is None else (kv_usage,),
            lora=None,
            cache_config=None,
            block_size_label="",
            num_blocks_label="",
            combine_load="max",
        ),
        minimum_version="0",
        minimum_reason="a generic engine has no known minimum version",
        required_flags=(),
        forbidden_flags=(),
        kv_cache_metrics=(),
        default_port=8000,
        detect_tokens=(),
    )


DEFAULT_ENGINE: Final = VLLM.name
"""``engineType`` when a scheduler does not set it (the schema's default)."""


def engine(name: str, catalogue: Mapping[str, Engine] = ENGINES) -> Engine:
    """The entry for ``name``; ``ValueError`` listing the known engines otherwise."""
    try:
        return catalogue[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(sorted(catalogue))}") from None


def detect_engine(text: str, catalogue: Mapping[str, Engine] = ENGINES) -> Engine | None:
    """The engine whose detection token occurs in ``text`` (argv or image repository, any case);
    engines marked ``detect_first`` are tried first."""
    lowered = text.lower()
    for candidate in sorted(catalogue.values(), key=lambda e: not e.detect_first):
        if any(token in lowered for token in candidate.detect_tokens):
            return candidate
    return None
