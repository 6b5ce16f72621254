"""Pick notes between ``--workers`` over the real scrape channel (three in-process workers).

A follower's picks reach the leader and, relayed, the other follower; the leader's reach both. Each
then routes a request with the same prompt prefix to the pod the first worker sent it to, scored by
its own prefix index. Also the batching of notes into channel lines and what a worker drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.pick_share import (
    REPLAY_BYTES,
    REPLAY_LINES,
    REPLAY_MEMORY_ROWS,
    PickNoteCollector,
    PickShare,
)
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_share import MAX_NOTES_BACKLOG, LeadingScraper, ScrapeFollower
from igw.scheduling.pick_notes import LearnCounts
from igw.scheduling.plugins.backlog_ttft_scorer import BacklogTtftScorer
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
        async with started(workers):
            leader, a, b = workers
            yield leader, a, b


@contextlib.asynccontextmanager
async def started(workers: list[Worker]) -> AsyncIterator[None]:
    """``workers`` started, each with its endpoints' first snapshots; closed afterwards."""
    for worker in workers:
        await worker.start()
    try:
        for worker in workers:
            await wait_for(partial(scraped, worker), what="snapshots")
        yield
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


async def test_a_one_endpoint_pool_sends_no_notes_and_they_resume_when_it_grows(tmp_path: Path) -> None:
    async with running(FakeModelServer("a"), FakeModelServer("b")) as pods:
        a, b = (p.key for p in pods)
        workers = [
            Worker(i, tmp_path, count=2, runtime=worker_runtime(a, stale_threshold="5s", weights=WEIGHTS))
            for i in range(2)
        ]
        async with started(workers):
            leader, follower = workers
            # Each sends its own prompts to the lone pod; no await in between, so the exchange
            # cannot drain the real outboxes before they are read here.
            for sender, base in ((leader, 0), (follower, 100)):
                outbox = sender.scheduler.scheduler.pick_notes
                assert outbox is not None  # attached by the exchange's first interval
                for n in range(base, base + 5):
                    assert pick(sender, request(f"one-{n}", prompt(n))).endpoint == a
                assert outbox.drain() == []
            for worker in workers:
                worker.scheduler.pool.replace([DiscoveredEndpoint(key=a), DiscoveredEndpoint(key=b)])
                assert worker.service is not None
                worker.service.sync()
            for worker in workers:
                await wait_for(partial(scraped, worker), what="both pods' snapshots")
            for sender, learner, n in ((follower, leader, 200), (leader, follower, 300)):
                chosen = pick(sender, request(f"two-{n}", prompt(n))).endpoint
                assert chosen is not None
                await wait_for(partial(holds, learner, chosen, prompt(n)), within=10, what="the note")
                # One channel per pair, in order: had the one-pod picks been noted, they would have
                # arrived first.
                other = 0 if sender is leader else 100
                assert not any(holds(learner, a, prompt(k)) for k in range(other, other + 5))
                learned = learner.metrics.registry.get_sample_value(
                    "igw_pick_notes_received_total", {"outcome": "learned"}
                )
                assert learned == 2  # the prefix note and the dispatch ledger's, of this one pick


