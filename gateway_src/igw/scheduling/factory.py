"""Build a :class:`~igw.scheduling.scheduler.Scheduler` from configuration.

Three entry points, all pure (no I/O; the caller supplies the random source and, when it has one,
the ConfigMap content):

* :func:`scheduler_from_spec` - one ``spec.schedulers[]`` entry of an InferenceGatewayConfig:
  ``weights`` (unset ones take the defaults) or ``configMapRef`` (an EndpointPickerConfig document).
* :func:`scheduler_from_weights` - explicit weights, for weight tuning in the benchmark.
* :func:`scheduler_from_picker_config` - an EndpointPickerConfig mapping.

Default weights (the table in :mod:`igw.config.weight_keys`): queue 2, kvCache 2, prefix 3
(GIE >= v1.2); loraAffinity 1 when the scheduler has ``loraAdapters``; predictedLatency 1, which
igw maps to ``predicted-ttft-scorer`` (measured TTFT per endpoint x requests waiting there,
including this router's dispatches the scrape cannot show yet).
That default is igw's, not GIE's: without it the GIE scorers herd between scrapes on identical pods
(docs/scheduler-design.md) and count an A10G's queue like an H100's on mixed
fleets; ``predictedLatency: 0`` restores GIE's queue/kvCache/prefix behaviour exactly.
``endpoint-speed-scorer`` (raw measured decode speed) stays available by its plugin type name.
``prefill-collision-scorer`` (weight 2, igw's too) keeps load-aware picks from landing on a pod that is
still prefilling this router's previous request (round-robin's even spacing; measured in
docs/scheduler-design.md); ``backlog-ttft-scorer`` (weight 4, igw's) predicts each pod's TTFT for
this request from the prompt tokens this router sent there and the pod's prefill speed fitted from
completed requests, which keeps slow GPUs of a mixed fleet out of the tail (docs/benchmark.md);
``prefill-admission-scorer`` (weight 16, igw's: more than the others together, so it acts as an
admission rule) keeps long prompts off pods the backlog scorer predicts far slower than the best;
``decode-balance-scorer`` (weight 2, igw's) evens out this router's requests in flight between pods
of one kind of hardware, as far as the request's prefix match buys little (ITL and E2E tails,
docs/benchmark.md, routing round 11). ``output-affinity-scorer`` (weight 2, igw's, since session s18)
groups requests by ``max_tokens`` on one kind of hardware while answers are at most a sixteenth of
the tokens and every candidate has requests waiting (its two gates): burst-235b's ITL and E2E tails
against least-request, at the cost of a higher TTFT tail there (docs/benchmark.md, routing rounds
16-18). None has a ``weights`` key;
all five are switched off with ``predictedLatency: 0``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Final

from igw.config.model import SchedulerSpec, Weights
from igw.config.weight_keys import SCORER_WEIGHTS
from igw.config.weight_keys import default_weights as table_defaults
from igw.scheduling.builtin import REGISTRY
from igw.scheduling.data_flow import Placed, order_by_data_flow
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.framework import Scorer
from igw.scheduling.picker_config import profile_from_picker_config
from igw.scheduling.plugins import (
    backlog_ttft_scorer,
    decode_balance_scorer,
    lora_affinity_scorer,
    output_affinity_scorer,
    prefill_admission_scorer,
    prefill_collision_scorer,
)
from igw.scheduling.plugins.lora_slot_filter import LoraSlotFilter
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.scheduler import Profile, Scheduler, WeightedScorer
from igw.scheduling.settings import RoutingSettings

WEIGHT_KEYS: Final[Mapping[str, str]] = {row.key: row.plugin_type for row in SCORER_WEIGHTS}
"""InferenceGatewayConfig ``weights`` key -> plugin type, from the one table
(:mod:`igw.config.weight_keys`)."""
PREFILL_COLLISION_KEY: Final = prefill_collision_scorer.TYPE
"""No ``weights`` key in the InferenceGatewayConfig shape: it rides on ``predictedLatency`` (below)."""
DEFAULT_PREFILL_COLLISION_WEIGHT: Final = 2.0
BACKLOG_TTFT_KEY: Final = backlog_ttft_scorer.TYPE
"""No ``weights`` key either: like ``prefill-collision-scorer`` it rides on ``predictedLatency``."""
DEFAULT_BACKLOG_TTFT_WEIGHT: Final = 4.0
PREFILL_ADMISSION_KEY: Final = prefill_admission_scorer.TYPE
"""No ``weights`` key either; it reads ``backlog-ttft-scorer``'s predictions."""
DEFAULT_PREFILL_ADMISSION_WEIGHT: Final = 16.0
"""Above the sum of the other default weights, so a candidate it rejects loses to every one it admits."""
DECODE_BALANCE_KEY: Final = decode_balance_scorer.TYPE
"""No ``weights`` key either; it reads ``backlog-ttft-scorer``'s one-kind verdict."""
DEFAULT_DECODE_BALANCE_WEIGHT: Final = 2.0
OUTPUT_AFFINITY_KEY: Final = output_affinity_scorer.TYPE
"""No ``weights`` key either; it reads ``backlog-ttft-scorer``'s one-kind verdict, like decode balance."""
DEFAULT_OUTPUT_AFFINITY_WEIGHT: Final = 2.0
"""The weight routing rounds 16-17 measured it at (docs/benchmark.md); set once, not searched."""
IGW_LATENCY_SCORERS: Final = (
    PREFILL_COLLISION_KEY,
    BACKLOG_TTFT_KEY,
    PREFILL_ADMISSION_KEY,
    DECODE_BALANCE_KEY,
    OUTPUT_AFFINITY_KEY,
)
"""igw's additions without a ``weights`` key, switched off together by ``predictedLatency: 0``."""


