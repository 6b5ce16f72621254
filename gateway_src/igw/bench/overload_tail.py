"""Where the slowest Critical requests of a live ``overload-priority`` arm spent their time.

Every request of the live benchmark carries its own ``X-Request-Id`` (``ovl-<index>``), which the
gateway reuses in its access log and forwards to the pod, and the benchmark's pod records each
request it takes in under that id (:attr:`igw.sim.server.LivePod.arrivals`). Joining the three
splits one request's time to first token, as the client measured it, into:

* ``queue``: the wait in the gateway's flow-control queue (the access log's ``queue_ms``);
* ``gateway``: the rest of the gateway's own time to first token less the pod's (parsing, the
  pick, connecting and relaying: the access log's ``ttft_ms`` less ``queue`` less the pod's part);
* ``pod queue``: from the pod taking the request in to the engine step that starts it (the pod's
  first-come queue, and the rest of the step running when it came): the pod's wall-clock time to
  its first written token less the first step;
* ``first step``: the engine step that computes its prefill and first token (longer with more
  sequences in the batch: prefill contention), on the engine's clock;
* ``client``: the client's time to first token less the gateway's (the load generator's own event
  loop and the loopback hop).

with the pod's batch and queue when the request came (``running`` / ``waiting``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from igw.sim.server import PodArrival

REQUEST_ID_PREFIX: Final = "ovl-"
"""The live benchmark's request ids: this prefix and the request's index in its list."""
TAIL_FRACTION: Final = 0.01
"""The share of Critical requests decomposed (the slowest, as the client measured them)."""


def request_id(index: int) -> str:
    """The ``X-Request-Id`` of the ``index``-th request of a live request list."""
    return f"{REQUEST_ID_PREFIX}{index}"


def access_records(lines: Iterable[str]) -> dict[str, dict[str, object]]:
    """The gateway's access-log entries by request id, from a router's log (other lines skipped).

    The access log is one JSON object per line, possibly after a logging prefix; lines that are not
    such an object, or have no ``request_id``, are not access-log entries.
    """
    out: dict[str, dict[str, object]] = {}
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            record = orjson.loads(line[start:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("request_id"), str):
            out[record["request_id"]] = record
    return out


@dataclass(frozen=True, slots=True)
class TailRow:
    """One request's time to first token, split by where it was spent (seconds; ``None``: unknown)."""

    index: int
    at_s: float
    """When it was sent, seconds into the run."""
    client_s: float
    queue_s: float | None
    gateway_s: float | None
    pod_queue_s: float | None
    first_step_s: float | None
    client_side_s: float | None
    running: int | None
    waiting: int | None


def _ms(record: Mapping[str, object] | None, key: str) -> float | None:
    value = None if record is None else record.get(key)
    return float(value) / 1000 if isinstance(value, int | float) else None


def split(
    index: int,
    at_s: float,
    client_ttft_s: float,
    access: Mapping[str, object] | None,
    arrival: PodArrival | None,
) -> TailRow:
    """One request's time to first token split into its parts (see the module's docstring)."""
    queue_s = None if access is None else (_ms(access, "queue_ms") or 0.0)
    gateway_ttft_s = _ms(access, "ttft_ms")
    gateway_s = pod_queue_s = first_step_s = None
    if arrival is not None and arrival.first_token_s is not None:
        req = arrival.request
        pod_ttft_s = arrival.first_token_s - arrival.taken_s  # both on the wall clock
        if req.first_scheduled_at is not None and req.first_token_at is not None:
            # The step's length on the engine's clock is exact; the rest of the pod's part is its
            # queue (and the step running when the request came).
            first_step_s = req.first_token_at - req.first_scheduled_at
            pod_queue_s = max(0.0, pod_ttft_s - first_step_s)
        if gateway_ttft_s is not None and queue_s is not None:
            gateway_s = gateway_ttft_s - queue_s - pod_ttft_s
    return TailRow(
        index=index,
        at_s=at_s,
        client_s=client_ttft_s,
        queue_s=queue_s,
        gateway_s=gateway_s,
        pod_queue_s=pod_queue_s,
        first_step_s=first_step_s,
        client_side_s=None if gateway_ttft_s is None else client_ttft_s - gateway_ttft_s,
        running=None if arrival is None else arrival.running,
        waiting=None if arrival is None else arrival.waiting,
    )


def slowest(ttfts: Mapping[int, float], fraction: float = TAIL_FRACTION) -> list[int]:
    """The indices of the slowest ``fraction`` of requests (at least one), slowest first."""
    if not ttfts:
        return []
    count = max(1, math.ceil(len(ttfts) * fraction))
    return sorted(ttfts, key=lambda i: (-ttfts[i], i))[:count]


PARTS: Final = ("queue_s", "gateway_s", "pod_queue_s", "first_step_s", "client_side_s")
"""The parts of a :class:`TailRow`, in the order the time is spent."""


def mean_parts(rows: Sequence[TailRow]) -> dict[str, float | None]:
    """Each part's mean over ``rows`` (rows where it is unknown left out; ``None`` when all are)."""
    out: dict[str, float | None] = {}
    for part in PARTS:
        values = [v for r in rows if (v := getattr(r, part)) is not None]
        out[part] = sum(values) / len(values) if values else None
    return out


def _cell(value: float | int | None, *, ms: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f}" if ms else str(value)


def tail_markdown(arm: str, tail: Sequence[TailRow], every: Sequence[TailRow], *, batch: int) -> list[str]:
    """The decomposition table for one arm: the slowest rows, then the means of the tail and of all
    (with the share of those requests that found the pod's ``batch`` full)."""
    lines = [
        f"Critical tail of `{arm}` (the slowest {TAIL_FRACTION:.0%} by the client's TTFT; ms; pod "
        "running / waiting when the request came):",
        "",
        "| request | sent at s | client TTFT | gateway queue | gateway rest | pod queue | first step "
        "| client side | running / waiting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in tail:
        lines.append(
            f"| {request_id(r.index)} | {r.at_s:.2f} | {_cell(r.client_s)} | {_cell(r.queue_s)} "
            f"| {_cell(r.gateway_s)} | {_cell(r.pod_queue_s)} | {_cell(r.first_step_s)} "
            f"| {_cell(r.client_side_s)} | {_cell(r.running, ms=False)} / {_cell(r.waiting, ms=False)} |"
        )
    for label, rows in (("mean of the tail", tail), ("mean of all Critical", every)):
        means = mean_parts(rows)
        client = sum(r.client_s for r in rows) / len(rows) if rows else None
        seen = [r for r in rows if r.running is not None]
        at_batch = sum(1 for r in seen if (r.running or 0) >= batch) / len(seen) if seen else None
        shares = "-" if at_batch is None else f"{at_batch:.0%} found the batch full"
        lines.append(
            f"| {label} | | {_cell(client)} | {_cell(means['queue_s'])} | {_cell(means['gateway_s'])} "
            f"| {_cell(means['pod_queue_s'])} | {_cell(means['first_step_s'])} "
            f"| {_cell(means['client_side_s'])} | {shares} |"
        )
    return lines
