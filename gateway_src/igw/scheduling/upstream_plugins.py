"""The plugin types the reference endpoint pickers register, with the release each list was read from.

An EndpointPickerConfig written for llm-d's scheduler or for GIE's endpoint picker may name a plugin
that exists there and not in igw (``pd-profile-handler``, ``prefill-header-handler``,
``precise-prefix-cache-scorer``, ...). It was refused as an "unknown plugin type", with a did-you-mean
pointing at an unrelated igw plugin (``pd-profile-handler`` -> ``single-profile-handler``): a user
could only conclude that they had misspelled it. :func:`upstream_source` tells such a name apart
from a typo, naming where it comes from; :mod:`igw.scheduling.registry` words the refusal.

The lists are the ``Register`` calls of each release (the names its factories are registered under),
copied whole, so they can be checked against the source line by line; the types igw implements too
are in them and never reach this module (the registry knows them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

LLM_D: Final = "llm-d-inference-scheduler v0.8.0"
"""pkg/epp/framework/plugins/register.go, ``RegisterAllPlugins`` (tag v0.8.0, 2026-04-25)."""
GIE: Final = "gateway-api-inference-extension v1.5.0"
"""cmd/epp/runner/runner.go, ``registerInTreePlugins`` (tag v1.5.0, 2026-04-18; the last release
with the endpoint picker in that repository: v1.6.0 holds only the API and the conformance tests)."""

_LLM_D_TYPES: Final = (
    "by-label",
    "by-label-selector",
    "encode-filter",
    "decode-filter",
    "prefill-filter",
    "disagg-headers-handler",
    "prefill-header-handler",
    "data-parallel-profile-handler",
    "disagg-profile-handler",
    "pd-profile-handler",
    "precise-prefix-cache-scorer",
    "load-aware-scorer",
    "session-affinity-scorer",
    "active-request-scorer",
    "no-hit-lru-scorer",
    "models-data-source",
    "model-server-protocol-models",
    "prefix-based-pd-decider",
    "always-disagg-pd-decider",
    "tokenizer",
    "always-disagg-multimodal-decider",
    "context-length-aware",
)
_GIE_TYPES: Final = (
    "prefix-cache-scorer",
    "max-score-picker",
    "random-picker",
    "weighted-random-picker",
    "single-profile-handler",
    "kv-cache-utilization-scorer",
    "queue-scorer",
    "running-requests-size-scorer",
    "lora-affinity-scorer",
    "token-load-scorer",
    "global-strict-fairness-policy",
    "round-robin-fairness-policy",
    "fcfs-ordering-policy",
    "edf-ordering-policy",
    "slo-deadline-ordering-policy",
    "static-usage-limit-policy",
    "approx-prefix-cache-producer",
    "predicted-latency-scorer",
    "predicted-latency-producer",
    "latency-slo-admitter",
    "prefix-cache-affinity-filter",
    "slo-headroom-tier-filter",
    "latency-scorer",
    "inflight-load-producer",
    "header-based-testing-filter",
    "destination-endpoint-served-verifier",
    "metrics-data-source",
    "core-metrics-extractor",
    "k8s-notification-source",
    "endpoint-notification-source",
    "request-attribute-reporter",
    "openai-parser",
    "vllmgrpc-parser",
    "passthrough-parser",
    "concurrency-detector",
    "utilization-detector",
)

UPSTREAM_PLUGIN_TYPES: Final[Mapping[str, str]] = {
    **{name: GIE for name in _GIE_TYPES},
    **{name: LLM_D for name in _LLM_D_TYPES},
}
"""Plugin type -> the release that registers it (no type is in both lists)."""


def upstream_source(type_name: str) -> str | None:
    """The release of llm-d or GIE that registers ``type_name`` (exact, as their registries match),
    or ``None`` for a name neither knows."""
    return UPSTREAM_PLUGIN_TYPES.get(type_name)
