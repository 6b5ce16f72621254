"""A logging handler that writes its lines in batches from a writer thread.

The access log has one record per request. Written by :class:`logging.StreamHandler`, each record
costs the request path a lock, the formatting (redaction included) and a ``write`` + ``flush``
system call pair. :class:`BatchedLineHandler` only queues the record on the request path; a
writer thread formats what has queued and writes it every ``interval_s`` (or as soon as ``batch``
records wait), so the request path pays an append. A batch goes out in pieces of whole lines of at
most ``PIPE_BUF`` bytes (:func:`whole_line_pieces`), one ``write`` and ``flush`` each, so the workers
of ``igw serve --workers N``, which share one stdout and one stderr pipe, cannot split each other's
lines. A line longer than ``PIPE_BUF`` cannot be written atomically at all: each worker's handlers
write under an advisory lock on a file named after the stream (:class:`StreamLock`,
:func:`share_streams`), one lock and unlock per batch, so no other worker writes while one writes.

No line is lost on a graceful exit: :meth:`close` (called by :func:`logging.shutdown`, which the
interpreter runs at exit, also after ``igw serve`` handles SIGTERM) stops the thread and writes
whatever is still queued. A process killed with SIGKILL loses at most one interval's lines. A stream
that takes no lines at exit (a stalled log shipper) holds the exit at most ``close_timeout_s``
(:data:`DEFAULT_CLOSE_TIMEOUT_S`): :meth:`~BatchedLineHandler.flush` and
:meth:`~BatchedLineHandler.close` then give up, leave the writer thread (a daemon) blocked in its
write, and count what was not written (:attr:`~BatchedLineHandler.unwritten`); until session s43 they
waited for the write, and a pod whose log shipper stopped never exited after SIGTERM.

Records wait up to an estimate of the memory they hold, ``max_queued_bytes`` (each item's
estimate: :meth:`DeferredLine.queued_bytes`, a string's length plus its header, a fixed
:data:`LOG_RECORD_BYTES` for a :class:`logging.LogRecord`); a record counts from when it is queued
until its line is written. Past the bound (the stream has stopped taking lines) new records are
dropped, counted, and reported in one line once the stream moves again, so a stalled log consumer
cannot grow the gateway's memory. The writer formats and writes at most ``batch`` records at a
time, so the lines it holds while a write blocks add at most one batch to the bound.

The estimate is kept without a lock (the request path takes none): bytes queued are added by the
thread that queues, bytes written by the one draining (drains are serialised), and the difference
is what waits. Two threads queuing at the same instant can lose one addition; that makes the
estimate lower than the truth by one record, never higher, so it can never drop records for good.

A caller that already has its whole line (the access log) can skip :class:`logging.LogRecord`
altogether: :func:`line_sink` returns the handler when a record logged at INFO on a logger would
reach only it and come out as the redacted message (no filters, a message-only
:class:`~igw.gateway.redaction.RedactingFormatter`), and :meth:`BatchedLineHandler.emit_line` queues
the line itself; the writer thread redacts it as the formatter would have. A caller whose line
takes work to build can queue the work instead (:meth:`BatchedLineHandler.emit_deferred`): the
writer thread builds the line, in a batch with the others, and redacts it unless its builder proved
it clean (:class:`DeferredLine`). Building the record
(``Logger.info`` -> ``makeRecord`` -> ``handle`` -> ``callHandlers``) costs more per request than
queuing and writing the line.

Why by hand: :class:`logging.handlers.QueueHandler` formats the record (``prepare``) on the
caller's thread - the cost this handler exists to move - and its listener writes (and flushes) one
record at a time.
"""

from __future__ import annotations

import collections
import fcntl
import io
import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Final, Protocol, TextIO

from mypy_extensions import mypyc_attr

from igw.gateway.redaction import RedactingFormatter

