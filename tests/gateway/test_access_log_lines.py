"""The access log's line path: with ``igw serve``'s set-up a line is queued without a ``LogRecord``,
and what is written is exactly what the record path writes (redaction included)."""

from __future__ import annotations

import dataclasses
import io
import logging
import random
from collections.abc import Callable, Iterator

import orjson
import pytest

from igw.gateway.access_log import AccessRecord, access_log
from igw.gateway.log_buffer import BatchedLineHandler, line_sink
from igw.gateway.redaction import MASK, RedactingFormatter

_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0ZW5hbnQtYSJ9.c2lnbmF0dXJl"


@pytest.fixture
def restored_access_logger() -> Iterator[logging.Logger]:
    """``igw.access`` as the test leaves it is put back as it was (the logger is process-wide)."""
    saved = (access_log.handlers[:], access_log.filters[:], access_log.propagate, access_log.level)
    try:
        yield access_log
    finally:
        access_log.handlers[:], access_log.filters[:], access_log.propagate, level = saved
        access_log.setLevel(level)


@pytest.fixture
def counted_records() -> Iterator[list[logging.LogRecord]]:
    """Every :class:`logging.LogRecord` made while the test runs (through logging's record factory)."""
    made: list[logging.LogRecord] = []
    original = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = original(*args, **kwargs)
        made.append(record)
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield made
    finally:
        logging.setLogRecordFactory(original)


def _serve_setup(logger: logging.Logger, stream: io.StringIO) -> BatchedLineHandler:
    """What ``igw serve`` does to ``igw.access``: no propagation, the batched handler, message-only
    redacting formatter."""
    handler = BatchedLineHandler(stream, interval_s=3600.0)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.filters[:] = []
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return handler


def _record() -> AccessRecord:
    record = AccessRecord(request_id="rid-1", method="POST", path="/v1/completions", ts=1700000000.25)
    record.status = 401
    record.scores = {"10.0.0.1:8000": {"queue": 0.123456789}}
    record.error = f"upstream echoed Authorization: Bearer {_TOKEN}"
    return record


def test_an_access_line_is_queued_without_a_log_record_and_redacted(
    restored_access_logger: logging.Logger, counted_records: list[logging.LogRecord]
) -> None:
    stream = io.StringIO()
    handler = _serve_setup(restored_access_logger, stream)
    assert line_sink(restored_access_logger) is handler
    _record().emit()
    handler.close()
    assert counted_records == []
    [line] = stream.getvalue().splitlines()
    assert _TOKEN not in line
    written = orjson.loads(line)
    assert written["error"] == f"upstream echoed Authorization: {MASK}"
    assert written["scores"] == {"10.0.0.1:8000": {"queue": 0.1235}}
    assert written["request_id"] == "rid-1"


def test_the_line_path_writes_what_the_record_path_writes(
    restored_access_logger: logging.Logger, counted_records: list[logging.LogRecord]
) -> None:
    lines = {}
    for path in ("line", "record"):
        stream = io.StringIO()
        handler = _serve_setup(restored_access_logger, stream)
        if path == "record":  # any filter sends the line through logging's records
            handler.addFilter(lambda _record: True)
            assert line_sink(restored_access_logger) is None
        _record().emit()
        handler.close()
        lines[path] = stream.getvalue()
    assert len(counted_records) == 1  # the record path's
    assert lines["line"] == lines["record"]
    assert lines["line"].count("\n") == 1