def default_weights(*, lora_adapters: bool) -> dict[str, float]:
    """The table's defaults plus igw's latency scorers (:data:`IGW_LATENCY_SCORERS`) at their default
    weights."""
    return {
        **table_defaults(lora_adapters=lora_adapters),
        PREFILL_COLLISION_KEY: DEFAULT_PREFILL_COLLISION_WEIGHT,
        BACKLOG_TTFT_KEY: DEFAULT_BACKLOG_TTFT_WEIGHT,
        PREFILL_ADMISSION_KEY: DEFAULT_PREFILL_ADMISSION_WEIGHT,
        DECODE_BALANCE_KEY: DEFAULT_DECODE_BALANCE_WEIGHT,
        OUTPUT_AFFINITY_KEY: DEFAULT_OUTPUT_AFFINITY_WEIGHT,
    }


DEFAULT_WEIGHTS: Final[Mapping[str, float]] = default_weights(lora_adapters=False)


def effective_weights(weights: Weights | None, *, lora_adapters: bool) -> dict[str, float]:
    """Defaults overlaid with the fields the user set (``None`` = not set; 0 disables a scorer).

    ``predictedLatency: 0`` also switches off igw's other additions (:data:`IGW_LATENCY_SCORERS`):
    like it they read this gateway's own measurements and state, and 0 is documented as "GIE's exact
    queue/kvCache/prefix behaviour" (the AWS ``weights`` shape has no key of its own for them).
    """
    merged = default_weights(lora_adapters=lora_adapters)
    if weights is not None:
        for row in SCORER_WEIGHTS:
            value = getattr(weights, row.field)
            if value is not None:
                merged[row.key] = float(value)
    if merged.get("predictedLatency", 0.0) <= 0:
        for key in IGW_LATENCY_SCORERS:
            merged.pop(key, None)
    return merged


def profile_from_weights(weights: Mapping[str, float]) -> Profile:
    """Scorers in the order of the weight table, then in data-flow order (prefix before no-hit-LRU,
    which reads its state), max-score picker.

    Keys are ``weights`` keys (``queue``, ``kvCache``...) or plugin type names (for scorers such as
    ``active-request-scorer`` that the CRD has no key for).
    """
    problems: list[str] = []
    by_type: dict[str, float] = {}
    for key, weight in weights.items():
        type_name = WEIGHT_KEYS.get(key, key)
        if type_name not in REGISTRY.types():
            problems.append(f"weights.{key}: unknown scorer (known: {', '.join(sorted(WEIGHT_KEYS))})")
            continue
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            problems.append(f"weights.{key}: must be a non-negative number, got {weight!r}")
            continue
        by_type[type_name] = float(weight)
    scorers: list[Placed[WeightedScorer]] = []
    order = [*WEIGHT_KEYS.values(), *sorted(set(by_type) - set(WEIGHT_KEYS.values()))]
    for type_name in order:
        weight = by_type.get(type_name, 0.0)
        if weight <= 0:
            continue
        path = f"weights.{type_name}"
        plugin = REGISTRY.create(type_name, path=path)
        if not isinstance(plugin, Scorer):
            problems.append(f"{path}: {type_name} is not a scorer")
            continue
        scorers.append(Placed(WeightedScorer(plugin, weight), plugin, path))
    if problems:
        raise SchedulerConfigError(problems)
    lora_aware = by_type.get(lora_affinity_scorer.TYPE, 0.0) > 0
    slot_filter = LoraSlotFilter()
    filters = [Placed(slot_filter, slot_filter, "weights.loraAffinity")] if lora_aware else []
    ordered_filters, ordered_scorers = order_by_data_flow(filters, scorers, None)
    return Profile(filters=tuple(ordered_filters), scorers=tuple(ordered_scorers), picker=MaxScorePicker())


def scheduler_from_weights(
    weights: Mapping[str, float],
    *,
    name: str = "scheduler",
    routing: RoutingSettings | None = None,
    rng: random.Random,
) -> Scheduler:
    return Scheduler(name=name, profile=profile_from_weights(weights), settings=routing, rng=rng)


def scheduler_from_picker_config(
    doc: Mapping[str, Any],
    *,
    name: str = "scheduler",
    routing: RoutingSettings | None = None,
    rng: random.Random,
) -> Scheduler:
    profile, settings = profile_from_picker_config(doc, settings=routing or RoutingSettings())
    return Scheduler(name=name, profile=profile, settings=settings, rng=rng)


def scheduler_from_spec(
    spec: SchedulerSpec,
    *,
    routing: RoutingSettings | None = None,
    rng: random.Random,
    picker_config: Mapping[str, Any] | None = None,
) -> Scheduler:
    """The scheduler for one ``spec.schedulers[]`` entry.

    With ``configMapRef`` the caller must pass the referenced EndpointPickerConfig as
    ``picker_config`` (the gateway reads it from the cluster or from ``--config-maps``).
    """
    if spec.config_map_ref is not None:
        if picker_config is None:
            ref = spec.config_map_ref
            raise SchedulerConfigError(
                [
                    f"scheduler {spec.name!r}: configMapRef {ref.name}/{ref.key} was not provided; "
                    "the EndpointPickerConfig it names is required"
                ]
            )
        return scheduler_from_picker_config(picker_config, name=spec.name, routing=routing, rng=rng)
    weights = effective_weights(spec.weights, lora_adapters=bool(spec.lora_adapters))
    return scheduler_from_weights(weights, name=spec.name, routing=routing, rng=rng)
