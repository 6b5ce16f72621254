"""``--workers`` scrape sharing in one process: a leader and a follower over a real unix socket.

The leader scrapes a real model server on loopback; the follower never contacts it and still sees
every scrape; the follower's dispatches reach the leader's frozen-page detection. Also the
whole-host ``/metrics`` merge, checked with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway import scrape_share
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.scrape_share import (
    CONFIG_CHANGED,
    ScrapeFollower,
    ScrapeLeader,
    apply_snapshot,
    snapshot,
)
from igw.gateway.worker_metrics import merge_pages
from igw.scheduling.types import EngineMetrics
from tests.compiled.tree import declared_types, skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_for
from tests.gateway.worker_pair import Worker, worker_runtime


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[FakeModelServer, Worker, Worker]]:
    async with running(FakeModelServer("pod", waiting=4, kv=0.25)) as (pod,):
        leader, follower = Worker(0, tmp_path, pod.key), Worker(1, tmp_path, pod.key)
        await follower.start()  # before the leader listens: the follower retries until it can connect
        await leader.start()
        try:
            yield pod, leader, follower
        finally:
            await follower.close()
            await leader.close()


async def test_only_the_leader_scrapes_and_the_follower_sees_every_scrape(
    pair: tuple[FakeModelServer, Worker, Worker],
) -> None:
    pod, leader, follower = pair
    assert isinstance(follower.service, ScrapeFollower)
    await wait_for(lambda: follower.state.metrics is not None, what="the follower's first snapshot")
    followed = follower.state.metrics
    assert followed is not None
    assert followed == leader.state.metrics
    assert followed.waiting == 4
    assert followed.kv_usage == pytest.approx(0.25)
    scrapes_before = pod.scrapes

    def newer_than(seen: float | None) -> Callable[[], bool]:
        return lambda: follower.state.scraped_at != seen

    for _ in range(2):  # the first newer snapshot may come from a scrape the pod had already counted
        await wait_for(newer_than(follower.state.scraped_at), what="a newer snapshot")
    assert pod.scrapes > scrapes_before
    ok = leader.metrics.registry.get_sample_value("igw_endpoint_scrapes_total", {"result": "ok"})
    assert ok is not None
    assert pod.scrapes - 1 <= ok <= pod.scrapes
    assert follower.metrics.registry.get_sample_value("igw_endpoint_scrapes_total", {"result": "ok"}) in (
        None,
        0.0,
    )
    assert follower.state.max_model_len == leader.state.max_model_len


def _queue_missing(worker: Worker) -> bool:
    metrics = worker.state.metrics
    return metrics is not None and metrics.waiting is None


@pytest.mark.parametrize("value", [math.nan, math.inf])
async def test_a_non_finite_queue_count_is_a_missing_signal_in_every_worker(
    pair: tuple[FakeModelServer, Worker, Worker], value: float, caplog: pytest.LogCaptureFixture
) -> None:
    """A pod whose page says the queue is NaN or infinite (valid in the exposition format): its
    scrapes land with the signal missing, in worker 0 and in the follower, and nothing is logged as
    failed (``int()`` of such a value raised out of every scrape of the pod)."""
    pod, leader, follower = pair
    await wait_for(lambda: follower.state.metrics is not None, what="the follower's first snapshot")
    pod.waiting = value  # type: ignore[assignment]  # what a broken engine's page may say
    for worker in (leader, follower):
        await wait_for(functools.partial(_queue_missing, worker), what="the queue signal missing")
        assert "vllm:num_requests_waiting" in worker.state.missing
        assert worker.state.metrics is not None
        assert worker.state.metrics.kv_usage == pytest.approx(0.25)
    assert not [r for r in caplog.records if "storing the scrape failed" in r.getMessage()]


async def test_failures_reach_the_follower_too(pair: tuple[FakeModelServer, Worker, Worker]) -> None:
    pod, _leader, follower = pair
    await wait_for(lambda: follower.state.metrics is not None, what="the first snapshot")
    pod.metrics_status = 404
    await wait_for(lambda: follower.state.scrape_failing, what="the failure to be shared")
    assert follower.state.last_error == "GET /metrics answered 404"
    assert "/metrics" in follower.state.missing
    pod.metrics_status = 200
    await wait_for(lambda: not follower.state.scrape_failing, what="the recovery to be shared")


async def test_a_follower_s_dispatches_make_the_leader_detect_a_frozen_page(
    pair: tuple[FakeModelServer, Worker, Worker],
) -> None:
    _pod, leader, follower = pair  # the fake server's page never changes while its values do not
    await wait_for(lambda: follower.state.metrics is not None, what="the first snapshot")
    await wait_for(lambda: not leader.state.page.frozen, what="a settled page")
    await wait_for(lambda: leader.state.page.digest is not None, what="a digest")
    assert leader.state.picks == 0
    follower.state.dispatched(10)  # a request only the follower sent
    await wait_for(lambda: leader.state.page.frozen, within=5, what="frozen detection at the leader")
    await wait_for(lambda: follower.state.page.frozen, what="the frozen flag at the follower")


async def test_usage_reports_are_summed_per_endpoint(pair: tuple[FakeModelServer, Worker, Worker]) -> None:
    pod, leader, follower = pair
    await wait_for(lambda: follower.state.metrics is not None, what="the first snapshot")
    for _ in range(3):
        follower.state.dispatched(5)
    follower.state.completed(5)
    service = leader.service
    assert service is not None
    usage = service.leader.remote_usage  # type: ignore[attr-defined]
    await wait_for(lambda: usage("s", pod.key) == (3, 2), what="the follower's usage at the leader")
    assert usage("s", "10.0.0.1:1") == (0, 0)


def test_worker_pages_merge_into_one_exposition_labelled_by_worker() -> None:
    pages = []
    for worker, count in ((0, 2), (1, 5)):
        registry = CollectorRegistry()
        c = Counter("igw_requests", "requests", ["model"], registry=registry)
        c.labels("m").inc(count)
        Counter("igw_plain", "no labels", registry=registry).inc(worker + 1)
        pages.append((worker, generate_latest(registry)))
    text = merge_pages(pages).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    totals = {
        (s.labels.get("worker"), s.labels.get("model")): s.value
        for s in families["igw_requests"].samples
        if s.name == "igw_requests_total"
    }
    assert totals == {("0", "m"): 2.0, ("1", "m"): 5.0}
    plain = {
        s.labels["worker"]: s.value for s in families["igw_plain"].samples if s.name == "igw_plain_total"
    }
    assert plain == {"0": 1.0, "1": 2.0}
    assert text.count("# TYPE igw_requests_total counter") == 1


async def test_closing_a_follower_while_its_leader_goes_away_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers stop together on SIGTERM: a follower told to close just as the leader's channel ends
    must end, not swallow the cancellation and keep reconnecting (its worker would then be killed)."""
    original = ScrapeFollower._report

    async def slow_to_stop(self: ScrapeFollower, writer: asyncio.StreamWriter) -> None:
        try:
            await original(self, writer)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # widens the window in which close() arrives
            raise

    monkeypatch.setattr(ScrapeFollower, "_report", slow_to_stop)
    async with running(FakeModelServer("pod")) as (pod,):
        leader, follower = Worker(0, tmp_path, pod.key), Worker(1, tmp_path, pod.key)
        await leader.start()
        await follower.start()
        try:
            service = follower.service
            assert isinstance(service, ScrapeFollower)
            await wait_for(service.connected.is_set, within=10, what="the follower connected")
            await leader.close()  # the channel ends: the follower's finally awaits the slow reporter
            await wait_for(lambda: not service.connected.is_set(), what="the channel seen closed")
            # Before the fix the cancellation was swallowed there and close() waited for ever.
            closing = asyncio.ensure_future(follower.close())
            done, _ = await asyncio.wait({closing}, timeout=5)  # unlike wait_for, never cancels it
            if not done:
                closing.cancel()  # a second cancellation ends the follower, for the cleanup
                with contextlib.suppress(asyncio.CancelledError):
                    await closing
                pytest.fail("the follower did not end within 5 s of close()")
        finally:
            await follower.close()
            await leader.close()


