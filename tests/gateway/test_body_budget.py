"""The process's budget of request-body bytes held at once (``serverLimits.maxBodyBytesHeld``,
:mod:`igw.gateway.body_budget`): a real loopback gateway with a 2 MiB budget and slow 1 MiB uploads
refuses the bodies past it (503 ``server_busy``, ``Retry-After``, counted, the connection closed
with the body unread), and every way a request ends gives its bytes back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from igw.gateway.body_budget import (
    BodyBudget,
    HeapTrim,
    budget_meaning,
)
from igw.gateway.inference import STATE_KEY
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.limits_config import server_limits
from igw.gateway.serving import ServerLimits
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, connection, read_response, runner_gateway, scheduler, wait_for

MIB = 2**20
DOC = config_doc([scheduler("llama", "m")])


def upload(size: int = MIB) -> tuple[bytes, bytes]:
    """A completion request whose body is ``size`` bytes: (head, body)."""
    body = orjson.dumps({"model": "m", "prompt": "x" * (size - 50), "max_tokens": 1})
    body += b" " * (size - len(body))
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    return head.encode(), body


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path, key: str, *, budget: int, doc: dict[str, Any] = DOC
) -> AsyncIterator[tuple[int, web.Application]]:
    limits = ServerLimits(body_timeout_s=1.0)
    async with runner_gateway(tmp_path, key, doc=doc, limits=limits, budget=budget) as (port, app, _):
        yield port, app


@pytest.fixture(params=["lean", "aiohttp"])
def server_side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(SWITCH_ENV, request.param)
    return str(request.param)


async def test_bodies_past_the_budget_are_refused_unread_and_the_budget_returns_to_zero(
    tmp_path: Path, server_side: str
) -> None:
    head, body = upload()
    async with running(FakeModelServer("a")) as (a,), gateway(tmp_path, a.key, budget=2 * MIB) as (port, app):
        budget = app[STATE_KEY].body_budget
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(connection(port)) for _ in range(8)]
            for i, (_, writer) in enumerate(clients):  # each sends its head and 64 KiB, then stalls
                writer.write(head + body[: 64 * 1024])
                await writer.drain()
                if i < 2:
                    want = (i + 1) * MIB
                    await wait_for(lambda: budget.held == want, what=f"upload {i} held")  # noqa: B023
            refusals = []
            for reader, _ in clients[2:]:
                status, headers, answer = await asyncio.wait_for(read_response(reader), 5)
                refusals.append((status, headers.get("retry-after"), orjson.loads(answer)["error"]["code"]))
                assert headers.get("connection") == "close"
                # closed at once, the body left unread: on aiohttp's side too, which before session
                # s48 read and discarded it for its 10 s lingering time first (the client uploading)
                assert await asyncio.wait_for(reader.read(), 3) == b""
            assert [(status, code) for status, _, code in refusals] == [(503, "server_busy")] * 6
            assert all(retry is not None and int(retry) >= 1 for _, retry, _ in refusals)  # spread
            assert budget.held == 2 * MIB
            assert budget.refused == 6
            metrics = app[STATE_KEY].metrics.registry.get_sample_value
            assert metrics("igw_body_budget_refusals_total") == 6
            assert metrics("igw_body_bytes_held") == 2 * MIB
            # one upload completes (forwarded, 200), the other client leaves mid-upload
            (r0, w0), (_, w1) = clients[0], clients[1]
            w0.write(body[64 * 1024 :])
            status, _, _ = await asyncio.wait_for(read_response(r0), 5)
            assert status == 200
            assert a.received[-1].body == body
            w1.close()
            await wait_for(lambda: budget.held == 0, what="budget back to 0")
        # room again: the next upload is served
        async with connection(port) as (reader, writer):
            writer.write(head + body)
            status, _, _ = await asyncio.wait_for(read_response(reader), 5)
            assert status == 200
        assert budget.held == 0


async def test_a_refused_upload_is_cut_at_once_while_the_client_is_still_sending(
    tmp_path: Path, server_side: str
) -> None:
    """The refused client keeps uploading (16 KiB every 50 ms of a 4 MiB body): it reads the 503 and
    then the end of the connection within a second or two, not after aiohttp's 10 s of lingering."""
    head, body = upload()
    big_head, big_body = upload(4 * MIB)
    async with running(FakeModelServer("a")) as (a,), gateway(tmp_path, a.key, budget=2 * MIB) as (port, app):
        budget = app[STATE_KEY].body_budget
        async with connection(port) as (_r0, w0), connection(port) as (r1, w1):
            w0.write(head + body[:1024])  # 1 MiB held, stalled
            await wait_for(lambda: budget.held == MIB, what="first body held")

            async def keep_sending() -> None:
                w1.write(big_head)
                for at in range(0, len(big_body), 16 * 1024):
                    w1.write(big_body[at : at + 16 * 1024])
                    await w1.drain()
                    await asyncio.sleep(0.05)

            sender = asyncio.create_task(keep_sending())
            try:
                started = asyncio.get_running_loop().time()
                status, _, answer = await asyncio.wait_for(read_response(r1), 5)
                assert (status, orjson.loads(answer)["error"]["code"]) == (503, "server_busy")
                assert await asyncio.wait_for(r1.read(), 5) == b""
                assert asyncio.get_running_loop().time() - started < 3.0
                assert not sender.done()  # the client was still uploading when the connection ended
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await sender
            w0.close()
        await wait_for(lambda: budget.held == 0, what="budget back to 0")


