"""One discovery per worker group: worker 0's reports reach the other workers over the scrape channel.

Units: the relaying sink reports to its own state first, keeps the latest report of each kind for a
worker that connects later, and a report round-trips into another sink; malformed reports are
refused. In one process over the real unix socket: worker 0 runs a static-file discovery, worker 1
never starts its own source and still gets every report - at start, on a change of the file, and
after it connects late.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from igw.config.model import SchedulerSpec
from igw.gateway.discovery import DiscoverySink
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.discovery_share import RelayingSink, apply_report
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.scrape_share import LeadingScraper, ScrapeFollower, ScrapeLeader, start_discovery
from tests.gateway.support import wait_for
from tests.gateway.worker_pair import Worker


class RecordingSink:
    """A discovery sink that keeps the last report of each kind."""

    def __init__(self) -> None:
        self.endpoints: dict[str, list[DiscoveredEndpoint]] = {}
        self.adapters: dict[str, str] | None = None
        self.services: dict[str, list[str]] | None = None
        self.calls: list[str] = []

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self.endpoints[scheduler] = list(endpoints)
        self.calls.append(f"endpoints {scheduler}")

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        self.adapters = dict(adapters)
        self.calls.append("adapters")

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        self.services = {name: list(addresses) for name, addresses in services.items()}
        self.calls.append("services")


class NeverStarted:
    """A discovery source a follower must not start (it would open its own API watches)."""

    async def start(self, sink: DiscoverySink) -> None:
        raise AssertionError("a follower started its own discovery source")

    async def stop(self) -> None:
        return None

    def retarget(self, schedulers: tuple[SchedulerSpec, ...]) -> None:
        raise AssertionError("a follower retargeted a discovery source it does not run")

    def describe(self) -> str:
        return "never started"


POD_A = DiscoveredEndpoint(key="10.0.0.1:8000", labels={"app": "llama", "gpu": "h200"}, pod="inference/a")
POD_B = DiscoveredEndpoint(key="10.0.0.2:8000", labels={}, pod=None)


def test_the_relaying_sink_reports_to_its_own_state_then_to_the_others() -> None:
    own, sent = RecordingSink(), list[bytes]()
    relay = RelayingSink(own, sent.append, min_interval_s=0.0)
    relay.apply_endpoints("s", [POD_A])
    relay.apply_endpoints("s", [POD_A, POD_B])
    relay.apply_endpoints("t", [])
    relay.apply_bbr_adapters({"sql-lora": "llama"})
    relay.apply_services({"fallback": ("127.0.0.1:9000",)})
    assert own.calls == ["endpoints s", "endpoints s", "endpoints t", "adapters", "services"]
    assert len(sent) == 5
    # a worker that connects now gets the latest of each: scheduler s's second list, not its first
    assert sorted(relay.lines()) == sorted(sent[1:])
    other = RecordingSink()
    for line in relay.lines():
        apply_report(orjson.loads(line), other)
    assert other.endpoints == {"s": [POD_A, POD_B], "t": []}
    assert other.adapters == {"sql-lora": "llama"}
    assert other.services == {"fallback": ["127.0.0.1:9000"]}


@pytest.mark.parametrize(
    "doc",
    [
        {"t": "d"},
        {"t": "d", "k": "pods"},
        {"t": "d", "k": "endpoints", "sch": "s"},
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [{}], "eps": [["10.0.0.1:8000", 0]]},
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [{}], "eps": 3},
        {"t": "d", "k": "endpoints", "sch": "s", "eps": [["10.0.0.1:8000", 0, None]]},  # no label sets
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [{}], "eps": [["10.0.0.1:8000", 1, None]]},
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [{}], "eps": [["10.0.0.1:8000", -1, None]]},
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [{}], "eps": [["10.0.0.1:8000", "0", None]]},
        {"t": "d", "k": "endpoints", "sch": "s", "ls": [["app"]], "eps": [["10.0.0.1:8000", 0, None]]},
        {"t": "d", "k": "adapters", "a": ["sql-lora"]},
        {"t": "d", "k": "services", "v": None},
    ],
)
def test_a_malformed_report_is_refused(doc: dict[str, Any]) -> None:
    sink = RecordingSink()
    with pytest.raises(ValueError, match="discovery report"):
        apply_report(doc, sink)
    assert sink.calls == []


HYPERPOD_LABELS = {
    "app": "llama-3-1-8b-instruct",
    "app.kubernetes.io/name": "llama-3-1-8b-instruct",
    "app.kubernetes.io/instance": "llama-3-1-8b-instruct-prod",
    "app.kubernetes.io/managed-by": "sagemaker-hyperpod",
    "pod-template-hash": "7c9f8d6b5d",
    "sagemaker.amazonaws.com/model": "meta-llama/Llama-3.1-8B-Instruct",
    "version": "v3",
}
"""About what a HyperPod model pod carries (450 bytes per endpoint when written out per endpoint)."""


def _pool(n: int, *, distinct: bool = False) -> list[DiscoveredEndpoint]:
    """``n`` pods of one Deployment (one label set), or each with a label of its own."""
    return [
        DiscoveredEndpoint(
            key=f"10.1.{i // 250}.{i % 250}:8000",
            labels={**HYPERPOD_LABELS, "slot": str(i)} if distinct else dict(HYPERPOD_LABELS),
            pod=f"inference/llama-3-1-8b-instruct-7c9f8d6b5d-{i:05d}",
        )
        for i in range(n)
    ]


class ManualTimers:
    """A clock and ``call_later`` the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> None:
        self.due.append((self.now + delay_s, callback))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        ready = [c for at, c in self.due if at <= self.now]
        self.due = [(at, c) for at, c in self.due if at > self.now]
        for callback in ready:
            callback()


def _keys(line: bytes) -> list[str]:
    return [row[0] for row in orjson.loads(line)["eps"]]


def test_reports_of_a_kind_leave_at_most_once_per_interval_the_latest_held() -> None:
    """A burst of pool changes (a rolling update): the first report leaves at once, the others are
    held and only the latest leaves when the interval is up; worker 0's own state and a worker that
    connects meanwhile see every change at once; another kind is not held back by this one."""
    timers, own, sent = ManualTimers(), RecordingSink(), list[bytes]()
    relay = RelayingSink(
        own, sent.append, min_interval_s=0.05, clock=lambda: timers.now, schedule=timers.schedule
    )
    pools = [[POD_A], [POD_A, POD_B], [POD_B], [POD_A, POD_B]]
    for pool in pools:
        relay.apply_endpoints("s", pool)
        timers.advance(0.01)
    assert own.calls == ["endpoints s"] * 4  # this worker's own state: every report, at once
    assert [_keys(line) for line in sent] == [[POD_A.key]]
    assert [_keys(line) for line in relay.lines()] == [[POD_A.key, POD_B.key]]  # the replay is the newest
    relay.apply_bbr_adapters({"sql-lora": "llama"})  # another kind: its own interval
    assert orjson.loads(sent[-1])["k"] == "adapters"
    timers.advance(0.02)  # 0.06 s after the first report: the latest held one leaves
    assert [_keys(line) for line in sent if b'"endpoints"' in line] == [[POD_A.key], [POD_A.key, POD_B.key]]
    timers.advance(1.0)  # quiet: nothing more
    assert len(sent) == 3
    relay.apply_endpoints("s", [POD_B])  # after a quiet interval: at once
    assert _keys(sent[-1]) == [POD_B.key]
    relay.apply_endpoints("t", [POD_A])  # another scheduler: its own interval
    assert _keys(sent[-1]) == [POD_A.key]


@contextlib.asynccontextmanager
async def _relay_to_a_follower(
    tmp_path: Path,
) -> AsyncIterator[tuple[ScrapeLeader, RelayingSink, RecordingSink]]:
    """Worker 0's leader and discovery relay, and the sink a connected follower's reports land in."""
    leader, follower = Worker(0, tmp_path), Worker(1, tmp_path)
    await leader.start()
    await follower.start()
    try:
        service = follower.service
        assert isinstance(service, ScrapeFollower)
        followed = RecordingSink()
        service.follow_discovery(followed)
        await wait_for(service.connected.is_set, what="the follower connected")
        assert isinstance(leader.service, LeadingScraper)
        yield leader.service.leader, leader.service.leader.relaying(RecordingSink()), followed
        assert service.connected.is_set()  # never dropped on the way
    finally:
        await follower.close()
        await leader.close()


async def test_a_burst_of_pool_changes_reaches_a_follower_as_its_latest_pool(tmp_path: Path) -> None:
    async with _relay_to_a_follower(tmp_path) as (_, relay, followed):
        for n in range(1, 101):  # a hundred pod events in one go
            relay.apply_endpoints("s", _pool(n))
        await wait_for(lambda: len(followed.endpoints.get("s", [])) == 100, what="the last pool")
        assert followed.endpoints["s"] == _pool(100)
        assert followed.calls.count("endpoints s") == 2  # the first at once, the latest after the interval


def test_a_report_lists_each_label_set_once_and_reads_back_the_same() -> None:
    pool = [*_pool(3), POD_A, POD_B, *_pool(2)]
    sent: list[bytes] = []
    relay = RelayingSink(RecordingSink(), sent.append, min_interval_s=0.0)
    relay.apply_endpoints("s", pool)
    doc = orjson.loads(sent[0])
    assert doc["ls"] == [HYPERPOD_LABELS, POD_A.labels, POD_B.labels]
    assert [row[1] for row in doc["eps"]] == [0, 0, 0, 1, 2, 0, 0]
    other = RecordingSink()
    apply_report(doc, other)
    assert other.endpoints["s"] == pool
    first, second = other.endpoints["s"][:2]
    assert first.labels is not second.labels  # each endpoint its own dict, as discovery made them
    assert relay.replay_bytes == len(sent[0])
    # A pool of one Deployment costs about its addresses and pod names, not its labels per pod.
    relay.apply_endpoints("s", _pool(5000))
    assert relay.replay_bytes == len(sent[-1]) < 5000 * 100


@pytest.mark.parametrize("distinct", [False, True], ids=["one-deployment", "every-label-set-distinct"])
async def test_a_follower_gets_a_pool_of_twenty_thousand_endpoints(tmp_path: Path, distinct: bool) -> None:
    """Written out per endpoint, a pool of 2,300 such pods passed the 1 MiB line bound and the
    followers reconnected for ever with empty pools; a report that outgrows the 4 MiB backlog (every
    label set distinct: 9 MB) is not a follower that stopped reading, even with more lines behind it."""
    async with _relay_to_a_follower(tmp_path) as (leader, relay, followed):
        pool = _pool(20_000, distinct=distinct)
        relay.apply_endpoints("s", pool)
        for _ in range(3):  # later lines while the report is still unread
            leader.announce_config_change()
        await wait_for(lambda: len(followed.endpoints.get("s", [])) == len(pool), what="the whole pool")
        assert followed.endpoints["s"] == pool


def _write_endpoints(path: Path, *addresses: str) -> None:
    path.write_text("schedulers:\n  s:\n" + "".join(f"    - {a}\n" for a in addresses))


async def test_worker_0_discovers_and_a_follower_gets_every_report(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    _write_endpoints(endpoints, "127.0.0.1:8001")
    leader, follower = Worker(0, tmp_path), Worker(1, tmp_path)
    source = StaticFileDiscovery(endpoints, names={"s": "s", "m": "s"}, poll_interval_s=0.02)
    leader_state, follower_state = RecordingSink(), RecordingSink()
    await leader.start()
    try:
        assert leader.service is not None
        assert await start_discovery(leader.service, source, leader_state) is True
        assert [e.key for e in leader_state.endpoints["s"]] == ["127.0.0.1:8001"]
        # The follower connects after worker 0 reported: the replay brings it up to date, and the
        # reports that arrive before it has a sink are kept for it (in the app it gets one first).
        await follower.start()
        service = follower.service
        assert isinstance(service, ScrapeFollower)
        await wait_for(lambda: bool(service._early_reports), what="the replay, before the sink")
        assert await start_discovery(service, NeverStarted(), follower_state) is False
        assert follower_state.endpoints == leader_state.endpoints
        assert follower_state.services == {}
        _write_endpoints(endpoints, "127.0.0.1:8001", "127.0.0.1:8002")
        await wait_for(
            lambda: [e.key for e in follower_state.endpoints["s"]] == ["127.0.0.1:8001", "127.0.0.1:8002"],
            what="the file's change in the follower",
        )
    finally:
        await source.stop()
        await follower.close()
        await leader.close()
