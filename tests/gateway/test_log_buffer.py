"""The batched access-log handler: every line written, in order, redacted; none lost on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import aiohttp
import orjson
import pytest

from igw.gateway.access_log import AccessRecord
from igw.gateway.log_buffer import (
    ATOMIC_WRITE_BYTES,
    DEFAULT_CLOSE_TIMEOUT_S,
    DEFAULT_MAX_QUEUED_BYTES,
    LOG_RECORD_BYTES,
    BatchedLineHandler,
    share_streams,
    stream_lock_path,
    whole_line_pieces,
)
from igw.gateway.redaction import RedactingFormatter
from igw.gateway.workers import WorkerRole
from igw.perf.serve_process import serve_process
from igw.redaction import MASK
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.log_streams import CountingStream, StalledStream
from tests.gateway.support import config_doc, scheduler


def _logger(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger


def _stalled_handler(
    name: str,
    *,
    max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
) -> tuple[StalledStream, BatchedLineHandler, logging.Logger]:
    """A batched handler (0.01 s interval) on a :class:`StalledStream`, plain messages, and the logger
    ``name`` that writes only to it: the set-up the stalled-writer tests share."""
    stream = StalledStream()
    handler = BatchedLineHandler(
        stream, interval_s=0.01, max_queued_bytes=max_queued_bytes, close_timeout_s=close_timeout_s
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    return stream, handler, _logger(handler, name)


def _wait_for(predicate: object, *, within_s: float = 30.0) -> bool:
    assert callable(predicate)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_close_writes_every_queued_line_in_order_in_few_writes() -> None:
    stream = CountingStream()
    handler = BatchedLineHandler(stream, interval_s=60.0, batch=100_000)  # only close() writes
    handler.setFormatter(RedactingFormatter("%(message)s"))
    logger = _logger(handler, "igw.test.batched.order")
    try:
        for i in range(2000):
            logger.info("line %d", i)
        assert stream.lines() == []  # queued, not written, on the caller's thread
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert stream.lines() == [f"line {i}" for i in range(2000)]
    total = len(stream.getvalue().encode())
    # pieces of whole lines up to PIPE_BUF bytes (workers share a pipe), each filled to within a line
    assert max(stream.sizes) <= ATOMIC_WRITE_BYTES
    assert stream.writes <= total // (ATOMIC_WRITE_BYTES - len("line 1999\n")) + 1
    assert stream.flushes == stream.writes


def test_the_writer_thread_writes_after_the_interval_without_a_close() -> None:
    stream = CountingStream()
    handler = BatchedLineHandler(stream, interval_s=0.05)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = _logger(handler, "igw.test.batched.interval")
    try:
        logger.info("first")
        logger.info("second")
        assert _wait_for(lambda: stream.lines() == ["first", "second"])
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_a_full_batch_wakes_the_writer_before_its_interval() -> None:
    stream = CountingStream()
    handler = BatchedLineHandler(stream, interval_s=3600.0, batch=10)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = _logger(handler, "igw.test.batched.batch")
    try:
        for i in range(10):
            logger.info("n%d", i)
        assert _wait_for(lambda: len(stream.lines()) == 10)  # long before the hour is up
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_lines_pass_the_redacting_formatter_and_records_after_close_are_written() -> None:
    stream = CountingStream()
    handler = BatchedLineHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    handler.close()
    handler.handle(logging.makeLogRecord({"msg": "Authorization: Bearer abc.def", "levelno": 20}))
    assert stream.lines() == [f"Authorization: {MASK}"]


def test_a_failing_stream_is_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("disk full")

    handler = BatchedLineHandler(Broken())
    handler.handle(logging.makeLogRecord({"msg": "x", "levelno": 20}))
    handler.close()  # logging's handleError prints to stderr; nothing propagates
    assert "disk full" in capsys.readouterr().err


class _Deferred:
    """A line built by the writer (``emit_deferred``): ``clean`` as its builder proved it, or raising."""

    def __init__(self, text: str, *, clean: bool = False, fails: bool = False) -> None:
        self.text, self.clean, self.fails = text, clean, fails

    def render_line(self) -> tuple[str, bool]:
        if self.fails:
            raise ValueError("cannot build the line")
        return self.text, self.clean

    def queued_bytes(self) -> int:
        return 100


def test_deferred_lines_are_built_in_order_redacted_unless_proven_clean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = CountingStream()
    handler = BatchedLineHandler(stream, interval_s=3600.0)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    handler.emit_line("first")
    handler.emit_deferred(_Deferred("Authorization: Bearer abc.def"))
    handler.emit_deferred(_Deferred("broken", fails=True))
    handler.emit_deferred(_Deferred("proven clean", clean=True))
    handler.close()
    assert stream.lines() == ["first", f"Authorization: {MASK}", "proven clean"]
    err = capsys.readouterr().err
    assert "cannot build the line" in err  # reported as logging reports a failing record, not raised


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        BatchedLineHandler(io.StringIO(), interval_s=0)
    with pytest.raises(ValueError, match="max_queued_bytes"):
        BatchedLineHandler(io.StringIO(), max_queued_bytes=0)


def test_a_stalled_stream_bounds_the_queue_and_the_drops_are_reported() -> None:
    """A log consumer that stops reading must not grow the gateway's memory without bound: the
    record stuck in the write counts until it is written, four more fit, the rest are dropped."""
    stream, handler, logger = _stalled_handler(
        "igw.test.batched.stalled", max_queued_bytes=5 * LOG_RECORD_BYTES
    )
    try:
        logger.info("first")
        assert stream.entered.wait(30)  # the writer thread holds "first" and is stuck in write()
        for i in range(10):
            logger.info("n%d", i)
        assert handler.dropped == 6
        assert handler.queued_bytes() == 5 * LOG_RECORD_BYTES
    finally:
        stream.release.set()
        logger.removeHandler(handler)
        handler.close()
    lines = stream.lines()
    assert lines[:5] == ["first", "n0", "n1", "n2", "n3"]
    assert len(lines) == 6
    assert "6 log records dropped" in lines[5]
    assert handler.queued_bytes() == 0


def _access_record(i: int, rows: int) -> AccessRecord:
    """An access record as the observer leaves it: fresh id and numbers, ``rows`` scored endpoints."""
    keys = [f"10.0.{k // 250}.{k % 250}:8000" for k in range(rows)]
    scorers = ("queue", "kv-cache", "prefix", "predicted-ttft", "backlog-ttft", "collision", "total")
    return AccessRecord(
        request_id=f"{i:032x}",
        method="POST",
        path="/v1/completions",
        model="llama",
        scheduler="llama",
        status=200,
        endpoint=keys[0],
        attempts=1,
        scores={key: {name: (i * 0.37 + j) % 3.1 for j, name in enumerate(scorers)} for key in keys},
        decision_us=50.5 + i,
        duration_ms=3.3 + i,
        stream=True,
        prompt_tokens=i % 500,
        completion_tokens=i % 300,
    )


@pytest.mark.parametrize("rows", [1, 4, 16])
def test_a_stalled_stream_keeps_queued_access_records_within_the_byte_bound(rows: int) -> None:
    """Access records queued behind a stalled stream hold at most ``max_queued_bytes`` (traced), the
    rest are dropped and counted, and every kept one is written once the stream moves. With the
    former bound of 65,536 records all 4,000 (4.5-36 MB) would have stayed."""
    budget = 1024 * 1024
    stream = StalledStream()
    handler = BatchedLineHandler(stream, interval_s=0.01, max_queued_bytes=budget)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    try:
        handler.emit_line("first")
        assert stream.entered.wait(30)  # stuck writing "first": everything else waits
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(4000):
                handler.emit_deferred(_access_record(i, rows))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        kept = 4000 - handler.dropped
        assert handler.dropped > 0
        assert held <= budget, (held, kept)
        assert handler.queued_bytes() <= budget
        assert kept * _access_record(0, rows).queued_bytes() <= budget
    finally:
        stream.release.set()
        handler.close()
    lines = stream.lines()
    assert len(lines) == 1 + kept + 1
    assert [orjson.loads(line)["request_id"] for line in lines[1:-1]] == [f"{i:032x}" for i in range(kept)]
    assert f"{handler.dropped} log records dropped" in lines[-1]


_EXITS_ON_SIGTERM = """
import logging, os, signal, sys
from igw.gateway.access_log import AccessRecord
from igw.gateway.log_buffer import LOG_RECORD_BYTES, BatchedLineHandler
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as igw serve: SIGTERM ends it normally
logger = logging.getLogger("igw.access")
logger.setLevel(logging.INFO)
logger.addHandler(BatchedLineHandler(sys.stdout, interval_s=3600.0, batch=10**6))
for i in range(500):
    logger.info("line %d", i)
