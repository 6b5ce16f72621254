"""The telemetry micro-benchmark measures what it names and leaves the process's logging as it was."""

from __future__ import annotations

import logging

from igw.gateway.access_log import access_log
from igw.perf.telemetry_micro import access_log_costs, metrics_costs


def test_both_variants_are_measured_and_logging_is_restored() -> None:
    handlers, srcfile, propagate = access_log.handlers[:], logging._srcfile, access_log.propagate
    before, now = access_log_costs(records=200, rounds=2)
    assert before.name != now.name
    assert before.thread_us > 0
    assert now.thread_us > 0
    assert access_log.handlers == handlers
    assert logging._srcfile == srcfile
    assert access_log.propagate == propagate


def test_both_metrics_variants_are_measured() -> None:
    before, now = metrics_costs(requests=300, rounds=2)
    assert before.name != now.name
    assert before.thread_us > 0
    assert now.thread_us > 0