DEFAULT_INTERVAL_S: Final = 0.2
"""How long a line may wait before it is written."""
DEFAULT_BATCH: Final = 512
"""Queued records that wake the writer before its interval ends (bounds memory under bursts)."""
DEFAULT_MAX_QUEUED_BYTES: Final = 40 * 1024 * 1024
"""The estimated memory that queued records may hold at once (40 MiB). A stream that stops taking
lines (a stalled log collector, a full pipe) would otherwise make the queue - and the gateway's
memory - grow for as long as it stalls; past the bound new records are dropped and counted, and the
count is written as one line when the stream takes lines again. Until 2026-12-03 the bound was
65,536 records whatever their size: an access record holds more than its line until written
(≈ 1.1 kB with one score row, ≈ 8.9 kB with 16), so 67 MB or more instead of the ≈ 40 MB meant."""
LOG_RECORD_BYTES: Final = 1024
"""The estimate for a queued :class:`logging.LogRecord` (``tracemalloc``: ≈ 450 B for a one-line
message with two arguments; the rest leaves room for longer ones)."""
STR_HEADER_BYTES: Final = 49
"""``sys.getsizeof("")``: a queued line's estimate is this plus its length (an ASCII string's size)."""
DEFAULT_CLOSE_TIMEOUT_S: Final = 2.0
"""How long :meth:`BatchedLineHandler.flush` and :meth:`~BatchedLineHandler.close` wait for a stream
that takes no lines (a stalled log shipper, a full pipe) before giving up on what is still queued:
the exit of ``igw serve`` and ``igw global serve`` after SIGTERM waits at most this long per stream,
so it stays within the pod's grace period (the drain window plus a bound) instead of hanging until
someone reads."""
ATOMIC_WRITE_BYTES: Final[int] = getattr(select, "PIPE_BUF", 512)
"""The most bytes one write to a pipe carries whole, never mixed with another process's writes
(``PIPE_BUF``: 4,096 on Linux; POSIX guarantees 512): the batch is written in pieces of whole lines
no larger than this (:func:`whole_line_pieces`), so the workers of ``igw serve --workers N``, which
share one stdout and one stderr, cannot split each other's lines."""
YIELD_EVERY: Final = 32
"""The writer thread lets the event loop's thread run after formatting this many records."""


class DeferredLine(Protocol):
    """A line built on the writer thread (:meth:`BatchedLineHandler.emit_deferred`).

    Its builder must not change once queued: the writer thread reads it later, without a lock."""

    def render_line(self) -> tuple[str, bool]:
        """The message, and whether it is proven to be what redaction would write (then it is
        written as it is; otherwise the handler's formatter redacts it)."""
        ...

    def queued_bytes(self) -> int:
        """An estimate (an upper bound, cheap to compute) of the memory this object holds while it
        waits; the same every time it is asked."""
        ...


Queued = logging.LogRecord | str | DeferredLine
"""What waits in the queue: a record, a formatted message, or a message still to be built."""


@mypyc_attr(native_class=False)  # mypyc: it subclasses logging.Handler, so it stays a Python class
class BatchedLineHandler(logging.Handler):
    """Queue records on the caller's thread; format and write them in batches on a writer thread."""

    def __init__(
        self,
        stream: TextIO,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        batch: int = DEFAULT_BATCH,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
        label: str | None = None,
    ) -> None:
        super().__init__()
        if not interval_s > 0 or batch < 1 or max_queued_bytes < 1 or not close_timeout_s >= 0:
            raise ValueError(
                "interval_s must be > 0, batch >= 1, max_queued_bytes >= 1 and close_timeout_s >= 0 "
                f"(got {interval_s}, {batch}, {max_queued_bytes}, {close_timeout_s})"
            )
        self.close_timeout_s = close_timeout_s
        """How long :meth:`flush` and :meth:`close` wait for a stream that takes no lines."""
        self.label = label if label is not None else _stream_label(stream)
        """The stream's name in ``igw_log_lines_dropped_total{stream}`` (:mod:`igw.gateway.log_metrics`):
        ``stdout``, ``stderr``, or ``other``."""
        self.unwritten = 0
        """Records given up at :meth:`close` because the stream took no lines for ``close_timeout_s``
        (queued, or in the write that blocked); with the writer thread stuck, records logged after
        the close are counted here too instead of being written."""
        self._stuck = False
        """Set by :meth:`close` when the writer thread did not finish within ``close_timeout_s``."""
        self._flush_timed_out = False
        """Set by :meth:`flush` when the writer thread held the stream for all of ``close_timeout_s``:
        the stream has stalled, and a later flush or close does not wait for it again."""
        self._max_queued_bytes = max_queued_bytes
        self._bytes_in = 0
        """Estimated bytes of every record queued so far (added by the queuing thread)."""
        self._bytes_out = 0
        """Estimated bytes of every record written (or failed) so far (added by the draining thread)."""
        self.dropped = 0
        """Records dropped because the queue held ``max_queued_bytes`` (never reset: a running total)."""
        self._reported = 0
        self.failed = 0
        """Lines whose write raised (a closed stdout: ``BrokenPipeError``), lost (a running total)."""
        self._failing = False
        """Whether the last write raised: a stream that keeps failing (a log shipper gone, its pipe
        closed) is reported with a traceback once, not once per batch - until session s43 every batch
        wrote a ≈ 1.1 kB ``--- Logging error ---`` traceback on stderr, 5 a second under traffic."""
        self._writing = 0
        """Records in the batch being written (popped from the queue, not yet written)."""
        self.stream = stream
        self.stream_lock: StreamLock | None = None
        """Taken around each batch's writes when other processes write to the same stream
        (:func:`share_streams`); ``None``: this process is the stream's only writer."""
        self._interval_s = interval_s
        self._batch = batch
        # deque.append and popleft are atomic: the request path takes no lock.
        self._queue: collections.deque[Queued] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self._write_lock = threading.RLock()  # a record logged while writing must not deadlock
        self._thread = threading.Thread(target=self._run, name="igw-log-writer", daemon=True)
        self._thread.start()

    def handle(self, record: logging.LogRecord) -> bool:
        """Filter and queue; unlike :meth:`logging.Handler.handle`, without the handler's lock."""
        rv = self.filter(record)
        if rv:
            self.emit(record)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        self._enqueue(record, LOG_RECORD_BYTES)

    def takes_lines(self) -> bool:
        """Whether :meth:`emit_line` writes what :meth:`emit` would for an INFO record of that
        message: no filters, and a formatter that is the redacted message alone."""
        formatter = self.formatter
        return not self.filters and isinstance(formatter, RedactingFormatter) and formatter.message_only

    def emit_line(self, line: str) -> None:
        """Queue an already formatted message (redacted on the writer thread, as :meth:`emit`'s
        records are formatted there); only for a handler that :meth:`takes_lines`."""
        self._enqueue(line, STR_HEADER_BYTES + len(line))

    def emit_deferred(self, line: DeferredLine) -> None:
        """Queue a message that the writer thread builds (:meth:`DeferredLine.render_line`) and
        redacts unless proven clean, in a batch with the other queued lines: a line's building
        code runs hundreds of times in a row there instead of once between two requests' code on
        the event loop's thread; only for a handler that :meth:`takes_lines`."""
        self._enqueue(line, line.queued_bytes())

    def queued_bytes(self) -> int:
        """The estimated memory the records queued and not yet written hold."""
        return self._bytes_in - self._bytes_out

    def _enqueue(self, item: Queued, size: int) -> None:
        if self._stuck:  # closed, and the writer thread is blocked in a write: writing would block too
            self.unwritten += 1
            return
        if self._bytes_in - self._bytes_out + size > self._max_queued_bytes and not self._stopping:
            self.dropped += 1
            return
        self._bytes_in += size
        self._queue.append(item)
        if self._stopping:  # after close: write at once rather than drop (bounded, as flush)
            self.flush()
        elif len(self._queue) >= self._batch:
            self._wake.set()

    def flush(self) -> None:
        """Write everything queued so far, waiting at most ``close_timeout_s`` for a writer thread
        that is blocked in a write (a stream nobody reads) - :func:`logging.shutdown` flushes every
        handler at exit, and an unbounded wait there hung the process after SIGTERM."""
        if threading.current_thread() is self._thread or self._stuck:
            return
        if self._write_lock.acquire(timeout=0 if self._flush_timed_out else self.close_timeout_s):
            try:
                self._drain()
            finally:
                self._write_lock.release()
        else:  # blocked for the whole timeout: close (logging.shutdown's next call) waits no more
            self._flush_timed_out = True

    def close(self) -> None:
        """Stop the writer thread and write what is still queued, within ``close_timeout_s``: a
        writer thread still blocked in a write then is left behind (a daemon thread: it does not keep
        the process alive) and the records it did not write are counted in :attr:`unwritten`."""
        if self._stuck:
            return
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(0 if self._flush_timed_out else self.close_timeout_s)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._stuck = True
            self.unwritten += len(self._queue) + self._writing
        else:
            self._drain()
        super().close()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self._drain()
        self._drain()  # what close() left: written here, so that a stream that blocks blocks this thread

    def _drain(self) -> None:
        # One drain at a time (writer thread, flush, close), so batches are written in order; at most
        # one batch at a time, so the lines held while a write blocks stay within one batch.
        with self._write_lock:
            queue = self._queue
            while queue:
                records = [queue.popleft() for _ in range(min(len(queue), self._batch))]
                self._writing = len(records)
                try:
                    self._write(records)
                finally:
                    self._writing = 0
                    self._bytes_out += sum(map(_estimate, records))
            dropped = self.dropped - self._reported
            if dropped and not queue:  # after the records that were waiting when these were dropped
                self._reported += dropped
                self._write_line(
                    f"igw log writer: {dropped} log records dropped: the stream took no lines while "
                    f"{self._max_queued_bytes} bytes of them were waiting"
                )

    def _write(self, records: list[Queued]) -> None:
        lines = []
        on_writer = threading.current_thread() is self._thread
        for number, record in enumerate(records, start=1):
            try:
                lines.append(self._format_item(record))
            except Exception:  # logging's contract: report, never raise
                self.handleError(_as_record(record))
            if on_writer and number % YIELD_EVERY == 0:
                # Formatting holds the GIL; without a pause a large batch would stall the event loop
                # for up to the interpreter's switch interval (5 ms) at a time.
                time.sleep(0)
        if not lines:
            return
        written = 0
        lock = self.stream_lock
        try:
            if lock is not None:
                lock.acquire()
            try:
                for count, piece in whole_line_pieces(lines):
                    self.stream.write(piece)
                    self.stream.flush()  # one write(2) per piece: atomic on a pipe up to PIPE_BUF bytes
                    written += count
            finally:
                if lock is not None:
                    lock.release()
        except Exception:  # logging's contract: report, never raise
            self.failed += len(lines) - written
            if not self._failing:  # the first failure of a run of them, not one traceback per batch
                self.handleError(_as_record(records[0]))
            self._failing = True
        else:
            self._failing = False

    def _format_item(self, item: Queued) -> str:
        if isinstance(item, logging.LogRecord):
            return self.format(item)
        if isinstance(item, str):
            line, clean = item, False
        else:
            line, clean = item.render_line()
            if clean:  # its builder proved redaction would leave it as it is
                return line
        formatter = self.formatter
        assert isinstance(formatter, RedactingFormatter)  # emit_line/deferred only for takes_lines()
        return formatter.format_line(line)

    def _write_line(self, line: str) -> None:
        lock = self.stream_lock
        try:
            if lock is not None:
                lock.acquire()
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            finally:
                if lock is not None:
                    lock.release()
        except Exception:  # logging's contract: report, never raise
            self.handleError(logging.makeLogRecord({"msg": line}))