os.kill(os.getpid(), signal.SIGTERM)
signal.pause()
"""


def test_lines_still_queued_at_sigterm_are_written_at_exit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EXITS_ON_SIGTERM], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"line {i}" for i in range(500)]


async def test_igw_serve_writes_every_access_line_before_exiting_on_sigterm(tmp_path: Path) -> None:
    config, eps = tmp_path / "igwc.yaml", tmp_path / "endpoints.yaml"
    config.write_text(orjson.dumps(config_doc([scheduler("m", "m")])).decode())
    lines: list[str] = []
    async with running(FakeModelServer("pod")) as (pod,):
        eps.write_text(orjson.dumps({"schedulers": {"m": [pod.key]}}).decode())
        async with (
            serve_process(config, eps, "--drain-seconds", "0", on_line=lines.append) as gw,
            aiohttp.ClientSession() as http,
        ):
            for i in range(25):
                body = {"model": "m", "prompt": f"hi {i}", "max_tokens": 2}
                async with http.post(gw.url + "/v1/completions", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
            await asyncio.sleep(0)  # exit right away: the last lines are still queued in the gateway
    access = [orjson.loads(line) for line in lines if line.startswith('{"request_id"')]
    assert len(access) == 25
    assert all(record["path"] == "/v1/completions" and record["status"] == 200 for record in access)


def test_flush_and_close_give_up_on_a_stalled_stream_within_their_timeout() -> None:
    """``logging.shutdown`` (at exit, also after SIGTERM) flushes and closes every handler: with the
    writer thread blocked in a write that nobody reads, both waited for ever (a probe: ``igw serve``
    with unread stdout and stderr pipes was still running 30 s after SIGTERM). Now they wait
    ``close_timeout_s`` in all, count what was not written, and a record logged later does not block."""
    stream, handler, logger = _stalled_handler("igw.test.batched.close_stalled", close_timeout_s=0.3)
    try:
        logger.info("first")
        assert stream.entered.wait(30)  # the writer thread holds "first" and is stuck in write()
        for i in range(3):
            logger.info("n%d", i)
        started = time.monotonic()

        def shut_down() -> None:  # as logging.shutdown does at exit
            handler.flush()
            handler.close()

        shutdown = threading.Thread(target=shut_down, daemon=True)
        shutdown.start()
        shutdown.join(10)
        assert not shutdown.is_alive(), "flush/close still waiting for a stream nobody reads"
        assert time.monotonic() - started < 2.0
        assert handler.unwritten == 4  # the record in the blocked write and the three queued
        late = threading.Thread(target=logger.info, args=("late",), daemon=True)
        late.start()
        late.join(10)
        assert not late.is_alive()
        assert handler.unwritten == 5
    finally:
        stream.release.set()
        logger.removeHandler(handler)


def test_pieces_are_whole_lines_within_pipe_buf_bytes_and_a_longer_line_goes_alone() -> None:
    long = "x" * (ATOMIC_WRITE_BYTES + 10)
    wide = "é" * 1500  # 1,500 characters, 3,000 bytes in UTF-8: two do not fit in one piece
    lines = ["a" * 100] * 50 + [long, "b", wide, wide, "c"]
    pieces = list(whole_line_pieces(lines))
    assert "".join(piece for _, piece in pieces) == "\n".join(lines) + "\n"
    assert sum(count for count, _ in pieces) == len(lines)
    assert all(piece.endswith("\n") for _, piece in pieces)
    assert (1, long + "\n") in pieces
    assert all(len(piece.encode()) <= ATOMIC_WRITE_BYTES for _, piece in pieces if piece != long + "\n")
    assert [count for count, _ in pieces] == [40, 10, 1, 2, 2]


_SHARES_A_PIPE = """
import logging, sys
from igw.gateway.log_buffer import BatchedLineHandler
logger = logging.getLogger("igw.test.shared.pipe")
logger.propagate = False
logger.setLevel(logging.INFO)
logger.addHandler(BatchedLineHandler(sys.stdout, interval_s=0.01, batch=512, close_timeout_s=120))
pad = "p" * 700
for i in range(3000):
    logger.info('{"writer": %s, "n": %d, "pad": "%s"}', sys.argv[1], i, pad)
