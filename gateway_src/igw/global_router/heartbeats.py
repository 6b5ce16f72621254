"""Read every configured cluster's heartbeat from Redis (one pipelined round trip per poll).

Each cluster's key ``<keyPrefix><cluster>`` is a hash with one field per gateway replica, as written
by :mod:`igw.gateway.heartbeat`; :class:`~igw.global_router.replicas.ReplicaMerge` makes one
heartbeat of them. A key holding a plain string is the single document of a gateway from before
per-replica fields (read as one replica, so routers can be upgraded before the gateways).

A malformed value (or one naming another cluster) is logged once per cluster and replica until it is
fine again and left out; a cluster whose key holds no well-formed document at all is read as no
heartbeat and listed in :attr:`HeartbeatReader.malformed`, which drains it (reason ``malformed``:
:mod:`igw.global_router.health`). A Redis error makes :meth:`HeartbeatReader.read` raise
:class:`HeartbeatSourceDown`; the router then suspends staleness instead of draining the fleet. A
store that refuses the router's credentials raises :class:`HeartbeatSourceRefused`, which says so.

A store in which two clusters' keys or more vanished since the last read lost its data (a Redis
restarted without it, failed over to a replica that lost it, ``FLUSHALL``): several clusters' last
gateways stopping within one poll is far less likely, and each of them said ``draining`` before
deleting its field anyway. So is a store read again after an outage without a key it held before
(restarted, or failed over: a gateway stopping in the outage could not delete its field either).
Until each of those clusters' keys is written again, the cluster is left out of
:meth:`HeartbeatReader.read`'s answer (its last heartbeat stands, and its staleness goes on: a
gateway that is alive publishes again within its interval). Until session s38 such a store read as
every cluster's key deleted (``gone``), which drained the whole fleet at once: every request
answered ``503 no_healthy_cluster`` until the gateways' next publication, then every cluster
slow-started. Until session s42 only a store holding *no* configured key at all was taken for one
that lost its data: a gateway writing its key again between the loss and the router's next read
(likely: gateways publish every second, routers read every half second, a restarted store comes
back to every gateway at once) made the others read as ``gone``, the same drain and slow start.
One key vanishing alone, the store readable throughout, is its cluster's last gateway stopping
(``gone``) only when its last heartbeat read said ``draining``: a stopping gateway says so through
its drain period (5 s by default, ten polls) before it deletes its field. A key that vanishes under
a heartbeat that did not is kept as one the store lost, until its gateway writes again or its
staleness drains it: until session s42 a store that lost its keys, every gateway but one writing
again before the router's next read, drained that one as ``gone`` and slow-started it.

A key holding more than :data:`MAX_REPLICA_FIELDS` fields or :data:`MAX_KEY_BYTES` bytes is not read:
its cluster is drained as ``malformed`` (logged once) and the other clusters are read as usual. The
read is one Lua script that measures each key before taking it (:data:`_FETCH`), so an oversized key
costs its size on the server, not on the wire. Before session s38 every key was read whole in one
pipeline: one cluster's key with 20,000 replica fields and a 10 MB document pushed the read past its
0.5 s timeout at every poll, the router took the store for down and suspended staleness for every
cluster, so a cluster that died meanwhile was never drained.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from igw.config.redis_client import LuaScript, lean_handshake
from igw.errors import IgwGatewayError
from igw.gateway.heartbeat_message import Heartbeat
from igw.global_router.replicas import ReplicaMerge

log = logging.getLogger("igw.global_router")

LEGACY_REPLICA = ""
"""The replica name a plain-string heartbeat (one document per cluster) is read under."""

MAX_REPLICA_FIELDS: Final = 1024
"""The most replica fields one cluster's key may hold (one per gateway replica: far beyond a fleet's)."""
MAX_KEY_BYTES: Final = 4 * 1024 * 1024
"""The most bytes one cluster's key may hold, field names and documents together."""

MAX_READ_FIELDS: Final = 2048
"""The most replica fields one read takes, every cluster's key together."""
MAX_READ_BYTES: Final = 4 * 1024 * 1024
"""The most bytes one read takes, every cluster's key together (field names and documents)."""

