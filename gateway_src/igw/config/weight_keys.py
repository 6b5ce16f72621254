"""The one table of ``spec.schedulers[].weights`` keys.

Each row ties a key of the InferenceGatewayConfig ``weights`` object to the attribute of
:class:`igw.config.model.Weights` that holds it, the scheduling plugin type it weights, the
scheduler's default when the key is unset, and the description the schema carries. The config
builder and the scheduler factory are derived from this table; the schema's ``weights`` properties
and the ``Weights`` dataclass (kept explicit so type checkers see its attributes) are checked
against it by ``tests/config/test_weight_keys.py``, so adding a key is one row here plus the
schema property and the dataclass field that the test then demands.

This module lives in ``config`` (the lowest layer) and so names plugin types as strings; the test
also checks that each one is a registered scorer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class WeightKey:
    key: str
    """Key in the ``weights`` object (``kvCache``)."""
    field: str
    """Attribute of :class:`igw.config.model.Weights` (``kv_cache``)."""
    plugin_type: str
    """Scheduling plugin type the weight applies to (``kv-cache-utilization-scorer``)."""
    default: float | None
    """Weight the scheduler uses when the key is unset; ``None``: the scorer is off unless set."""
    description: str
    """The schema property's description."""
    default_with_lora_adapters: float | None = None
    """Default instead of ``default`` when the scheduler lists ``loraAdapters``."""


SCORER_WEIGHTS: Final[tuple[WeightKey, ...]] = (
    WeightKey("queue", "queue", "queue-scorer", 2, "Queue-depth scorer weight."),
    WeightKey("kvCache", "kv_cache", "kv-cache-utilization-scorer", 2, "KV-cache utilisation scorer weight."),
    WeightKey("prefix", "prefix", "prefix-cache-scorer", 3, "Prefix-cache affinity scorer weight."),
    WeightKey(
        "lru",
        "lru",
        "no-hit-lru-scorer",
        None,
        "LRU (recently used) scorer weight; only with scheduler llm-d.",
    ),
    WeightKey(
        "loraAffinity",
        "lora_affinity",
        "lora-affinity-scorer",
        None,
        "LoRA-adapter affinity scorer weight.",
        default_with_lora_adapters=1,
    ),
    WeightKey(
        "runningRequests",
        "running_requests",
        "running-requests-size-scorer",
        None,
        "Running-requests scorer weight.",
    ),
    WeightKey(
        "predictedLatency",
        "predicted_latency",
        "predicted-ttft-scorer",
        1,
        "Predicted-latency scorer weight.",
    ),
)
"""In scoring order: the factory adds scorers in this order (then in data-flow order)."""


def default_weights(*, lora_adapters: bool) -> dict[str, float]:
    """``weights`` key -> weight for every key the scheduler weights when the user sets nothing."""
    weights: dict[str, float] = {}
    for row in SCORER_WEIGHTS:
        value = (
            row.default_with_lora_adapters
            if lora_adapters and row.default_with_lora_adapters
            else row.default
        )
        if value is not None:
            weights[row.key] = float(value)
    return weights
