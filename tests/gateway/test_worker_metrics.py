"""A worker group's whole-host ``/metrics``: each worker's page over its real unix socket.

The pages here are as large as a worker's at 1,000 endpoints (hundreds of KiB, more than one read of
a unix socket returns): every sample of every worker must be in the merged page, and a worker that
stops in the middle of its page is left out (logged), never merged as a shorter page.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway import worker_metrics
from igw.gateway.worker_metrics import WorkerMetrics

_ENDPOINTS = 12_000


def _page(worker: int) -> bytes:
    """A gauge per endpoint and a counter after them: the counter is what a cut page loses first."""
    lines = ["# HELP igw_endpoint_age_seconds Age.", "# TYPE igw_endpoint_age_seconds gauge"]
    lines += [
        f'igw_endpoint_age_seconds{{endpoint="10.0.{i // 250}.{i % 250}:8000"}} {worker}.5'
        for i in range(_ENDPOINTS)
    ]
    lines += [
        "# HELP igw_last_total Last.",
        "# TYPE igw_last_total counter",
        f"igw_last_total {worker + 1}.0",
    ]
    return ("\n".join(lines) + "\n").encode()


def _rendering(render: Callable[[], bytes]) -> Callable[[], Awaitable[bytes]]:
    """``render`` as the awaitable :class:`WorkerMetrics` takes (the gateway's renders off the loop)."""

    async def page() -> bytes:
        return render()

    return page


@contextlib.asynccontextmanager
async def _group(renders: list[Callable[[], bytes]]) -> AsyncIterator[list[WorkerMetrics]]:
    with tempfile.TemporaryDirectory(prefix="igw-wm-") as tmp:  # short: a unix socket path has 107 bytes
        sockets = [str(Path(tmp) / f"m{i}.sock") for i in range(len(renders))]
        workers = [
            WorkerMetrics(index=i, sockets=sockets, render=_rendering(r)) for i, r in enumerate(renders)
        ]
        for w in workers:
            await w.start()
        try:
            yield workers
        finally:
            for w in workers:
                await w.close()


def _samples(page: bytes) -> dict[tuple[str, str], int]:
    """(family, worker) -> samples of a merged page (``prometheus_client``'s own parser)."""
    counts: dict[tuple[str, str], int] = {}
    for family in text_string_to_metric_families(page.decode()):
        for sample in family.samples:
            key = (sample.name, sample.labels["worker"])
            counts[key] = counts.get(key, 0) + 1
    return counts


async def test_every_worker_s_whole_page_is_merged_however_large() -> None:
    async with _group([functools.partial(_page, i) for i in range(3)]) as workers:
        assert len(_page(0)) > 256 * 1024
        counts = _samples(await workers[1].page())
    for worker in ("0", "1", "2"):
        assert counts[("igw_endpoint_age_seconds", worker)] == _ENDPOINTS
        assert counts[("igw_last_total", worker)] == 1


async def test_a_worker_that_stops_mid_page_is_left_out_not_merged_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _group([lambda: _page(0), lambda: _page(1)]) as workers:
        # Worker 1's socket answers with the start of a page and closes, as a worker dying mid-write.
        await workers[1].close()
        path = workers[0]._sockets[1]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

        async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            page = _page(1)
            writer.write(len(page).to_bytes(8, "big") + page[: len(page) // 2])
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(cut, path=path)
        try:
            with caplog.at_level(logging.WARNING, logger="igw.gateway.worker_metrics"):
                counts = _samples(await workers[0].page())
        finally:
            server.close()
            await server.wait_closed()
    assert {worker for name, worker in counts if name != worker_metrics.UP_FAMILY} == {"0"}
    assert "worker 1's metrics could not be read" in caplog.text
    assert "closed" in caplog.text


async def test_the_merge_runs_off_the_event_loop_s_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge is bytes work over every worker's lines (about 100 ms for 16 workers at 1,000
    endpoints): in a thread, so the worker keeps serving requests meanwhile."""
    threads: list[int] = []
    merge = worker_metrics.merge_pages

    def recording(pages: Sequence[tuple[int, bytes]]) -> bytes:
        threads.append(threading.get_ident())
        return merge(pages)

    monkeypatch.setattr(worker_metrics, "merge_pages", recording)
    async with _group([functools.partial(_page, i) for i in range(2)]) as workers:
        counts = _samples(await workers[0].page())
    assert counts[("igw_last_total", "1")] == 1
    assert threads
    assert threads[0] != threading.get_ident()


async def test_a_worker_that_does_not_answer_is_shown_as_down_not_just_left_out() -> None:
    """A worker whose socket is not there yet (a group starting: worker 0 serves seconds before the
    others) is named in the page with ``igw_worker_metrics_up`` 0, the others with 1: before session
    s42 the page held worker 0's series alone and nothing told Prometheus that two workers were missing."""
    async with _group([lambda: _page(0)]) as (first,):
        sockets = [first._sockets[0], first._sockets[0] + ".1", first._sockets[0] + ".2"]
        alone = WorkerMetrics(index=0, sockets=sockets, render=_rendering(lambda: _page(0)))
        page = await alone.page()
    up = {
        s.labels["worker"]: s.value
        for f in text_string_to_metric_families(page.decode())
        for s in f.samples
        if s.name == worker_metrics.UP_FAMILY
    }
    assert up == {"0": 1.0, "1": 0.0, "2": 0.0}
