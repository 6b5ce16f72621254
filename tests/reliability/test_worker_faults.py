"""In-flight streams of ``igw serve --workers 2`` when one of its processes is killed outright.

A killed worker's own streams are cut bare (nothing is left to answer them); every other stream must
get the drain and the grace and then the shutdown's ending - an SSE error event ``shutting_down`` and
``[DONE]`` - as after a SIGTERM, and no process may outlive the group.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import orjson

from igw.sim.live import run_fleet
from tests.gateway.support import data_events
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, igw_serve, process_gone

DRAIN_S = 0.5
GRACE_S = 1.5
ARGS = ("--workers", "2", "--drain-seconds", str(DRAIN_S), "--stream-grace-seconds", str(GRACE_S))
BOUND_S = 20.0
"""Past drain + grace: the final cut (up to 5 s) and a loaded machine's slowness."""


class Stream:
    """One long stream on a connection of its own, and the worker that serves that connection."""

    def __init__(self, http: aiohttp.ClientSession, worker: dict[str, int]) -> None:
        self.http = http
        self.worker = worker
        self.ended_at = 0.0

    async def read(self, url: str) -> list[bytes] | BaseException:
        """The stream's data events, or the error that cut it."""
        body = {"model": MODEL, "prompt": "tell a story", "max_tokens": 5000, "stream": True}
        try:
            async with self.http.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                return data_events(await resp.read())
        except aiohttp.ClientError as exc:
            return exc
        finally:
            self.ended_at = time.monotonic()
            await self.http.close()


async def _streams_on_both_workers(
    url: str,
) -> tuple[list[Stream], list[asyncio.Task[list[bytes] | BaseException]]]:
    """Long streams, each on a new connection (the kernel hashes it to a worker, which ``/readyz``
    on that connection names), until each worker serves at least two; 40 connections at most."""
    streams: list[Stream] = []
    while min(sum(s.worker["index"] == i for s in streams) for i in (0, 1)) < 2:
        assert len(streams) < 40, [s.worker for s in streams]
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        async with http.get(url + "/readyz") as resp:
            worker: dict[str, int] = (await resp.json())["worker"]
        streams.append(Stream(http, worker))
    tasks = [asyncio.create_task(s.read(url)) for s in streams]
    await asyncio.sleep(0.5)  # every stream is relaying tokens
    return streams, tasks


def _ended_for_shutdown(events: list[bytes] | BaseException) -> None:
    assert isinstance(events, list), f"cut bare: {events!r}"
    assert events[-1] == b"data: [DONE]"
    error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == "shutting_down"
    assert len(events) > 3  # tokens were relayed before the end


async def test_a_killed_worker_s_survivor_ends_its_streams_for_shutdown_and_the_group_exits_3(
    tmp_path: Path,
) -> None:
    """``kill -9`` of worker 1: the parent stops worker 0 with SIGTERM (drain, grace, then the error
    event and ``[DONE]``) and exits 3; the port is closed afterwards. Broken by a parent that kills
    the survivor instead (its streams cut bare) or exits without waiting for it (a worker left
    serving the port), or by a cut that drops the error event."""
    async with (
        run_fleet(fleet_spec("llama-3.1-8b/h100", time_scale=1.0), admin=False) as fleet,
        igw_serve(tmp_path, gateway_doc(), [fleet.pods[0].key], *ARGS) as gw,
    ):
        streams, tasks = await _streams_on_both_workers(gw.url)
        victim = next(s.worker["pid"] for s in streams if s.worker["index"] == 1)
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        code = await asyncio.wait_for(gw.proc.wait(), timeout=DRAIN_S + GRACE_S + BOUND_S)
        elapsed = time.monotonic() - t0
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
        assert code == 3, gw.output[-3000:]
        for stream, events in zip(streams, results, strict=True):
            if stream.worker["index"] == 0:
                _ended_for_shutdown(events)
                assert stream.ended_at - t0 >= DRAIN_S + GRACE_S * 0.9  # it got its grace
        survivor = next(s.worker["pid"] for s in streams if s.worker["index"] == 0)
        assert process_gone(survivor)
        assert elapsed < DRAIN_S + GRACE_S + BOUND_S
        try:
            async with aiohttp.ClientSession() as fresh:
                await fresh.get(gw.url + "/healthz")
            raise AssertionError("the port still answers after the group exited")
        except aiohttp.ClientConnectorError:
            pass
        assert f"(pid {victim}) ended (killed by SIGKILL): stopping all workers" in gw.output
        assert "Traceback" not in gw.output


async def test_the_parent_killed_outright_its_workers_end_every_stream_for_shutdown(tmp_path: Path) -> None:
    """``kill -9`` of the parent: the kernel sends each worker SIGTERM (``PR_SET_PDEATHSIG``), and
    both drain, end their streams with the error event and ``[DONE]`` after the grace, and exit
    within drain + grace + a bound. Broken by a parent-death signal that kills (SIGKILL: every stream
    cut bare) or none at all (the workers serve on, and this test times out on them)."""
    async with (
        run_fleet(fleet_spec("llama-3.1-8b/h100", time_scale=1.0), admin=False) as fleet,
        igw_serve(tmp_path, gateway_doc(), [fleet.pods[0].key], *ARGS) as gw,
    ):
        streams, tasks = await _streams_on_both_workers(gw.url)
        pids = sorted({s.worker["pid"] for s in streams})
        t0 = time.monotonic()
        gw.proc.kill()
        await gw.proc.wait()
        gone_at: dict[int, float] = {}
        try:
            while len(gone_at) < len(pids) and time.monotonic() - t0 < DRAIN_S + GRACE_S + BOUND_S:
                gone_at.update(
                    {p: time.monotonic() - t0 for p in pids if p not in gone_at and process_gone(p)}
                )
                await asyncio.sleep(0.05)
        finally:
            for pid in pids:  # a failing test leaves no worker behind
                if not process_gone(pid):
                    os.kill(pid, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
        assert sorted(gone_at) == pids, f"workers still running: {set(pids) - set(gone_at)}"
        for stream, events in zip(streams, results, strict=True):
            _ended_for_shutdown(events)
            assert stream.ended_at - t0 >= DRAIN_S + GRACE_S * 0.9  # it got its grace
        assert "Traceback" not in gw.output