def test_usage_reports_carry_only_what_changed_and_worker_0_holds_the_whole() -> None:
    """After each report worker 0 holds what a whole report would say (every endpoint this worker has
    dispatched to, with its counts); a report carries only the endpoints whose counts changed, and an
    endpoint that left the pool as ``0, 0``."""
    follower = _follower()
    pool = follower._runtime().schedulers["s"].pool
    a, b = pool.states["10.0.0.1:8000"], pool.states["10.0.0.2:8000"]
    reported: scrape_share.Usage = {}
    held: scrape_share.Usage = {}

    def whole() -> scrape_share.Usage:
        return {("s", k): (st.picks, st.inflight) for k, st in pool.states.items() if st.picks}

    def report() -> list[list[object]]:
        rows = follower.usage_rows(reported)
        scrape_share.take_usage(held, orjson.loads(orjson.dumps(rows)))
        assert held == whole()
        return rows

    assert report() == []
    a.dispatched(5)
    a.dispatched(5)
    b.dispatched(5)
    assert report() == [["s", a.key, 2, 2], ["s", b.key, 1, 1]]
    assert report() == []  # nothing moved
    a.completed(5)
    assert report() == [["s", a.key, 2, 1]]
    pool.replace([DiscoveredEndpoint(key=a.key)])
    assert report() == [["s", b.key, 0, 0]]
    assert held == {("s", a.key): (2, 1)}