_FETCH: Final = """
local max_fields, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local read_fields, read_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, sizes, fields = {}, {}, {}
local total_size, total_fields = 0, 0
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    local n = redis.call('HLEN', key)
    if n > max_fields then
      out[i] = {'refused', n .. ' replica fields, more than ' .. max_fields}
    else
      local kv = redis.call('HGETALL', key)
      local size = 0
      for j = 1, #kv do size = size + #kv[j] end
      if size > max_bytes then
        out[i] = {'refused', size .. ' bytes, more than ' .. max_bytes}
      else
        table.insert(kv, 1, 'hash')
        out[i] = kv
        sizes[i], fields[i] = size, n
      end
    end
  elseif kind == 'string' then
    local size = redis.call('STRLEN', key)
    if size > max_bytes then
      out[i] = {'refused', size .. ' bytes, more than ' .. max_bytes}
    else
      out[i] = {'string', redis.call('GET', key)}
      sizes[i], fields[i] = size, 1
    end
  elseif kind == 'none' then
    out[i] = {'none'}
  else
    out[i] = {'refused', 'a ' .. kind .. ', not a hash of replica documents'}
  end
  if sizes[i] then
    total_size, total_fields = total_size + sizes[i], total_fields + fields[i]
  end
end
while total_size > read_bytes or total_fields > read_fields do
  local largest = nil
  for i = 1, #KEYS do
    if sizes[i] and (largest == nil or sizes[i] > sizes[largest]) then largest = i end
  end
  out[largest] = {'refused', sizes[largest] .. ' bytes in ' .. fields[largest] ..
    ' replica fields, the largest key of a read over its budget (' .. total_size .. ' bytes in ' ..
    total_fields .. ' fields, more than ' .. read_bytes .. ' bytes or ' .. read_fields .. ' fields)'}
  total_size, total_fields = total_size - sizes[largest], total_fields - fields[largest]
  sizes[largest] = nil
end
return out
"""
"""Every cluster's key, each measured before it is taken: ``{'hash', field, value, ...}``,
``{'string', document}`` (a gateway from before per-replica fields), ``{'none'}``, or
``{'refused', why}`` for a key too large to read or of another type. When the keys within their
own bounds hold more than the read's (``ARGV[3]`` fields, ``ARGV[4]`` bytes) together, the largest
are refused until the rest fit: the clusters whose writers grew them are drained, not the others."""


class HeartbeatSourceDown(IgwGatewayError):
    """The heartbeat store could not be read."""


class HeartbeatSourceRefused(HeartbeatSourceDown):
    """The heartbeat store refused the router's credentials (``WRONGPASS``, ``NOAUTH``, ``NOPERM``):
    a configuration error, not an outage, which no retry mends. Its message names the setting to
    look at (``spec.heartbeats.redis.passwordEnv`` and the variable), never the password. Until
    session s39 it read as any outage (``heartbeat store unreadable (AuthenticationError: ...)``),
    and ``/readyz`` of a router started that way said only ``heartbeat_source_up: false``."""


def _refusal(exc: Exception, *, password_env: str | None, has_password: bool) -> str:
    """What a refusal of the router's credentials means, naming the setting (never the password):
    ``password_env``, the variable the password came from; ``has_password``, whether the client
    sent one at all (from that variable or the URL)."""
    # deferred: optional dependency: redis is imported only when this feature is configured
    from redis.exceptions import NoPermissionError

    where = "spec.heartbeats.redis"
    if isinstance(exc, NoPermissionError):
        return (
            "the heartbeat store refused a command to the router's Redis user (NOPERM): grant that "
            f"user (the user name in {where}.url) read access to the heartbeat keys and EVAL/EVALSHA"
        )
    if not has_password:
        return (
            "the heartbeat store refused the router's authentication: it requires a password and "
            f"none is configured (set {where}.passwordEnv to the environment variable that holds it)"
        )
    source = f"{where}.url"
    if password_env is not None:
        source = f"{where}.passwordEnv, environment variable {password_env}"
    return "the heartbeat store refused the router's authentication: wrong password (or user) from " + source