def whole_line_pieces(lines: list[str]) -> Iterator[tuple[int, str]]:
    """``lines`` as consecutive pieces of whole lines, each newline-terminated and at most
    :data:`ATOMIC_WRITE_BYTES` bytes in UTF-8 (a line longer than that alone in its piece), with the
    number of lines in each.

    Why: the workers of ``igw serve --workers N`` share one stdout and one stderr pipe, and a write
    to a pipe is atomic only up to ``PIPE_BUF`` bytes. Until session s43 each batch was one write of
    up to hundreds of kB; while the pipe was full (a log shipper reading slower than the workers
    write) the kernel took it in pieces and another worker's bytes landed inside a line - 94 of
    1,483 access lines were broken JSON with 2 workers and a slow reader, and CloudWatch drops an
    EMF line it cannot parse."""
    piece: list[str] = []
    size = 0
    for line in lines:
        length = (len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))) + 1
        if piece and size + length > ATOMIC_WRITE_BYTES:
            yield len(piece), "\n".join(piece) + "\n"
            piece, size = [], 0
        piece.append(line)
        size += length
    if piece:
        yield len(piece), "\n".join(piece) + "\n"


class StreamLock:
    """An advisory lock (``flock``) on a file in a directory the writers of one stream share, named
    after the stream's device and inode, so every process - and every handler - writing to that pipe
    (stdout and stderr may be one) takes the same lock.

    Why: a write to a pipe is atomic only up to ``PIPE_BUF`` bytes. A longer line (a long model name
    or path, a traceback, a debug line with many headers) is written by the kernel in pieces while
    the pipe is full, and another worker's write - of any size - can land between them: 1,302 of
    9,000 JSON lines were broken with three writers, a slow reader and one 6 kB line in ten. Every
    batch is written under the lock, not only those with a long line, because the write that lands
    inside a long line is usually a short one. The cost is two ``flock`` calls per batch (a batch
    is up to :data:`DEFAULT_BATCH` records). Truncating lines to ``PIPE_BUF`` was not chosen: it
    loses the end of tracebacks and breaks any JSON line it cuts.

    Each instance opens the file itself: ``flock`` locks belong to the open file, so two handlers
    (or two processes that inherited one descriptor) holding one open file would not exclude each
    other. A process that dies holding the lock releases it with its descriptors; the descriptor is
    kept open for the life of the process (records logged after a handler's close are written too).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


LOCK_FILE_PREFIX: Final = "log-"
"""The lock files' names: ``log-<device>-<inode>.lock`` in the directory passed to :func:`share_streams`."""