async def test_an_idle_exchange_sleeps_and_a_note_wakes_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no notes to send, neither worker drains its outboxes every note interval (5 ms: about
    100 drains each in the half second watched) but once per scrape interval (5 s here); the first
    note after the quiet spell still reaches the other worker at once, not at the next drain (about
    4 s after the pick: the 2 s bound leaves a loaded box 2 s either side)."""
    async with running(FakeModelServer("a"), FakeModelServer("b")) as pods:
        keys = [p.key for p in pods]
        workers = [
            Worker(
                i,
                tmp_path,
                count=2,
                runtime=worker_runtime(*keys, stale_threshold="10s", scrape_interval="5s", weights=WEIGHTS),
            )
            for i in range(2)
        ]
        async with started(workers):
            leader, follower = workers
            assert isinstance(leader.service, LeadingScraper)
            assert isinstance(follower.service, ScrapeFollower)
            shares = {"leader": leader.service.leader.picks, "follower": follower.service.picks}
            drains = dict.fromkeys(shares, 0)
            for name, share in shares.items():

                def counted(share: PickShare = share, name: str = name) -> list[bytes]:
                    drains[name] += 1
                    return PickShare.lines(share)

                monkeypatch.setattr(share, "lines", counted)
            await asyncio.sleep(0.5)
            assert all(count <= 2 for count in drains.values()), drains
            text = prompt(42)
            started_at = time.monotonic()
            chosen = pick(follower, request("wakes", text)).endpoint
            assert chosen is not None
            await wait_for(partial(holds, leader, chosen, text), within=10, what="the note")
            assert time.monotonic() - started_at < 2.0  # not the idle wait's 5 s


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
    sender = worker_runtime("a:1", "b:1")  # two pods: a pool of one notes nothing
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


def sharing_after_40_picks(sender: GatewayRuntime) -> tuple[PickShare, SchedulerRuntime, float]:
    """``sender``'s pick share (outboxes attached) once its scheduler ``s`` made 40 picks of
    different prompts: a batch of prefix notes waiting to be written. Returns the share, the
    scheduler runtime and the time the picks were made at."""
    share = PickShare(lambda: sender, time.monotonic, max_line=4096)
    share.lines()  # attaches the outboxes
    sr = sender.schedulers["s"]
    now = time.monotonic()
    for n in range(40):
        sr.scheduler.pick(request(f"r{n}", prompt(n)), sr.pool.views(), now=now)
    return share, sr, now


async def written_past_a_flood(share: PickShare, learner: GatewayRuntime) -> tuple[list[bytes], PickShare]:
    """Write ``share``'s next lines to a real socket peer that already has more than
    MAX_NOTES_BACKLOG of a flood unread (so the lines past the backlog are skipped, as a worker
    does), then let ``learner`` learn every pick note that arrived. Returns the lines offered and the
    receiving share (its ``learned`` counts explain a failed assertion)."""
    ours, theirs = socket.socketpair()
    reader, peer = await asyncio.open_connection(sock=theirs, limit=1 << 20)
    _, writer = await asyncio.open_connection(sock=ours)
    try:
        flood = b'{"t":"x","pad":"' + b"x" * 1000 + b'"}\n'
        for _ in range(3 * MAX_NOTES_BACKLOG // len(flood)):
            writer.write(flood)
        assert writer.transport.get_write_buffer_size() > MAX_NOTES_BACKLOG
        lines = share.lines()
        for line in lines:
            share.write(writer, line, max_unsent=MAX_NOTES_BACKLOG)
        writer.write_eof()
        receiver = PickShare(lambda: learner, time.monotonic, max_line=4096, worker=1)
        while line := await asyncio.wait_for(reader.readline(), timeout=10):
            doc = orjson.loads(line)
            if doc["t"] == "p":
                receiver.learn(doc)
        return lines, receiver
    finally:
        writer.close()
        peer.close()
        await peer.wait_closed()


async def test_an_ejection_is_written_even_when_the_peer_has_too_much_unread() -> None:
    """A flood of ordinary notes (or snapshots) leaves the peer more than MAX_NOTES_BACKLOG unread:
    the next batch's prefix notes are skipped, as before, but the ejection made in the same interval
    still goes out. Until session s41 it shared the batch's line and was skipped with it, so the peer
    never learned the ejection (its note alone told it) and sent its own requests to the failing pod."""
    sender, learner = (worker_runtime("a:1", "b:1", stale_threshold="60s") for _ in range(2))
    share, sr, now = sharing_after_40_picks(sender)
    for _ in range(sr.scheduler.settings.outlier_detection.consecutive_failures):
        sr.scheduler.on_connect_failed("a:1", now=now)
    assert "a:1" in sr.scheduler.outliers.ejected
    lines, receiver = await written_past_a_flood(share, learner)
    assert len(lines) > 1
    assert 0 < share.lines_unsent < len(lines)  # the prefix notes skipped, not the ejection
    assert "a:1" in learner.schedulers["s"].scheduler.outliers.ejected, receiver.learned


async def test_an_adapter_404_is_written_even_when_the_peer_has_too_much_unread() -> None:
    """As an ejection: an adapter's 404 (``@model-missing``) is remembered for 60 s, far past its
    note's stale threshold, and its note is the only telling, so a peer that skipped it sent that
    adapter's requests to the pod that had just answered 404, paying its own 404 there. Until session
    s42 the note went in the interval's ordinary line and was skipped with it under a flood."""
    weights = {**WEIGHTS, "loraAffinity": 1}
    sender, learner = (worker_runtime("a:1", "b:1", stale_threshold="60s", weights=weights) for _ in range(2))
    share, sr, now = sharing_after_40_picks(sender)
    sr.scheduler.on_model_missing("a:1", "chat", now=now)
    assert sr.scheduler.models_missing(now)
    _, receiver = await written_past_a_flood(share, learner)
    assert share.lines_unsent > 0  # the prefix notes skipped, not the 404
    missing = learner.schedulers["s"].scheduler.models_missing(time.monotonic())
    assert [(key, model) for key, model, _ in missing] == [("a:1", "chat")], receiver.learned


