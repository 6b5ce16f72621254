"""The engine catalogue: what the gateway knows about each model-server engine, as data.

One entry per ``spec.schedulers[].engineType`` value. Everything engine-specific that more than one
part of igw needs lives here, so the parts cannot drift apart:

* the metric families routing reads, new and old names (the gateway's metrics parser, the
  pre-flight metrics probe, the simulator's ``/metrics`` pages);
* the lowest supported version, flags that must or must not be set, and which KV-cache metric names
  each version range exposes (the pre-flight model-server check, the simulator's version rules);
* the HTTP paths of its metrics page, readiness probe and model list, its default port and how to
  recognise it in a container's argv or image (pre-flight checks, the simulator's servers);
* the ``engineType`` enum of the InferenceGatewayConfig schema, checked against :data:`ENGINES`
  by a test.

Adding an engine is one :class:`Engine` entry in :data:`ENGINES` plus its tests. Versions are PEP 440
strings compared with plain ordering, so a pre-release of a minimum (``0.9.2rc1``) is *below* it.
This module is pure data and imports nothing from igw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal


@dataclass(frozen=True, slots=True)
class MetricFamilies:
    """Prometheus families an engine publishes for the signals routing scores on."""

    waiting: str
    """Requests queued, not yet scheduled."""
    running: str
    """Requests in the running batch."""
    kv_usage: tuple[str, ...]
    """KV-cache utilisation (fraction 0..1): preferred name first, deprecated fallbacks after."""
    lora: str | None
    """LoRA info gauge with ``running_lora_adapters``/``waiting_lora_adapters``/``max_lora`` labels."""
    cache_config: str
    """Info gauge carrying the KV block size and the number of KV blocks as labels."""
    block_size_label: str
    num_blocks_label: str
    combine_load: Literal["sum", "max"]
    """How several series of one queue/running gauge combine: ``sum`` when each series is a separate
    engine (vLLM data parallelism), ``max`` when every rank repeats the same scheduler numbers."""


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
        """Routing signal -> accepted family names, preferred first (what a page must carry)."""
        f = self.families
        return {"queue": (f.waiting,), "running": (f.running,), "kv-cache": f.kv_usage}


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
        combine_load="sum",
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
        combine_load="max",
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

ENGINES: Final[Mapping[str, Engine]] = {e.name: e for e in (VLLM, SGLANG)}
"""By ``engineType``, in the order the schema's enum lists them."""

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
