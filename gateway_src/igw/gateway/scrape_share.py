"""One scrape of each pod per interval for the whole host: worker 0 scrapes, the others follow.

With ``igw serve --workers N`` every worker process routes with its own pools, but only the *leader*
(worker 0) runs the :class:`~igw.gateway.scraper.Scraper`. After every scrape it publishes the
endpoint's new state - parsed signals, scrape time, failure, missing signals, frozen flag, context
window - to the *followers* over a unix stream socket in a private directory, and each follower
writes it into its own :class:`~igw.gateway.endpoints.EndpointState`. The other way, every follower
reports, once per scrape interval, the per-endpoint dispatch counts and in-flight requests that
changed (worker 0 merges them), so the leader's frozen-page detection sees the whole host's traffic
(a page that stops moving while *any* worker sends requests to the pod is frozen). On the same
channel, every few milliseconds (:func:`~igw.scheduling.pick_notes.note_interval`) while they make
any, the workers exchange their *pick notes* (:mod:`igw.gateway.pick_share`): each follower's go
to the leader, which learns them and relays them to the other followers, and the leader's go to
every follower, so each worker's prefix index also knows the prompts the other workers routed.
Worker 0's discovery reports travel on the same channel too (:mod:`igw.gateway.discovery_share`):
the other workers run no discovery source of their own.

Why a unix socket with newline-delimited JSON rather than shared memory: a snapshot is a few hundred
bytes and changes once per scrape, so the copy is not the cost - the CPU goes into encoding it once
and decoding it once per follower, which shared memory would need too; a socket gives per-follower
back-pressure and tells each side when the other died, which a shared-memory ring would need its own
protocol for.
``time.monotonic`` is the same clock in every process of a host (``CLOCK_MONOTONIC``), so scrape
times travel as they are and staleness means the same thing in every worker.

A follower whose leader goes away keeps its last snapshots, which age into staleness (the
scheduler's rule, not this module's); the supervisor ends the whole group when a worker dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final, Protocol

import orjson

from igw.gateway.discovery import DiscoverySink, DiscoverySource
from igw.gateway.discovery_share import KIND as DISCOVERY
from igw.gateway.discovery_share import RelayingSink, apply_report, report_slot
from igw.gateway.endpoints import EndpointState
from igw.gateway.pick_share import KIND as PICKS
from igw.gateway.pick_share import PickNoteCollector, PickShare
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.scrape_client import PageGetter
from igw.gateway.scraper import Scraper, ScrapeService
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.workers import WorkerRole
from igw.scheduling.pick_notes import note_interval
from igw.scheduling.types import EngineMetrics

log = logging.getLogger("igw.gateway.scrape_share")

MAX_FOLLOWER_BACKLOG: Final = 4 * 1024 * 1024
"""Bytes a follower may leave unread before the leader drops it (it reconnects and resyncs)."""
MAX_NOTES_BACKLOG: Final = MAX_FOLLOWER_BACKLOG // 2
"""Unsent bytes above which a batch of pick notes is skipped instead of written (counted in
``PickShare.lines_unsent``): notes are a hint, never a reason to disconnect a peer."""
RECONNECT_S: Final = 0.05
RELAY_DELAY_S: Final = 0.01
"""Longest a scrape's snapshot waits in worker 0 before it is written to the followers, with the
others that land meanwhile: a fifth of the default scrape interval, a hundredth of the default stale
threshold, and never more than :data:`RELAY_SHARE` of the configured interval. Why wait at all:
worker 0's loop turns are short at 1,000 pods, and writing at the end of each woke every follower
about 900 times a second for a few snapshots each; a wake-up costs a follower about as much as
applying the snapshots it brings. 5 ms until session s27; 10 ms halves the wake-ups again and cut a
16-worker group at 1,000 busy pods from 1.05-1.06 to 0.97 of a core (docs/gateway.md, "Lean data
path, round 23")."""
RELAY_SHARE: Final = 0.2
"""The share of the scrape interval a snapshot waits at most (a configured 20 ms interval: 4 ms)."""
NOTE_LINE_BYTES: Final = 1024 * 1024
"""Pick notes are sent in lines of at most this size (a busy interval's notes are split)."""
MAX_LINE: Final = 64 * 1024 * 1024
"""Longest line either end of the channel reads. Worker 0's discovery report lists a whole pool and a
follower's usage report every endpoint it ever sent a request to, so both grow with the pool; the
bound only stops a broken worker from filling the other's memory."""
READ_BYTES: Final = 256 * 1024
"""Bytes a follower asks for per read of worker 0's channel (it gets what has arrived, up to that)."""
CONFIG: Final = "c"
"""The ``t`` of worker 0's line saying its configuration file changed: the others check theirs now."""
CONFIG_CHANGED: Final = orjson.dumps({"t": CONFIG}) + b"\n"
_SETS: Final = ("active_adapters", "waiting_adapters")

_Pools = dict[str, dict[str, EndpointState] | None]
"""Scheduler name -> its pool's endpoint states (``None``: no such scheduler), kept for one read."""
Usage = dict[tuple[str, str], tuple[int, int]]
"""(scheduler, endpoint) -> (dispatches ever, requests in flight) of one follower, for the endpoints
it has dispatched to."""


def _encode_default(value: object) -> object:
    if isinstance(value, frozenset):
        return sorted(value)
    raise TypeError(f"cannot share a {type(value).__name__}")


_METRIC_FIELDS: Final = tuple(f.name for f in fields(EngineMetrics))
_metric_values: Final = operator.attrgetter(*_METRIC_FIELDS)
_SET_POSITIONS: Final = tuple(i for i, name in enumerate(_METRIC_FIELDS) if name in _SETS)
SNAPSHOT: Final = "s"
"""The first item of a snapshot line (the other lines are objects with their kind in ``t``)."""
Snapshot = list[Any]
"""A decoded snapshot line: ``[SNAPSHOT, scheduler, key, metrics, kv source, scraped at, failing, last
error, missing families, context window, frozen]``, ``metrics`` a list in :class:`EngineMetrics`
field order (adapter sets as sorted lists) or ``None``."""
_SCHEDULER, _KEY, _SCRAPED_AT, _ITEMS = 1, 2, 5, 11
_NONE_MISSING: Final[frozenset[str]] = frozenset()
"""The missing families of a page that has every one (most snapshots): one object, not one per snapshot."""


def snapshot(scheduler: str, state: EndpointState) -> bytes:
    """One endpoint's scraped state as a channel line (:data:`Snapshot`).

    Why a positional array rather than an object with named fields: it is encoded once per scrape
    of every pod and decoded by every follower, and at 1,000 busy pods a follower's cost per
    snapshot was most of its CPU; the array decodes without a key per field and the metrics are
    built positionally. Both ends are the same build (one image per pod), so the order is one
    source: :class:`EngineMetrics`' fields, here and in :func:`apply_snapshot`."""
    m = state.metrics
    doc = [
        SNAPSHOT,
        scheduler,
        state.key,
        # One C-level getter for the fields (a tuple, encoded as an array): ``dataclasses.asdict``
        # deep-copies every value, and was most of the leader's cost per snapshot (every scrape of
        # every pod, once per worker group).
        None if m is None else _metric_values(m),
        state.kv_source,
        state.scraped_at,
        state.scrape_failing,
        state.last_error,
        sorted(state.missing),
        state.max_model_len,
        state.page.frozen,
    ]
    return orjson.dumps(doc, default=_encode_default) + b"\n"


def apply_snapshot(doc: Snapshot, state: EndpointState) -> None:
    """Write a leader's snapshot into a follower's endpoint state (``ValueError`` for a malformed one)."""
    if len(doc) != _ITEMS:
        raise ValueError(f"a snapshot has {_ITEMS} items, not {len(doc)}")
    _, _, _, raw, kv_source, scraped_at, failing, last_error, missing, max_model_len, frozen = doc
    if raw is None:
        metrics = None
    else:
        if type(raw) is not list or len(raw) != len(_METRIC_FIELDS):
            raise ValueError(f"a snapshot's metrics are not the {len(_METRIC_FIELDS)} EngineMetrics fields")
        for i in _SET_POSITIONS:
            if (names := raw[i]) is not None:
                raw[i] = frozenset(names)
        try:
            # Each position spelled out, not ``*raw``: the compiled build then calls the native
            # constructor directly instead of through ``type.__call__`` and argument parsing (every
            # snapshot in every follower). ``tests/gateway/test_scrape_share.py`` round-trips a value in
            # every field, so a field added to EngineMetrics and not here fails there.
            metrics = EngineMetrics(raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7])
        except TypeError as exc:  # the compiled constructor checks each field's type
            raise ValueError(f"a snapshot's metrics have a field of the wrong type: {exc}") from exc
    state.take_scrape(
        metrics,
        kv_source,
        scraped_at,
        failing,
        last_error,
        frozenset(missing) if missing else _NONE_MISSING,
        max_model_len,
    )
    state.page.frozen = frozen