def backlog(worker: Worker) -> BacklogTtftScorer:
    return next(
        ws.scorer
        for ws in worker.scheduler.scheduler.profile.scorers
        if isinstance(ws.scorer, BacklogTtftScorer)
    )


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[FakeModelServer, Worker, Worker]]:
    """A leader and a follower with the default profile (backlog-ttft-scorer included) over two
    pods of unlike KV capacity (a mixed fleet: one kind of hardware sends no backlog notes); the
    follower is not started, so a test can let it join late."""
    async with running(
        FakeModelServer("a", num_gpu_blocks=40_000), FakeModelServer("b", num_gpu_blocks=5_000)
    ) as pods:
        keys = [p.key for p in pods]
        leader, follower = (
            Worker(i, tmp_path, count=2, runtime=worker_runtime(*keys, stale_threshold="5s"))
            for i in range(2)
        )
        await leader.start()
        try:
            await wait_for(partial(scraped, leader), what="the leader's first scrape")
            yield pods[0], leader, follower
        finally:
            await follower.close()
            await leader.close()


async def test_a_dispatch_joins_the_backlog_of_the_other_worker_both_ways(
    pair: tuple[FakeModelServer, Worker, Worker],
) -> None:
    _pod, leader, follower = pair
    await follower.start()
    await wait_for(partial(scraped, follower), what="the follower's first snapshot")
    for n, (sender, learner) in enumerate([(follower, leader), (leader, follower)]):
        req = replace(request(f"long-{n}", prompt(100 + n)), prompt_tokens=4000)
        chosen = pick(sender, req).endpoint
        assert chosen is not None
        sent = backlog(sender).backlogs[chosen].total

        def learned(learner: Worker = learner, chosen: str = chosen, sent: float = sent) -> bool:
            entry = backlog(learner).backlogs.get(chosen)
            return entry is not None and entry.total >= sent

        await wait_for(learned, within=10, what="the backlog note")
        now = time.monotonic()
        [ahead] = [b.now(now, 0.0) for k, b in backlog(learner).backlogs.items() if k == chosen]
        assert ahead >= 4000 - 1  # not drained (rate 0 here): the whole dispatch is in the learner's backlog
    received = follower.metrics.registry.get_sample_value(
        "igw_pick_notes_received_total", {"outcome": "learned"}
    )
    assert received is not None
    assert received >= 1


