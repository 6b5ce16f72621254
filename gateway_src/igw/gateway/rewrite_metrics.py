"""Per-target metrics of canary rewrites, so a rollout can be judged target by target.

Every request a ``spec.extensions.modelRewrites`` rule matched is counted once, when its response
is complete, under the rule's label and the target the rule chose:

* ``igw_model_rewrite_requests_total{rule, target, code}``: the observed split (compare each
  target's share with its weight) and each target's error rate;
* ``igw_model_rewrite_request_duration_seconds{rule, target}``: each target's latency;
* ``igw_model_rewrite_fallbacks_total{rule, from, to}``: draws of a target whose pool had no usable
  endpoint, sent to another target of the rule (``to``, the target the two series above count).

Both label values come from the configuration only (a rule's ``name`` or ``rules[<index>]``, and a
target the rule lists), never from the request, so the number of series is bounded by the rules:
a fallback rule that matches any client-chosen model name still adds only its own targets.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram

from igw.gateway.model_rewrite import Split
from igw.gateway.telemetry import LATENCY_BUCKETS, status_label


class FinishHook(Protocol):
    """Called once with a request's final HTTP status, its duration in seconds and the model of the
    version asked last (``None``: the one drawn)."""

    def __call__(self, status: int, elapsed_s: float, answered: str | None = None) -> None: ...


class RewriteMetrics:
    """The per-rule, per-target series of one gateway's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "igw_model_rewrite_requests",
            "Requests a canary rewrite rule sent to each target, by the final HTTP status.",
            ["rule", "target", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            "igw_model_rewrite_request_duration_seconds",
            "Time from request received to response complete, per canary rule and target.",
            ["rule", "target"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

        self.fallbacks = Counter(
            "igw_model_rewrite_fallbacks",
            "Draws of a canary target whose pool had no usable endpoint, sent to another target instead.",
            ["rule", "from", "to"],
            registry=registry,
        )

    def on_finish(self, split: Split) -> FinishHook:
        """The hook that accounts one request of ``split`` when it completes (and its fallback now),
        under the target that answered: another of the rule's targets when a continuation's search
        asked that version's pod last (since session s49; until then the drawn target was counted,
        so a canary's errors and latency could land on the stable version's series). Only the
        rule's own targets label a series."""
        if split.fallback_from is not None:
            self.fallbacks.labels(split.rule, split.fallback_from, split.target).inc()

        def finished(status: int, elapsed_s: float, answered: str | None = None) -> None:
            target = answered if answered is not None and answered in split.targets else split.target
            self.requests.labels(split.rule, target, status_label(status)).inc()
            self.duration.labels(split.rule, target).observe(elapsed_s)

        return finished