class HeartbeatReader:
    def __init__(
        self,
        *,
        url: str,
        key_prefix: str,
        clusters: Sequence[str],
        password: str | None = None,
        password_env: str | None = None,
        timeout_s: float = 0.5,
        staleness_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``password``: the Redis password when the URL holds none (``spec.heartbeats.redis.passwordEnv``);
        ``password_env``: the name of that variable (named when the store refuses the password);
        ``staleness_s``: how long a replica counts after its ``seq`` last changed (the config's
        ``failover.heartbeatStalenessSeconds``); ``clock``: the router's clock."""
        # deferred: optional dependency: redis is imported only when this feature is configured
        import redis.asyncio as redis_asyncio

        self._client = redis_asyncio.Redis.from_url(
            url,
            password=password,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            **lean_handshake(),  # no round trip before the first read (igw.config.redis_client)
        )
        self._password_env = password_env
        self._clusters = tuple(clusters)
        self._key_prefix = key_prefix
        self._staleness_s = staleness_s
        self._keys = [f"{key_prefix}{name}" for name in self._clusters]
        self._merges = {name: ReplicaMerge(staleness_s=staleness_s) for name in self._clusters}
        self._clock = clock
        self._bad: set[str] = set()
        self._bad_fields: set[tuple[str, str]] = set()
        self._holding: frozenset[str] = frozenset()
        """The clusters whose key held a field at the last read."""
        self._after_outage = False
        """Whether the last attempt to read the store failed (the next read is the first after an
        outage)."""
        self._lost: set[str] = set()
        self._draining: set[str] = set()
        """The clusters whose last heartbeat read said ``draining`` (every live gateway replica
        stopping): their key vanishing next is their last replica's goodbye (``gone``)."""
        """The clusters whose key the store lost (the module's docstring), not written again since."""
        self._fetch_script = LuaScript(_FETCH)  # one round trip, the first read included
        self._refused: set[str] = set()
        """The clusters whose key was too large to read (or of another type) at the last read."""

    def set_clusters(self, clusters: Sequence[str]) -> None:
        """Read ``clusters``' keys from the next read on (a reloaded ``spec.clusters``): a cluster kept
        keeps what was learnt of it (its replicas, a lost or refused key), a removed one is
        forgotten. A read in flight finishes with the clusters it started with."""
        self._clusters = tuple(clusters)
        self._keys = [f"{self._key_prefix}{name}" for name in self._clusters]
        self._merges = {
            name: self._merges.get(name) or ReplicaMerge(staleness_s=self._staleness_s)
            for name in self._clusters
        }
        kept = set(self._clusters)
        for names in (self._bad, self._lost, self._draining, self._refused):
            names &= kept
        self._bad_fields = {(c, r) for c, r in self._bad_fields if c in kept}
        self._holding &= kept

    @property
    def unread(self) -> frozenset[str]:
        """The clusters whose key was not read at the last :meth:`read`: too large (alone, or the
        largest of a read over its budget) or of another type (``igw_global_heartbeat_unread``)."""
        return frozenset(self._refused)

    @property
    def malformed(self) -> frozenset[str]:
        """The clusters whose key held no well-formed heartbeat at the last :meth:`read`."""
        return frozenset(self._bad)

    async def read(self) -> dict[str, Heartbeat | None]:
        """``{cluster: heartbeat or None}`` for every configured cluster, its replicas merged, less
        the clusters whose key the store lost (with others, or across an outage) and that is not
        written again yet (nothing is known of them: the module's docstring)."""
        clusters, keys, merges = self._clusters, self._keys, self._merges  # as they are when asked
        try:
            fields = await self._fetch(keys)
        except HeartbeatSourceDown:
            self._after_outage = True
            raise
        holding = frozenset(name for name, replicas in zip(clusters, fields, strict=True) if replicas)
        vanished = self._holding - holding
        if len(vanished) >= 2 or (vanished and self._after_outage):
            log.error(
                "the heartbeat store lost the keys of clusters %s at once%s (restarted, failed over or "
                "flushed?): kept as they were until their gateways publish again",
                ", ".join(sorted(vanished)),
                " (read after an outage)" if self._after_outage else "",
            )
            self._lost |= vanished
        elif quiet := vanished - self._draining - self._bad - self._refused:  # fresh heartbeats only
            log.warning(
                "cluster %s: heartbeat key vanished though its gateway never said draining (the store "
                "lost it?): kept as it was until its gateway publishes again or it goes stale",
                ", ".join(sorted(quiet)),
            )
            self._lost |= quiet
        self._after_outage = False
        self._holding = holding
        self._lost -= holding
        self._refused -= self._lost  # no key to refuse (igw_global_heartbeat_unread)
        # Decoded on a worker thread: one cluster's key may hold MAX_KEY_BYTES of JSON, whose objects
        # take a tenth of a second and more to build and check, and requests wait on the loop.
        return await asyncio.to_thread(self._decode_all, fields, clusters, merges, now=self._clock())

    def _decode_all(
        self,
        fields: Sequence[dict[str, bytes] | str],
        clusters: Sequence[str],
        merges: Mapping[str, ReplicaMerge],
        *,
        now: float,
    ) -> dict[str, Heartbeat | None]:
        """Every cluster's documents in ``fields`` (as :meth:`_fetch` returns them) decoded and merged
        at ``now``: :meth:`read`'s answer. Run on a worker thread (one read at a time: the fleet
        polls in one task), so it touches only the reader's own bookkeeping."""
        out: dict[str, Heartbeat | None] = {}
        for name, replicas in zip(clusters, fields, strict=True):
            if name in self._lost:
                continue
            if isinstance(replicas, str):  # a key too large to read: drained, as a malformed one
                if name not in self._refused:
                    log.error("cluster %s: heartbeat key not read (%s); draining it", name, replicas)
                    self._refused.add(name)
                self._bad.add(name)
                out[name] = merges[name].merge({}, now=now)
                continue
            if name in self._refused:
                self._refused.discard(name)
                log.warning("cluster %s: heartbeat key readable again", name)
            good: dict[str, Heartbeat] = {}
            for replica, raw in replicas.items():
                beat = self._decoded(name, replica, raw)
                if beat is not None:
                    good[replica] = beat
            # Forget logged replicas whose field is gone (pods come and go: the set would only grow).
            self._bad_fields -= {(c, r) for c, r in self._bad_fields if c == name and r not in replicas}
            if replicas and not good:
                if name not in self._bad:
                    log.error("cluster %s: no well-formed heartbeat; draining it", name)
                    self._bad.add(name)
            elif name in self._bad:
                log.warning("cluster %s: heartbeat well-formed again", name)
                self._bad.discard(name)
            out[name] = merged = merges[name].merge(good, now=now)
            if merged is not None and merged.draining:
                self._draining.add(name)
            elif merged is not None:
                self._draining.discard(name)
        return out

    async def _fetch(self, keys: Sequence[str]) -> list[dict[str, bytes] | str]:
        """Every cluster's fields (replica name → raw document; a plain-string key as one field), or
        why its key was not read (too many fields or bytes, another type: :data:`_FETCH`)."""
        # deferred: optional dependency: redis is imported only when this feature is configured
        from redis.exceptions import AuthenticationError, AuthorizationError, NoPermissionError, RedisError

        try:
            results = await self._fetch_script(
                self._client,
                keys=list(keys),
                args=[MAX_REPLICA_FIELDS, MAX_KEY_BYTES, MAX_READ_FIELDS, MAX_READ_BYTES],
            )
        except (AuthenticationError, AuthorizationError, NoPermissionError) as exc:
            has_password = bool(self._client.connection_pool.connection_kwargs.get("password"))
            refusal = _refusal(exc, password_env=self._password_env, has_password=has_password)
            raise HeartbeatSourceRefused(refusal) from exc
        except (RedisError, OSError) as exc:
            raise HeartbeatSourceDown(f"{type(exc).__name__}: {exc}") from exc
        out: list[dict[str, bytes] | str] = []
        for result in results:
            kind = _text(result[0])
            if kind == "hash":
                items = result[1:]
                out.append({_text(items[j]): items[j + 1] for j in range(0, len(items), 2)})
            elif kind == "string":
                out.append({LEGACY_REPLICA: result[1]})
            elif kind == "refused":
                out.append(_text(result[1]))
            else:
                out.append({})
        return out

    def _decoded(self, cluster: str, replica: str, raw: bytes) -> Heartbeat | None:
        """``raw`` decoded, or ``None`` (logged once until it is fine) when malformed or misnamed."""
        problem: str | None = None
        beat: Heartbeat | None = None
        try:
            beat = Heartbeat.decode(raw)
        except ValueError as exc:
            problem = f"ignoring malformed heartbeat: {exc}"
        if beat is not None and beat.cluster != cluster:
            problem = f"heartbeat names cluster {beat.cluster!r}; ignored"
            beat = None
        where = (cluster, replica)
        if problem is None:
            self._bad_fields.discard(where)
        elif where not in self._bad_fields:
            self._bad_fields.add(where)
            # Quoted (repr): a field name is whatever a writer chose, and one with a line break
            # would otherwise forge a line of the router's log.
            named = f" (replica {replica!r})" if replica != LEGACY_REPLICA else ""
            log.error("cluster %s%s: %s", cluster, named, problem)
        return beat

    async def close(self) -> None:
        await self._client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose


def _text(value: bytes | str) -> str:
    """A hash field's name as text (the client returns bytes; a name that is not UTF-8 is escaped)."""
    return value if isinstance(value, str) else value.decode("utf-8", "backslashreplace")
