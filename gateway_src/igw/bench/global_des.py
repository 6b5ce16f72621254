"""A discrete-event model of tier 2 for fleets too large for one machine (``igw bench global-des``).

It runs the router's own code in virtual time - :func:`igw.global_router.policy.plan` for every
request and one :class:`igw.global_router.health.ClusterHealth` per (router, cluster) fed by
heartbeats and request outcomes - against a simple cluster model, so what it measures is the
product's decisions at a scale no laptop can run live (by default 10 regions × 20 clusters).

Model, and what it leaves out:

- one router per region (replicas behave alike: same heartbeats, same code); clients send Poisson
  traffic to their region's router;
- a cluster is an M/G/c queue (``c = pods × slots``, lognormal service time); beyond ``2c``
  queued requests it answers 429 like a saturated tier-1 gateway;
- regions sit on a ring; round-trip time between regions ``i`` and ``j`` is
  ``base_rtt + per_hop_rtt × ring distance``; a connect to a dead cluster costs one round trip;
- every cluster publishes a heartbeat each second (saturation, P99 TTFT over 10 s); routers read
  all heartbeats every ``poll_s``; failure detection from request outcomes is applied at the
  moment of the attempt (not one round trip later);
- faults: one cluster of region 0 is killed, returns, then region 0 goes down;
- models (``pod_splits``): by default one model on every pod. With several, each cluster serves
  them on pods of their own (a pool per model, each an M/G/c queue answering 429 beyond ``2c``
  queued), its pods split as ``pod_splits`` says in turn over the clusters, and a request's model is
  drawn with equal odds; ``pool_figures`` says whether the heartbeats carry each pool's figures (as
  tier 1's do) or only the cluster's (as from a gateway that publishes no ``pools``), the routing
  then reading what the heartbeat holds (:func:`igw.global_router.policy.model_load`).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from igw.bench.console import Progress, stderr_progress
from igw.gateway.heartbeat_message import Heartbeat, PoolLoad
from igw.global_router.config import ClusterSpec, FailoverSpec, RoutingSpec
from igw.global_router.health import ClusterHealth, Transition, record_failure
from igw.global_router.policy import ClusterState, plan

MODEL = "llama"
WARMUP_S = 2.0


@dataclass(frozen=True, slots=True)
class DesOptions:
    regions: int = 10
    clusters_per_region: int = 20
    pods_per_cluster: int = 4
    slots_per_pod: int = 8
    rate_per_region: float = 60.0
    mean_service_s: float = 0.5
    tokens_per_request: int = 600
    base_rtt_s: float = 0.01
    per_hop_rtt_s: float = 0.02
    poll_s: float = 0.5
    kill_at_s: float = 20.0
    return_at_s: float = 40.0
    region_down_at_s: float = 80.0
    end_s: float = 100.0
    policy: str = "latency-first"
    slo_s: float = 1.0
    slow_start_s: float = 20.0
    seed: int = 1
    pod_splits: tuple[tuple[int, ...], ...] = ()
    """Per cluster in turn, its pods per model (each split summing to ``pods_per_cluster``); empty:
    one model on every pod."""
    pool_figures: bool = True
    """Whether the heartbeats carry each model's pool figures (``pools``), or only the cluster's."""


@dataclass
class _Pool:
    """One model's pods at a cluster: an M/G/c queue."""

    slots: int
    busy: int = 0
    queue: deque[tuple[float, int]] = field(default_factory=deque)


@dataclass
class _Cluster:
    spec: ClusterSpec
    pools: dict[str, _Pool]
    alive: bool = True
    ttfts: deque[tuple[float, float]] = field(default_factory=deque)
    seq: int = 0
    seq_epoch: int = 0
    """Bumped on a crash: service completions scheduled before it are void."""


