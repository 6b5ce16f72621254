"""Pick notes on the worker channel: every worker's picks reach the other workers' plugins.

The notes themselves (what a plugin shares, the bounded outbox the request path appends to, the
learner) are :mod:`igw.scheduling.pick_notes`; this module moves them between the processes of
``igw serve --workers N`` over the scrape channel of :mod:`igw.gateway.scrape_share`, every
:func:`~igw.scheduling.pick_notes.note_interval` (a few milliseconds) while there are notes: each
follower sends its batch to worker 0, which learns it and relays the same bytes to the other
followers, and worker 0 sends its own batch to every follower. A worker with nothing to send
sleeps until its first note (:meth:`PickShare.due`).

A batch is one or more channel lines ``{"t": "p", "w": worker, "p": [[scheduler, at, plugin,
endpoint, note], ...]}``, each at most ``max_line`` bytes (the channel reader's limit), so a busy
interval is split rather than breaking the channel. Nothing here runs on the request path:
gathering drains the outboxes, learning runs in the channel's reader. Ejections and adapter 404s
(:data:`UNSKIPPABLE`) go in lines of their own, marked :data:`URGENT`, which a peer's backlog never
makes :meth:`PickShare.write` skip.

**Late joiners.** Worker 0 keeps the lines it sent or relayed in the last stale threshold (at most
:data:`REPLAY_LINES` lines and :data:`REPLAY_BYTES` bytes) and replays them to a worker that
(re)connects, after the endpoints' snapshots: its prefix index and backlogs then start from the
recent picks rather than from empty (older notes would be dropped as stale on arrival anyway).
Then the ejections worker 0's outlier detection has in force, stamped with the time of the replay
(:meth:`PickShare.ejection_lines`): an ejection outlives the stale threshold many times over, and
worker 0 learns every follower's, so a late worker starts with the group's ejections. Then, for the
same reason, the adapter 404s still in memory and the newest stored responses' endpoints
(:meth:`PickShare.memory_lines`, bounded by :data:`REPLAY_MEMORY_ROWS`).

**Counters.** :class:`PickNoteCollector` exports what became of the notes as Prometheus counters
(``igw_pick_notes_received_total{outcome}``, ``igw_pick_notes_dropped_total``,
``igw_pick_note_lines_skipped_total``, ``igw_pick_note_lines_replayed_total``), read from this
module's counts when ``/metrics`` is rendered, so counting stays a plain integer increment.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from igw.gateway.runtime import GatewayRuntime
from igw.scheduling.outliers import OUTLIER_NOTES
from igw.scheduling.pick_notes import LearnCounts
from igw.scheduling.scheduler import MODEL_MISSING_NOTES

log = logging.getLogger("igw.gateway.pick_share")

KIND: Final = "p"
"""The ``t`` of a pick-note line on the channel."""
WARN_EVERY_S: Final = 10.0
"""At most one warning about dropped notes per this many seconds (drops can recur every interval)."""
REPLAY_LINES: Final = 256
"""Lines of recent notes worker 0 keeps for a worker that (re)connects."""
REPLAY_BYTES: Final = 1024 * 1024
"""Bytes of recent notes worker 0 keeps for a worker that (re)connects (half the backlog at which
a peer's notes are skipped, so a replay never makes the next batch skip)."""
REPLAY_MEMORY_ROWS: Final = 4096
"""At most this many of the adapter 404s in memory, and this many of the stored responses' ids, are
told to a worker that (re)connects (:meth:`PickShare.memory_lines`): the newest, a few hundred KB at
most, so a replay stays within the backlog at which a peer's notes are skipped."""
_TAIL: Final = b"]}\n"
URGENT: Final = b'{"t":"p","e":1,'
"""How a line of :data:`UNSKIPPABLE` notes starts (:meth:`PickShare.lines`): :meth:`PickShare.write`
never skips it, and worker 0 relays a follower's such line with its bytes, so the mark travels with it."""
UNSKIPPABLE: Final = frozenset({OUTLIER_NOTES, MODEL_MISSING_NOTES})
"""The notes that go in :data:`URGENT` lines: each is the only telling of a memory that outlives its
note's stale threshold many times over (an ejection: ``baseEjectionTime``; an adapter's 404: 60 s),
and they are few (one per failing pod per ejection, one per pod and adapter answered 404). A peer
that skipped one sent requests to the pod until its own failures or 404s there taught it again.
Adapter 404s joined the ejections in session s42 (a flood skipped them with the prefix notes)."""


class PickShare:
    """One worker's end of the pick-note exchange: gather its notes, learn the others'."""

    def __init__(
        self,
        runtime: Callable[[], GatewayRuntime],
        clock: Callable[[], float],
        *,
        max_line: int,
        worker: int = 0,
    ) -> None:
        self._worker = worker
        self._head = b'{"t":"p","w":%d,"p":[' % worker
        self._urgent_head = URGENT + b'"w":%d,"p":[' % worker
        """Each line names the worker whose picks it carries: a replay to a worker that reconnected
        may hold its own earlier notes, which it must not learn twice (a backlog would double)."""
        self._runtime = runtime
        self._clock = clock
        self._max_line = max_line
        self.learned = LearnCounts()
        """What became of the notes received (learned, stale, unknown plugin, malformed)."""
        self.dropped = 0
        """Notes dropped before sending: outbox full, not JSON-encodable, or longer than a line."""
        self._warned_at = float("-inf")
        self.lines_unsent = 0
        """Lines of notes not written because the peer's buffer had no room (see
        :mod:`igw.gateway.scrape_share`)."""
        self.lines_replayed = 0
        """Lines written to a worker that (re)connected (:meth:`replay`: recent notes, ejections,
        remembered 404s and stored responses)."""
        self._recent: deque[tuple[float, bytes]] = deque()
        self._recent_bytes = 0
        self._found_notes = False
        """Whether the last :meth:`lines` drained any note (then :meth:`due` spaces batches)."""
        self._idle: asyncio.Future[None] | None = None
        """Set while :meth:`due` waits for a first note; resolved by :meth:`_wake`."""

    def remember(self, line: bytes) -> None:
        """Keep a line sent or relayed now for :meth:`replay` (the oldest go beyond the bounds)."""
        self._recent.append((self._clock(), line))
        self._recent_bytes += len(line)
        while len(self._recent) > REPLAY_LINES or self._recent_bytes > REPLAY_BYTES:
            _, old = self._recent.popleft()
            self._recent_bytes -= len(old)

    def recent(self) -> list[bytes]:
        """The remembered lines younger than the stale threshold, oldest first."""
        oldest = self._clock() - self._runtime().settings.stale_threshold_s
        return [line for at, line in self._recent if at >= oldest]

    def replay(self, writer: asyncio.StreamWriter) -> None:
        """Write :meth:`recent`, then :meth:`ejection_lines` and :meth:`memory_lines`, to a peer that
        just connected."""
        for line in (*self.recent(), *self.ejection_lines(), *self.memory_lines()):
            writer.write(line)
            self.lines_replayed += 1

    def ejection_lines(self) -> list[bytes]:
        """Every ejection this worker's outlier detection has in force (its own and those the other
        workers' notes taught it), as ``@outlier-detection`` notes stamped now.

        Why not only :meth:`recent`: an ejection lasts ``baseEjectionTime`` (30 s) and more, its note
        is older than the stale threshold (1 s) after a second, so a worker that started or
        reconnected later neither got it replayed nor would have learned it, and sent requests to a
        pod the group had ejected until it had seen that pod fail ``consecutiveFailures`` times
        itself (session s41: 4 and 5 failed answers of 60 in two runs of a fresh two-worker group)."""
        now = self._clock()
        rows: list[list[object]] = [
            [name, now, OUTLIER_NOTES, key, [until, ejections]]
            for name, sr in self._runtime().schedulers.items()
            for key, (until, ejections) in sr.scheduler.outliers.in_force(now)
        ]
        if not rows:
            return []
        encoded, _ = self._encode_rows(rows)
        return self._pack(encoded, self._urgent_head)

    def memory_lines(self) -> list[bytes]:
        """What this worker remembers past the stale threshold besides ejections, as notes stamped
        now: the adapter 404s still in memory (``@model-missing``, 60 s) and the endpoints of the most
        recently used stored responses (``@response-affinity``), at most :data:`REPLAY_MEMORY_ROWS`
        of each, the newest.

        Why: like an ejection, each outlives its note's stale threshold, so a worker that started
        or reconnected later knew none of them. It sent an adapter request to the pod that had just
        answered 404 for it, and a continuation (``previous_response_id``) of an earlier response to
        any pod, searching every pod for it (one 404 per pod asked) (session s41)."""
        now = self._clock()
        schedulers = self._runtime().schedulers
        newest = sorted(
            (at, name, key, model)
            for name, sr in schedulers.items()
            for key, model, at in sr.scheduler.models_missing(now)
        )[-REPLAY_MEMORY_ROWS:]
        rows: list[list[object]] = [
            [name, now, MODEL_MISSING_NOTES, key, [model, at]] for at, name, key, model in newest
        ]
        left = REPLAY_MEMORY_ROWS
        for name, sr in schedulers.items():
            if left <= 0:
                break
            stored = sr.scheduler.responses.most_recent(left)
            left -= len(stored)
            rows += [[name, now, sr.scheduler.responses.name, key, [rid]] for rid, key in stored]
        if not rows:
            return []
        # One call when it fits a line (4,096 response ids: about 420 KB), as lines() does: row by
        # row took 17-55 ms of worker 0's loop per connecting worker on this busy 2-core machine,
        # one call 5-8 ms (70,000 ids remembered, session s41).
        line = orjson.dumps({"t": KIND, "w": self._worker, "p": rows}) + b"\n"
        if len(line) <= self._max_line:
            return [line]
        encoded, _ = self._encode_rows(rows)
        return self._pack(encoded, self._head)

    async def due(self, interval: float, idle_s: float) -> None:
        """Return when the next :meth:`lines` is due.

        After a drain that found notes, in ``interval`` (the note interval: a busy worker's notes
        go out in one batch per interval, as before). After one that found none, as soon as a pick
        puts a note into an outbox (the outboxes' ``wake``), or after ``idle_s``, whichever comes
        first. Why: on a one-endpoint pool (no notes at all) or an idle gateway, draining empty
        outboxes every 5 ms woke each worker 200 times a second for nothing; and a note made after
        a quiet spell now goes out at once instead of waiting for the next tick. ``idle_s`` bounds
        the wait for what only a drain does: attaching outboxes to the schedulers of a reloaded
        runtime (their picks go unnoted until then) and the caller's other periodic work."""
        if self._found_notes:
            await asyncio.sleep(interval)
            return
        loop = asyncio.get_running_loop()
        idle = self._idle = loop.create_future()
        timer = loop.call_later(idle_s, _settle, idle)
        try:
            await idle
        finally:
            timer.cancel()
            self._idle = None

    def _wake(self) -> None:
        """An outbox got its first note since the last drain: end :meth:`due`'s idle wait."""
        idle = self._idle
        if idle is not None:
            _settle(idle)

    def lines(self) -> list[bytes]:
        """Drain every scheduler's outbox into channel lines. Attaches an outbox to schedulers that
        have none yet (a new or reloaded runtime), and to each its ``wake`` (:meth:`due`).

        The batch is encoded in one call (one line) when it fits; only a batch too long for a line
        or holding a note that is not JSON is encoded row by row, to split it and drop what cannot
        travel."""
        rows: list[list[object]] = []
        dropped = 0
        for name, sr in self._runtime().schedulers.items():
            outbox = sr.scheduler.share_picks()
            if outbox.wake is None:
                outbox.wake = self._wake
            notes = outbox.drain()
            dropped += outbox.dropped
            outbox.dropped = 0
            rows += [[name, at, plugin, endpoint, note] for at, plugin, endpoint, note in notes]
        lines: list[bytes] = []
        self._found_notes = bool(rows) or dropped > 0
        urgent = [row for row in rows if row[2] in UNSKIPPABLE]
        if urgent:
            # Lines of their own, which write() never skips: an ejection (session s41) or an adapter
            # 404 (s42) shared a line with the interval's pick notes and, when the peer had too much
            # unread, was skipped with them, and the peer never learned it (its note is the only telling).
            rows = [row for row in rows if row[2] not in UNSKIPPABLE]
            encoded, unsent = self._encode_rows(urgent)
            dropped += unsent
            lines = self._pack(encoded, self._urgent_head)
        if rows:
            try:
                line = orjson.dumps({"t": KIND, "w": self._worker, "p": rows}) + b"\n"
            except TypeError:
                line = b""  # a third-party plugin's note that is not JSON: found row by row below
            if line and len(line) <= self._max_line:
                lines.append(line)
            else:
                encoded, unsent = self._encode_rows(rows)
                dropped += unsent
                lines += self._pack(encoded, self._head)
        if dropped:
            self.dropped += dropped
            now = self._clock()
            if now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                log.warning("pick notes dropped before sending: %d in all", self.dropped)
        return lines

    def _encode_rows(self, rows: list[list[object]]) -> tuple[list[bytes], int]:
        """Each row encoded on its own; those that are not JSON or longer than a line are left out
        (their count is returned)."""
        encoded: list[bytes] = []
        dropped = 0
        for row in rows:
            try:
                data = orjson.dumps(row)
            except TypeError:
                dropped += 1
                continue
            if len(data) + len(self._urgent_head) + len(_TAIL) > self._max_line:
                dropped += 1
                continue
            encoded.append(data)
        return encoded, dropped

    def _pack(self, rows: list[bytes], head: bytes) -> list[bytes]:
        lines: list[bytes] = []
        batch: list[bytes] = []
        size = len(head) + len(_TAIL)
        for row in rows:
            if batch and size + len(row) + 1 > self._max_line:
                lines.append(head + b",".join(batch) + _TAIL)
                batch, size = [], len(head) + len(_TAIL)
            batch.append(row)
            size += len(row) + 1
        if batch:
            lines.append(head + b",".join(batch) + _TAIL)
        return lines

    def write(self, writer: asyncio.StreamWriter, line: bytes, *, max_unsent: int) -> None:
        """Write a line of notes to a peer unless it already has ``max_unsent`` bytes unread (then
        the line is skipped and counted: the request path and the channel never wait for notes).

        A line of ejections or adapter 404s (:data:`URGENT`, :data:`UNSKIPPABLE`) is always written:
        they are few, each is told once, and a peer that missed one sent requests to the pod until
        its own failures or 404s there taught it again. A peer that stops reading is
        disconnected by the snapshots' bound (:mod:`igw.gateway.scrape_share`), not by these."""
        if writer.transport.get_write_buffer_size() > max_unsent and not line.startswith(URGENT):
            self.lines_unsent += 1
        else:
            writer.write(line)

    def learn(self, doc: dict[str, Any]) -> None:
        """Teach this worker's schedulers the notes of one received line."""
        if doc.get("w") == self._worker:
            return  # our own notes, replayed after a reconnect: learned when we made the picks
        rows = doc.get("p")
        if not isinstance(rows, list):
            self.learned.malformed += 1
            return
        by_scheduler: dict[str, list[list[object]]] = {}
        for row in rows:
            if not isinstance(row, list) or len(row) != 5 or not isinstance(row[0], str):
                self.learned.malformed += 1
                continue
            by_scheduler.setdefault(row[0], []).append(row[1:])
        schedulers = self._runtime().schedulers
        now = self._clock()
        for name, notes in by_scheduler.items():
            sr = schedulers.get(name)
            if sr is None:
                self.learned.unknown += len(notes)
                continue
            # Only endpoints this worker has: a note about a pod removed here in the meantime would
            # otherwise give it index entries that no removal ever drops again.
            states = sr.pool.states
            known = [note for note in notes if not isinstance(note[2], str) or note[2] in states]
            self.learned.unknown += len(notes) - len(known)
            sr.scheduler.learn_picks(known, now=now, counts=self.learned)


def _settle(idle: asyncio.Future[None]) -> None:
    if not idle.done():
        idle.set_result(None)


class PickNoteCollector(Collector):
    """The pick-note counts of one worker as Prometheus counters, read at each ``/metrics``."""

    def __init__(self, share: PickShare) -> None:
        self._share = share

    def collect(self) -> Iterator[Metric]:
        share = self._share
        received = CounterMetricFamily(
            "igw_pick_notes_received",
            "Pick notes from the other workers of igw serve --workers, by what became of them.",
            labels=["outcome"],
        )
        counts = share.learned
        for outcome, value in (
            ("learned", counts.learned),
            ("stale", counts.stale),
            ("unknown", counts.unknown),
            ("malformed", counts.malformed),
        ):
            received.add_metric([outcome], value)
        yield received
        yield CounterMetricFamily(
            "igw_pick_notes_dropped",
            "This worker's pick notes dropped before sending (outbox full, not JSON, longer than a line).",
            value=share.dropped,
        )
        yield CounterMetricFamily(
            "igw_pick_note_lines_skipped",
            "Lines of pick notes not written because the peer had too much unread.",
            value=share.lines_unsent,
        )
        yield CounterMetricFamily(
            "igw_pick_note_lines_replayed",
            "Lines replayed to a worker that (re)connected: recent pick notes, the ejections in force, "
            "the adapter 404s and stored responses remembered.",
            value=share.lines_replayed,
        )
