"""Tier-1 heartbeats for the global router: this gateway's load, published to Redis every second.

Opt-in through ``spec.extensions.globalHeartbeat`` (cluster, region, Redis URL). Every
``interval`` the gateway writes one JSON document to ``<keyPrefix><cluster>`` with a TTL; the
global routers (``igw.global_router.heartbeats``) read it. A shared store instead of pushing to each
router keeps routers stateless and replicas consistent, and needs no consensus of our own.

The document (:class:`~igw.gateway.heartbeat_message.Heartbeat`) carries what tier 2 routes
on: models and pools, fresh/total endpoints, saturation (the share of endpoints without spare
capacity by the scheduler's own queue/KV thresholds), queue depth, TTFT quantiles and the 429 rate
over the last ``window``. The quantiles and rates come from deltas of the gateway's own Prometheus
series, so the request path is not touched at all. ``seq`` increases with every publication:
routers judge staleness by when they last saw it change, on their own clock, so clock skew between
machines does not matter.

A publication failure (Redis down) is logged once per outage and retried at the next tick; the
gateway keeps serving.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from igw.config.durations import parse_duration
from igw.gateway.emf import quantile
from igw.gateway.heartbeat_message import Heartbeat, PoolLoad
from igw.gateway.ticker import Ticker
from igw.scheduling.saturation import has_capacity

if TYPE_CHECKING:
    from igw.gateway.state import GatewayState

log = logging.getLogger("igw.gateway.heartbeat")

EXTENSION: Final = "globalHeartbeat"


@dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    cluster: str
    region: str
    redis_url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "igw:hb:"
    interval_s: float = 1.0
    ttl_s: float = 10.0
    window_s: float = 10.0

    @property
    def key(self) -> str:
        return f"{self.key_prefix}{self.cluster}"

    @staticmethod
    def from_mapping(raw: Mapping[str, Any]) -> HeartbeatSettings:
        """From a validated ``spec.extensions.globalHeartbeat``."""
        redis = raw.get("redis", {})
        return HeartbeatSettings(
            cluster=str(raw["cluster"]),
            region=str(raw["region"]),
            redis_url=str(redis.get("url", "redis://127.0.0.1:6379/0")),
            key_prefix=str(redis.get("keyPrefix", "igw:hb:")),
            interval_s=parse_duration(str(raw.get("interval", "1s"))),
            ttl_s=parse_duration(str(raw.get("ttl", "10s"))),
            window_s=parse_duration(str(raw.get("window", "10s"))),
        )


def quantile_from_buckets(bounds: Iterable[tuple[float, float]], q: float) -> float | None:
    """``q``-quantile of a histogram given as cumulative ``(upper bound, count)`` pairs in any order:
    :func:`igw.gateway.emf.quantile` (Prometheus' ``histogram_quantile`` rule, one implementation)
    on the pairs sorted by bound."""
    return quantile(q, sorted(bounds))


@dataclass(frozen=True, slots=True)
class _Counters:
    at: float
    ttft: Mapping[float, float]
    requests: float
    rejected_429: float


def _read_counters(state: GatewayState, now: float) -> _Counters:
    ttft: dict[float, float] = {}
    for metric in state.metrics.ttft.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                ttft[bound] = ttft.get(bound, 0.0) + sample.value
    requests = rejected = 0.0
    for metric in state.metrics.requests.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                requests += sample.value
                if sample.labels.get("code") == "429":
                    rejected += sample.value
    return _Counters(at=now, ttft=ttft, requests=requests, rejected_429=rejected)


def _went_back(before: _Counters, after: _Counters) -> bool:
    """Whether any counter of ``after`` is lower than in ``before`` (a reset between them)."""
    if after.requests < before.requests or after.rejected_429 < before.rejected_429:
        return True
    later = after.ttft
    return any(later.get(bound, 0.0) < count for bound, count in before.ttft.items())


class LoadWindow:
    """Counter snapshots over the last ``window_s``; quantiles and rates are differences across it."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._snapshots: deque[_Counters] = deque()

    def add(self, snapshot: _Counters) -> tuple[_Counters, _Counters]:
        """Record ``snapshot``; return (oldest kept within the window, newest).

        A counter lower than in the last snapshot (the series were reset) starts the window anew
        at ``snapshot``: a difference across the reset would be negative, a rate or a TTFT below 0
        that the global router refuses, draining this cluster (:meth:`Heartbeat.decode`)."""
        if self._snapshots and _went_back(self._snapshots[-1], snapshot):
            self._snapshots.clear()
        self._snapshots.append(snapshot)
        while len(self._snapshots) > 2 and snapshot.at - self._snapshots[1].at >= self._window_s:
            self._snapshots.popleft()
        return self._snapshots[0], snapshot


def build_heartbeat(
    state: GatewayState,
    settings: HeartbeatSettings,
    *,
    seq: int,
    window: LoadWindow,
    now: float,
    wall: float,
) -> Heartbeat:
    """This gateway's heartbeat now (pure reading of ``state``; nothing is modified but ``window``)."""
    pools: dict[str, PoolLoad] = {}
    total = fresh = busy = queue = 0
    models: set[str] = set()
    for name, sr in state.runtime.schedulers.items():
        settings_s = sr.scheduler.settings
        views = sr.pool.views()
        p_fresh = [v for v in views if sr.scheduler.is_fresh(v, now)]
        p_free = [
            v
            for v in p_fresh
            if has_capacity(
                v,
                queue_threshold=settings_s.queue_depth_threshold,
                kv_threshold=settings_s.kv_cache_util_threshold,
            )
        ]
        p_queue = sum(int(v.metrics.waiting or 0) for v in p_fresh if v.metrics is not None)
        pools[name] = PoolLoad(
            model=sr.spec.model_name,
            endpoints_total=len(views),
            endpoints_fresh=len(p_fresh),
            saturation=1.0 if not views else 1.0 - len(p_free) / len(views),
            queue_depth=p_queue,
        )
        if views:
            models.add(sr.spec.model_name)
            models.update(sr.spec.lora_adapters)
        total += len(views)
        fresh += len(p_fresh)
        busy += len(views) - len(p_free)
        queue += p_queue
    oldest, newest = window.add(_read_counters(state, now))
    span = max(newest.at - oldest.at, 1e-9)
    delta = [(b, newest.ttft.get(b, 0.0) - oldest.ttft.get(b, 0.0)) for b in newest.ttft]
    return Heartbeat(
        cluster=settings.cluster,
        region=settings.region,
        seq=seq,
        sent_at=wall,
        models=tuple(sorted(models)),
        endpoints_total=total,
        endpoints_fresh=fresh,
        saturation=1.0 if total == 0 else busy / total,
        queue_depth=queue,
        ttft_p50_s=quantile_from_buckets(delta, 0.5),
        ttft_p90_s=quantile_from_buckets(delta, 0.9),
        ttft_p99_s=quantile_from_buckets(delta, 0.99),
        rate_429_per_s=(newest.rejected_429 - oldest.rejected_429) / span if newest.at > oldest.at else 0.0,
        requests_per_s=(newest.requests - oldest.requests) / span if newest.at > oldest.at else 0.0,
        draining=state.draining,
        pools=pools,
    )


class HeartbeatPublisher:
    """Publishes :func:`build_heartbeat` every ``interval`` until stopped."""

    def __init__(
        self,
        state: GatewayState,
        settings: HeartbeatSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        # deferred: optional dependency: redis is imported only when this feature is configured
        import redis.asyncio as redis_asyncio

        self._state = state
        self._settings = settings
        self._clock = clock
        self._wall = wall
        self._client = redis_asyncio.Redis.from_url(
            settings.redis_url, socket_connect_timeout=0.5, socket_timeout=0.5
        )
        self._window = LoadWindow(settings.window_s)
        self._seq = 0
        self._failing = False
        self._ticker = Ticker(self._tick, interval_s=settings.interval_s, name="igw-heartbeat")

    @property
    def published(self) -> int:
        """Heartbeats written successfully so far."""
        return self._seq

    async def publish_once(self) -> None:
        """Write one heartbeat; raises ``redis.exceptions.RedisError`` / ``OSError`` on failure."""
        beat = build_heartbeat(
            self._state,
            self._settings,
            seq=self._seq + 1,
            window=self._window,
            now=self._clock(),
            wall=self._wall(),
        )
        await self._client.set(self._settings.key, beat.encode(), px=int(self._settings.ttl_s * 1000))
        self._seq += 1

    async def _tick(self) -> None:
        # deferred: optional dependency: redis is imported only when this feature is configured
        from redis.exceptions import RedisError

        try:
            await self.publish_once()
            if self._failing:
                log.warning("heartbeat to %s is being published again", self._settings.key)
                self._failing = False
        except (RedisError, OSError) as exc:
            if not self._failing:
                log.error("heartbeat %s not published (%s); retrying", self._settings.key, type(exc).__name__)
                self._failing = True

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        """Stop publishing and delete the key, so routers drain this cluster at once, not after staleness."""
        await self._ticker.stop()
        with contextlib.suppress(Exception):
            await self._client.delete(self._settings.key)
        await self._client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose


def heartbeat_context(state: GatewayState, raw: Mapping[str, Any]) -> Callable[[Any], AsyncIterator[None]]:
    """An aiohttp cleanup context publishing heartbeats for the app's lifetime (``raw``: the extension)."""
    settings = HeartbeatSettings.from_mapping(raw)

    async def context(_app: Any) -> AsyncIterator[None]:
        publisher = HeartbeatPublisher(state, settings, clock=state.clock)
        publisher.start()
        try:
            yield
        finally:
            await publisher.stop()

    return context
