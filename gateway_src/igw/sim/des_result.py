"""What a DES run returns: per-request records, per-pod time series, and a summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from igw.errors import IgwToolingError
from igw.scheduling.types import EndpointKey
from igw.sim.spec import PodSpec


class SimulationError(IgwToolingError, ValueError):
    """The simulation cannot run as asked (bad input named in the message)."""


@dataclass(slots=True)
class RequestRecord:
    """Outcome of one workload request."""

    request_id: str
    arrival: float
    pod: EndpointKey | None
    status: int
    """200 served; 429 saturated; 503 no endpoints; 400 rejected by the engine; 404 unknown adapter;
    5xx injected errors or a dead pod."""
    prompt_tokens: int
    output_tokens: int = 0
    cached_tokens: int = 0
    ttft: float | None = None
    itl: float | None = None
    e2e: float | None = None
    queue_time: float | None = None
    preemptions: int = 0
    attempts: int = 1
    retried: int = 0
    """Refusals the gateway retried on the next-best endpoint within this attempt (its ``retry``)."""
    retry_after_s: float | None = None
    model: str = ""
    group: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def preempted(self) -> bool:
        return self.preemptions > 0

    @property
    def rejected(self) -> bool:
        return self.status in (429, 503)


@dataclass(slots=True)
class PodSeries:
    """Regularly sampled state of one pod (a step function: each value holds until the next sample)."""

    times: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)


@dataclass(slots=True)
class SimulationResult:
    records: list[RequestRecord]
    series: dict[EndpointKey, PodSeries]
    pods: dict[EndpointKey, PodSpec]
    policy_name: str
    seed: int
    scrape_interval_s: float
    end_time: float
    steps: int
    scrapes: int = 0
    """Scrapes the router took over the run (every pod every interval, or paced)."""

    def served(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    def summary(self) -> dict[str, Any]:
        """Headline numbers (TTFT/ITL/E2E percentiles over served requests, rejection counts).

        ``served_fraction`` stands beside the percentiles because they leave every failed or refused
        request out: a policy that sent a third of its requests to a hung pod showed a lower TTFT p99
        than one that lost 4 % (docs/simulator.md, ``igw sim run``)."""
        served = self.served()
        ttft = sorted(r.ttft for r in served if r.ttft is not None)
        itl = sorted(r.itl for r in served if r.itl is not None)
        e2e = sorted(r.e2e for r in served if r.e2e is not None)
        out_tokens = sum(r.output_tokens for r in served)
        return {
            "policy": self.policy_name,
            "requests": len(self.records),
            "served": len(served),
            "served_fraction": len(served) / len(self.records) if self.records else None,
            "rejected_429": sum(1 for r in self.records if r.status == 429),
            "rejected_503": sum(1 for r in self.records if r.status == 503),
            "errors": sum(1 for r in self.records if not r.ok and not r.rejected),
            "preempted": sum(1 for r in served if r.preempted),
            "ttft_p50": percentile(ttft, 50),
            "ttft_p95": percentile(ttft, 95),
            "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(itl, 50),
            "e2e_p50": percentile(e2e, 50),
            "output_tokens_per_s": out_tokens / self.end_time if self.end_time > 0 else 0.0,
            "cached_token_fraction": (
                sum(r.cached_tokens for r in served) / max(1, sum(r.prompt_tokens for r in served))
            ),
            "sim_seconds": self.end_time,
            "engine_steps": self.steps,
        }


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]