async def test_worker_0_reads_a_usage_report_of_fifty_thousand_endpoints(tmp_path: Path) -> None:
    """A follower reports every endpoint it ever sent a request to, every scrape interval: with a
    pool past ~30,000 endpoints the line passed the old 1 MiB read bound and worker 0 dropped the
    follower at every report."""
    path = str(tmp_path / "scrape.sock")
    runtime = worker_runtime("10.0.0.1:8000")
    leader = ScrapeLeader(path, lambda: runtime, clock=lambda: 0.0, report_interval_s=lambda: 0.05)
    await leader.start()
    try:
        reader, writer = await asyncio.open_unix_connection(path)
        rows = [["s", f"10.1.{i // 250}.{i % 250}:8000", 7, i % 3] for i in range(50_000)]
        line = orjson.dumps({"t": "u", "u": rows}) + b"\n"
        assert len(line) > 1024 * 1024, len(line)
        writer.write(line)
        await writer.drain()
        await wait_for(lambda: leader.remote_usage("s", "10.1.199.249:8000") == (7, 1), what="the report")
        assert leader.remote_usage("s", "10.1.0.1:8000") == (7, 1)
        writer.close()
        await writer.wait_closed()
        del reader
    finally:
        await leader.close()


def test_a_snapshot_carries_every_signal_as_the_engine_metrics_fields_say() -> None:
    """Field by field (not ``dataclasses.asdict``): the same document, adapters sorted, ``None`` kept."""
    metrics = EngineMetrics(
        waiting=3, running=12, kv_usage=0.42, active_adapters=frozenset({"b", "a"}),
        waiting_adapters=frozenset(), num_gpu_blocks=27_000,
    )  # fmt: skip
    state = EndpointState(key="10.0.0.1:8000", labels={}, metrics=metrics, scraped_at=5.0, max_model_len=8192)
    doc = orjson.loads(snapshot("s", state))
    named = {f.name: getattr(metrics, f.name) for f in dataclasses.fields(EngineMetrics)}
    assert doc[3] == list({**named, "active_adapters": ["a", "b"], "waiting_adapters": []}.values())
    follower_state = EndpointState(key="10.0.0.1:8000", labels={})
    apply_snapshot(doc, follower_state)
    assert follower_state.metrics == metrics
    assert (follower_state.scraped_at, follower_state.max_model_len) == (5.0, 8192)


