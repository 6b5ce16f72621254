from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from igw.config.durations import DURATION_PATTERN, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("0s", 0.0),
        ("1h1m1s1ms", 3661.001),
        ("99999h", 359996400.0),
    ],
)
def test_parses_gateway_api_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "10", "1.5s", "-1s", "1d", "10 s", "100000s", "1h1m1s1ms1s", "s", "1us"]
)
def test_rejects_anything_else_with_a_clear_message(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**8))
def test_format_round_trips(millis: int) -> None:
    text = format_duration(millis / 1000)
    assert re.fullmatch(DURATION_PATTERN, text)
    assert parse_duration(text) == pytest.approx(millis / 1000)


@given(st.from_regex(DURATION_PATTERN, fullmatch=True))
def test_everything_the_schema_pattern_accepts_parses(text: str) -> None:
    assert parse_duration(text) >= 0
