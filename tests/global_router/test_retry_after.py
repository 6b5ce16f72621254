"""The Retry-After the router relays after several clusters refused (:mod:`igw.global_router.retry_after`)."""

from __future__ import annotations

import email.utils

import pytest

from igw.global_router.retry_after import retry_after_seconds, soonest_retry_after

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        (email.utils.formatdate(NOW + 12, usegmt=True), 12.0),
        (email.utils.formatdate(NOW - 50, usegmt=True), 0.0),  # a date past: no wait
        ("-5", None),
        ("1.5", None),
        ("²", None),  # a Unicode digit is no delta-seconds
        ("soon", None),
        ("", None),
        ("Fri, 01 Jan 2099 00:00:00 -0000", None),  # a date without a zone
    ],
)
def test_a_retry_after_is_read_as_seconds_or_an_http_date(value: str, seconds: float | None) -> None:
    assert retry_after_seconds(value, now=NOW) == seconds


@pytest.mark.parametrize(
    ("values", "soonest"),
    [
        (["30", "2", "999999999"], 2),
        (["9" * 400], 3600),  # past a float's range: bounded, no OverflowError
        (["0"], 1),
        ([email.utils.formatdate(NOW + 8, usegmt=True), "60"], 8),  # 7.5 s from now: rounded up
        (["soon", "45"], 45),
        (["soon"], None),
        ([], None),
    ],
)
def test_the_soonest_readable_wait_is_taken_and_bounded(values: list[str], soonest: int | None) -> None:
    assert soonest_retry_after(values, now=NOW + 0.5) == soonest