def stream_lock_path(stream: TextIO, directory: str) -> str | None:
    """The lock file for ``stream`` in ``directory`` (named by the device and inode behind its
    descriptor), or ``None`` for a stream with no descriptor (nothing else can write to it)."""
    try:
        status = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return os.path.join(directory, f"{LOCK_FILE_PREFIX}{status.st_dev}-{status.st_ino}.lock")


def share_streams(handlers: list[logging.Handler], directory: str) -> None:
    """Make each :class:`BatchedLineHandler` in ``handlers`` write under its stream's
    :class:`StreamLock` in ``directory``, which the other processes writing to the same streams (the
    workers of ``igw serve --workers N``, their group's private directory) pass too."""
    for handler in handlers:
        if isinstance(handler, BatchedLineHandler) and handler.stream_lock is None:
            path = stream_lock_path(handler.stream, directory)
            if path is not None:
                handler.stream_lock = StreamLock(path)


_STREAM_LABELS: Final = {"<stdout>": "stdout", "<stderr>": "stderr"}
"""The ``name`` of :data:`sys.stdout` and :data:`sys.stderr`, and their label."""


def _stream_label(stream: TextIO) -> str:
    """``stdout`` or ``stderr`` for the process's own streams (by their ``name``), else ``other``."""
    name = getattr(stream, "name", None)
    return _STREAM_LABELS.get(name, "other") if isinstance(name, str) else "other"


def _estimate(item: Queued) -> int:
    """What :meth:`BatchedLineHandler._enqueue` counted for ``item``."""
    if isinstance(item, str):
        return STR_HEADER_BYTES + len(item)
    if isinstance(item, logging.LogRecord):
        return LOG_RECORD_BYTES
    return item.queued_bytes()


def _as_record(item: Queued) -> logging.LogRecord:
    """``item`` as a record, for :meth:`logging.Handler.handleError`'s report."""
    if isinstance(item, logging.LogRecord):
        return item
    return logging.makeLogRecord(
        {"msg": item if isinstance(item, str) else f"(an unbuilt {type(item).__name__})"}
    )


def close_reporting(handler: logging.Handler) -> None:
    """Close ``handler``; when it is a :class:`BatchedLineHandler` that gave up on a stream that took
    no lines (:meth:`BatchedLineHandler.close`), say on the ``igw.log_writer`` logger (stderr, itself
    written within its own bound) how many lines were not written, so an exit that lost access or
    EMF lines says so instead of losing them silently."""
    handler.close()
    if isinstance(handler, BatchedLineHandler) and handler.unwritten:
        logging.getLogger("igw.log_writer").warning(
            "%d log lines on %s not written at exit: the stream took none for %.1f s",
            handler.unwritten,
            handler.label,
            handler.close_timeout_s,
        )


def line_sink(logger: logging.Logger) -> BatchedLineHandler | None:
    """The handler that takes ``logger``'s INFO lines without a :class:`logging.LogRecord`: when a
    record logged there would reach that one handler only (no propagation, no logger filters, one
    handler at INFO or below that :meth:`~BatchedLineHandler.takes_lines`), else ``None``. The
    caller checks ``logger.isEnabledFor(logging.INFO)`` first, as ``Logger.info`` does."""
    handlers = logger.handlers
    if logger.propagate or logger.filters or logger.disabled or len(handlers) != 1:
        return None
    handler = handlers[0]
    if not isinstance(handler, BatchedLineHandler) or handler.level > logging.INFO:
        return None
    return handler if handler.takes_lines() else None
