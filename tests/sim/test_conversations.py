"""Multi-turn sessions: prompts grow by the previous answer, and a pod caches the answer's blocks."""

from __future__ import annotations

import itertools
import random

import pytest

from igw.sim.conversations import multi_turn
from igw.sim.des import simulate
from igw.sim.request import SimRequest
from igw.sim.spec import PodSpec
from igw.sim.tokens import count_tokens, generated_text, output_token_text
from igw.sim.workloads import FixedLength, WorkloadError, poisson_arrivals, take
from tests.sim.support import RoundRobin


def _chat(sessions: int = 6, turns: int = 4) -> list[SimRequest]:
    rng = random.Random(3)
    return take(
        multi_turn(
            sessions=sessions,
            turns=turns,
            system_prompt_len=256,
            user_lengths=FixedLength(40),
            output_lengths=FixedLength(30),
            session_arrivals=poisson_arrivals(rate=2, rng=rng),
            think_time_s=2.0,
            model="m",
            rng=rng,
        ),
        sessions * turns,
    )


def test_generated_text_is_token_exact() -> None:
    assert len(generated_text(37)) == 37 * 4
    assert "".join(output_token_text(i) for i in range(37)) == generated_text(37)


def test_turns_resend_the_conversation_in_arrival_order() -> None:
    reqs = _chat()
    assert len(reqs) == 24
    assert [r.arrival for r in reqs] == sorted(r.arrival for r in reqs)
    by_session: dict[str | None, list[SimRequest]] = {}
    for r in reqs:
        by_session.setdefault(r.group, []).append(r)
        assert r.prompt_tokens == count_tokens(r.prompt_text)
    for turns in by_session.values():
        for prev, cur in itertools.pairwise(turns):
            assert cur.prompt_text.startswith(prev.prompt_text + generated_text(prev.output_tokens))
            assert cur.prompt_tokens == prev.prompt_tokens + 30 + 40


def test_a_pod_reuses_the_previous_answer_blocks() -> None:
    reqs = _chat(sessions=2, turns=3)
    res = simulate(pods=[PodSpec(preset="llama-3.1-8b/h100")], requests=reqs, policy=RoundRobin(), seed=0)
    by_id = {r.request_id: r for r in res.records}
    prev, cur = by_id["chat-0-1"], by_id["chat-0-2"]
    # everything of the previous turn (prompt + answer) in whole blocks is a hit
    assert cur.cached_tokens >= ((prev.prompt_tokens + prev.output_tokens) // 16 - 1) * 16
    assert cur.cached_tokens > prev.prompt_tokens


def test_bad_parameters_are_named() -> None:
    with pytest.raises(WorkloadError, match="turns"):
        next(
            multi_turn(
                sessions=1,
                turns=0,
                system_prompt_len=1,
                user_lengths=FixedLength(1),
                output_lengths=FixedLength(1),
                session_arrivals=iter([0.0]),
                think_time_s=1,
                model="m",
                rng=random.Random(0),
            )
        )