@dataclass
class _Request:
    region: int
    sent: float
    cluster: str = ""
    network_s: float = 0.0
    """Round trips spent on the way (failed connects, 429s, the final cluster's)."""
    latency_s: float = math.nan
    failed: bool = False
    retried: bool = False
    model: str = MODEL
    refusals: int = 0
    """429s answered on the way (each a round trip before the next cluster was tried)."""


def _ring_rtt(a: int, b: int, options: DesOptions) -> float:
    if a == b:
        return 0.0
    hops = min(abs(a - b), options.regions - abs(a - b))
    return options.base_rtt_s + options.per_hop_rtt_s * hops


def run_global_des(options: DesOptions) -> dict[str, Any]:
    """Simulate; return the measurements (redirect times, failures, latency, ramp, cost)."""
    rng = random.Random(options.seed)
    regions = [f"r{i}" for i in range(options.regions)]
    splits = options.pod_splits or ((options.pods_per_cluster,),)
    models = (MODEL,) if len(splits[0]) == 1 else tuple(f"model-{m}" for m in range(len(splits[0])))
    clusters: dict[str, _Cluster] = {}
    for r, region in enumerate(regions):
        for c in range(options.clusters_per_region):
            name = f"{region}-c{c}"
            price = 0.2 + 0.05 * r + 0.01 * c  # regions differ in price; cost-first has a reason to move
            spec = ClusterSpec(name, region, f"http://{name}", models, float(options.pods_per_cluster), price)
            split = splits[(r * options.clusters_per_region + c) % len(splits)]
            pools = {
                model: _Pool(slots=pods * options.slots_per_pod)
                for model, pods in zip(models, split, strict=True)
            }
            clusters[name] = _Cluster(spec, pools)
    failover = FailoverSpec(slow_start_s=options.slow_start_s)
    routing = RoutingSpec(
        policy="cost-first-within-slo" if options.policy == "cost-first-within-slo" else "latency-first",
        ttft_p99_slo_s=options.slo_s,
        inter_region_penalty_s=options.base_rtt_s + options.per_hop_rtt_s,
    )
    health = [{name: ClusterHealth(name, failover) for name in clusters} for _ in regions]
    specs = {name: cluster.spec for name, cluster in clusters.items()}
    store: dict[str, Heartbeat | None] = {}
    region_index = {region: i for i, region in enumerate(regions)}
    events: list[tuple[float, int, str, Any]] = []
    counter = 0

    def push(t: float, kind: str, payload: Any = None) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(events, (t, counter, kind, payload))

    requests: list[_Request] = []
    drains: dict[tuple[str, int], list[float]] = {}
    in_flight: dict[str, set[int]] = {name: set() for name in clusters}
    victim = f"{regions[0]}-c0"
    for r in range(options.regions):
        # Traffic starts once routers have read a first heartbeat (their readiness gates the LB).
        push(WARMUP_S + rng.expovariate(options.rate_per_region), "arrival", r)
        push(rng.random() * options.poll_s, "poll", r)
    for name in clusters:
        push(rng.random(), "heartbeat", name)
    push(options.kill_at_s, "kill", [victim])
    push(options.return_at_s, "revive", [victim])
    push(options.region_down_at_s, "kill", [n for n in clusters if n.startswith(f"{regions[0]}-")])

    def start_service(cluster: _Cluster, model: str, now: float) -> None:
        pool = cluster.pools[model]
        while pool.busy < pool.slots and pool.queue:
            enqueued, index = pool.queue.popleft()
            pool.busy += 1
            service = rng.lognormvariate(math.log(options.mean_service_s) - 0.125, 0.5)
            cluster.ttfts.append((now, now - enqueued + 0.05))
            push(now + service, "finish", (cluster.spec.name, model, index, cluster.seq_epoch))

    def observe(r: int, name: str, transition: Transition | None, now: float) -> None:
        if transition is not None and transition.kind == "failover":
            drains.setdefault((name, r), []).append(now)

    def dispatch(index: int, now: float) -> None:
        """Plan and place request ``index`` at ``now`` (its first try, or a retry after a crash)."""
        request = requests[index]
        r = request.region
        views = health[r]
        states = [
            ClusterState(spec=c.spec, heartbeat=views[n].heartbeat, ramp=views[n].ramp(now=now))
            for n, c in clusters.items()
        ]
        elapsed = 0.0
        answered = 0
        for choice in plan(request.model, states, region=regions[r], routing=routing, rng=rng):
            if answered >= routing.max_attempts:
                break
            target = clusters[choice.cluster.name]
            rtt = _ring_rtt(r, region_index[target.spec.region], options) + 0.001
            if not target.alive:
                elapsed += rtt  # connect refused after one round trip: next cluster, not an attempt
                record_failure(views, specs, target.spec.name, now=now, spec=failover, unreachable=True)
                observe(r, target.spec.name, views[target.spec.name].evaluate(now=now, source_up=True), now)
                continue
            answered += 1
            pool = target.pools[request.model]
            if len(pool.queue) > 2 * pool.slots:
                elapsed += rtt  # 429 from tier 1: the router tries the next cluster
                request.refusals += 1
                continue
            request.cluster = target.spec.name
            request.network_s += elapsed + rtt
            pool.queue.append((now, index))
            in_flight[target.spec.name].add(index)
            start_service(target, request.model, now)
            return
        request.failed = True

    t = 0.0
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if t > options.end_s + 30:
            break
        if kind == "arrival":
            if t < options.end_s:
                push(t + rng.expovariate(options.rate_per_region), "arrival", payload)
            model = models[0] if len(models) == 1 else models[rng.randrange(len(models))]
            requests.append(_Request(region=payload, sent=t, model=model))
            dispatch(len(requests) - 1, t)
        elif kind == "finish":
            name, model, index, epoch = payload
            cluster = clusters[name]
            if epoch != cluster.seq_epoch:
                continue  # the cluster crashed meanwhile; the request was retried elsewhere
            cluster.pools[model].busy -= 1
            in_flight[name].discard(index)
            requests[index].latency_s = t - requests[index].sent + requests[index].network_s
            start_service(cluster, model, t)
        elif kind == "heartbeat":
            cluster = clusters[payload]
            push(t + 1.0, "heartbeat", payload)
            if not cluster.alive:
                continue
            while cluster.ttfts and cluster.ttfts[0][0] < t - 10:
                cluster.ttfts.popleft()
            values = sorted(v for _, v in cluster.ttfts)
            p99 = values[min(len(values) - 1, int(0.99 * len(values)))] if values else None
            cluster.seq += 1
            store[payload] = _heartbeat(cluster, options, seq=cluster.seq, at=t, ttft_p99_s=p99)
        elif kind == "poll":
            push(t + options.poll_s, "poll", payload)
            for name, h in health[payload].items():
                h.observe_heartbeat(store.get(name), now=t)
                observe(payload, name, h.evaluate(now=t, source_up=True), t)
        elif kind == "kill":
            for name in payload:
                cluster = clusters[name]
                cluster.alive = False
                cluster.seq_epoch += 1
                for pool in cluster.pools.values():
                    pool.queue.clear()
                    pool.busy = 0
                orphans, in_flight[name] = in_flight[name], set()
                for index in sorted(orphans):
                    requests[index].retried = True
                    dispatch(index, t)  # the connection broke before a response: retried elsewhere
        elif kind == "revive":
            for name in payload:
                clusters[name].alive = True
    return _summary(requests, drains, clusters, regions, victim, options)


