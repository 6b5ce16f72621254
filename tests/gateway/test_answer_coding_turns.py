""":class:`~igw.gateway.answer_coding.CodedScan` decodes in steps that leave the event loop turns.

A gzip body of many members is decoded whole, whatever the pieces it arrives in and wherever its
members fall against the bytes handed to zlib at once (:data:`INPUT_BYTES`); a run of members that
decode to nothing still gives the loop a turn every :data:`QUIET_STEPS` of them. Before session s43
a MiB of empty gzip members (20 bytes each) was decoded in one call with no turn, in time growing
with the square of their number (1.9 s for a MiB, 0.26 s for a quarter of one).
"""

from __future__ import annotations

import asyncio
import gzip
import random

import orjson

from igw.gateway.answer_coding import INPUT_BYTES, QUIET_STEPS, CodedScan

USAGE = {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}


def test_members_across_the_input_windows_decode_whole_in_any_pieces() -> None:
    rng = random.Random(7)
    plain = orjson.dumps({"object": "text_completion", "text": rng.randbytes(100_000).hex(), "usage": USAGE})
    cuts = sorted(rng.sample(range(1, len(plain)), 400))
    members = [gzip.compress(plain[a:b]) for a, b in zip([0, *cuts], [*cuts, len(plain)], strict=True)]
    members[1:1] = [gzip.compress(b"")] * 3 * QUIET_STEPS  # a run of empty ones among them
    body = b"".join(members)
    assert len(body) > 4 * INPUT_BYTES
    coded = CodedScan(b"gzip")
    decoded = bytearray()
    at = 0
    while at < len(body):
        size = rng.choice((1, 2, 19, 20, 21, INPUT_BYTES - 1, INPUT_BYTES + 1, 3 * INPUT_BYTES))
        decoded += b"".join(coded.decode(body[at : at + size]))
        at += size
    coded.finish()
    assert coded.unreadable is None
    assert bytes(decoded) == plain
    assert coded.document()["usage"] == USAGE


def test_a_run_of_empty_members_gives_the_loop_turns() -> None:
    empty = gzip.compress(b"")
    count = (1 << 20) // len(empty)
    coded = CodedScan(b"gzip")
    pieces = list(coded.decode(empty * count))
    coded.finish()
    assert coded.unreadable is None
    assert pieces == [b""] * (count // QUIET_STEPS)


async def test_feed_gives_the_loop_a_turn_after_each_piece() -> None:
    """A body that decodes to many pieces (``PIECE_BYTES`` each) is fed with the loop turning
    between them: another task runs once per piece."""
    plain = b" " * (40 << 20)
    body = gzip.compress(plain, compresslevel=9)
    turns = 0
    done = False

    async def turn() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(turn())
    await asyncio.sleep(0)
    coded = CodedScan(b"gzip")
    await coded.feed(body)
    done = True
    await other
    coded.finish()
    assert coded.unreadable is None
    assert turns >= 40