def test_every_engine_metrics_field_crosses_the_channel() -> None:
    """A value other than the default in every field of :class:`EngineMetrics`, by its declared type:
    ``apply_snapshot`` names the positions one by one, so a field added to the record and not there
    arrives as its default and fails here."""
    values: list[Any] = []
    types = declared_types(EngineMetrics)  # as written: the compiled build erases field.type
    for i, field in enumerate(dataclasses.fields(EngineMetrics)):
        declared = types[field.name]
        if "frozenset" in declared:
            values.append(frozenset({f"adapter-{i}"}))
        elif "float" in declared:
            values.append(i + 0.5)
        else:
            assert "int" in declared, declared
            values.append(i + 1)
    metrics = EngineMetrics(*values)
    state = EndpointState(key="10.0.0.1:8000", labels={}, metrics=metrics, scraped_at=5.0)
    follower_state = EndpointState(key="10.0.0.1:8000", labels={})
    apply_snapshot(orjson.loads(snapshot("s", state)), follower_state)
    assert follower_state.metrics == metrics
    assert [getattr(follower_state.metrics, f.name) for f in dataclasses.fields(EngineMetrics)] == values


SCRAPED_FIELDS = (
    *("metrics", "kv_source", "scraped_at", "scrape_failing", "last_error", "missing", "max_model_len"),
)


@pytest.mark.parametrize("with_metrics", [True, False])
def test_a_follower_takes_every_scraped_field_and_tells_its_pool_once(with_metrics: bool) -> None:
    """Every field a scrape writes, through the channel's bytes, equals the leader's; the follower's
    view is made anew from them, and the pool is told once per snapshot."""
    leader_state = EndpointState(
        key="10.0.0.1:8000",
        labels={},
        metrics=EngineMetrics(waiting=2, kv_usage=0.5, max_lora=4) if with_metrics else None,
        kv_source="vllm:kv_cache_usage_perc",
        scraped_at=7.25,
        scrape_failing=not with_metrics,
        last_error=None if with_metrics else "HTTP 503",
        missing=frozenset({"vllm:lora_requests_info", "vllm:cache_config_info"}),
        max_model_len=32_768,
    )
    leader_state.page.frozen = with_metrics
    follower_state = EndpointState(key="10.0.0.1:8000", labels={})
    told: list[str] = []
    follower_state.on_view_change = told.append
    before = follower_state.view()
    apply_snapshot(orjson.loads(snapshot("s", leader_state)), follower_state)
    assert told == ["10.0.0.1:8000"]
    for name in SCRAPED_FIELDS:
        assert getattr(follower_state, name) == getattr(leader_state, name), name
    assert follower_state.page.frozen is with_metrics
    assert follower_state.view() is not before
    assert follower_state.view() == leader_state.new_view()


@pytest.mark.parametrize(
    "doc",
    [
        ["s", "s", "10.0.0.1:8000", None, None, 1.0, False, None, []],  # items missing
        ["s", "s", "10.0.0.1:8000", [1, 2], None, 1.0, False, None, [], None, False],  # metrics too short
    ],
    ids=["short", "metrics-short"],
)
def test_a_malformed_snapshot_is_refused_and_leaves_the_state_as_it_was(doc: list[object]) -> None:
    state = EndpointState(key="10.0.0.1:8000", labels={}, scraped_at=3.0)
    with pytest.raises(ValueError, match="snapshot"):
        apply_snapshot(doc, state)
    assert (state.scraped_at, state.metrics) == (3.0, None)


def _follower() -> ScrapeFollower:
    runtime = worker_runtime("10.0.0.1:8000", "10.0.0.2:8000")
    return ScrapeFollower(
        "unused.sock",
        lambda: runtime,
        clock=lambda: 0.0,
        report_interval_s=lambda: 0.05,
        worker=1,
    )


