"""Tier-1 heartbeats for the global router: this gateway's load, published to Redis every second.

Opt-in through ``spec.extensions.globalHeartbeat`` (cluster, region, Redis URL). Every
``interval`` each gateway replica writes one JSON document as its own field (:func:`replica_name`)
of the Redis hash ``<keyPrefix><cluster>``, whose TTL every write renews; the global routers
(``igw.global_router.heartbeats``) read every replica's field and merge them into the cluster's
state. One field per replica, not one key per cluster: a cluster's gateway runs several replicas,
and when the cluster had one document that each replica overwrote, a replica stopping in a rolling
update deleted it (and said ``draining`` first), so every router drained the whole cluster while the
other replicas served, then slow-started it over ``slowStartSeconds``. In a worker group
(``igw serve --workers N``) worker 0 publishes for the pod (:func:`publishes_heartbeat`). A shared
store instead of pushing to each router keeps routers stateless and replicas consistent, and needs
no consensus of our own.

The document (:class:`~igw.gateway.heartbeat_message.Heartbeat`) carries what tier 2 routes
on: models and pools, fresh/total endpoints, saturation (the share of endpoints without spare
capacity by the scheduler's own queue/KV thresholds), queue depth, TTFT quantiles and the 429 rate
over the last ``window``. The quantiles and rates come from deltas of the gateway's own Prometheus
series, so the request path is not touched at all. ``seq`` increases with every publication:
routers judge staleness by when they last saw it change, on their own clock, so clock skew between
machines does not matter.

A publication failure (Redis down) is logged once per outage and retried at the next tick; the
gateway keeps serving. A replica that stops removes its own field (the key goes with the last
field); fields of replicas killed without stopping are removed by the others once unchanged for a
TTL on their own monotonic clock (:meth:`HeartbeatPublisher.prune`: no wall clock, so a clock step
or skew prunes no live replica), and routers ignore them once stale anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from igw.config.durations import parse_duration
from igw.config.redis_client import lean_handshake
from igw.config.redis_password import redis_password
from igw.gateway.emf import quantile
from igw.gateway.emf_metrics import HEARTBEAT_EXTENSION, HEARTBEAT_RESULTS
from igw.gateway.heartbeat_message import Heartbeat, PoolLoad
from igw.gateway.outage_log import OutageLog
from igw.gateway.ticker import Ticker
from igw.scheduling.saturation import has_capacity

if TYPE_CHECKING:
    from igw.gateway.state import GatewayState

log = logging.getLogger("igw.gateway.heartbeat")

EXTENSION: Final = HEARTBEAT_EXTENSION


@dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    cluster: str
    region: str
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_password_env: str | None = None
    """The environment variable holding the Redis password (:mod:`igw.config.redis_password`)."""
    key_prefix: str = "igw:hb:"
    interval_s: float = 1.0
    ttl_s: float = 10.0
    window_s: float = 10.0
    replica: str = ""
    """This replica's field in the cluster's hash (:func:`replica_name` when empty)."""
    rate_scale: float = 1.0
    """What this process's request and 429 rates are multiplied by to stand for its pod: the
    worker count in a worker group, whose worker 0 alone publishes (the kernel spreads the
    connections evenly over the workers); 1 otherwise."""

    @property
    def key(self) -> str:
        return f"{self.key_prefix}{self.cluster}"

    @property
    def field(self) -> str:
        return self.replica or replica_name()

    @property
    def prune_every_s(self) -> float:
        """The longest time between two of a replica's prunes while its writes succeed: a prune runs
        at the first write a TTL or more after the last (:meth:`HeartbeatPublisher.publish_once`),
        and writes come every ``interval``, so up to a TTL plus an interval. The CDK app's alarm on
        failed prunes sizes its period by it: with one-minute periods and a TTL over a minute, some
        minutes held no prune and read 0, so "failed every minute" never fired."""
        return self.ttl_s + self.interval_s

    @staticmethod
    def from_mapping(raw: Mapping[str, Any]) -> HeartbeatSettings:
        """From a validated ``spec.extensions.globalHeartbeat``."""
        redis = raw.get("redis", {})
        return HeartbeatSettings(
            cluster=str(raw["cluster"]),
            region=str(raw["region"]),
            redis_url=str(redis.get("url", "redis://127.0.0.1:6379/0")),
            redis_password_env=redis.get("passwordEnv"),
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


def replica_name() -> str:
    """This process's field in its cluster's heartbeat hash: ``<host name>/<pid>`` (a pod's host name
    is the pod's name; the pid tells apart two gateways on one machine and a restarted worker)."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}/{os.getpid()}"


def publishes_heartbeat(worker_index: int | None) -> bool:
    """Whether the process of ``worker_index`` (``None``: not in a worker group) publishes its pod's
    heartbeat: worker 0 of a group, which discovers and scrapes the pods for all of them, so its
    saturation and queue figures are the pod's; one field per pod rather than one per worker."""
    return worker_index is None or worker_index == 0


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
            adapters=tuple(sorted(sr.spec.lora_adapters)),
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
        rate_429_per_s=(
            (newest.rejected_429 - oldest.rejected_429) / span * settings.rate_scale
            if newest.at > oldest.at
            else 0.0
        ),
        requests_per_s=(
            (newest.requests - oldest.requests) / span * settings.rate_scale if newest.at > oldest.at else 0.0
        ),
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
        password: str | None = None,
    ) -> None:
        """``password``: the Redis password when the URL holds none (:func:`heartbeat_password`)."""
        # deferred: optional dependency: redis is imported only when this feature is configured
        import redis.asyncio as redis_asyncio

        self._state = state
        self._settings = settings
        self._clock = clock
        self._wall = wall
        self._client = redis_asyncio.Redis.from_url(
            settings.redis_url,
            password=password,
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            **lean_handshake(),  # no round trip before the first write (igw.config.redis_client)
        )
        self._window = LoadWindow(settings.window_s)
        self._field = settings.field
        self._pruned_at = float("-inf")
        self._seen_fields: dict[bytes, tuple[int, float]] = {}
        """The other replicas' fields at the last :meth:`prune`: field -> (its ``seq``, when this
        replica first saw that ``seq``, on ``clock``)."""
        self._seq = 0
        self._outages = OutageLog()
        """When failed writes and their end are logged: a flapping store's are counted, not each
        logged (:mod:`igw.gateway.outage_log`)."""
        self._logged_problem: str | None = None
        """The trouble of the last logged failure: ``unreachable``, or the refusal's error type."""
        writes = state.metrics.heartbeat_writes
        self._written = {result: writes.labels(result) for result in HEARTBEAT_RESULTS}
        """``igw_heartbeat_writes_total`` by result: every write counted, the held ones too."""
        prunes = state.metrics.heartbeat_prunes
        self._pruned = {result: prunes.labels(result) for result in HEARTBEAT_RESULTS}
        """``igw_heartbeat_prunes_total`` by result: a prune's failure is not a failed write."""
        self._prune_problem: str | None = None
        """The trouble of the last prune, while it fails (logged when it starts and ends)."""
        # at a fixed rate: a slow store must not stretch the interval the routers' staleness
        # counts on (until session s43, 1 s + the round trips: 1.45 s on a store answering in 0.45 s)
        self._ticker = Ticker(
            self._tick, interval_s=settings.interval_s, name="igw-heartbeat", fixed_rate=True
        )

    @property
    def published(self) -> int:
        """Heartbeats written successfully so far."""
        return self._seq

    async def publish_once(self) -> None:
        """Write one heartbeat, then prune once per TTL (:meth:`_prune_counted`); raises
        ``redis.exceptions.RedisError`` / ``OSError`` when the write fails, never for the prune."""
        beat = build_heartbeat(
            self._state,
            self._settings,
            seq=self._seq + 1,
            window=self._window,
            now=self._clock(),
            wall=self._wall(),
        )
        key = self._settings.key
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.hset(key, self._field, beat.encode())
            pipe.pexpire(key, int(self._settings.ttl_s * 1000))
            await pipe.execute()
        self._seq += 1
        now = self._clock()
        if now - self._pruned_at >= self._settings.ttl_s:
            self._pruned_at = now
            await self._prune_counted()

    async def _prune_counted(self) -> None:
        """:meth:`prune`, its outcome counted in ``igw_heartbeat_prunes_total`` and a failure logged
        when it starts (or its kind changes) and when it ends. The heartbeat was written before it:
        until session s45 a failed prune (an ACL granting ``HSET`` but not ``HGETALL``/``HDEL``, a
        timeout on a large hash) failed the tick, counted and logged as a write that was not
        published, and fired the failed-writes alert while every write landed."""
        # deferred: optional dependency: redis is imported only when this feature is configured
        from redis.exceptions import AuthenticationError, AuthorizationError, RedisError, ResponseError

        try:
            await self.prune()
        except (RedisError, OSError) as exc:
            refused = isinstance(exc, (ResponseError, AuthenticationError, AuthorizationError))
            self._pruned["refused" if refused else "unreachable"].inc()
            kind = type(exc).__name__
            if kind != self._prune_problem:
                self._prune_problem = kind
                log.warning(
                    "heartbeat %s: other replicas' stale fields not pruned (%s); the heartbeat itself "
                    "is published",
                    self._settings.key,
                    kind,
                )
        else:
            self._pruned["ok"].inc()
            if self._prune_problem is not None:
                self._prune_problem = None
                log.info("heartbeat %s: stale fields pruned again", self._settings.key)

    async def prune(self) -> None:
        """Remove the fields of replicas that stopped writing (killed without stopping: their field
        outlives them, since the other replicas' writes renew the key's TTL).

        A field's age is measured here, on this process's monotonic clock: how long this replica
        has seen its ``seq`` unchanged. Prune runs once per TTL, so a field goes one to two TTLs
        after its replica's last write. Until session s41 the age was the field's own ``sent_at``
        (its writer's wall clock) against this machine's wall clock: a step of this node's clock
        (NTP) by more than a TTL pruned every other replica's live field at once, and did again at
        every prune while it lasted (a node whose clock ran that far behind had its field pruned
        by every other replica likewise); the routers then read the cluster from fewer replicas
        until the others wrote again. This replica's own field, and a field that cannot be read,
        are left (the routers ignore one that is malformed)."""
        key = self._settings.key
        fields = await self._client.hgetall(key)
        now = self._clock()
        own = self._field.encode()
        seen: dict[bytes, tuple[int, float]] = {}
        old = []
        for field_name, raw in fields.items():
            if field_name == own:
                continue
            try:
                seq = Heartbeat.decode(raw).seq
            except ValueError:
                continue
            last = self._seen_fields.get(field_name)
            if last is None or last[0] != seq:
                seen[field_name] = (seq, now)
            elif now - last[1] >= self._settings.ttl_s:
                old.append(field_name)
            else:
                seen[field_name] = last
        self._seen_fields = seen
        if old:
            await self._client.hdel(key, *old)

    async def _tick(self) -> None:
        # deferred: optional dependency: redis is imported only when this feature is configured
        from redis.exceptions import AuthenticationError, AuthorizationError, RedisError, ResponseError

        try:
            await self.publish_once()
        except (RedisError, OSError) as exc:
            # refused: the store answered (OOM, READONLY, NOPERM, WRONGPASS); logged at once when
            # not the trouble logged last, as the router's reader does (an operator's mistake or a
            # full store is no flap); the same trouble again is counted like one
            refused = isinstance(exc, (ResponseError, AuthenticationError, AuthorizationError))
            self._written["refused" if refused else "unreachable"].inc()
            kind = type(exc).__name__ if refused else "unreachable"
            if (line := self._outages.down(self._clock(), news=kind != self._logged_problem)) is not None:
                self._logged_problem = kind
                log.error(
                    "heartbeat %s not published (%s); retrying%s",
                    self._settings.key,
                    type(exc).__name__,
                    line.note,
                )
        else:
            self._written["ok"].inc()
            if (line := self._outages.up(self._clock())) is not None:
                again = "being published again" if line.kind == "up" else "being published, flapping"
                log.warning("heartbeat to %s is %s%s", self._settings.key, again, line.note)

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        """Stop publishing and remove this replica's field: the routers stop counting it at once, not
        after staleness, and drain the cluster at once when it was the last replica (Redis deletes a
        hash with its last field)."""
        await self._ticker.stop()
        with contextlib.suppress(Exception):
            await self._client.hdel(self._settings.key, self._field)
        await self._client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose


def heartbeat_password(settings: HeartbeatSettings) -> str | None:
    """The heartbeat store's password from ``redis.passwordEnv`` (:mod:`igw.config.redis_password`);
    ``RedisPasswordError`` naming the field when the variable is unset."""
    return redis_password(
        settings.redis_url, settings.redis_password_env, path=f"spec.extensions.{EXTENSION}.redis"
    )


def heartbeat_context(
    state: GatewayState, raw: Mapping[str, Any], *, workers: int = 1
) -> Callable[[Any], AsyncIterator[None]]:
    """An aiohttp cleanup context publishing heartbeats for the app's lifetime (``raw``: the extension;
    ``workers``: the size of the worker group whose worker 0 this is, 1 outside a group)."""
    settings = dataclasses.replace(HeartbeatSettings.from_mapping(raw), rate_scale=float(workers))
    password = heartbeat_password(settings)  # now: a missing variable stops the start, named

    async def context(_app: Any) -> AsyncIterator[None]:
        publisher = HeartbeatPublisher(state, settings, clock=state.clock, password=password)
        publisher.start()
        try:
            yield
        finally:
            await publisher.stop()

    return context
