"""The tokens per stream event a pool's streams teach (:mod:`igw.gateway.event_tokens`): what a
stream cut before its usage chunk is counted."""

from __future__ import annotations

import pytest

from igw.gateway.event_tokens import MAX_TOKENS_PER_EVENT, MIN_EVENTS, WEIGHT, TokensPerEvent


def test_one_token_per_event_until_a_long_stream_reports_its_usage() -> None:
    per_event = TokensPerEvent()
    assert per_event.tokens(30) == 30
    per_event.learn(90, MIN_EVENTS - 1)  # too short to tell: its role, usage and [DONE] weigh
    assert per_event.tokens(30) == 30
    per_event.learn(96, 32)  # three tokens per event
    assert per_event.tokens(30) == 90


def test_later_streams_move_the_ratio_by_the_weight() -> None:
    per_event = TokensPerEvent()
    per_event.learn(96, 32)
    per_event.learn(32, 32)
    assert per_event.ratio == pytest.approx(3.0 + WEIGHT * (1.0 - 3.0))


def test_never_less_than_one_token_per_event_nor_more_than_the_bound() -> None:
    per_event = TokensPerEvent()
    per_event.learn(30, 33)  # one token per event and three that carry none
    assert per_event.tokens(10) == 10
    nonsense = TokensPerEvent()
    nonsense.learn(10**9, MIN_EVENTS)
    assert nonsense.ratio == MAX_TOKENS_PER_EVENT
    assert nonsense.tokens(2) == 2 * MAX_TOKENS_PER_EVENT
