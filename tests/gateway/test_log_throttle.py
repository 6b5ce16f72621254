"""A throttle keyed by its records' first arguments (:class:`igw.gateway.log_throttle.RepeatThrottle`
with ``keyed_args``): each pod and reason has its own first line and minute, and the kinds it
remembers are bounded. The template-keyed behaviour is tested in
``tests/observability/test_trace_export.py``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

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