def _reader(*chunks: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return reader


async def test_the_follower_reads_lines_cut_anywhere_by_the_reads() -> None:
    """Whole reads split into lines: a line cut between two reads, several in one, a last one
    without its newline (the channel closed mid-line, as ``readline`` returned it)."""
    states = [
        EndpointState(key=key, labels={}, metrics=EngineMetrics(waiting=i), scraped_at=float(i + 1))
        for i, key in enumerate(("10.0.0.1:8000", "10.0.0.2:8000"))
    ]
    data = b"".join(snapshot("s", state) for state in states) + CONFIG_CHANGED + b'{"t": "later-kind"}'
    for cut in range(1, len(data)):
        follower = _follower()
        changes: list[int] = []
        follower.on_config_change = functools.partial(changes.append, 1)
        reader = asyncio.StreamReader()
        reader.feed_data(data[:cut])
        task = asyncio.create_task(follower.read(reader))
        await asyncio.sleep(0)
        reader.feed_data(data[cut:])
        reader.feed_eof()
        await task
        pool = follower._runtime().schedulers["s"].pool.states
        assert [pool[s.key].scraped_at for s in states] == [1.0, 2.0], cut
        assert [pool[s.key].metrics for s in states] == [s.metrics for s in states], cut
        assert changes == [1], cut


def _snapshot_line(key: str, scraped_at: float, waiting: int) -> bytes:
    state = EndpointState(key=key, labels={}, metrics=EngineMetrics(waiting=waiting), scraped_at=scraped_at)
    return snapshot("s", state)


async def test_a_snapshot_of_an_endpoint_not_here_yet_is_applied_when_it_appears_and_only_then() -> None:
    """Worker 0 may scrape a pod before this worker's pool has it: its latest snapshot is held and
    applied when the endpoint appears (``sync``), never over a newer one taken since; an endpoint
    that leaves and comes back waits for its next scrape, as worker 0's new state does."""
    follower = _follower()
    runtime = follower._runtime()
    pool = runtime.schedulers["s"].pool
    later, early = "10.0.0.3:8000", "10.0.0.5:8000"
    await follower.read(
        _reader(_snapshot_line(later, 1.0, 1), _snapshot_line(later, 2.0, 2), _snapshot_line(early, 1.0, 1))
    )
    assert later not in pool.states
    pool.replace([DiscoveredEndpoint(key=k) for k in ("10.0.0.1:8000", "10.0.0.2:8000", later, early)])
    await follower.read(_reader(_snapshot_line(early, 5.0, 5)))  # before the pool's sync: the newer one stays
    try:
        follower.sync()
        state = pool.states[later]
        assert (state.scraped_at, state.metrics) == (2.0, EngineMetrics(waiting=2))
        assert (pool.states[early].scraped_at, pool.states[early].metrics) == (5.0, EngineMetrics(waiting=5))
        await follower.read(_reader(_snapshot_line(later, 3.0, 3)))
        follower.sync()  # nothing held any more: the newer snapshot stays
        assert (state.scraped_at, state.metrics) == (3.0, EngineMetrics(waiting=3))
        pool.replace([DiscoveredEndpoint(key=k) for k in ("10.0.0.1:8000", "10.0.0.2:8000")])
        pool.replace([DiscoveredEndpoint(key=k) for k in ("10.0.0.1:8000", "10.0.0.2:8000", later)])
        follower.sync()
        assert (pool.states[later].scraped_at, pool.states[later].metrics) == (None, None)
    finally:
        await follower.close()


async def test_a_runtime_swapped_between_two_lines_of_one_read_gets_the_later_snapshots() -> None:
    """The follower keeps each scheduler's pool for the lines of one read; any other line (here a
    configuration change whose handler swaps the runtime, as a reload does) makes it look again."""
    first = worker_runtime("10.0.0.1:8000")
    second = worker_runtime("10.0.0.1:8000", "10.0.0.4:8000")
    current = [first]
    follower = ScrapeFollower(
        "unused.sock", lambda: current[0], clock=lambda: 0.0, report_interval_s=lambda: 0.05, worker=1
    )
    follower.on_config_change = functools.partial(current.__setitem__, 0, second)
    data = _snapshot_line("10.0.0.1:8000", 1.0, 1) + CONFIG_CHANGED + _snapshot_line("10.0.0.4:8000", 2.0, 4)
    await follower.read(_reader(data))
    assert first.schedulers["s"].pool.states["10.0.0.1:8000"].scraped_at == 1.0
    assert second.schedulers["s"].pool.states["10.0.0.4:8000"].metrics == EngineMetrics(waiting=4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[1, 2]\n", "neither a snapshot nor an object"),
        (b"7\n", "neither a snapshot nor an object"),
        (b'["s", "s", "10.0.0.1:8000"]\n', "items"),
        (b'["s", ["s"], "10.0.0.1:8000", null, null, 1.0, false, null, [], null, false]\n', "strings"),
        (b"{not json\n", "unexpected character"),
        pytest.param(
            b"x" * 1026,
            "over 1024 bytes",
            marks=skip_compiled(
                "igw.gateway.scrape_share",
                "MAX_LINE is lowered by monkeypatch; compiled code bound the Final constant at build time",
            ),
        ),
    ],
    ids=["array", "number", "short-snapshot", "unhashable-scheduler", "not-json", "too-long"],
)
async def test_a_line_the_follower_cannot_read_ends_the_channel_with_value_error(
    data: bytes, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ValueError``: what ``_follow`` catches, logs and reconnects on (as for a broken socket). The
    line bound is lowered to 1 KiB here (it is 64 MiB)."""
    monkeypatch.setattr(scrape_share, "MAX_LINE", 1024)
    with pytest.raises(ValueError, match=message):
        await _follower().read(_reader(data))


class _Writer:
    """A follower's stream writer as the leader uses it: records each write with the loop's time."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.times: list[float] = []
        self.transport = self

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.times.append(asyncio.get_running_loop().time())


async def test_the_snapshots_of_one_relay_delay_go_out_in_one_write_before_any_later_line() -> None:
    delay = 0.05
    leader = ScrapeLeader(
        "unused.sock",
        lambda: None,  # type: ignore[arg-type,return-value]
        clock=lambda: 0.0,
        report_interval_s=lambda: 1.0,  # a fifth of it is longer than the delay
        relay_delay_s=delay,
    )
    writer = _Writer()
    leader._followers[writer] = {}  # type: ignore[index]
    states = [EndpointState(key=f"10.0.0.{i}:8000", labels={}, scraped_at=float(i)) for i in range(3)]
    loop = asyncio.get_running_loop()
    published_at = loop.time()
    leader.publish("s", states[0])
    await asyncio.sleep(0)
    assert writer.writes == []  # queued past the loop turn: later scrapes join the same write
    for state in states[1:]:
        leader.publish("s", state)
    await wait_for(lambda: bool(writer.writes), what="the queued snapshots' write")
    assert writer.writes == [b"".join(snapshot("s", state) for state in states)]
    # Not before the delay (a timer may fire up to a millisecond early), and not much after it.
    assert delay - 0.002 <= writer.times[0] - published_at < delay + 0.5
    leader.publish("s", states[0])
    leader.announce_config_change()  # a later line leaves at once, after the snapshot queued before it
    assert writer.writes[1:] == [snapshot("s", states[0]), CONFIG_CHANGED]
    await asyncio.sleep(delay * 2)
    assert len(writer.writes) == 3  # nothing left queued: the timer found nothing to write


async def test_a_snapshot_waits_at_most_a_fifth_of_a_short_scrape_interval() -> None:
    """The relay delay (10 ms) never exceeds ``RELAY_SHARE`` of the configured scrape interval: with
    a 20 ms interval the batch leaves after about 4 ms."""
    leader = ScrapeLeader(
        "unused.sock",
        lambda: None,  # type: ignore[arg-type,return-value]
        clock=lambda: 0.0,
        report_interval_s=lambda: 0.02,
        relay_delay_s=1.0,
    )
    writer = _Writer()
    leader._followers[writer] = {}  # type: ignore[index]
    loop = asyncio.get_running_loop()
    published_at = loop.time()
    leader.publish("s", EndpointState(key="10.0.0.1:8000", labels={}, scraped_at=1.0))
    await wait_for(lambda: bool(writer.writes), what="the snapshot's write")
    assert 0.004 - 0.002 <= writer.times[0] - published_at < 0.5
    assert scrape_share.RELAY_SHARE * 0.02 < scrape_share.RELAY_DELAY_S  # the share is what bounds it here
