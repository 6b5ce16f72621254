"""Multi-turn chat sessions: each turn resends the whole conversation so far (the dominant prefix reuse).

Turn ``k`` of a session sends ``system + (user_1 + answer_1) + ... + user_k``, where every answer is the
text the simulated engine generates (:func:`igw.sim.tokens.generated_text`), so a pod that served the
previous turn holds the KV blocks of the previous prompt *and* answer - as vLLM caches generated-token
blocks too - and a router that keeps a session on one pod skips most of the prefill.

Open loop: turn ``k + 1`` is sent an exponential think time (mean ``think_time_s``) after turn ``k`` was
*sent*, not after its answer arrived; the DES cannot know the answer time in advance. Sessions start at
the times of ``session_arrivals``; requests come out sorted by arrival and are built lazily.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass

from igw.sim.request import SimRequest
from igw.sim.tokens import count_tokens, generated_text, synthetic_text
from igw.sim.workloads import LengthSampler, WorkloadError


@dataclass(slots=True)
class _Session:
    index: int
    history: str
    turn: int
    next_at: float


def multi_turn(
    *,
    sessions: int,
    turns: int,
    system_prompt_len: int,
    user_lengths: LengthSampler,
    output_lengths: LengthSampler,
    session_arrivals: Iterator[float],
    think_time_s: float,
    model: str,
    rng: random.Random,
    shared_system_prompt: bool = True,
    id_prefix: str = "chat",
) -> Iterator[SimRequest]:
    """``sessions`` x ``turns`` requests; one system prompt for all sessions unless told otherwise."""
    for name, v in (("sessions", sessions), ("turns", turns), ("think_time_s", think_time_s)):
        if not v > 0:
            raise WorkloadError(f"{name} must be > 0, got {v!r}")
    if system_prompt_len < 0:
        raise WorkloadError(f"system_prompt_len must be >= 0, got {system_prompt_len!r}")
    shared = synthetic_text(tokens=system_prompt_len, rng=rng) if shared_system_prompt else ""
    pending: list[tuple[float, int, _Session]] = []
    started = 0
    next_start = next(session_arrivals)
    while pending or started < sessions:
        if started < sessions and (not pending or next_start <= pending[0][0]):
            system = shared if shared_system_prompt else synthetic_text(tokens=system_prompt_len, rng=rng)
            session = _Session(index=started, history=system, turn=0, next_at=next_start)
            heapq.heappush(pending, (session.next_at, session.index, session))
            started += 1
            if started < sessions:
                next_start = next(session_arrivals)
            continue
        at, _, session = heapq.heappop(pending)
        prompt = session.history + synthetic_text(tokens=max(1, user_lengths.sample(rng)), rng=rng)
        out = max(1, output_lengths.sample(rng))
        yield SimRequest(
            request_id=f"{id_prefix}-{session.index}-{session.turn}",
            arrival=at,
            prompt_text=prompt,
            prompt_tokens=count_tokens(prompt),
            output_tokens=out,
            model=model,
            group=f"session-{session.index}",
        )
        session.turn += 1
        if session.turn < turns:
            session.history = prompt + generated_text(out)
            session.next_at = at + rng.expovariate(1.0 / think_time_s)
            heapq.heappush(pending, (session.next_at, session.index, session))
