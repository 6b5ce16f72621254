"""A throttle keyed by its records' first arguments (:class:`igw.gateway.log_throttle.RepeatThrottle`
with ``keyed_args``): each pod and reason has its own first line and minute, and the kinds it
remembers are bounded. The template-keyed behaviour is tested in
``tests/observability/test_trace_export.py``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from igw.gateway.log_throttle import RepeatThrottle
from tests.log_capture import captured_records
from tests.security.helpers import ManualClock

TEMPLATE = "upstream %s sent a compressed answer whose usage could not be read (%s): %s"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, list[logging.LogRecord]]]:
    with captured_records("tests.log_throttle.keyed") as found:
        yield found


def test_each_pod_and_reason_has_its_own_first_line_and_minute(
    captured: tuple[logging.Logger, list[logging.LogRecord]],
) -> None:
    """100 answers from each of two pods, two reasons from one: four first lines (one pod's flood
    hides no other pod's line, nor its own other reason), the detail argument (decoder messages
    with numbers in them) not a key; a minute later one line each with the count held."""
    logger, records = captured
    clock = ManualClock(1000.0)
    throttle = RepeatThrottle(clock=clock, keyed_args=2)
    logger.addFilter(throttle)
    kinds = [
        ("10.0.0.1:8000", "decode_error"),
        ("10.0.0.2:8000", "decode_error"),
        ("10.0.0.1:8000", "bomb_bound"),
    ]
    try:
        for i in range(100):
            for pod, reason in kinds:
                logger.warning(TEMPLATE, pod, reason, f"detail {i}")
        clock.now += 61
        for pod, reason in kinds:
            logger.warning(TEMPLATE, pod, reason, "later")
    finally:
        logger.removeFilter(throttle)
    lines = [r.getMessage() for r in records]
    assert lines[:3] == [TEMPLATE % (pod, reason, "detail 0") for pod, reason in kinds]
    assert lines[3:] == [
        TEMPLATE % (pod, reason, "later") + " [99 like this in the last 61 s not logged]"
        for pod, reason in kinds
    ]


def test_the_kinds_remembered_are_bounded(captured: tuple[logging.Logger, list[logging.LogRecord]]) -> None:
    """Pods come and go: past ``max_keys`` kinds the oldest is forgotten (its next line passes again)
    rather than the map growing with every pod address ever seen."""
    logger, records = captured
    throttle = RepeatThrottle(clock=ManualClock(1000.0), keyed_args=1, max_keys=2)
    logger.addFilter(throttle)
    try:
        for pod in ("a", "b", "a", "b", "c", "b", "a"):  # "c" pushes out "a", the oldest
            logger.warning("pod %s", pod)
    finally:
        logger.removeFilter(throttle)
    assert [r.getMessage() for r in records] == ["pod a", "pod b", "pod c", "pod a"]
    assert len(throttle._seen) == 2


class FakeTimers:
    """The throttle's timer, fired by the test: each armed ``(delay, fire, cancelled)``."""

    def __init__(self) -> None:
        self.armed: list[list[Any]] = []

    def __call__(self, delay_s: float, fire: Callable[[], None]) -> Any:
        entry: list[Any] = [delay_s, fire, False]
        self.armed.append(entry)
        return SimpleNamespace(cancel=lambda: entry.__setitem__(2, True))

    def live(self) -> list[float]:
        return [delay for delay, _, cancelled in self.armed if not cancelled]

    def fire_last(self) -> None:
        _, fire, cancelled = self.armed[-1]
        assert not cancelled
        fire()


def test_repeats_held_are_logged_when_their_window_ends_without_a_next_line(
    captured: tuple[logging.Logger, list[logging.LogRecord]],
) -> None:
    """A failure that stops within its window: the last repeat held is logged when the window ends,
    with the count of the others, by one timer for the throttle (armed for the earliest window that
    holds a repeat, not one per kind). Until session s45 the held count waited for a next line that,
    the failure over, never came."""
    logger, records = captured
    clock = ManualClock(1000.0)
    timers = FakeTimers()
    throttle = RepeatThrottle(clock=clock, keyed_args=1, timer=timers)
    logger.addFilter(throttle)
    try:
        logger.warning("pod %s failed (%s)", "b", "first")
        clock.now += 30  # b's window ends at 1060, a's at 1090
        for i in range(4):
            logger.warning("pod %s failed (%s)", "a", i)  # the first passes, three held
        assert timers.live() == [30.0 + 30.0]  # a's repeats held: armed for a's end at 1090
        logger.warning("pod %s failed (%s)", "b", "again")  # held: b's window ends first
        assert [r.getMessage() for r in records] == ["pod b failed (first)", "pod a failed (0)"]
        assert timers.live() == [30.0]  # one timer, for b's end at 1060
        clock.now += 30
        timers.fire_last()
        assert records[2].getMessage() == "pod b failed (again)"  # the one held, as it was
        assert timers.live() == [30.0, 30.0]  # armed again for a's end at 1090
        clock.now += 30
        timers.fire_last()
        assert records[3].getMessage() == "pod a failed (3) [2 more like this in the last 60 s not logged]"
        assert len(timers.live()) == 2  # nothing held: not armed again
        logger.warning("pod %s failed (%s)", "a", "after")  # within a's new window: held
        throttle.close()  # at shutdown, what is still held is logged
    finally:
        logger.removeFilter(throttle)
    assert [r.getMessage() for r in records][4:] == ["pod a failed (after)"]
    assert len(records) == 5


def test_the_default_timer_logs_the_held_repeat_on_its_own(
    captured: tuple[logging.Logger, list[logging.LogRecord]],
) -> None:
    """The default (the monotonic clock, a daemon timer thread): nothing but the window's end logs
    the held repeat."""
    logger, records = captured
    throttle = RepeatThrottle(interval_s=0.05)
    logger.addFilter(throttle)
    try:
        for i in range(3):
            logger.warning("collector down (%s)", i)
        deadline = time.monotonic() + 10.0
        while len(records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        lines = [r.getMessage() for r in records]  # before close(), which logs what is held
    finally:
        logger.removeFilter(throttle)
        throttle.close()
    assert lines[0] == "collector down (0)"
    assert lines[1].startswith("collector down (2) [1 more like this in the last ")


def test_a_forgotten_throttle_passes_a_kind_it_had_seen(
    captured: tuple[logging.Logger, list[logging.LogRecord]],
) -> None:
    """:meth:`~RepeatThrottle.forget` (the suite's conftest, at each test's end) drops the kinds seen,
    not only the repeats held: a pod's address and reason one test logged, on the port a later test's
    pod reuses, held that test's first line within the minute (``test_hostile_pod_framing``'s
    ``..._warned_once_per_pod`` saw its ``not_json_object`` line held in a full-suite run)."""
    logger, records = captured
    throttle = RepeatThrottle(clock=ManualClock(1000.0), keyed_args=2)
    logger.addFilter(throttle)
    try:
        logger.warning(TEMPLATE, "127.0.0.1:42443", "not_json_object", "an earlier test's")
        throttle.forget()
        logger.warning(TEMPLATE, "127.0.0.1:42443", "not_json_object", "the next test's")
        logger.warning(TEMPLATE, "127.0.0.1:42443", "not_json_object", "held")
    finally:
        logger.removeFilter(throttle)
    details = [r.args[2] for r in records if isinstance(r.args, tuple)]
    assert details == ["an earlier test's", "the next test's"]
