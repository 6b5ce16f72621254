"""Helpers the simulator tests import: tiny routing policies, request builders, a quiet engine."""

from __future__ import annotations

import random
from collections.abc import Sequence

from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    RequestOutcome,
    RoutingDecision,
    RoutingRequest,
)
from igw.sim.engine import Engine, EngineRequest
from igw.sim.presets import get_preset
from igw.sim.tokens import block_hashes


class RoundRobin:
    """Test policy: cycles through endpoints; records what it saw for assertions."""

    name = "test-rr"

    def __init__(self) -> None:
        self.i = 0
        self.seen: list[tuple[float, tuple[EndpointView, ...]]] = []
        self.outcomes: list[RequestOutcome] = []

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        self.seen.append((now, tuple(endpoints)))
        e = endpoints[self.i % len(endpoints)]
        self.i += 1
        return RoutingDecision(kind=DecisionKind.PICKED, endpoint=e.key)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        self.outcomes.append(outcome)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        del keys


def run_alone(engine: Engine, req: EngineRequest, *, start: float = 0.0) -> float:
    """Add ``req`` and drive ``engine`` until idle; returns the virtual end time."""
    engine.add(req)
    return run_until_idle(engine, start=start)


def run_until_idle(engine: Engine, *, start: float = 0.0) -> float:
    """Drive ``engine`` step by step from virtual time ``start`` until it has no work left; returns
    the virtual end time."""
    t = start
    while engine.has_work():
        batch = engine.schedule(t)
        assert batch is not None
        t += batch.duration
        engine.complete(batch, t)
    return t


def make_request(
    rid: str, *, text: str, out: int, arrival: float = 0.0, adapter: str | None = None, block_size: int = 16
) -> EngineRequest:
    return EngineRequest(
        request_id=rid,
        prompt_tokens=len(text) // 4,
        max_output_tokens=out,
        block_hashes=block_hashes(text, block_size=block_size, salt=adapter or ""),
        adapter=adapter,
        arrival=arrival,
    )


def quiet_engine(preset: str = "llama-3.1-8b/h100", **kw: object) -> Engine:
    return Engine(preset=get_preset(preset), rng=random.Random(0), jitter_sigma=0.0, **kw)  # type: ignore[arg-type]
