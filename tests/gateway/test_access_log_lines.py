"""The access log's line path: with ``igw serve``'s set-up a line is queued without a ``LogRecord``,
and what is written is exactly what the record path writes (redaction included)."""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import random
import struct
from collections.abc import Callable, Iterator

import orjson
import pytest

from igw.gateway import access_log as access_log_module
from igw.gateway.access_log import AccessRecord, _rounded, access_log
from igw.gateway.log_buffer import BatchedLineHandler, line_sink
from igw.gateway.redaction import RedactingFormatter
from igw.redaction import MASK

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
        "scores": [
            None,
            {},
            {"e1": {"queue": 0.123456789, "total": 1 / 3}, "e2": {"kv": 2.0}},
            {
                "e1": {
                    "a": -0.0,
                    "b": math.nan,
                    "c": math.inf,
                    "d": -math.inf,
                    "e": 0.00015,
                    "f": -2.5e-5,
                }
            },
        ],
        "decision_us": [12.5, 41.2649, 0.05, -0.0, math.nan, 1e300, None],
        "reason": ["1 stale endpoints excluded", None],
        "duration_ms": [3.25, 3.14159265, 0.0005, 0.0015, -1e-9, math.inf, None],
        "ttft_ms": [1.5, 1.23456789, None],
        "prompt_tokens": [10, 2**63 - 1, None],
        "completion_tokens": [4, None],
        "error": ["boom", 'modèle 模型 \u2028 "q"', None],
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
        fields = record.line_fields()
        assert list(fields) == list(_generic_fields(record))
        # bytes, not ==: -0.0 == 0.0, 3 == 3.0 and NaN != NaN would hide a wrong value
        assert orjson.dumps(fields) == orjson.dumps(_generic_fields(record))


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


def _round_cases() -> list[object]:
    """Values for ``_rounded``: random magnitudes and bit patterns, exact decimal ties and their
    neighbours (where a product's error decides the side), zeros, NaN, the infinities, huge and
    subnormal floats, ints and bools (``round`` keeps those integers)."""
    rng = random.Random(11)
    cases: list[object] = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324]
    cases += [-5e-324, 2.0**52, 2.0**53 + 2.0, 2.0**52 - 0.5, 3, -7, 2**70, True, False]
    for digits in range(5):
        for k in range(-400, 400):
            tie = (k + 0.5) / 10**digits
            cases += [tie, math.nextafter(tie, math.inf), math.nextafter(tie, -math.inf), k / 10**digits]
    for _ in range(20000):
        cases.append(rng.uniform(-1.0, 1.0))
        cases.append(rng.uniform(-1e9, 1e9))
        cases.append(rng.random() * 10.0 ** rng.randint(-320, 300))
        cases.append(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
    return cases


def test_rounded_gives_what_round_gives() -> None:
    """``_rounded`` is ``round`` for every digits the line uses (the same type, the same float:
    compared by ``repr`` so that ``-0.0``, NaN and ints count)."""
    for value in _round_cases():
        for digits in range(5):
            got, want = _rounded(value, digits), round(value, digits)  # type: ignore[call-overload]
            assert type(got) is type(want), (value, digits, got, want)
            assert repr(got) == repr(want), (value, digits)


def test_rounded_calls_round_only_on_a_scaled_half_or_outside_its_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of ``_rounded``: an ordinary score or timing does not go through ``round`` (pure
    Python only: the compiled module binds the builtin at build time)."""
    if not access_log_module.__file__ or not access_log_module.__file__.endswith(".py"):
        pytest.skip("the compiled module does not look the builtin up at call time")
    calls: list[object] = []

    def counted(value: float, digits: int) -> object:
        calls.append(value)
        return round(value, digits)

    monkeypatch.setattr(access_log_module, "round", counted, raising=False)
    for value in (2.0, 13.0, 0.123456789, 41.2649, 2303.389999724459, -7.2501e-3, 1e-300, 0.0, -0.0):
        _rounded(value, 4)
    assert calls == []
    for value in (0.00005, 0.00025, math.nan, math.inf, 1e300, 3):
        _rounded(value, 4)
    assert len(calls) == 6
