"""What ``igw top`` shows, computed from two successive scrapes of one gateway (pure, no I/O).

A :class:`Scrape` is one ``/metrics`` page (every sample keyed by name and labels) plus the
``/readyz`` detail taken at the same moment. :func:`build_view` compares it with the previous one:
counters become per-second rates over the interval (a counter that went down restarted, so its
whole value is the interval's), histogram bucket deltas become quantiles (the interpolation
Prometheus' ``histogram_quantile`` uses, shared with the CloudWatch reporter), and gauges are shown
as they are. Without a previous scrape, rates, shares and quantiles are ``None`` (shown as ``-``).

A worker group (``igw serve --workers N``) answers with every worker's samples, each labelled with its
``worker``: a pod's picks and requests in flight are the sum over the workers (each counts its own),
its scrape age and flags the worst any worker routes on (:data:`POD_GAUGE_ACROSS_WORKERS`).
"""

from __future__ import annotations

import math
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

from igw.errors import IgwToolingError
from igw.gateway.emf import quantile
from igw.scheduling.scheduler import TOTAL as TOTAL_SCORE

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]

TTFT_BUCKET: Final = "igw_time_to_first_token_seconds_bucket"
DURATION_BUCKET: Final = "igw_request_duration_seconds_bucket"
REQUESTS: Final = "igw_requests_total"
OUTPUT_TOKENS: Final = "igw_tokens_total"
PICKS: Final = "igw_endpoint_picks_total"
RETRIES: Final = "igw_upstream_retries_total"
READY_PODS: Final = "inference_pool_ready_pods"
STALE_ENDPOINTS: Final = "igw_pool_stale_endpoints"
POD_GAUGES: Final = {
    "kv": "igw_endpoint_kv_cache_usage",
    "queue": "igw_endpoint_queue_depth",
    "running": "igw_endpoint_running_requests",
    "inflight": "igw_endpoint_inflight_requests",
    "scrape_age": "igw_endpoint_scrape_age_seconds",
    "failing": "igw_endpoint_scrape_failing",
    "frozen": "igw_endpoint_metrics_frozen",
    "ejected": "igw_endpoint_ejected_seconds",
}
POD_GAUGE_ACROSS_WORKERS: Final[Mapping[str, Callable[[float, float], float]]] = {
    "inflight": operator.add,
    "scrape_age": max,
    "failing": max,
    "frozen": max,
    "ejected": max,
}
"""How one pod's gauge from several workers of a group combines: each worker has its own requests in
flight; an age or a flag is the worst any worker routes on. The scraped values (KV, queue, running)
come from worker 0 alone since session s28 (before, every worker repeated the same relayed scrape:
the first one read stands)."""
SIGNAL_MISSING: Final = "igw_endpoint_signal_missing"
READ_METRICS: Final = frozenset(
    {
        TTFT_BUCKET,
        DURATION_BUCKET,
        REQUESTS,
        OUTPUT_TOKENS,
        PICKS,
        RETRIES,
        READY_PODS,
        STALE_ENDPOINTS,
        SIGNAL_MISSING,
    }
    | set(POD_GAUGES.values())
)
"""Every sample name ``igw top`` reads (a test checks each is on a live gateway's page)."""
REQUIRED_LABELS: Final[Mapping[str, tuple[str, ...]]] = {
    TTFT_BUCKET: ("le",),
    DURATION_BUCKET: ("le",),
    REQUESTS: ("model",),
    OUTPUT_TOKENS: ("model",),
    PICKS: ("scheduler", "endpoint"),
    RETRIES: ("scheduler",),
    READY_PODS: ("name",),
    SIGNAL_MISSING: ("scheduler", "endpoint", "signal"),
    **{name: ("scheduler", "endpoint") for name in POD_GAUGES.values()},
}
"""The labels each sample ``igw top`` reads must carry; :func:`parse_scrape` refuses a page whose
samples lack one (before session s39 such a page, from something that is not an igw gateway or a
proxy's garbage, ended ``igw top`` with a traceback instead of naming the problem)."""
_READ_LINE: Final = re.compile(
    r"^[ \t]*(?:" + "|".join(re.escape(name) for name in sorted(READ_METRICS)) + r")[ \t{].*$", re.MULTILINE
)
"""A sample line of a name in :data:`READ_METRICS` (the name ends at a label brace or a blank)."""
_NOT_A_LINE: Final = re.compile(r"^[ \t]*[^#\sa-zA-Z_:].*$", re.MULTILINE)
"""A line no Prometheus text page has: neither blank, nor a comment, nor starting with a metric
name (an HTML or JSON page served as ``/metrics``)."""
COUNTS: Final = frozenset({READY_PODS, STALE_ENDPOINTS})
"""Samples shown as whole numbers: NaN or an infinity there is refused, not drawn."""