def _propagating(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    logger.propagate = True


def _second_handler(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    logger.addHandler(logging.NullHandler())


def _logger_filter(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    logger.addFilter(lambda _record: True)


def _handler_above_info(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    handler.setLevel(logging.WARNING)


def _timestamped_format(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    handler.setFormatter(RedactingFormatter("%(asctime)s %(message)s"))


def _plain_formatter(logger: logging.Logger, handler: BatchedLineHandler) -> None:
    handler.setFormatter(logging.Formatter("%(message)s"))  # not redacting: records only


@pytest.mark.parametrize(
    "change",
    [
        _propagating,
        _second_handler,
        _logger_filter,
        _handler_above_info,
        _timestamped_format,
        _plain_formatter,
    ],
)
def test_any_other_set_up_keeps_logging_records(
    restored_access_logger: logging.Logger,
    change: Callable[[logging.Logger, BatchedLineHandler], None],
) -> None:
    handler = _serve_setup(restored_access_logger, io.StringIO())
    try:
        change(restored_access_logger, handler)
        assert line_sink(restored_access_logger) is None
    finally:
        handler.close()


def test_a_record_path_line_still_reaches_other_handlers(
    restored_access_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    restored_access_logger.propagate = True
    restored_access_logger.handlers[:] = []
    with caplog.at_level(logging.INFO, logger="igw.access"):
        _record().emit()
    [message] = [r.getMessage() for r in caplog.records if r.name == "igw.access"]
    assert orjson.loads(message)["status"] == 401


def _generic_fields(record: AccessRecord) -> dict[str, object]:
    """The line's fields as the generic rule states them: every field that is not ``None``, in
    declaration order, the scores rounded to 4 decimals, ``decision_us`` to 1 and the other timings
    to 3."""
    out = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    out = {name: value for name, value in out.items() if value is not None}
    for name, digits in (("decision_us", 1), ("duration_ms", 3), ("ttft_ms", 3), ("queue_ms", 3)):
        if name in out:
            out[name] = round(out[name], digits)
    if record.scores:
        out["scores"] = {k: {n: round(v, 4) for n, v in row.items()} for k, row in record.scores.items()}
    return out


def test_the_written_out_fields_match_the_generic_rule_for_random_records() -> None:
    """``line_fields`` is written out field by field (the per-request cost); every field of the
    class, present or ``None``, must come out as the generic rule says, in the same order."""
    rng = random.Random(7)
    samples: dict[str, list[object]] = {
        "model": ["m", None],
        "base_model": ["b", None],
        "scheduler": ["s", None],
        "endpoint": ["10.0.0.1:8000", None],
        "scores": [None, {}, {"e1": {"queue": 0.123456789, "total": 1 / 3}, "e2": {"kv": 2.0}}],
        "decision_us": [12.5, 41.2649, None],
        "reason": ["1 stale endpoints excluded", None],
        "duration_ms": [3.25, 3.14159265, None],
        "ttft_ms": [1.5, 1.23456789, None],
        "prompt_tokens": [10, None],
        "completion_tokens": [4, None],
        "error": ["boom", None],
        "priority": [2, None],
        "tenant": ["t", None],
        "queue_ms": [0.5, 0.0004999, None],
        "requested_model": ["r", None],
        "trace_id": ["0" * 32, None],
    }
    names = {f.name for f in dataclasses.fields(AccessRecord)}
    always = {"request_id", "method", "path", "ts", "status", "attempts", "stream"}
    assert names == always | set(samples)  # a new field needs a sample here (and a line in line_fields)
    for _ in range(300):
        record = AccessRecord(request_id="r", method="POST", path="/v1/completions", ts=1.5)
        record.status = rng.choice([200, 429])
        record.attempts = rng.choice([1, 2])
        record.stream = rng.choice([True, False])
        for name, values in samples.items():
            setattr(record, name, rng.choice(values))
        assert list(record.line_fields().items()) == list(_generic_fields(record).items())


def test_the_lines_level_check_follows_every_change_of_the_loggers_level(
    restored_access_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``emit`` reads ``isEnabledFor``'s answer from the logger's memo: a level set, a
    ``logging.disable`` and the ``disabled`` flag each take effect on the next record, as
    ``isEnabledFor`` would have them, and once the memo has its answer the method is not called."""
    stream = io.StringIO()
    handler = _serve_setup(restored_access_logger, stream)
    _record().emit()  # written; fills the memo
    calls: list[int] = []
    original = logging.Logger.isEnabledFor

    def counted(self: logging.Logger, level: int) -> bool:
        calls.append(level)
        return original(self, level)

    monkeypatch.setattr(logging.Logger, "isEnabledFor", counted)
    _record().emit()  # written, answered from the memo
    assert calls == []
    access_log.setLevel(logging.WARNING)
    _record().emit()  # not written
    _record().emit()  # not written: the memo's answer is now "no"
    access_log.setLevel(logging.INFO)
    logging.disable(logging.INFO)
    try:
        _record().emit()  # not written
    finally:
        logging.disable(logging.NOTSET)
    _record().emit()  # written
    monkeypatch.setattr(access_log, "disabled", True)
    _record().emit()  # not written
    handler.close()
    assert len(stream.getvalue().splitlines()) == 3
