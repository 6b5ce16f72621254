"""Pick notes between ``--workers`` over the real scrape channel (three in-process workers).

A follower's picks reach the leader and, relayed, the other follower; the leader's reach both. Each
then routes a request with the same prompt prefix to the pod the first worker sent it to, scored by
its own prefix index. Also the batching of notes into channel lines and what a worker drops.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import orjson
import pytest

from igw.gateway.pick_share import PickShare
from igw.gateway.scrape_share import MAX_NOTES_BACKLOG
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from igw.scheduling.plugins.prefix_index import prefix_hashes
from igw.scheduling.types import RoutingDecision, RoutingRequest
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_for
from tests.gateway.worker_pair import Worker, worker_runtime

WEIGHTS = {"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 0}
BLOCK_CHARS = 16 * 4
"""The fake model server's 16-token KV block at 4 characters per token (the scorer's auto-tune)."""


def prompt(n: int) -> str:
    return f"Conversation {n}. You answer questions about shipping rates. " * 12


def request(request_id: str, text: str) -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id, model="m", base_model="m", prefix_text=text, prompt_tokens=len(text) // 4
    )


def pick(worker: Worker, req: RoutingRequest) -> RoutingDecision:
    sr = worker.scheduler
    return sr.scheduler.pick(req, sr.pool.views(), now=time.monotonic())


def holds(worker: Worker, endpoint: str, text: str) -> bool:
    """Whether the worker's prefix index places all of ``text``'s blocks on ``endpoint``."""
    scorer = next(
        ws.scorer
        for ws in worker.scheduler.scheduler.profile.scorers
        if isinstance(ws.scorer, PrefixCacheScorer)
    )
    hashes = prefix_hashes("m", text, block_chars=BLOCK_CHARS, max_blocks=scorer.max_blocks)
    return scorer.index.match(hashes).get(endpoint, 0) == len(hashes) > 0


def scraped(worker: Worker) -> bool:
    return all(state.metrics is not None for state in worker.scheduler.pool.states.values())


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[tuple[Worker, Worker, Worker]]:
    async with running(FakeModelServer("a"), FakeModelServer("b")) as pods:
        keys = [p.key for p in pods]
        # Only the scraped queue and KV scorers next to the prefix scorer (predictedLatency 0 turns
        # off the latency scorers, which learn from each worker's own requests): the pods' pages
        # are equal, so the prefix index alone separates them. A long stale threshold keeps the
        # scrapes fresh on a loaded machine.
        workers = [
            Worker(i, tmp_path, count=3, runtime=worker_runtime(*keys, stale_threshold="5s", weights=WEIGHTS))
            for i in range(3)
        ]
        for worker in workers:
            await worker.start()
        try:
            for worker in workers:
                await wait_for(partial(scraped, worker), what="snapshots")
            leader, a, b = workers
            yield leader, a, b
        finally:
            for worker in reversed(workers):
                await worker.close()


async def test_workers_route_a_shared_prefix_to_the_pod_another_worker_sent_it_to(
    group: tuple[Worker, Worker, Worker],
) -> None:
    leader, a, b = group
    for n, (sender, others) in enumerate([(a, (leader, b)), (leader, (a, b)), (b, (leader, a))] * 2):
        text = prompt(n)
        first = pick(sender, request(f"first-{n}", text))
        chosen = first.endpoint
        assert chosen is not None
        for other in others:
            await wait_for(partial(holds, other, chosen, text), within=10, what="the note")
            again = pick(other, request(f"again-{n}", text))
            assert again.endpoint == chosen
            assert again.scores[chosen]["prefix-cache-scorer"] > 0


def test_notes_are_packed_into_lines_within_the_channel_limit_and_all_learned() -> None:
    sender, learner = worker_runtime("a:1", "b:1"), worker_runtime("a:1", "b:1")
    share = PickShare(lambda: sender, time.monotonic, max_line=4096)
    assert share.lines() == []  # attaches the outboxes: picks from now on are noted
    sr = sender.schedulers["s"]
    views = list(sr.pool.views())
    for n in range(40):
        sr.scheduler.pick(request(f"r{n}", prompt(n)), views, now=time.monotonic())
    lines = share.lines()
    assert len(lines) > 1
    assert all(len(line) <= 4096 and line.endswith(b"\n") for line in lines)
    receiver = PickShare(lambda: learner, time.monotonic, max_line=4096, worker=1)
    for line in lines:
        receiver.learn(orjson.loads(line))
    assert receiver.learned.learned >= 40
    assert receiver.learned.stale == receiver.learned.malformed == receiver.learned.unknown == 0
    assert share.dropped == 0


def test_what_cannot_be_sent_or_learned_is_counted() -> None:
    sender = worker_runtime("a:1")
    clock = [100.0]
    share = PickShare(lambda: sender, lambda: clock[0], max_line=200)  # too short for a prefix note
    share.lines()
    outbox = sender.schedulers["s"].scheduler.share_picks()
    sr = sender.schedulers["s"]
    sr.scheduler.pick(request("r", prompt(1)), sr.pool.views(), now=99.0)
    assert all(b"prefix-cache-scorer" not in line for line in share.lines())
    assert share.dropped >= 1
    assert outbox.dropped == 0
    note = {"h": [1, 2], "c": 10}
    share.learn(
        {
            "t": "p",
            "p": [
                ["s", 99.9, "prefix-cache-scorer", "a:1", note],
                ["s", 10.0, "prefix-cache-scorer", "a:1", note],  # older than the stale threshold
                ["other-scheduler", 99.9, "prefix-cache-scorer", "a:1", note],
                ["s", 99.9, "prefix-cache-scorer", "gone:1", note],  # a pod this worker does not have
                "not a row",
            ],
        }
    )
    assert (share.learned.learned, share.learned.stale, share.learned.unknown, share.learned.malformed) == (
        1,
        1,
        2,
        1,
    )
    share.learn({"t": "p", "p": "nothing"})
    assert share.learned.malformed == 2


async def test_a_line_is_skipped_and_counted_when_the_peer_has_too_much_unread() -> None:
    share = PickShare(lambda: worker_runtime("a:1"), time.monotonic, max_line=4096)
    ours, theirs = socket.socketpair()
    reader, peer = await asyncio.open_connection(sock=theirs)
    _, writer = await asyncio.open_connection(sock=ours)
    try:
        share.write(writer, b'{"t":"p","p":[]}\n', max_unsent=-1)  # "full": nothing may be unread
        share.write(writer, b'{"t":"p","p":[1]}\n', max_unsent=MAX_NOTES_BACKLOG)
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), timeout=5) == b'{"t":"p","p":[1]}\n'
        assert share.lines_unsent == 1
    finally:
        writer.close()
        await writer.wait_closed()
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""  # the end, read before closing
        peer.close()
        await peer.wait_closed()
