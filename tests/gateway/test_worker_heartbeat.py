"""The heartbeat between a worker group's parent and its workers (``igw.gateway.worker_heartbeat``):
beats from a running loop, silence measured from the last beat, a start-up allowance before the
first, and a worker whose pipe ended (it exited) left to the exit status."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import pytest

from igw.gateway.worker_heartbeat import START_ALLOWANCE_S, Heartbeat, HeartbeatWatch


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_a_worker_is_stuck_only_after_the_limit_without_a_beat(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    watch = HeartbeatWatch([read_end], started_at=100.0, stuck_after_s=5.0)
    os.write(write_end, b".")
    assert watch.stuck(101.0) == []  # the beat read at 101
    assert watch.stuck(105.9) == []
    assert watch.stuck(106.5) == [(0, 5.5)]
    os.write(write_end, b"...")  # beats again (several queued count as one)
    assert watch.stuck(107.0) == []
    assert watch.stuck(111.5) == []  # 4.5 s since that beat: within the limit
    assert watch.stuck(112.5) == [(0, 5.5)]


def test_a_starting_worker_has_the_allowance_before_its_first_beat(pipe: tuple[int, int]) -> None:
    read_end, _ = pipe
    watch = HeartbeatWatch([read_end], started_at=0.0, stuck_after_s=5.0)
    assert watch.stuck(5.0 + START_ALLOWANCE_S - 0.1) == []
    [(index, silent)] = watch.stuck(5.0 + START_ALLOWANCE_S + 0.1)
    assert index == 0
    assert silent == pytest.approx(5.0 + START_ALLOWANCE_S + 0.1)


def test_a_worker_whose_pipe_ended_is_left_to_its_exit_status(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    watch = HeartbeatWatch([read_end], started_at=0.0, stuck_after_s=1.0)
    os.write(write_end, b".")
    os.close(write_end)  # the worker exited: its end of the pipe closed
    assert watch.stuck(0.5) == []
    assert watch.stuck(1_000.0) == []


def test_only_the_silent_worker_of_several_is_named() -> None:
    pipes = [os.pipe() for _ in range(3)]
    try:
        watch = HeartbeatWatch([r for r, _ in pipes], started_at=0.0, stuck_after_s=2.0)
        for _, w in pipes:
            os.write(w, b".")
        assert watch.stuck(1.0) == []
        os.write(pipes[0][1], b".")
        os.write(pipes[2][1], b".")
        assert watch.stuck(3.5) == [(1, 2.5)]
    finally:
        watch.close()
        for _, w in pipes:
            os.close(w)


async def test_the_worker_beats_from_its_loop_until_stopped(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.set_blocking(read_end, False)
    heartbeat = Heartbeat(write_end, asyncio.get_running_loop(), interval_s=0.05)
    heartbeat.start()
    assert os.read(read_end, 100) == b"."  # the first beat at once
    await asyncio.sleep(0.3)
    assert len(os.read(read_end, 100)) >= 3
    heartbeat.stop()
    await asyncio.sleep(0.15)
    with pytest.raises(BlockingIOError):
        os.read(read_end, 100)


async def test_a_full_or_closed_pipe_does_not_stop_the_worker(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    heartbeat = Heartbeat(write_end, asyncio.get_running_loop(), interval_s=0.01)
    os.set_blocking(write_end, False)
    while True:  # fill the pipe: the parent has not read for a while
        try:
            os.write(write_end, b"x" * 65536)
        except BlockingIOError:
            break
    heartbeat.start()
    await asyncio.sleep(0.05)
    os.close(read_end)  # the parent is gone
    await asyncio.sleep(0.05)
    heartbeat.stop()