def _heartbeat(
    cluster: _Cluster, options: DesOptions, *, seq: int, at: float, ttft_p99_s: float | None
) -> Heartbeat:
    """What the cluster's gateway publishes: saturation as queued and running requests over slots,
    the cluster's and (``options.pool_figures``) each model pool's."""
    pods_per_slot = 1 / options.slots_per_pod
    pools = {
        model: PoolLoad(
            model=model,
            endpoints_total=round(pool.slots * pods_per_slot),
            endpoints_fresh=round(pool.slots * pods_per_slot),
            saturation=min(1.0, (pool.busy + len(pool.queue)) / pool.slots) if pool.slots else 1.0,
            queue_depth=len(pool.queue),
        )
        for model, pool in cluster.pools.items()
    }
    slots = sum(pool.slots for pool in cluster.pools.values())
    load = sum(pool.busy + len(pool.queue) for pool in cluster.pools.values())
    return Heartbeat(
        cluster=cluster.spec.name,
        region=cluster.spec.region,
        seq=seq,
        sent_at=at,
        models=tuple(cluster.pools),
        endpoints_total=options.pods_per_cluster,
        endpoints_fresh=options.pods_per_cluster,
        saturation=min(1.0, load / slots),
        queue_depth=sum(len(pool.queue) for pool in cluster.pools.values()),
        ttft_p99_s=ttft_p99_s,
        pools=pools if options.pool_figures else {},
    )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(
    requests: list[_Request],
    drains: dict[tuple[str, int], list[float]],
    clusters: dict[str, _Cluster],
    regions: list[str],
    victim: str,
    options: DesOptions,
) -> dict[str, Any]:
    def redirect(name: str, since: float) -> float | None:
        """Seconds from ``since`` until every region's router had drained ``name``."""
        firsts = [
            min((t for t in drains.get((name, r), []) if t >= since), default=None)
            for r in range(len(regions))
        ]
        known = [t for t in firsts if t is not None]
        return max(known) - since if len(known) == len(regions) else None

    local = [q for q in requests if q.region == 0 and not q.failed and not math.isnan(q.latency_s)]
    before = [q.latency_s for q in local if q.sent < options.kill_at_s]
    during = [q.latency_s for q in local if options.region_down_at_s + 5 < q.sent < options.end_s]
    ramp = []
    for b in range(int(options.slow_start_s) + 5):
        start = options.return_at_s + b
        region0 = [q for q in local if start <= q.sent < start + 1 and q.cluster.startswith(f"{regions[0]}-")]
        if region0:
            ramp.append((b + 0.5, sum(q.cluster == victim for q in region0) / len(region0)))
    done = [q for q in requests if not q.failed and q.sent < options.end_s]
    cost = sum(clusters[q.cluster].spec.cost_per_million_tokens or 0.0 for q in done)
    region_redirects = [
        redirect(f"{regions[0]}-c{c}", options.region_down_at_s) for c in range(options.clusters_per_region)
    ]
    return {
        "options": asdict(options),
        "clusters": len(clusters),
        "requests": len(requests),
        "failed": sum(q.failed for q in requests),
        "refused_429": sum(q.refusals for q in requests),
        "retried_after_crash": sum(q.retried for q in requests),
        "redirect_cluster_s": redirect(victim, options.kill_at_s),
        "redirect_region_s": None
        if None in region_redirects
        else max(r for r in region_redirects if r is not None),
        "region0_p50_before_s": _pct(before, 0.5),
        "region0_p99_before_s": _pct(before, 0.99),
        "region0_p50_region_down_s": _pct(during, 0.5),
        "region0_p99_region_down_s": _pct(during, 0.99),
        "ramp_curve": ramp,
        "cost_per_1k_requests_usd": 1000 * cost * options.tokens_per_request / 1e6 / max(1, len(done)),
        "p99_latency_s": _pct([q.latency_s for q in done], 0.99),
    }


