"""Structured access log: one JSON object per inference request on the ``igw.access`` logger.

Fields: ``ts`` (unix), ``request_id``, ``method``, ``path``, ``model``, ``base_model``, ``scheduler``,
``status``, ``endpoint`` (the one that served, after any retry), ``attempts``, ``scores`` (the
per-scorer weighted scores of the chosen endpoint and its fallbacks), ``decision_us``,
``reason`` (the scheduler's notes: stale endpoints excluded, imputed signals...), ``duration_ms``,
``ttft_ms``, ``stream``, ``prompt_tokens``, ``completion_tokens``, ``error``; for a request that
waited in a flow-control queue ``priority`` (its band), ``tenant`` (its fairness key;
``rateLimits.anonymousTenant`` for none, as the metrics say) and ``queue_ms``; for a canary-split
request ``requested_model`` (the name the client sent); for a request whose OpenTelemetry trace
was recorded ``trace_id`` (32 hex digits), to find its trace.

Where ``igw serve`` set the logger up (its batched handler only), the line is queued without a
:class:`logging.LogRecord` (:func:`igw.gateway.log_buffer.line_sink`); otherwise it is logged.

With that set-up the line is not even built on the request's path: the record itself is queued
(:meth:`~igw.gateway.log_buffer.BatchedLineHandler.emit_deferred`) and the writer thread builds its
line (:meth:`AccessRecord.render_line`: the fields, the rounded scores, ``orjson``) in a batch with
the others. Timed in the serving process, building the line between two requests' code cost several
times what the same code costs run back to back (docs/gateway.md, round 9). A record is not changed
once emitted (:class:`~igw.gateway.observer.RequestObserver` emits it last).

Redaction at the source: the writer redacts every line (a lower-cased copy of it and eight
substring scans) unless the line is proven clean. A line is clean when each of its strings - the
record's text fields, the score table's endpoint and scorer names, the request id - is one that
redaction leaves unchanged in its JSON form (:func:`~igw.redaction.needs_redaction`); the
numbers, literals and field names of a line contain no trigger, and no pattern can match across a
string's quotes, so such a line is exactly what redacting it would write. Distinct strings are few
(configured models, schedulers, endpoints, scorer names), so each is judged once and remembered
(:data:`_CLEAN`); a fresh request id (32 hexadecimal digits, which spell no trigger and are too few
for a key in hex) is judged by its alphabet and length. Any other line is redacted as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import orjson

from igw.gateway.log_buffer import DeferredLine, line_sink
from igw.redaction import needs_redaction

access_log = logging.getLogger("igw.access")


def _info_enabled() -> bool:
    """``access_log.isEnabledFor(logging.INFO)``, read from the answer that method keeps: the
    logger's own per-level memo (``Logger._cache``, which ``setLevel`` and ``logging.disable`` clear
    and the next ``isEnabledFor`` fills again), after the ``disabled`` flag it checks first; the method
    itself answers when the memo has no answer yet (or this Python's logger keeps none). Why: in the
    compiled build the method was the one interpreted call a request made to write its line."""
    if access_log.disabled:
        return False
    memo: dict[int, bool] | None = getattr(access_log, "_cache", None)
    if memo is not None:
        known = memo.get(logging.INFO)
        if known is not None:
            return known
    return access_log.isEnabledFor(logging.INFO)


_CLEAN: set[str | None] = {None}
"""Strings whose JSON form :func:`~igw.redaction.needs_redaction` found clean (and ``None``,
an absent field); bounded by :data:`CLEAN_CACHE_SIZE`."""
CLEAN_CACHE_SIZE: Final = 4096
"""Clean strings remembered at most (cleared when full: client-chosen names cannot grow it)."""
_HEX_DIGITS: Final = "0123456789abcdef"
_HEX_KEY_DIGITS: Final = 64
"""Hex ids this long or longer are scanned: a client's ``X-Request-Id`` (up to 128 characters) can
hold a small private key's DER in hex (an Ed25519 key is 96 digits), which redaction masks."""
US_DIGITS: Final = 1
"""Decimals the line gives ``decision_us``."""
MS_DIGITS: Final = 3
"""Decimals the line gives ``duration_ms``, ``ttft_ms`` and ``queue_ms``."""
"""A fresh request id's alphabet: no redaction trigger can be spelt with it, and it has no ``@``."""


def _clean(text: str | None) -> bool:
    """Whether ``text`` (``None``: absent) is written by redaction unchanged inside a JSON line;
    remembered when it is."""
    if text is None or text in _CLEAN:
        return True
    if needs_redaction(orjson.dumps(text).decode()):
        return False
    if len(_CLEAN) >= CLEAN_CACHE_SIZE:
        _CLEAN.clear()
        _CLEAN.add(None)
    _CLEAN.add(text)
    return True


_EXACT_BELOW: Final = 4503599627370496.0
"""2 ** 52: below it a float's fraction and whole part split exactly, and the whole part plus 0.5 or
plus one is a float too (the fast path's range; NaN and the infinities compare false and stay out)."""


def _rounded(value: object, digits: int) -> object:
    """``round(value, digits)``: the same result, for the digits the line uses (1, 3 and 4),
    without ``round``'s decimal string round trip where the answer is certain.

    ``round`` gives the float nearest to the exact value rounded half-even to ``digits`` decimals,
    through a correctly rounded decimal conversion and back (≈ 0.3 µs a call; ten calls a scored
    line, on the log writer's thread). Here ``scaled = abs(value) * 10 ** digits`` is the exact
    product ``P`` rounded once; it splits exactly into a whole part ``k`` and a fraction. Rounding is
    monotonic and ``k + 0.5`` is a float, so a fraction below 0.5 means ``P < k + 0.5`` and one above
    means ``P > k + 0.5`` (and ``P`` lies within half a unit of ``scaled``, far less than 0.5): the
    integer nearest ``P`` is ``k`` or ``k + 1`` for certain, with no tie. ``K / 10 ** digits`` - one
    correctly rounded division of two exact floats - is then the float nearest ``K * 10 ** -digits``,
    which is what ``round`` returns. The sign is put back (``-0.0`` where a negative value rounds to
    zero, as with ``round``). A fraction of exactly 0.5 (``P`` may be a tie or not), a scaled
    magnitude of 2 ** 52 or more, NaN, an infinity, other digits and anything not a ``float``
    (``round`` keeps an ``int`` or ``bool`` an integer) go to ``round``; zero is returned as it is
    (``round`` keeps ``0.0`` and ``-0.0``). The scales are written out, not read from a ``Final``
    tuple of floats: the compiled build took such a tuple for never set (``NameError`` at the first
    call). ``tests/gateway/test_access_log_lines.py`` compares the two on random, edge and tie
    values, in both builds (``tests/compiled``)."""
    if type(value) is float:
        if value == 0.0:
            return value
        if digits == 4:
            scale = 10000.0
        elif digits == 3:
            scale = 1000.0
        elif digits == 1:
            scale = 10.0
        else:
            return round(value, digits)
        scaled = abs(value) * scale
        if scaled < _EXACT_BELOW:
            fraction = scaled % 1.0
            if fraction != 0.5:
                whole = scaled - fraction
                if fraction > 0.5:
                    whole += 1.0
                rounded = whole / scale
                return rounded if value > 0.0 else -rounded
    return round(value, digits)  # type: ignore[call-overload]


RECORD_BYTES: Final = 640
"""A queued access record's memory without its score table (``tracemalloc`` of 10,000 records with
fresh ids, times and counts: 362 B with no score table, 595 B besides a table; rounded up)."""
SCORE_ROW_BYTES: Final = 560
"""Each scored endpoint's share (its row of seven scorer values: 521-525 B measured with one to 64
rows; rounded up)."""


@dataclass(slots=True, init=False)
class AccessRecord:
    """One request's access-log fields (``ts`` defaults to the time of construction). The
    ``__init__`` is written out, not generated, so that the mypyc build compiles it to native code
    (a generated one is ``exec``-made Python, :mod:`igw.compiled`); its parameters are the fields, in
    order, with their defaults (``tests/scheduling/test_record_init.py`` checks that). The timings
    (``decision_us``, ``duration_ms``, ``ttft_ms``, ``queue_ms``) are kept as measured and rounded
    in the line (:data:`US_DIGITS`, :data:`MS_DIGITS`, by :func:`_rounded`, as the scores): where
    ``igw serve`` defers the line, that rounding runs on the log writer's thread, in a batch, not on
    the request's path (``round`` with digits is one of the dearer builtins)."""

    request_id: str
    method: str
    path: str
    ts: float
    model: str | None
    base_model: str | None
    scheduler: str | None
    status: int
    endpoint: str | None
    attempts: int
    scores: Mapping[str, Mapping[str, float]] | None
    decision_us: float | None
    reason: str | None
    duration_ms: float | None
    ttft_ms: float | None
    stream: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    error: str | None
    priority: int | None
    tenant: str | None
    queue_ms: float | None
    requested_model: str | None
    trace_id: str | None

    def __init__(
        self,
        request_id: str,
        method: str,
        path: str,
        ts: float | None = None,
        model: str | None = None,
        base_model: str | None = None,
        scheduler: str | None = None,
        status: int = 0,
        endpoint: str | None = None,
        attempts: int = 0,
        scores: Mapping[str, Mapping[str, float]] | None = None,
        decision_us: float | None = None,
        reason: str | None = None,
        duration_ms: float | None = None,
        ttft_ms: float | None = None,
        stream: bool = False,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        error: str | None = None,
        priority: int | None = None,
        tenant: str | None = None,
        queue_ms: float | None = None,
        requested_model: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.method = method
        self.path = path
        self.ts = time.time() if ts is None else ts
        self.model = model
        self.base_model = base_model
        self.scheduler = scheduler
        self.status = status
        self.endpoint = endpoint
        self.attempts = attempts
        self.scores = scores
        self.decision_us = decision_us
        self.reason = reason
        self.duration_ms = duration_ms
        self.ttft_ms = ttft_ms
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.error = error
        self.priority = priority
        self.tenant = tenant
        self.queue_ms = queue_ms
        self.requested_model = requested_model
        self.trace_id = trace_id

    def emit(self) -> None:
        """Log this record's line (at INFO on ``igw.access``); the record must not change after."""
        if not _info_enabled():
            return
        sink = line_sink(access_log)
        if sink is None:
            access_log.info(orjson.dumps(self.line_fields()).decode())
        else:  # igw serve's set-up: the writer thread builds the line, without a LogRecord
            sink.emit_deferred(self)

    def queued_bytes(self) -> int:
        """An upper estimate of the memory this record holds while its line waits to be written
        (the log writer's queue is bounded by the sum): :data:`RECORD_BYTES` plus
        :data:`SCORE_ROW_BYTES` per scored endpoint."""
        scores = self.scores
        return RECORD_BYTES + SCORE_ROW_BYTES * len(scores) if scores else RECORD_BYTES

    def render_line(self) -> tuple[str, bool]:
        """The line (JSON of :meth:`line_fields`) and whether redacting it would leave it as it is
        (:meth:`redaction_free`); called on the log writer's thread."""
        return orjson.dumps(self.line_fields()).decode(), self.redaction_free()

    def redaction_free(self) -> bool:
        """Whether this record's line is exactly what redacting it would write: every string in it
        is clean (see the module's docstring). Each text field is listed here; a text field added
        to the class and not here fails ``tests/security/test_access_log_redaction.py``."""
        strings = (
            self.method,
            self.path,
            self.model,
            self.base_model,
            self.scheduler,
            self.endpoint,
            self.reason,
            self.error,
            self.tenant,
            self.requested_model,
            self.trace_id,
        )
        if not _CLEAN.issuperset(strings) and not all(map(_clean, strings)):
            return False
        scores = self.scores
        if scores:
            if not _CLEAN.issuperset(scores) and not all(map(_clean, scores)):
                return False
            for row in scores.values():
                if not _CLEAN.issuperset(row) and not all(map(_clean, row)):
                    return False
        return id_clean(self.request_id)

    def line_fields(self) -> dict[str, object]:
        """The line's fields: every field that is not ``None``, in declaration order, the scores
        rounded to 4 decimals and the timings as the class docstring says.

        Written out field by field rather than as a comprehension over the fields' names and values:
        in the serving process that comprehension cost ≈ 3 µs per request, the largest part of the
        line's ≈ 10 µs (docs/gateway.md, round 8). The seven fields that are never ``None`` are set
        unconditionally. Not ``dataclasses.asdict`` either: it deep-copies ``scores``.
        ``tests/gateway/test_access_log_lines.py`` compares this with the generic form for random
        records, so a field added to the class and not here fails it."""
        out: dict[str, object] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "ts": self.ts,
        }
        if self.model is not None:
            out["model"] = self.model
        if self.base_model is not None:
            out["base_model"] = self.base_model
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler
        out["status"] = self.status
        if self.endpoint is not None:
            out["endpoint"] = self.endpoint
        out["attempts"] = self.attempts
        scores = self.scores
        if scores is not None:
            out["scores"] = (
                {
                    key: {name: _rounded(value, 4) for name, value in row.items()}
                    for key, row in scores.items()
                }
                if scores
                else scores
            )
        if self.decision_us is not None:
            out["decision_us"] = _rounded(self.decision_us, US_DIGITS)
        if self.reason is not None:
            out["reason"] = self.reason
        if self.duration_ms is not None:
            out["duration_ms"] = _rounded(self.duration_ms, MS_DIGITS)
        if self.ttft_ms is not None:
            out["ttft_ms"] = _rounded(self.ttft_ms, MS_DIGITS)
        out["stream"] = self.stream
        if self.prompt_tokens is not None:
            out["prompt_tokens"] = self.prompt_tokens
        if self.completion_tokens is not None:
            out["completion_tokens"] = self.completion_tokens
        if self.error is not None:
            out["error"] = self.error
        if self.priority is not None:
            out["priority"] = self.priority
        if self.tenant is not None:
            out["tenant"] = self.tenant
        if self.queue_ms is not None:
            out["queue_ms"] = _rounded(self.queue_ms, MS_DIGITS)
        if self.requested_model is not None:
            out["requested_model"] = self.requested_model
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        return out


def _clean_once(text: str) -> bool:
    """:func:`_clean` without remembering ``text`` (a client's request id: one per request)."""
    return not needs_redaction(orjson.dumps(text).decode())


def id_clean(request_id: str) -> bool:
    """Whether a request id is written by redaction unchanged inside a JSON line: a fresh id by its
    alphabet and length, any other (a client's) scanned and not remembered."""
    fresh = len(request_id) < _HEX_KEY_DIGITS and not request_id.strip(_HEX_DIGITS)
    return fresh or _clean_once(request_id)


def strings_clean(strings: Iterable[str | None]) -> bool:
    """Whether every one of ``strings`` (``None``: absent) is written by redaction unchanged inside a
    JSON line (:func:`_clean`, remembered): what another record's ``redaction_free`` is made of (the
    global router's, :mod:`igw.global_router.access_log`), so both tiers' lines share one rule."""
    return all(map(_clean, strings))


def write_record(logger: logging.Logger, record: DeferredLine) -> None:
    """Write ``record``'s line at INFO on ``logger`` as :meth:`AccessRecord.emit` writes its own: queued
    unbuilt to the batched handler where the logger's set-up has one (:func:`line_sink`; built and
    redacted unless proven clean on its writer thread), else built here and logged (the handler's
    formatter redacts it). For a logger other than ``igw.access`` (the global router's)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    sink = line_sink(logger)
    if sink is None:
        logger.info(record.render_line()[0])
    else:
        sink.emit_deferred(record)