class ScrapeError(IgwToolingError):
    """A page from the gateway could not be read. This class itself is an answer that asking again
    will not change (a 4xx status, a page that is not the gateway's): ``--screenshot`` ends at once;
    its subclasses are the failures worth retrying."""


class GatewayUnreachable(ScrapeError):
    """No HTTP answer at all (refused, reset, timed out, unresolvable): ``igw top`` backs off."""


class GatewayFailing(ScrapeError):
    """An answer the gateway may give differently soon: a 5xx status (starting, overloaded,
    restarting), 408 or 429 (try later), a body cut off mid-transfer. ``--screenshot`` retries it
    for a bounded number of refresh intervals."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One moment of one gateway: its samples and its readiness detail."""

    at: float
    """Monotonic seconds when the page was taken (only differences matter)."""
    samples: Mapping[SampleKey, float]
    readiness: Mapping[str, Any]
    """The ``/readyz`` body (``schedulers`` → endpoints with ``fresh`` and ``adapters``); may be empty."""
    decisions: Sequence[Mapping[str, Any]] = ()
    """Newest first, from ``/debug/decisions`` when asked for (see :mod:`igw.gateway.decision_log`)."""
    decisions_error: str | None = None
    """Why the decisions asked for could not be read (no decision log, a refused token), else
    ``None``: the rest of the scrape stands, so the pools and pods are still drawn."""


def parse_scrape(
    metrics_text: str,
    readiness: Mapping[str, Any],
    *,
    at: float,
    decisions: Sequence[Mapping[str, Any]] = (),
    decisions_error: str | None = None,
) -> Scrape:
    """The samples of a Prometheus text page that ``igw top`` reads, keyed by name and labels.

    Only the lines of :data:`READ_METRICS` go through the Prometheus parser (found by one regular
    expression scan), and the rest of the page is checked only for lines no Prometheus page has:
    the parser is pure Python, and until session s50 it read every series of the page, those of
    other families (a gateway's tenants and adapters, a hostile page of a million names) included,
    on the screen's event loop, so a large page froze the screen for seconds each refresh."""
    bad = _NOT_A_LINE.search(metrics_text)
    if bad is not None:
        start = bad.start()
        line = metrics_text.count("\n", 0, start) + 1
        quoted = metrics_text[start : start + 80].partition("\n")[0]
        raise ScrapeError(f"/metrics: not a Prometheus text page (line {line}: {quoted!r})")
    read = "\n".join(match.group() for match in _READ_LINE.finditer(metrics_text))
    samples: dict[SampleKey, float] = {}
    try:
        for family in text_string_to_metric_families(read):
            for s in family.samples:
                if s.name in READ_METRICS:
                    _check_sample(s.name, s.labels, s.value)
                    samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    except ValueError as exc:
        raise ScrapeError(f"/metrics: not a Prometheus text page ({exc})") from exc
    _check_readiness(readiness)
    return Scrape(
        at=at, samples=samples, readiness=readiness, decisions=decisions, decisions_error=decisions_error
    )


def _check_sample(name: str, labels: Mapping[str, str], value: float) -> None:
    """Refuse a sample ``igw top`` could not draw: a label it reads missing, a bucket bound or a
    count that is not a number (:data:`REQUIRED_LABELS`, :data:`COUNTS`)."""
    for label in REQUIRED_LABELS.get(name, ()):
        if label not in labels:
            raise ScrapeError(f"/metrics: a {name} sample has no {label!r} label")
    if "le" in REQUIRED_LABELS.get(name, ()):
        try:
            float(labels["le"])
        except ValueError:
            raise ScrapeError(f"/metrics: a {name} sample has le={labels['le']!r}, not a number") from None
    if name in COUNTS and not math.isfinite(value):
        raise ScrapeError(f"/metrics: {name} is {value}, not a count")