def run_global_des_command(
    *,
    out: Path,
    quick: bool,
    seed: int,
    command: str,
    base: DesOptions | None = None,
    progress: Progress | None = None,
) -> int:
    """``igw bench global-des``: both cost policies on the large fleet; Markdown + JSON under ``out``.

    ``base`` replaces the default fleet (10 regions × 20 clusters; ``quick``: 5 × 10). Each of the six
    runs is told to ``progress`` as it starts (default: a stamped line on stderr): ``--quick`` alone
    took a minute on two shared cores without a line before the report.
    """
    say = progress or stderr_progress()

    if base is None:
        base = DesOptions(seed=seed)
        if quick:
            base = DesOptions(regions=5, clusters_per_region=10, rate_per_region=30.0, seed=seed)
    results = {}
    for policy in POLICIES:
        say(f"{policy}: {base.regions} regions x {base.clusters_per_region} clusters, failover script")
        results[policy] = run_global_des(replace(base, policy=policy))
    out.mkdir(parents=True, exist_ok=True)
    first = results[POLICIES[0]]
    lines = [
        "# Tier-2 global router: discrete-event model",
        "",
        f"Command: `{command}`",
        "",
        f"{base.regions} regions × {base.clusters_per_region} clusters ({first['clusters']} clusters), "
        f"{base.rate_per_region:g} req/s per region; a cluster of region 0 killed at {base.kill_at_s:g} s, "
        f"back at {base.return_at_s:g} s (slow start {base.slow_start_s:g} s), "
        f"region 0 down at {base.region_down_at_s:g} s.",
        "",
        "| policy | requests | failed | retried after a crash | redirect, one cluster | redirect, region "
        "| region-0 P50 before / region down | cost per 1000 requests | P99 latency |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, r in results.items():
        lines.append(
            f"| {policy} | {r['requests']} | {r['failed']} | {r['retried_after_crash']} "
            f"| {_fmt(r['redirect_cluster_s'])} | {_fmt(r['redirect_region_s'])} "
            f"| {_fmt(r['region0_p50_before_s'])} / {_fmt(r['region0_p50_region_down_s'])} "
            f"| ${r['cost_per_1k_requests_usd']:.4f} | {_fmt(r['p99_latency_s'])} |"
        )
    pooled = replace(POOLS, seed=seed, end_s=30.0 if quick else POOLS.end_s)
    pool_results = {}
    for policy in POLICIES:
        for figures in (False, True):
            say(f"{policy}: model pools, routed on {'each pool' if figures else 'the cluster'}'s figures")
            options = replace(pooled, policy=policy, pool_figures=figures)
            pool_results[policy, figures] = run_global_des(options)
    lines += [
        "",
        f"Model pools: {pooled.regions} regions × {pooled.clusters_per_region} clusters, two models, each "
        f"cluster's {pooled.pods_per_cluster} pods split 3/1 or 1/3 in turn, "
        f"{pooled.rate_per_region:g} req/s per region, {pooled.end_s:g} s, no fault; routed on the "
        "cluster's figures (heartbeats without `pools`) or each model's pool figures.",
        "",
        "| policy | heartbeat figures | requests | failed | answered 429 | P99 latency |",
        "|---|---|---|---|---|---|",
    ]
    for (policy, figures), r in pool_results.items():
        lines.append(
            f"| {policy} | {'model pools' if figures else 'cluster'} | {r['requests']} | {r['failed']} "
            f"| {r['refused_429']} | {_fmt(r['p99_latency_s'])} |"
        )
    results["model-pools"] = {
        f"{policy}/{'pools' if f else 'cluster'}": r for (policy, f), r in pool_results.items()
    }
    (out / "global-des-results.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "global-des-report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


POLICIES = ("latency-first", "cost-first-within-slo")
POOLS = DesOptions(
    regions=3,
    clusters_per_region=4,
    rate_per_region=150.0,
    pod_splits=((3, 1), (1, 3)),
    kill_at_s=math.inf,
    return_at_s=math.inf,
    region_down_at_s=math.inf,
    end_s=60.0,
)
"""The model-pools scenario: each cluster as busy as the next, one of its two pools far busier."""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f} s"