def take_usage(usage: Usage, rows: list[list[Any]]) -> None:
    """Write a follower's usage report into what worker 0 holds of that follower: each row
    ``[scheduler, endpoint, dispatches ever, in flight]`` replaces the endpoint's, and ``0, 0`` drops
    it (:meth:`ScrapeFollower.usage_rows` sends only what changed since its last report)."""
    for scheduler, key, picks, inflight in rows:
        if picks or inflight:
            usage[(scheduler, key)] = (picks, inflight)
        else:
            usage.pop((scheduler, key), None)


class ScrapeLeader:
    """Worker 0's side: accept followers, publish each scrape, collect their usage."""

    def __init__(
        self,
        path: str,
        runtime: Callable[[], GatewayRuntime],
        *,
        clock: Callable[[], float],
        report_interval_s: Callable[[], float],
        relay_delay_s: float = RELAY_DELAY_S,
    ) -> None:
        self._path = path
        self._runtime = runtime
        self._interval = report_interval_s
        self._relay_delay_s = relay_delay_s
        self._server: asyncio.Server | None = None
        self._followers: dict[asyncio.StreamWriter, Usage] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sharer: asyncio.Task[None] | None = None
        self._discovery: RelayingSink | None = None
        self.picks = PickShare(runtime, clock, max_line=NOTE_LINE_BYTES)
        self._queued: list[bytes] = []
        """Snapshots published since the last write, written to the followers together."""

    def relaying(self, sink: DiscoverySink) -> RelayingSink:
        """The sink worker 0's discovery source reports to: ``sink``, and every follower after it."""
        self._discovery = RelayingSink(sink, self._broadcast)
        return self._discovery

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=self._path, limit=MAX_LINE)
        self._sharer = asyncio.create_task(self._share_picks(), name="pick notes to the workers")

    async def _share_picks(self) -> None:
        """Every note interval while there are any, this worker's pick notes to every follower
        (idle: one drain per scrape interval, or at the first note; :meth:`PickShare.due`)."""
        while True:
            # Drained first: the first drain attaches the outboxes, so picks are noted from the start.
            for line in self.picks.lines():
                self.picks.remember(line)  # also with no follower yet: one that joins gets them
                self._send_notes(line, sender=None)
            interval = self._interval()
            await self.picks.due(note_interval(interval), interval)

    def _send_notes(self, line: bytes, *, sender: asyncio.StreamWriter | None) -> None:
        for writer in list(self._followers):
            if writer is not sender:
                self.picks.write(writer, line, max_unsent=MAX_NOTES_BACKLOG)

    def announce_config_change(self) -> None:
        """Tell every follower that the configuration file changed (they reload it now)."""
        self._broadcast(CONFIG_CHANGED)

    def publish(self, scheduler: str, state: EndpointState) -> None:
        """Send ``state`` to every follower (called by the scraper after each scrape) within
        :data:`RELAY_DELAY_S` (:data:`RELAY_SHARE` of a shorter interval), with the other scrapes
        that land meanwhile: one write, and one
        wake-up of each follower, per batch instead of per scrape (a follower's cost per snapshot
        was mostly its wake-up: the scraper's pages land a few at a time, spread over the interval).
        A line sent meanwhile (:meth:`_broadcast`) takes the queued snapshots with it, in order."""
        if self._followers:
            queued = self._queued
            queued.append(snapshot(scheduler, state))
            if len(queued) == 1:
                delay = min(self._relay_delay_s, RELAY_SHARE * self._interval())
                asyncio.get_running_loop().call_later(delay, self._write_queued)

    def _write_queued(self) -> None:
        if self._queued:
            lines, self._queued = self._queued, []
            self._write_all(b"".join(lines))

    def _broadcast(self, line: bytes) -> None:
        """``line`` to every follower, after the snapshots already queued (the order they were made)."""
        self._write_queued()
        self._write_all(line)

    def _write_all(self, line: bytes) -> None:
        # Beyond the usual backlog, room for two rounds of the discovery reports: a large pool's
        # report is written at once, and a worker reading it is not one that stopped reading.
        replay = 0 if self._discovery is None else self._discovery.replay_bytes
        limit = MAX_FOLLOWER_BACKLOG + 2 * replay
        for writer in list(self._followers):
            if writer.transport.get_write_buffer_size() > limit:
                log.warning("a worker does not read scrape snapshots: disconnected it (it resyncs)")
                self._followers.pop(writer, None)
                writer.close()
                continue
            writer.write(line)

    def remote_usage(self, scheduler: str, key: str) -> tuple[int, int]:
        """The other workers' (dispatches ever, requests in flight) to this endpoint, summed."""
        picks = inflight = 0
        for usage in self._followers.values():
            p, i = usage.get((scheduler, key), (0, 0))
            picks += p
            inflight += i
        return picks, inflight

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._followers[writer] = {}
        try:
            # Endpoints first, so the snapshots that follow land in pools that hold them.
            for line in [] if self._discovery is None else self._discovery.lines():
                writer.write(line)
            for name, sr in self._runtime().schedulers.items():
                for state in sr.pool.states.values():
                    if state.scraped_at is not None or state.scrape_failing:
                        writer.write(snapshot(name, state))
            self.picks.replay(writer)
            while line := await reader.readline():
                doc = orjson.loads(line)
                kind = doc.get("t")
                if kind == "u" and writer in self._followers:
                    take_usage(self._followers[writer], doc["u"])
                elif kind == PICKS:
                    self.picks.learn(doc)
                    self.picks.remember(line)
                    self._send_notes(line, sender=writer)  # the same bytes to the other followers
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log.warning("scrape channel to a worker failed: %s", exc)
        except asyncio.CancelledError:
            # close() ends the channel on purpose. Returning rather than re-raising: on Python 3.11
            # the stream server's done-callback calls ``exception()`` on a cancelled handler task and
            # logs the resulting CancelledError as an unhandled error at every shutdown.
            pass
        finally:
            self._followers.pop(writer, None)
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        if self._sharer is not None:
            self._sharer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sharer
            self._sharer = None
        if self._server is not None:
            self._server.close()
        for writer in list(self._followers):
            writer.close()
        self._followers.clear()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()


class ScrapeFollower:
    """A worker other than 0: take every endpoint's state from the leader instead of scraping.

    Has the scraper's ``sync``/``close`` so the gateway state drives it the same way.
    """

    def __init__(
        self,
        path: str,
        runtime: Callable[[], GatewayRuntime],
        *,
        clock: Callable[[], float],
        report_interval_s: Callable[[], float],
        worker: int,
    ) -> None:
        self._path = path
        self._runtime = runtime
        self._interval = report_interval_s
        self._clock = clock
        self.picks = PickShare(runtime, clock, max_line=NOTE_LINE_BYTES, worker=worker)
        self._latest: dict[tuple[str, str], Snapshot] = {}
        """The latest snapshot of each endpoint this worker's pools do not hold (yet): worker 0 may
        scrape a pod before this worker's discovery has it. Applied and dropped by :meth:`sync` when
        the endpoint appears here. Not kept for endpoints that are here: a new state for a returning
        endpoint waits for its next scrape, as worker 0's does (and holding every endpoint's last
        snapshot freed each one ``interval`` later, out of cache: a fifth of a follower's CPU)."""
        self._task: asyncio.Task[None] | None = None
        self._discovery: DiscoverySink | None = None
        self._early_reports: dict[tuple[str, str], dict[str, Any]] = {}
        self.connected = asyncio.Event()
        self.on_config_change: Callable[[], None] | None = None
        """Called when worker 0 says its configuration file changed, and on every (re)connection to
        it (a change may have gone by meanwhile)."""

    def follow_discovery(self, sink: DiscoverySink) -> None:
        """Hand worker 0's discovery reports to ``sink`` instead of running a discovery source here
        (with those that arrived before, in their order)."""
        self._discovery = sink
        early, self._early_reports = self._early_reports, {}
        for doc in early.values():
            try:
                apply_report(doc, sink)
            except ValueError as exc:
                log.warning("worker 0 sent a discovery report this worker cannot read: %s", exc)

    def sync(self) -> None:
        """Start following (first call) and apply the latest snapshot of endpoints that just appeared."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="scrape follower")
        for (scheduler, key), doc in list(self._latest.items()):
            state = self._state(scheduler, key)
            if state is not None:
                del self._latest[(scheduler, key)]
                apply_snapshot(doc, state)

    def _state(self, scheduler: str, key: str) -> EndpointState | None:
        states = self._states(scheduler)
        return None if states is None else states.get(key)

    def _states(self, scheduler: str) -> dict[str, EndpointState] | None:
        """The endpoint states of ``scheduler``'s pool in the current runtime (``None``: no such
        scheduler here)."""
        sr = self._runtime().schedulers.get(scheduler)
        return None if sr is None else sr.pool.states

    async def _follow(self) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self._path, limit=MAX_LINE)
            except OSError:
                await asyncio.sleep(RECONNECT_S)
                continue
            self.connected.set()
            if self.on_config_change is not None:
                self.on_config_change()
            reporter = asyncio.create_task(self._report(writer), name="scrape usage report")
            try:
                await self.read(reader)
            except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                log.warning("scrape channel to worker 0 failed: %s", exc)
            finally:
                self.connected.clear()
                reporter.cancel()
                # ``gather`` hands the reporter's own CancelledError back as a result but still raises
                # when *this* task is cancelled (close() during a reconnect): suppressing both would
                # swallow close()'s cancellation, and the follower would reconnect for ever.
                try:
                    await asyncio.gather(reporter, return_exceptions=True)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
            log.warning("scrape channel to worker 0 closed: reconnecting")
            await asyncio.sleep(RECONNECT_S)

    async def read(self, reader: asyncio.StreamReader) -> None:
        """Handle worker 0's lines until it closes the channel (``ValueError`` for a line that is not
        JSON or is longer than :data:`MAX_LINE`).

        Why whole reads split here rather than ``readline``: worker 0 writes a loop turn's snapshots in
        one write, and a ``readline`` per line was a coroutine step per snapshot; one read takes all
        that arrived. A last line without its newline (the channel closed mid-line) is handled as
        ``readline`` returned it."""
        rest = b""
        while chunk := await reader.read(READ_BYTES):
            lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE:
                raise ValueError(f"a line of worker 0's channel is over {MAX_LINE} bytes")
            pools: _Pools = {}
            for line in lines:
                self._handle(orjson.loads(line), pools)
        if rest:
            self._handle(orjson.loads(rest), {})

    def _handle(self, doc: object, pools: _Pools) -> None:
        """One line of worker 0's: a snapshot (an array, :data:`Snapshot`), or an object with its kind
        in ``t``: pick notes, a configuration change, a discovery report (another kind is skipped);
        ``ValueError`` for anything else.

        ``pools`` keeps each scheduler's endpoint states for the lines of one read: looking them up
        through the runtime cost a call into the interpreter and two generic attribute reads per
        snapshot in the compiled build. Any other line empties it (a discovery report or a reload may
        change what the runtime holds)."""
        if type(doc) is list and doc and doc[0] == SNAPSHOT:
            if len(doc) != _ITEMS:
                raise ValueError(f"a snapshot has {_ITEMS} items, not {len(doc)}")
            scheduler, key = doc[_SCHEDULER], doc[_KEY]
            if type(scheduler) is not str or type(key) is not str:
                raise ValueError("a snapshot names its scheduler and endpoint with strings")
            if scheduler in pools:
                states = pools[scheduler]
            else:
                states = pools[scheduler] = self._states(scheduler)
            state = None if states is None else states.get(key)
            if state is None:
                self._latest[(scheduler, key)] = doc
                return
            if self._latest:  # one held from before the endpoint appeared here is older than this one
                self._latest.pop((scheduler, key), None)
            apply_snapshot(doc, state)
            return
        pools.clear()
        if type(doc) is not dict:
            raise ValueError(f"worker 0 sent a line that is neither a snapshot nor an object: {doc!r:.80}")
        kind = doc.get("t")
        if kind == PICKS:
            self.picks.learn(doc)
        elif kind == CONFIG:
            if self.on_config_change is not None:
                self.on_config_change()
        elif kind == DISCOVERY:
            if self._discovery is None:
                self._early_reports[report_slot(doc)] = doc
            else:
                apply_report(doc, self._discovery)

    def usage_rows(self, reported: Usage) -> list[list[Any]]:
        """The usage rows that changed since ``reported`` (what worker 0 holds of this worker: every
        endpoint with a dispatch and its (dispatches ever, requests in flight)), which is brought up to
        date; an endpoint no longer in the pools is sent as ``0, 0`` (worker 0 drops it, :func:`take_usage`).

        Why only the changes: once it has served traffic a worker has dispatched to every endpoint, so
        a whole report is every endpoint of the pool every scrape interval from every worker - at
        1,000 endpoints and 16 workers about 180 µs of decoding in worker 0 per report, 5.5 % of a core
        - while an interval changes the counts of the few endpoints its requests went to."""
        rows: list[list[Any]] = []
        seen: set[tuple[str, str]] = set()
        for name, sr in self._runtime().schedulers.items():
            for key, state in sr.pool.states.items():
                picks = state.picks
                if not picks:
                    continue
                slot = (name, key)
                seen.add(slot)
                now = (picks, state.inflight)
                if reported.get(slot) != now:
                    reported[slot] = now
                    rows.append([name, key, picks, now[1]])
        if len(seen) != len(reported):
            for slot in [slot for slot in reported if slot not in seen]:
                del reported[slot]
                rows.append([slot[0], slot[1], 0, 0])
        return rows

    async def _report(self, writer: asyncio.StreamWriter) -> None:
        """Usage to the leader every scrape interval (what changed, :meth:`usage_rows`), pick notes
        every (shorter) note interval while there are any (idle: at the first note or the next usage
        report; :meth:`PickShare.due`)."""
        reported_at = float("-inf")
        reported: Usage = {}
        while True:
            interval = self._interval()
            now = self._clock()
            if now - reported_at >= interval:
                reported_at = now
                rows = self.usage_rows(reported)  # empty at each connection, as worker 0's copy is
                if rows:
                    writer.write(orjson.dumps({"t": "u", "u": rows}) + b"\n")
            for line in self.picks.lines():
                self.picks.write(writer, line, max_unsent=MAX_NOTES_BACKLOG)
            await self.picks.due(note_interval(interval), max(0.0, reported_at + interval - self._clock()))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class LeadingScraper:
    """Worker 0: the scraper, publishing every scrape to the followers."""

    def __init__(self, scraper: Scraper, leader: ScrapeLeader) -> None:
        self._scraper = scraper
        self.leader = leader

    def sync(self) -> None:
        self._scraper.sync()

    async def close(self) -> None:
        await self._scraper.close()
        await self.leader.close()


async def start_scraping(
    role: WorkerRole | None,
    *,
    runtime: Callable[[], GatewayRuntime],
    client: PageGetter,
    clock: Callable[[], float],
    metrics: GatewayMetrics,
) -> ScrapeService:
    """The scrape service for this process: a plain scraper, or a worker group's leader or follower."""
    if role is None:
        return Scraper(runtime=runtime, client=client, clock=clock, metrics=metrics)

    def interval() -> float:
        return runtime().settings.scrape_interval_s

    if not role.leads_scraping:
        follower = ScrapeFollower(
            role.scrape_channel, runtime, clock=clock, report_interval_s=interval, worker=role.index
        )
        metrics.registry.register(PickNoteCollector(follower.picks))
        return follower
    leader = ScrapeLeader(role.scrape_channel, runtime, clock=clock, report_interval_s=interval)
    metrics.registry.register(PickNoteCollector(leader.picks))
    await leader.start()
    scraper = Scraper(
        runtime=runtime,
        client=client,
        clock=clock,
        metrics=metrics,
        publish=leader.publish,
        remote_usage=leader.remote_usage,
    )
    return LeadingScraper(scraper, leader)


async def start_discovery(scrape: ScrapeService, discovery: DiscoverySource, sink: DiscoverySink) -> bool:
    """Start ``discovery`` reporting to ``sink`` - or, in a worker group, only in worker 0, which relays
    its reports to the others (:mod:`igw.gateway.discovery_share`). ``True`` when the source runs
    here (then it follows reloaded schedulers); ``False`` for a follower, which takes worker 0's."""
    if isinstance(scrape, ScrapeFollower):
        scrape.follow_discovery(sink)
        return False
    await discovery.start(scrape.leader.relaying(sink) if isinstance(scrape, LeadingScraper) else sink)
    return True


class FollowsReloads(Protocol):
    """What :func:`share_config_reloads` needs of the configuration reloader."""

    follows: bool
    on_changed: Callable[[], None] | None

    def nudge(self) -> None: ...


def share_config_reloads(scrape: ScrapeService, reloader: FollowsReloads) -> None:
    """In a worker group, worker 0's reloader announces every change of the configuration file and
    the others reload when told (see ``ConfigReloader.follows``); a single process is left as it is."""
    if isinstance(scrape, ScrapeFollower):
        reloader.follows = True
        scrape.on_config_change = reloader.nudge
    elif isinstance(scrape, LeadingScraper):
        reloader.on_changed = scrape.leader.announce_config_change