"""


def test_workers_sharing_a_slowly_read_pipe_never_split_each_others_lines() -> None:
    """The workers of ``igw serve --workers N`` share one stdout pipe; a reader slower than they
    write keeps it full, so a write larger than PIPE_BUF is taken in pieces and another process's
    bytes land inside a line (broken JSON access and EMF lines) unless each write is at most
    PIPE_BUF bytes of whole lines."""
    assert _lines_and_broken_from_three_writers(_SHARES_A_PIPE) == (9000, 0)


def _lines_and_broken_from_three_writers(script: str, *args: str) -> tuple[int, int]:
    """Run ``script`` (argv: its writer number, then ``args``) in three processes sharing one pipe as
    stdout, read by a log shipper slower than they write (the pipe stays full); the lines read and
    how many of them are not JSON."""
    read_end, write_end = os.pipe()
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(n), *args], stdout=write_end) for n in range(3)
    ]
    os.close(write_end)
    data = bytearray()
    try:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(2048):
                data += chunk
                time.sleep(0.0005)
    finally:
        for writer in writers:
            writer.wait(timeout=120)
    assert [writer.returncode for writer in writers] == [0, 0, 0]
    lines = data.decode().splitlines()
    broken = 0
    for line in lines:
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            broken += 1
    return len(lines), broken


_SHARES_A_PIPE_WITH_LONG_LINES = """
import logging, sys
from igw.gateway.log_buffer import BatchedLineHandler, share_streams
logger = logging.getLogger("igw.test.shared.pipe.long")
logger.propagate = False
logger.setLevel(logging.INFO)
handler = BatchedLineHandler(sys.stdout, interval_s=0.01, batch=512, close_timeout_s=120)
share_streams([handler], sys.argv[2])
logger.addHandler(handler)
pad, long = "p" * 700, "q" * 6000
for i in range(3000):
    logger.info('{"writer": %s, "n": %d, "pad": "%s"}', sys.argv[1], i, long if i % 10 == 0 else pad)