def _check_readiness(readiness: Mapping[str, Any]) -> None:
    """Refuse a ``/readyz`` body whose scheduler detail is not shaped as the gateway writes it
    (``schedulers`` → ``{model, endpoints: {address: {fresh, adapters: [names]}}}``), naming the part."""
    schedulers = readiness.get("schedulers")
    if schedulers is None:
        return
    if not isinstance(schedulers, Mapping):
        raise ScrapeError("/readyz: 'schedulers' is not an object")
    for pool, detail in schedulers.items():
        where = f"/readyz: schedulers.{pool}"
        if not isinstance(detail, Mapping):
            raise ScrapeError(f"{where} is not an object")
        if not isinstance(detail.get("model"), str | None):
            raise ScrapeError(f"{where}.model is not a string")
        endpoints = detail.get("endpoints")
        if endpoints is None:
            continue
        if not isinstance(endpoints, Mapping):
            raise ScrapeError(f"{where}.endpoints is not an object")
        for endpoint, info in endpoints.items():
            if not isinstance(info, Mapping):
                raise ScrapeError(f"{where}.endpoints.{endpoint} is not an object")
            adapters = info.get("adapters")
            if adapters is not None and (
                not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters)
            ):
                raise ScrapeError(f"{where}.endpoints.{endpoint}.adapters is not a list of names")


@dataclass(frozen=True, slots=True)
class PoolRow:
    pool: str
    model: str | None
    ready_pods: int
    pods: int
    kv_average: float | None
    """Mean KV use (0..1) of the pool's pods that report it."""
    queue_total: float | None
    picks_per_s: float | None
    stale_endpoints: int | None = None
    """Endpoints the gateway routes around as stale or failing; with ``--workers`` the worst worker's
    count (a worker whose relayed copy of the scrapes fell behind shows here). ``None``: a gateway
    that does not export ``igw_pool_stale_endpoints`` (before session s28)."""
    retries_per_s: float | None = None
    """Attempts per second that moved on to another pod (``igw_upstream_retries_total``, every cause:
    a refused or failed attempt retried, a pod asked for a stored response it did not have); with
    ``--workers`` every worker's together."""


