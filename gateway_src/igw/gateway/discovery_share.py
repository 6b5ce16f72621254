"""One discovery per worker group: worker 0 discovers endpoints, the other workers follow its reports.

With ``igw serve --workers N`` each worker routes with its own pools, but only worker 0 runs the
discovery source (with ``--in-cluster``: its Pod and bbr-managed ConfigMap watches); every report it
gives its own gateway state - a scheduler's endpoints, the LoRA adapter map, the named services - is
also sent to the other workers over the scrape channel (:mod:`igw.gateway.scrape_share`) as one
line, and each of them hands it to its own state. So the API server sees one set of watches per pod,
not N, and every worker routes over the same endpoint set (N watches could disagree for as long as
their events arrive at different times).

The latest report of each kind (per scheduler for endpoints) is kept and replayed to a worker that
connects or reconnects, so a worker that starts late or lost the channel catches up at once. A
worker whose configuration names a scheduler before worker 0's does (each worker reloads the file on
its own, see :mod:`igw.gateway.workers`) has no endpoints for it until worker 0 has reloaded too.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import orjson

from igw.gateway.discovery import DiscoverySink
from igw.gateway.endpoints import DiscoveredEndpoint

KIND: Final = "d"
"""The ``t`` of a discovery line on the scrape channel."""
ENDPOINTS: Final = "endpoints"
ADAPTERS: Final = "adapters"
SERVICES: Final = "services"


REPORT_INTERVAL_S: Final = 0.05
"""At most one report of a kind (of a scheduler's endpoints: per scheduler) per this many seconds goes
to the other workers; those made meanwhile are held, and the latest leaves when the interval is up.

Why: every pod event makes the discovery source report the scheduler's whole pool again, and a
rolling update of a large pool makes dozens of events a second, each costing every other worker a
decode and a pool update (measured in docs/gateway.md, "Large pools"); the first report after a
quiet interval still leaves at once, so a single change is not delayed. Worker 0's own state takes
every report at once."""

Schedule = Callable[[float, Callable[[], None]], object]
"""``schedule(delay_s, callback)``: run ``callback`` once after ``delay_s`` (the event loop's
``call_later``)."""


def _call_later(delay_s: float, callback: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay_s, callback)


class RelayingSink:
    """Worker 0's discovery sink: each report goes to its own state, then to the other workers (at
    most one of a kind per :data:`REPORT_INTERVAL_S`)."""

    def __init__(
        self,
        sink: DiscoverySink,
        publish: Callable[[bytes], None],
        *,
        min_interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule = _call_later,
    ) -> None:
        self._sink = sink
        self._publish = publish
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._schedule = schedule
        self._latest: dict[tuple[str, str], bytes] = {}
        self._replay_bytes = 0
        self._sent_at: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], bytes] = {}
        """The latest report of a slot whose interval is not up yet (a timer releases it)."""

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self._sink.apply_endpoints(scheduler, endpoints)
        # Each distinct label set once, the endpoints pointing at it: the pods of one Deployment
        # carry the same labels (their ReplicaSet's pod-template-hash included), and written out per
        # endpoint they were most of the line (docs/gateway.md, "Large pools").
        label_sets: list[dict[str, str]] = []
        seen: dict[frozenset[tuple[str, str]], int] = {}
        listed: list[list[object]] = []
        for e in endpoints:
            labels = dict(e.labels)
            index = seen.setdefault(frozenset(labels.items()), len(label_sets))
            if index == len(label_sets):
                label_sets.append(labels)
            listed.append([e.key, index, e.pod])
        self._send({"t": KIND, "k": ENDPOINTS, "sch": scheduler, "ls": label_sets, "eps": listed})

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        self._sink.apply_bbr_adapters(adapters)
        self._send({"t": KIND, "k": ADAPTERS, "a": dict(adapters)})

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        self._sink.apply_services(services)
        listed = {name: list(addresses) for name, addresses in services.items()}
        self._send({"t": KIND, "k": SERVICES, "v": listed})

    def lines(self) -> list[bytes]:
        """The latest report of each kind, for a worker that (re)connects."""
        return list(self._latest.values())

    @property
    def replay_bytes(self) -> int:
        """The size of :meth:`lines`: what a worker is sent when it connects, and about what one more
        round of reports adds to a worker's unread bytes (the leader allows for it)."""
        return self._replay_bytes

    def _send(self, doc: dict[str, Any]) -> None:
        line = orjson.dumps(doc) + b"\n"
        slot = report_slot(doc)
        self._replay_bytes += len(line) - len(self._latest.get(slot, b""))
        self._latest[slot] = line  # a worker that connects now gets it, held or not
        if slot in self._held:  # the slot's timer is set: it will send this one instead
            self._held[slot] = line
            return
        now = self._clock()
        wait = self._sent_at.get(slot, -math.inf) + self._min_interval_s - now
        if wait <= 0:
            self._sent_at[slot] = now
            self._publish(line)
            return
        self._held[slot] = line
        self._schedule(wait, functools.partial(self._release, slot))

    def _release(self, slot: tuple[str, str]) -> None:
        line = self._held.pop(slot, None)
        if line is not None:
            self._sent_at[slot] = self._clock()
            self._publish(line)


def apply_report(doc: Mapping[str, Any], sink: DiscoverySink) -> None:
    """Hand one of worker 0's discovery lines to this worker's sink; ``ValueError`` if malformed."""
    kind = doc.get("k")
    if kind not in (ENDPOINTS, ADAPTERS, SERVICES):
        raise ValueError(f"malformed discovery report: unknown kind {kind!r}")
    try:
        if kind == ENDPOINTS:
            label_sets = [{str(k): str(v) for k, v in labels.items()} for labels in doc["ls"]]
            endpoints = [
                DiscoveredEndpoint(
                    key=str(key),
                    labels=dict(label_sets[_index(index)]),
                    pod=None if pod is None else str(pod),
                )
                for key, index, pod in doc["eps"]
            ]
            sink.apply_endpoints(str(doc["sch"]), endpoints)
        elif kind == ADAPTERS:
            sink.apply_bbr_adapters({str(k): str(v) for k, v in doc["a"].items()})
        else:
            sink.apply_services({str(k): [str(a) for a in v] for k, v in doc["v"].items()})
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"malformed discovery report ({kind}): {exc!r}") from exc


def _index(value: object) -> int:
    """A position in a report's label sets: a non-negative integer (``IndexError`` past the end)."""
    if type(value) is not int or value < 0:
        raise TypeError(f"a label set's position is a non-negative integer, not {value!r}")
    return value


def report_slot(doc: Mapping[str, Any]) -> tuple[str, str]:
    """What a report replaces: the latest of each kind, per scheduler for endpoints."""
    return str(doc.get("k")), str(doc.get("sch", ""))