async def test_a_worker_that_joins_late_is_replayed_the_recent_notes(
    pair: tuple[FakeModelServer, Worker, Worker],
) -> None:
    _pod, leader, follower = pair
    text = prompt(7)
    chosen = pick(leader, request("early", text)).endpoint
    assert chosen is not None
    leader_share = leader.service
    assert isinstance(leader_share, LeadingScraper)
    # The leader's batch goes out (to nobody yet) and is kept for a worker that joins.
    await wait_for(lambda: bool(leader_share.leader.picks.recent()), what="the leader's batch")
    await follower.start()
    await wait_for(partial(holds, follower, chosen, text), within=10, what="the replayed note")
    assert pick(follower, request("again", text)).endpoint == chosen
    replayed = leader.metrics.registry.get_sample_value("igw_pick_note_lines_replayed_total")
    assert replayed is not None
    assert replayed >= 1


async def test_a_worker_that_joins_late_learns_the_ejections_still_in_force(
    pair: tuple[FakeModelServer, Worker, Worker],
) -> None:
    """An ejection made ten seconds before a worker joined (its note long past the stale threshold)
    still has twenty seconds to run: the joining worker leaves that pod out too."""
    pod, leader, follower = pair
    sr = leader.scheduler
    sr.scheduler.share_picks()  # as the leader's first drain does
    failing = pod.key
    ejected_at = time.monotonic() - 10.0
    for _ in range(sr.scheduler.settings.outlier_detection.consecutive_failures):
        sr.scheduler.on_connect_failed(failing, now=ejected_at)
    assert failing in sr.scheduler.outliers.ejected
    await follower.start()
    outliers = follower.scheduler.scheduler.outliers
    await wait_for(lambda: failing in outliers.ejected, within=5, what="the ejection in force")
    assert outliers.ejected[failing] == pytest.approx(ejected_at + 30.0)
    decisions = {pick(follower, request(f"r{i}", prompt(i))).endpoint for i in range(20)}
    assert failing not in decisions


async def test_a_worker_that_joins_late_learns_the_adapter_404s_and_stored_responses_in_memory(
    tmp_path: Path,
) -> None:
    """A 404 for an adapter ten seconds before a worker joined (remembered for 60 s) and a response
    stored then (remembered until evicted): their notes are long past the stale threshold, yet the
    joining worker leaves the pod out for that adapter and sends the continuation to the pod that
    stores it, as worker 0 does. Until session s41 it knew neither: the adapter request could go to
    the pod that had just answered 404, and the continuation was searched for on every pod."""
    weights = {**WEIGHTS, "loraAffinity": 1}
    async with running(FakeModelServer("a"), FakeModelServer("b")) as pods:
        lacks, stores = (p.key for p in pods)
        leader, follower = (
            Worker(
                i,
                tmp_path,
                count=2,
                runtime=worker_runtime(lacks, stores, stale_threshold="5s", weights=weights),
            )
            for i in range(2)
        )
        await leader.start()
        try:
            await wait_for(partial(scraped, leader), what="the leader's first scrape")
            sr = leader.scheduler
            sr.scheduler.share_picks()  # as the leader's first drain does
            then = time.monotonic() - 10.0
            sr.scheduler.on_model_missing(lacks, "chat", now=then)
            sr.scheduler.remember_response("resp_early", stores, now=then)
            await follower.start()
            await wait_for(partial(scraped, follower), what="the follower's first snapshot")
            learned = follower.scheduler.scheduler
            await wait_for(
                lambda: learned.responses.endpoint_of("resp_early") is not None, within=5, what="the replay"
            )
            assert learned.responses.endpoint_of("resp_early") == stores
            [(key, model, at)] = learned.models_missing(time.monotonic())
            assert (key, model) == (lacks, "chat")
            assert at == pytest.approx(then)
            adapter = replace(request("lora", prompt(1)), model="chat", adapter="chat")
            for n in range(10):
                assert pick(follower, replace(adapter, request_id=f"lora-{n}")).endpoint == stores
            follow_up = replace(request("turn-2", prompt(2)), previous_response_id="resp_early")
            assert pick(follower, follow_up).endpoint == stores
        finally:
            await follower.close()
            await leader.close()