@dataclass(frozen=True, slots=True)
class PodRow:
    pool: str
    endpoint: str
    kv: float | None
    queue: float | None
    running: float | None
    inflight: float | None
    adapters: tuple[str, ...] | None
    """LoRA adapters in the running batch (``None``: the gateway does not say)."""
    pick_share: float | None
    """This pod's share (0..1) of its pool's picks over the interval."""
    scrape_age_s: float | None
    flags: tuple[str, ...]
    """``stale``, ``failing``, ``frozen``, ``ejected``, ``missing <signal>`` (empty: healthy)."""


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    requests_per_s: float | None
    error_ratio: float | None
    """5xx share of the interval's requests (``None`` without requests)."""
    output_tokens_per_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    latency_p99_s: float | None


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One scheduling decision: why this pod."""

    at: float
    """Wall-clock seconds of the decision."""
    pool: str
    model: str | None
    outcome: str
    chosen: str | None
    candidates: int
    removed: int
    """Endpoints excluded before scoring (stale, context too small, a filter)."""
    leading_scorer: str | None
    """The scorer that gave the chosen endpoint its largest weighted score."""
    decision_us: float | None
    """``None``: the pick was not timed (a flow-control queue's re-pick, an :attr:`asked_alone` pick)."""
    asked_alone: str | None = None
    """The pod a canary continuation's search sent the request to (the entry's ``asked_alone``,
    since session s50): the decision was its pool's pick among that pod alone, and the request went
    there whatever :attr:`chosen` says."""


@dataclass(frozen=True, slots=True)
class TopView:
    interval_s: float | None
    """Seconds between the two scrapes (``None`` on the first)."""
    pools: tuple[PoolRow, ...]
    pods: tuple[PodRow, ...]
    models: tuple[ModelRow, ...]
    decisions: tuple[DecisionRow, ...] = ()


def counter_delta(previous: float | None, current: float) -> float:
    """Increase of a counter between two scrapes; a decrease means it restarted from zero."""
    if previous is None or current < previous:
        return current
    return current - previous


def _by_name(scrape: Scrape, name: str) -> Iterable[tuple[dict[str, str], float]]:
    for (sample, labels), value in scrape.samples.items():
        if sample == name:
            yield dict(labels), value


def _deltas(previous: Scrape, current: Scrape, name: str) -> Iterable[tuple[dict[str, str], float]]:
    for (sample, labels), value in current.samples.items():
        if sample == name:
            yield dict(labels), counter_delta(previous.samples.get((sample, labels)), value)


def _quantiles(
    previous: Scrape, current: Scrape, name: str, qs: tuple[float, ...]
) -> dict[str, tuple[float | None, ...]]:
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, delta in _deltas(previous, current, name):
        buckets[labels.get("model", "")][float(labels["le"])] += delta
    return {model: tuple(quantile(q, sorted(b.items())) for q in qs) for model, b in buckets.items()}


def _endpoint_readiness(scrape: Scrape) -> dict[tuple[str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for pool, detail in (scrape.readiness.get("schedulers") or {}).items():
        for endpoint, info in (detail.get("endpoints") or {}).items():
            out[(pool, endpoint)] = info
    return out


def build_view(previous: Scrape | None, current: Scrape) -> TopView:
    """The rows for ``current``; rates, shares and quantiles need ``previous``."""
    interval = None if previous is None else current.at - previous.at
    if interval is not None and interval <= 0:
        raise ScrapeError(f"scrapes out of order: interval {interval} s")
    picks: dict[tuple[str, str], float] = {}
    if previous is not None:
        for labels, delta in _deltas(previous, current, PICKS):
            key = (labels["scheduler"], labels["endpoint"])
            picks[key] = picks.get(key, 0.0) + delta  # a worker group: every worker's own picks
    pool_picks: dict[str, float] = defaultdict(float)
    for (pool, _), delta in picks.items():
        pool_picks[pool] += delta
    pool_retries: dict[str, float] = defaultdict(float)
    if previous is not None:
        for labels, delta in _deltas(previous, current, RETRIES):
            pool_retries[labels["scheduler"]] += delta
    pods = _pods(current, picks, pool_picks)
    return TopView(
        interval_s=interval,
        pools=_pools(current, pods, pool_picks, pool_retries, interval),
        pods=pods,
        models=() if previous is None or interval is None else _models(previous, current, interval),
        decisions=tuple(decision_row(entry) for entry in current.decisions),
    )


def decision_row(entry: Mapping[str, Any]) -> DecisionRow:
    """A decision-log entry as a row; a malformed entry is a :class:`ScrapeError` naming the field."""
    try:
        chosen = entry["chosen"]
        per_scorer: Mapping[str, float] = next(
            (s["scores"] for s in entry["scored"] if s["endpoint"] == chosen), {}
        )
        scores = {name: v for name, v in per_scorer.items() if name != TOTAL_SCORE}
        return DecisionRow(
            at=float(entry["time"]),
            pool=str(entry["scheduler"]),
            model=entry["model"],
            outcome=str(entry["outcome"]),
            chosen=chosen,
            candidates=int(entry["candidates"]),
            # a gateway since session s42 lists at most 32 removed endpoints and counts them all
            removed=int(entry.get("removed_total", len(entry["removed"]))),
            leading_scorer=max(scores, key=lambda name: scores[name]) if scores else None,
            # null when the pick was not timed (a queue's re-pick, an asked-alone pick): until
            # session s50 such an entry was refused as malformed, and with it the whole view
            decision_us=None if entry["decision_us"] is None else float(entry["decision_us"]),
            asked_alone=None if entry.get("asked_alone") is None else str(entry["asked_alone"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ScrapeError(f"/debug/decisions: an entry lacks or mistypes {exc}") from exc


def _pods(
    current: Scrape, picks: Mapping[tuple[str, str], float], pool_picks: Mapping[str, float]
) -> tuple[PodRow, ...]:
    gauges: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for field, name in POD_GAUGES.items():
        combine = POD_GAUGE_ACROSS_WORKERS.get(field)
        for labels, value in _by_name(current, name):
            row = gauges[(labels["scheduler"], labels["endpoint"])]
            seen = row.get(field)
            if seen is None:
                row[field] = value
            elif combine is not None:
                row[field] = combine(seen, value)
    missing: dict[tuple[str, str], set[str]] = defaultdict(set)
    for labels, value in _by_name(current, SIGNAL_MISSING):
        if value:
            missing[(labels["scheduler"], labels["endpoint"])].add(labels["signal"])
    readiness = _endpoint_readiness(current)
    rows = []
    for key in sorted(set(gauges) | set(readiness)):
        pool, endpoint = key
        g = gauges.get(key, {})
        ready = readiness.get(key, {})
        flags = []
        if ready.get("fresh") is False:
            flags.append("stale")
        if g.get("failing"):
            flags.append("failing")
        if g.get("frozen"):
            flags.append("frozen")
        if g.get("ejected"):  # outlier detection: it failed requests in a row (seconds left)
            flags.append("ejected")
        flags.extend(f"missing {signal}" for signal in sorted(missing.get(key, ())))
        adapters = ready.get("adapters")
        total = pool_picks.get(pool)
        rows.append(
            PodRow(
                pool=pool,
                endpoint=endpoint,
                kv=g.get("kv"),
                queue=g.get("queue"),
                running=g.get("running"),
                inflight=g.get("inflight"),
                adapters=None if adapters is None else tuple(adapters),
                pick_share=picks.get(key, 0.0) / total if total else None,
                scrape_age_s=g.get("scrape_age"),
                flags=tuple(flags),
            )
        )
    return tuple(rows)


def _pools(
    current: Scrape,
    pods: tuple[PodRow, ...],
    pool_picks: Mapping[str, float],
    pool_retries: Mapping[str, float],
    interval: float | None,
) -> tuple[PoolRow, ...]:
    ready = {labels["name"]: value for labels, value in _by_name(current, READY_PODS)}
    stale: dict[str, float] = {}
    for labels, value in _by_name(current, STALE_ENDPOINTS):  # one sample per worker of a group
        pool = labels.get("scheduler", "")
        stale[pool] = max(value, stale.get(pool, value))
    schedulers = current.readiness.get("schedulers") or {}
    members: dict[str, list[PodRow]] = defaultdict(list)
    for pod in pods:
        members[pod.pool].append(pod)
    rows = []
    for pool in sorted(set(members) | set(ready) | set(schedulers) | set(stale)):
        mine = members.get(pool, [])
        kv = [p.kv for p in mine if p.kv is not None]
        queues = [p.queue for p in mine if p.queue is not None]
        rows.append(
            PoolRow(
                pool=pool,
                model=(schedulers.get(pool) or {}).get("model"),
                ready_pods=int(ready.get(pool, 0)),
                pods=len(mine),
                kv_average=sum(kv) / len(kv) if kv else None,
                queue_total=sum(queues) if queues else None,
                picks_per_s=None if interval is None else pool_picks.get(pool, 0.0) / interval,
                stale_endpoints=int(stale[pool]) if pool in stale else None,
                retries_per_s=None if interval is None else pool_retries.get(pool, 0.0) / interval,
            )
        )
    return tuple(rows)


def _models(previous: Scrape, current: Scrape, interval: float) -> tuple[ModelRow, ...]:
    requests: dict[str, float] = defaultdict(float)
    errors: dict[str, float] = defaultdict(float)
    for labels, delta in _deltas(previous, current, REQUESTS):
        requests[labels["model"]] += delta
        if labels.get("code", "").startswith("5"):
            errors[labels["model"]] += delta
    tokens: dict[str, float] = defaultdict(float)
    for labels, delta in _deltas(previous, current, OUTPUT_TOKENS):
        if labels.get("direction") == "out":
            tokens[labels["model"]] += delta
    ttft = _quantiles(previous, current, TTFT_BUCKET, (0.5, 0.9, 0.99))
    latency = _quantiles(previous, current, DURATION_BUCKET, (0.99,))
    rows = []
    for model in sorted(set(requests) | set(tokens)):
        p50, p90, p99 = ttft.get(model, (None, None, None))
        count = requests.get(model, 0.0)
        rows.append(
            ModelRow(
                model=model,
                requests_per_s=count / interval,
                error_ratio=errors.get(model, 0.0) / count if count else None,
                output_tokens_per_s=tokens.get(model, 0.0) / interval,
                ttft_p50_s=p50,
                ttft_p90_s=p90,
                ttft_p99_s=p99,
                latency_p99_s=latency.get(model, (None,))[0],
            )
        )
    return tuple(rows)
