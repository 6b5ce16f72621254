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


class RelayingSink:
    """Worker 0's discovery sink: each report goes to its own state, then to the other workers."""

    def __init__(self, sink: DiscoverySink, publish: Callable[[bytes], None]) -> None:
        self._sink = sink
        self._publish = publish
        self._latest: dict[tuple[str, str], bytes] = {}

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self._sink.apply_endpoints(scheduler, endpoints)
        listed = [[e.key, dict(e.labels), e.pod] for e in endpoints]
        self._send({"t": KIND, "k": ENDPOINTS, "sch": scheduler, "eps": listed})

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

    def _send(self, doc: dict[str, Any]) -> None:
        line = orjson.dumps(doc) + b"\n"
        self._latest[report_slot(doc)] = line
        self._publish(line)


def apply_report(doc: Mapping[str, Any], sink: DiscoverySink) -> None:
    """Hand one of worker 0's discovery lines to this worker's sink; ``ValueError`` if malformed."""
    kind = doc.get("k")
    if kind not in (ENDPOINTS, ADAPTERS, SERVICES):
        raise ValueError(f"malformed discovery report: unknown kind {kind!r}")
    try:
        if kind == ENDPOINTS:
            endpoints = [
                DiscoveredEndpoint(key=str(key), labels=dict(labels), pod=None if pod is None else str(pod))
                for key, labels, pod in doc["eps"]
            ]
            sink.apply_endpoints(str(doc["sch"]), endpoints)
        elif kind == ADAPTERS:
            sink.apply_bbr_adapters({str(k): str(v) for k, v in doc["a"].items()})
        else:
            sink.apply_services({str(k): [str(a) for a in v] for k, v in doc["v"].items()})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"malformed discovery report ({kind}): {exc!r}") from exc


def report_slot(doc: Mapping[str, Any]) -> tuple[str, str]:
    """What a report replaces: the latest of each kind, per scheduler for endpoints."""
    return str(doc.get("k")), str(doc.get("sch", ""))
