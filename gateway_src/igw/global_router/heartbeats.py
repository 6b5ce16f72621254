"""Read every configured cluster's heartbeat from Redis (one ``MGET`` per poll).

The keys are ``<keyPrefix><cluster>`` as written by :mod:`igw.gateway.heartbeat`. A malformed value
(or one naming another cluster) is logged (once per cluster until it is fine again), read as no
heartbeat, and its cluster listed in :attr:`HeartbeatReader.malformed`, which drains it (reason
``malformed``: :mod:`igw.global_router.health`). A Redis error makes
:meth:`HeartbeatReader.read` raise :class:`HeartbeatSourceDown`; the router then suspends staleness
(see :mod:`igw.global_router.health`) instead of draining the fleet.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from igw.errors import IgwGatewayError
from igw.gateway.heartbeat_message import Heartbeat

log = logging.getLogger("igw.global_router")


class HeartbeatSourceDown(IgwGatewayError):
    """The heartbeat store could not be read."""


class HeartbeatReader:
    def __init__(self, *, url: str, key_prefix: str, clusters: Sequence[str], timeout_s: float = 0.5) -> None:
        # deferred: optional dependency: redis is imported only when this feature is configured
        import redis.asyncio as redis_asyncio

        self._client = redis_asyncio.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )
        self._clusters = tuple(clusters)
        self._keys = [f"{key_prefix}{name}" for name in self._clusters]
        self._bad: set[str] = set()

    @property
    def malformed(self) -> frozenset[str]:
        """The clusters whose value at the last :meth:`read` was malformed or named another cluster."""
        return frozenset(self._bad)

    async def read(self) -> dict[str, Heartbeat | None]:
        """``{cluster: heartbeat or None}`` for every configured cluster."""
        # deferred: optional dependency: redis is imported only when this feature is configured
        from redis.exceptions import RedisError

        try:
            values = await self._client.mget(self._keys)
        except (RedisError, OSError) as exc:
            raise HeartbeatSourceDown(f"{type(exc).__name__}: {exc}") from exc
        out: dict[str, Heartbeat | None] = {}
        for name, raw in zip(self._clusters, values, strict=True):
            beat: Heartbeat | None = None
            problem: str | None = None
            if raw is not None:
                try:
                    beat = Heartbeat.decode(raw)
                except ValueError as exc:
                    problem = f"ignoring malformed heartbeat: {exc}"
                if beat is not None and beat.cluster != name:
                    problem = f"heartbeat names cluster {beat.cluster!r}; ignored"
                    beat = None
            if problem is None:
                if name in self._bad:
                    log.warning("cluster %s: heartbeat well-formed again", name)
                    self._bad.discard(name)
            elif name not in self._bad:
                log.error("cluster %s: %s", name, problem)
                self._bad.add(name)
            out[name] = beat
        return out

    async def close(self) -> None:
        await self._client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose
