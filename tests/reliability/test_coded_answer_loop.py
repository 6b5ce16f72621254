"""A pod's compressed answer is decoded without holding the gateway's event loop.

The gateway decodes a whole answer a pod compressed though asked for none - to read its ``usage``
whatever the client accepts, and to relay it decoded to a client that does not accept the coding -
up to 256 MiB (:mod:`igw.gateway.answer_coding`). Before session s43 that decode ran in one
synchronous call where the client accepts the coding: a hostile pod's 300 KB gzip bomb held the loop,
so every other request (``/healthz`` included) waited, for the 1.5 to 2.2 s that zlib and the usage
scan took over 256 MiB, before the 502 (``igw serve``, both sides of the ``IGW_HTTP_SERVER``
switch). Relayed decoded to a client reading as fast as it was written (another process or thread),
the writes never waited and the loop was held as long (2.2 s).

Measured structurally rather than against a wall-clock bound: while the bomb is handled a task in the
same loop notes each of its turns, and the most CPU time the loop's thread spent between two turns
must be a small part of what it spent on the whole exchange (a decode in 1 MiB pieces with a turn
between each), where before it was nearly all of it. Both are the loop thread's own CPU time
(``time.thread_time``), so a loaded machine's preemption, which stretched a wall-clock gap (117 ms
of a 334 ms exchange once the usage scan stopped early, session s44), does not count as a held loop.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import os
import socket
import time
import zlib
from pathlib import Path

import orjson
import pytest

from tests.reliability.harness import (
    MODEL,
    answering_coded,
    gateway_doc,
    in_process_gateway,
    scripted_upstream,
)

HELD_PART: float = 0.25
"""The largest part of the exchange one turn of the loop may take (before the fix: above 0.9)."""


def _zip_bomb(size: int) -> bytes:
    """A gzip body that decodes to a JSON object of ``size`` spaces, ``{`` and ``}`` around them
    (about a thousandth of that on the wire): an answer's shape, so the gateway decodes it as one
    (since session s50 a compressed answer to an inference POST that does not start as a JSON object
    is refused at its first decoded byte, before the decode this test watches)."""
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    mib = b" " * (1 << 20)
    coded = [squeezer.compress(b"{"), *(squeezer.compress(mib) for _ in range(size >> 20))]
    return b"".join([*coded, squeezer.compress(b"}"), squeezer.flush()])


def _empty_members(size: int) -> bytes:
    """A gzip body of about ``size`` bytes, nearly all of it empty members (each decodes to nothing,
    RFC 1952 2.2), between a member of ``{`` and one of ``}``: a JSON object, so the gateway takes it
    as an answer (since session s50 one that decodes to nothing is refused as an empty body)."""
    member = gzip.compress(b"")
    ends = gzip.compress(b"{"), gzip.compress(b"}")
    count = (size - sum(map(len, ends))) // len(member)
    return ends[0] + member * count + ends[1]


def _exchange(port: int, accept: str) -> tuple[int, int]:
    """One completion request on a blocking socket (run in a thread: a client that reads as fast as
    the gateway writes, as one in another process does); its status and the bytes read."""
    body = orjson.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 8})
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Accept-Encoding: {accept}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    first = b""
    read = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(head + body)
        try:
            while chunk := conn.recv(1 << 20):
                first = first or chunk
                read += len(chunk)
        except ConnectionResetError:
            pass  # the gateway cuts a relay it cannot finish
    return int(first.split(b" ", 2)[1]), read


@pytest.mark.parametrize(
    ("accept", "junk", "status"),
    [
        ("gzip", 0, 502),  # whole (under 1 MiB): forwarded coded, decoded only for its usage
        ("gzip", 900 * 1024, 200),  # past 1 MiB: relayed coded as it arrives, scanned as it passes
        ("identity", 0, 200),  # decoded for the client, relayed as it decodes, cut at the bound
        ("gzip", -1, 200),  # a MiB of empty gzip members: each decodes to nothing
    ],
    ids=["accepting-whole", "accepting-relayed", "not-accepting", "empty-members"],
)
async def test_a_zip_bomb_is_decoded_in_turns_of_the_event_loop(
    tmp_path: Path, accept: str, junk: int, status: int
) -> None:
    # the bound is reached before the junk
    body = _empty_members((1 << 20) - 64) if junk < 0 else _zip_bomb(300 << 20) + os.urandom(junk)

    answer = answering_coded(body)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        port = int(gw.url.rsplit(":", 1)[1])
        turns: list[float] = []
        done = False

        async def note_turns() -> None:
            while not done:
                turns.append(time.thread_time())  # the loop thread's CPU time, not the wall clock
                await asyncio.sleep(0.001)

        noting = asyncio.create_task(note_turns())
        started = time.thread_time()
        got, read = await asyncio.to_thread(_exchange, port, accept)
        ended = time.thread_time()
        done = True
        await noting
    assert got == status
    if accept == "identity":
        assert read > 200 << 20  # relayed decoded up to the bound, then cut
    marks = [started, *(t for t in turns if started < t < ended), ended]
    held = max(b - a for a, b in itertools.pairwise(marks))
    assert held < HELD_PART * (ended - started), (
        f"one turn of the loop took {held * 1000:.0f} ms of CPU of the {(ended - started) * 1000:.0f} ms "
        "the loop thread spent on the exchange"
    )