def test_the_memory_told_to_a_late_worker_is_bounded_to_the_newest() -> None:
    """More stored responses than REPLAY_MEMORY_ROWS: the newest that many are told, in the order a
    learner's LRU rebuilds them, packed into lines within the channel limit, and learned."""
    sender, learner = (worker_runtime("a:1", "b:1", stale_threshold="5s") for _ in range(2))
    share = PickShare(lambda: sender, time.monotonic, max_line=64 * 1024)
    responses = sender.schedulers["s"].scheduler.responses
    for n in range(REPLAY_MEMORY_ROWS + 100):
        responses.remember(f"resp_{n}", "ab"[n % 2] + ":1")
    lines = share.memory_lines()
    assert all(len(line) <= 64 * 1024 for line in lines)
    rows = [row for line in lines for row in orjson.loads(line)["p"]]
    assert len(rows) == REPLAY_MEMORY_ROWS
    assert [row[4][0] for row in rows[:1] + rows[-1:]] == ["resp_100", f"resp_{REPLAY_MEMORY_ROWS + 99}"]
    receiver = PickShare(lambda: learner, time.monotonic, max_line=64 * 1024, worker=1)
    for line in lines:
        receiver.learn(orjson.loads(line))
    learned = learner.schedulers["s"].scheduler.responses
    assert len(learned) == REPLAY_MEMORY_ROWS
    assert learned.endpoint_of("resp_101") == "b:1"
    assert learned.endpoint_of("resp_99") is None


def test_a_worker_does_not_learn_its_own_notes_again() -> None:
    runtime = worker_runtime("a:1", "b:1")
    share = PickShare(lambda: runtime, time.monotonic, max_line=4096, worker=1)
    share.lines()
    sr = runtime.schedulers["s"]
    sr.scheduler.pick(request("r", prompt(3)), sr.pool.views(), now=time.monotonic())
    [line] = share.lines()
    assert orjson.loads(line)["w"] == 1
    share.learn(orjson.loads(line))  # a replay after a reconnect
    assert share.learned == LearnCounts()
    other = PickShare(lambda: worker_runtime("a:1", "b:1"), time.monotonic, max_line=4096, worker=2)
    other.learn(orjson.loads(line))
    assert other.learned.learned >= 1


def test_recent_lines_are_bounded_by_count_bytes_and_age() -> None:
    clock = [100.0]
    runtime = worker_runtime("a:1", stale_threshold="1s")
    share = PickShare(lambda: runtime, lambda: clock[0], max_line=4096)
    for i in range(REPLAY_LINES + 10):
        share.remember(b"line %d\n" % i)
    recent = share.recent()
    assert len(recent) == REPLAY_LINES
    assert recent[-1] == b"line %d\n" % (REPLAY_LINES + 9)  # the newest kept, the oldest gone
    big = b"x" * (REPLAY_BYTES // 4)
    for _ in range(5):
        share.remember(big)
    assert sum(map(len, share.recent())) <= REPLAY_BYTES
    clock[0] += 1.5  # older than the stale threshold: the receiver would drop them
    share.remember(b"fresh\n")
    assert share.recent() == [b"fresh\n"]


def test_the_counters_are_prometheus_series() -> None:
    runtime = worker_runtime("a:1")
    share = PickShare(lambda: runtime, time.monotonic, max_line=4096)
    share.learned = LearnCounts(learned=5, stale=2, unknown=1, malformed=3)
    share.dropped, share.lines_unsent, share.lines_replayed = 4, 6, 7
    registry = CollectorRegistry()
    registry.register(PickNoteCollector(share))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    received = {s.labels["outcome"]: s.value for s in families["igw_pick_notes_received"].samples}
    assert received == {"learned": 5, "stale": 2, "unknown": 1, "malformed": 3}
    assert registry.get_sample_value("igw_pick_notes_dropped_total") == 4
    assert registry.get_sample_value("igw_pick_note_lines_skipped_total") == 6
    assert registry.get_sample_value("igw_pick_note_lines_replayed_total") == 7
    assert families["igw_pick_notes_dropped"].type == "counter"
