"""Text streams that stand in for a log handler's stdout/stderr in the batched-log-writer tests: one
that counts its writes and flushes, and one whose writes block like a pipe nobody reads."""

from __future__ import annotations

import io
import threading


class CountingStream(io.StringIO):
    """A text stream that counts its write and flush calls (the batching is what is tested)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.sizes: list[int] = []
        self.flushes = 0
        self.lock = threading.Lock()

    def write(self, s: str) -> int:
        with self.lock:
            self.writes += 1
            self.sizes.append(len(s.encode()))
            return super().write(s)

    def flush(self) -> None:
        self.flushes += 1

    def lines(self) -> list[str]:
        with self.lock:
            return self.getvalue().splitlines()


class StalledStream(CountingStream):
    """A stream whose writes block until :attr:`release` is set (a log consumer that stopped)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, s: str) -> int:
        self.entered.set()
        assert self.release.wait(300)
        return super().write(s)