async def test_bodies_entering_flow_controls_queue_leave_the_budget(tmp_path: Path, server_side: str) -> None:
    """A saturated pod: three 1 MiB bodies, held while they arrive, are given back to the budget as
    they enter flow control's queue, which counts them against its own ``maxBytes`` from there (the
    budget bounds bodies being read, not bodies queued: counted in both, a full queue would refuse
    uploads it had long finished reading)."""
    head, body = upload()
    doc = config_doc([scheduler("llama", "m")])
    doc["spec"]["extensions"]["flowControl"] = {"pollInterval": "20ms"}
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(tmp_path, a.key, budget=64 * MIB, doc=doc) as (port, app),
    ):
        state = app[STATE_KEY]
        budget = state.body_budget
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(connection(port)) for _ in range(3)]
            for _, writer in clients:
                writer.write(head + body[: 64 * 1024])
            await wait_for(lambda: budget.held == 3 * MIB, what="three bodies held while arriving")
            assert state.flow.queued_bytes("llama") == 0
            for _, writer in clients:
                writer.write(body[64 * 1024 :])
            await wait_for(lambda: state.flow.depths("llama") == {0: 3}, what="three requests queued")
            assert state.flow.queued_bytes("llama") >= 3 * MIB
            assert budget.held == 0
            assert a.received == []
        await wait_for(lambda: state.flow.queued_bytes("llama") == 0, what="the queue emptied")
        assert budget.held == 0


@pytest.mark.parametrize("ending", ["success", "bad-json", "timeout", "disconnect", "too-large"])
async def test_every_ending_gives_the_body_bytes_back(tmp_path: Path, server_side: str, ending: str) -> None:
    head, body = upload(256 * 1024)
    if ending == "bad-json":
        body = b"{" + body[1:-1] + b"!"
    async with running(FakeModelServer("a")) as (a,), gateway(tmp_path, a.key, budget=2 * MIB) as (port, app):
        budget = app[STATE_KEY].body_budget
        async with connection(port) as (reader, writer):
            if ending == "too-large":  # refused before reading: nothing taken
                writer.write(head.replace(b"262144", str(300 * MIB).encode()))
            else:
                writer.write(head + body[:1024])
                await wait_for(lambda: budget.held == 256 * 1024, what="body held")
            if ending in ("success", "bad-json"):
                writer.write(body[1024:])
            if ending == "disconnect":
                writer.close()
            else:
                status, _, _ = await asyncio.wait_for(read_response(reader), 5)
                expected = {"success": 200, "bad-json": 400, "timeout": 408, "too-large": 413}[ending]
                assert status == expected
            await wait_for(lambda: budget.held == 0, what="budget back to 0")
        assert budget.refused == 0


async def test_a_chunked_body_counts_as_it_arrives_and_is_refused_past_the_budget(tmp_path: Path) -> None:
    head, body = upload()
    async with running(FakeModelServer("a")) as (a,), gateway(tmp_path, a.key, budget=MIB) as (port, app):
        budget = app[STATE_KEY].body_budget
        async with connection(port) as (_r0, w0), connection(port) as (r1, w1):
            w0.write(head + body[:1000])  # holds the whole budget
            await wait_for(lambda: budget.held == MIB, what="first body held")
            chunked = head.replace(f"Content-Length: {MIB}".encode(), b"Transfer-Encoding: chunked")
            w1.write(chunked + b"%x\r\n" % 4096 + body[:4096] + b"\r\n")
            status, headers, answer = await asyncio.wait_for(read_response(r1), 5)
            assert (status, orjson.loads(answer)["error"]["code"]) == (503, "server_busy")
            assert headers.get("retry-after")
            w0.close()
        await wait_for(lambda: budget.held == 0, what="budget back to 0")


def test_a_lone_body_always_fits_and_a_full_budget_refuses() -> None:
    budget = BodyBudget(limit=10)
    big = budget.take(50)  # nothing else held: taken whatever its size
    assert big is not None
    assert budget.held == 50
    assert budget.take(1) is None
    assert budget.refused == 1
    big.release()
    big.release()  # a second release gives nothing back
    assert budget.held == 0


def test_the_start_log_states_the_budget_in_requests() -> None:
    assert budget_meaning(256 * MIB) == (
        "about 2621 concurrent requests of 100 KiB, about 512 MiB resident when full"
    )


def test_the_budget_is_set_by_the_config_and_refused_negative_naming_the_field() -> None:
    options = {"max_body_bytes_held": None}
    assert server_limits({"maxBodyBytesHeld": 4 * MIB}, options).max_body_bytes_held == 4 * MIB
    assert server_limits({}, options).max_body_bytes_held == 0  # derived at start
    with pytest.raises(ValueError, match="--max-body-bytes-held: must not be negative"):
        server_limits({}, {"max_body_bytes_held": -1})


async def test_the_heap_is_trimmed_once_per_burst_when_its_bodies_are_all_given_back() -> None:
    """A burst past the threshold trims once, when the bytes held return to 0 (not at each release,
    not in the release itself); a small burst does not; a second burst within the interval trims at
    the interval's end, or not at all if bodies are held again by then (that burst's drain trims)."""
    budget = BodyBudget(limit=100 * MIB)
    trims: list[int] = []

    def fake_trim() -> bool:
        trims.append(budget.held)
        return True

    trim = HeapTrim(budget, interval_s=0.2, trim=fake_trim)

    async def burst(sizes: list[int]) -> None:
        holds = [budget.take(size) for size in sizes]
        for hold in holds:
            assert hold is not None
            hold.release()
            await asyncio.sleep(0)  # a trim waits for its own callback, never runs inside a release

    await burst([30 * MIB, 30 * MIB, 10 * MIB])  # peak 70 MiB: past the 50 MiB threshold (half the limit)
    assert trims == []  # scheduled, not run in the release
    await wait_for(lambda: trims == [0], what="the first burst's trim")
    assert trim.trims == 1
    assert budget.peak == 0
    await burst([10 * MIB, 10 * MIB])  # a small burst: nothing
    await burst([60 * MIB])  # within the interval: waits for its end
    await asyncio.sleep(0.05)
    assert trims == [0]
    await wait_for(lambda: trims == [0, 0], what="the second burst's trim, at the interval's end")
    await asyncio.sleep(0.3)
    assert trims == [0, 0]  # once per burst
    await burst([60 * MIB])  # drained, then bodies held again before the trim's time: skipped
    held = budget.take(MIB)
    await asyncio.sleep(0.3)
    assert trims == [0, 0]
    assert held is not None
    held.release()  # the peak was kept: this drain trims
    await wait_for(lambda: len(trims) == 3, what="the held burst's trim")
    assert trim.trims == 3


async def test_a_pending_trim_is_cancelled_at_shutdown_and_none_is_scheduled_after(tmp_path: Path) -> None:
    """One trim pending at most (a second drain within the interval adds none); the app's cleanup
    cancels the pending one and later drains schedule nothing (no trim once shutdown began)."""
    trims: list[int] = []
    async with running(FakeModelServer("a")) as (a,), gateway(tmp_path, a.key, budget=100 * MIB) as (_, app):
        state = app[STATE_KEY]
        budget = state.body_budget

        def fake_trim() -> bool:
            trims.append(1)
            return True

        trim = state.heap_trim = HeapTrim(budget, interval_s=3600.0, trim=fake_trim)

        def burst() -> None:
            hold = budget.take(60 * MIB)
            assert hold is not None
            hold.release()

        burst()
        await wait_for(lambda: trims == [1], what="the first burst's trim")
        burst()  # within the interval: pending until its end
        assert trim.pending
        handle = trim._pending
        burst()  # a second drain while one is pending: still the one
        assert trim._pending is handle
    assert not trim.pending
    assert handle is not None
    assert handle.cancelled()
    burst()  # a drain after the cleanup: nothing scheduled
    assert not trim.pending
    assert trims == [1]