"""


def test_workers_sharing_a_pipe_and_a_lock_directory_never_split_lines_longer_than_pipe_buf(
    tmp_path: Path,
) -> None:
    """A line longer than PIPE_BUF is written by the kernel in pieces while the pipe is full, and
    another worker's write lands between them unless the workers write under one lock per stream
    (:func:`share_streams`): 1,302 of 9,000 lines were broken without it."""
    assert _lines_and_broken_from_three_writers(_SHARES_A_PIPE_WITH_LONG_LINES, str(tmp_path)) == (9000, 0)
    assert [path.name.startswith("log-") for path in tmp_path.iterdir()] == [True]  # one lock: one pipe


def test_streams_on_one_pipe_share_one_lock_and_a_stream_without_a_descriptor_takes_none(
    tmp_path: Path,
) -> None:
    read_end, write_end = os.pipe()
    other_read, other_write = os.pipe()
    streams = [os.fdopen(fd, "w") for fd in (write_end, os.dup(write_end), other_write)]
    try:
        handlers: list[logging.Handler] = [BatchedLineHandler(stream) for stream in streams]
        handlers.append(BatchedLineHandler(io.StringIO()))
        share_streams(handlers, str(tmp_path))
        locks = [handler.stream_lock for handler in handlers if isinstance(handler, BatchedLineHandler)]
        paths = [None if lock is None else lock.path for lock in locks]
        assert paths[0] == paths[1] == stream_lock_path(streams[0], str(tmp_path))
        assert paths[2] is not None
        assert paths[2] != paths[0]
        assert paths[3] is None
        assert locks[0] is not locks[1]  # each its own open file: flock excludes them from each other
        for handler in handlers:
            handler.close()
    finally:
        for stream in streams:
            stream.close()
        os.close(read_end)
        os.close(other_read)


def test_the_last_worker_leaving_removes_the_groups_log_locks_and_directory(tmp_path: Path) -> None:
    """A parent killed outright leaves the group's directory to its last worker; the lock files
    must not keep it there (``rmdir`` of a directory with a file left in it fails)."""
    group = tmp_path / "group"
    group.mkdir()
    orphaned = WorkerRole(index=0, count=1, directory=str(group), parent=os.getppid() + 1_000_000)
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        handler = BatchedLineHandler(stream)
        share_streams([handler], str(group))
        assert [path.name.startswith("log-") for path in group.iterdir()] == [True]
        orphaned.leave()
        handler.close()
    os.close(read_end)
    assert not group.exists()
