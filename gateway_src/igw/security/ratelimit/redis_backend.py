"""Token buckets in Redis, shared by every gateway replica.

One Lua script per decision keeps read-refill-decide-write atomic across replicas (and decides
every limit a request meets in one call, :meth:`RedisBuckets.admit_all`), and uses
Redis's own ``TIME`` so replicas with skewed clocks still share one timeline. The arithmetic is
:mod:`igw.security.ratelimit.buckets`, transcribed; keys are ``<prefix><key>:req`` and
``<prefix><key>:tok`` (hashes ``{l: level, t: updated_at}``), ``<key>`` a bucket key of
:mod:`igw.security.ratelimit.keys`, and expire once the bucket would be
full again, so idle tenants cost nothing. A reservation (:meth:`RedisBuckets.hold`) is the string
``<tokens>:<tenant>`` under ``<prefix>held:<key>:hold`` for a day, set by the script that debits
its charge (:meth:`RedisBuckets.account_all`, every hold of a response in the same call), read and
deleted in one script by the one replica that settles it (every hold of a response at once,
:meth:`RedisBuckets.release_all`). Any Redis error or timeout raises
:class:`~igw.security.ratelimit.backend.BackendUnavailable`; the limiter decides what happens then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Final

import redis.asyncio as redis_asyncio
from redis.exceptions import RedisError

from igw.config.redis_client import LuaScript, lean_handshake
from igw.config.redis_password import redis_password
from igw.security.ratelimit.backend import HOLD_TTL_S, BackendUnavailable
from igw.security.ratelimit.buckets import ALLOW, Decision, LimitName, token_rate, tokens_needed
from igw.security.settings import RedisSettings, TenantLimits

_SCRIPT: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local op = ARGV[1]
local n = tonumber(ARGV[2])

-- one check per pair of keys (KEYS[2i-1]: requests, KEYS[2i]: tokens), five arguments each
local function check(i)
  local b = 3 + (i - 1) * 5
  return tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
    tonumber(ARGV[b + 4])
end

local function load(key, rate, cap)
  local v = redis.call('HMGET', key, 'l', 't')
  local level, ts = tonumber(v[1]), tonumber(v[2])
  if level == nil or ts == nil then return cap end
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end
  level = level + elapsed * rate
  if level > cap then level = cap end
  return level
end

local function save(key, level, rate, cap)
  redis.call('HSET', key, 'l', string.format('%.17g', level), 't', string.format('%.17g', now))
  local ttl = math.ceil((cap - level) / rate) + 60
  redis.call('EXPIRE', key, ttl)
end

if op == 'account' then
  for i = 1, n do
    local _, _, tok_rate, tok_cap, amount = check(i)
    if tok_rate > 0 and amount ~= 0 then
      local level = load(KEYS[2 * i], tok_rate, tok_cap) - amount
      -- a credit: at most full (as load reads it), so that save's expiry stays positive
      if level > tok_cap then level = tok_cap end
      save(KEYS[2 * i], level, tok_rate, tok_cap)
    end
  end
  -- then the reservations (KEYS past the checks'), two arguments each: what is held, for how long;
  -- a key held already keeps its first holder
  local h = 3 + 5 * n
  for j = 1, #KEYS - 2 * n do
    redis.call('SET', KEYS[2 * n + j], ARGV[h + 2 * (j - 1)], 'EX', ARGV[h + 2 * j - 1], 'NX')
  end
  return {1, 0, 0, n}
end

-- every check first: a request refused by one takes nothing from the others
local levels = {}
for i = 1, n do
  local req_rate, req_cap, tok_rate, tok_cap, amount = check(i)
  if tok_rate > 0 and amount > 0 then
    local level = load(KEYS[2 * i], tok_rate, tok_cap)
    if level < amount then
      return {0, 2, math.ceil((amount - level) / tok_rate * 1000), i - 1}
    end
  end
  if req_rate > 0 then
    local level = load(KEYS[2 * i - 1], req_rate, req_cap)
    if level < 1 then
      return {0, 1, math.ceil((1 - level) / req_rate * 1000), i - 1}
    end
    levels[i] = level
  end
end
for i = 1, n do
  if levels[i] ~= nil then
    local req_rate, req_cap = check(i)
    save(KEYS[2 * i - 1], levels[i] - 1, req_rate, req_cap)
  end
end
return {1, 0, 0, n}
"""


_RELEASE: Final = """
local out = {}
for i = 1, #KEYS do
  local held = redis.call('GET', KEYS[i])
  if held then redis.call('DEL', KEYS[i]) end
  out[i] = held
end
return out
"""
"""Read and delete reservations in one step (``GETDEL``, which Redis has only since 6.2, for each);
one missing answers ``false`` in its place (a nil in the reply)."""


REDIS_PATH: Final = "spec.extensions.rateLimits.redis"
"""Where the settings come from, in messages (the global router's ``spec.rateLimits.redis`` is the
same node)."""


MAX_CONNECTIONS: Final = 100
"""The most connections one gateway process (or router replica) opens to the rate-limit Redis; more
concurrent decisions wait for one. A decision holds its connection for one round trip, so 100
serve some 100,000 decisions a second from a Redis answering in a millisecond; a Redis slower than
that, under that load, makes requests wait up to their deadline and then meet ``onRedisUnavailable``."""


class RedisBuckets:
    name = "redis"

    def __init__(self, *, settings: RedisSettings) -> None:
        self._settings = settings
        # A blocking pool: a decision that finds every connection busy waits for one (within its
        # deadline, :meth:`_call`) rather than failing. redis-py's default pool (100 connections
        # in redis-py 8) raises ``MaxConnectionsError`` at once instead, which took a healthy
        # Redis for down: until session s43 a burst of more than 100 concurrent requests on one
        # gateway process (or 1,000 requests a second on a Redis answering in 100 ms) applied
        # ``onRedisUnavailable`` to every tenant for ``retryAfterFailure`` (``deny``: 429 for all).
        pool: redis_asyncio.BlockingConnectionPool[Any] = redis_asyncio.BlockingConnectionPool.from_url(
            settings.url,
            max_connections=MAX_CONNECTIONS,
            timeout=self._deadline_s,
            password=redis_password(settings.url, settings.password_env, path=REDIS_PATH),
            socket_connect_timeout=settings.connect_timeout_s,
            socket_timeout=settings.command_timeout_s,
            retry_on_timeout=False,
            # a new connection's first round trip is its first command (:mod:`igw.config.redis_client`)
            **lean_handshake(),
        )
        # from_pool: the client closes the pool with it (types-redis predates from_pool)
        self._client: redis_asyncio.Redis[bytes] = redis_asyncio.Redis.from_pool(pool)  # type: ignore[attr-defined]
        self._script = LuaScript(_SCRIPT)
        self._release = LuaScript(_RELEASE)

    @property
    def _deadline_s(self) -> float:
        """The longest one call may take, waiting for a connection included: what a request can
        wait on Redis (``connectTimeout`` + ``commandTimeout``)."""
        return self._settings.connect_timeout_s + self._settings.command_timeout_s

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self._settings.key_prefix}{tenant}"
        return [f"{base}:req", f"{base}:tok"]

    async def _run(
        self,
        op: str,
        checks: Sequence[tuple[str, TenantLimits, float]],
        holds: Sequence[tuple[str, str, int]] = (),
    ) -> list[int]:
        """The script's answer to ``op`` over ``checks`` (bucket key, limits, amount) and, for
        ``account``, ``holds`` (:meth:`hold`'s key, tenant, tokens), in one call."""
        keys: list[str] = []
        args: list[Any] = [op, len(checks)]
        for tenant, limits, amount in checks:
            keys += self._keys(tenant)
            args += [*self._rates(limits), amount]
        for key, tenant, tokens in holds:
            keys.append(self._held_key(key))
            # "tokens:tenant": the count first, so that a tenant name holding ':' splits right
            args += [f"{tokens}:{tenant}", int(HOLD_TTL_S)]
        result = await self._call(self._script(self._client, keys=keys, args=args))
        return [int(x) for x in result]

    async def _call(self, command: Awaitable[Any]) -> Any:
        """``command``'s result; any Redis error or timeout as :class:`BackendUnavailable`."""
        try:
            async with asyncio.timeout(self._deadline_s):
                return await command
        except (RedisError, OSError, TimeoutError) as exc:
            raise BackendUnavailable(f"redis: {type(exc).__name__}: {exc}") from None

    def _held_key(self, key: str) -> str:
        # ends in ':hold', as no bucket's key does (those end in ':req' and ':tok')
        return f"{self._settings.key_prefix}held:{key}:hold"

    @staticmethod
    def _rates(limits: TenantLimits) -> list[Any]:
        req_rate = limits.requests_per_second or 0.0
        return [req_rate, limits.request_capacity, token_rate(limits), limits.token_capacity]

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int | None) -> Decision:
        return (await self.admit_all([(tenant, limits)], est_tokens=est_tokens))[1]

    async def admit_all(
        self, checks: Sequence[tuple[str, TenantLimits]], *, est_tokens: int | None
    ) -> tuple[int, Decision]:
        # 0: the script does not read the token bucket (a real estimate needs at least 1)
        asked = [
            (
                tenant,
                limits,
                0
                if limits.tokens_per_minute is None or est_tokens is None
                else tokens_needed(limits, est_tokens),
            )
            for tenant, limits in checks
        ]
        allowed, which, retry_ms, index = await self._run("admit", asked)
        if allowed:
            return len(checks), ALLOW
        limit: LimitName = "tokens" if which == 2 else "requests"
        return index, Decision(allowed=False, limit=limit, retry_after_s=retry_ms / 1000)

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None:
        if limits.tokens_per_minute is None or tokens == 0:
            return
        await self._run("account", [(tenant, limits, tokens)])

    async def account_all(
        self,
        debits: Sequence[tuple[str, TenantLimits, int]],
        *,
        holds: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        counted = [d for d in debits if d[1].tokens_per_minute is not None and d[2] != 0]
        if counted or holds:
            await self._run("account", counted, holds)

    async def hold(self, *, key: str, tenant: str, tokens: int) -> None:
        await self._run("account", [], [(key, tenant, tokens)])

    async def release(self, key: str) -> tuple[str, int] | None:
        return (await self.release_all([key]))[0]

    async def release_all(self, keys: Sequence[str]) -> list[tuple[str, int] | None]:
        if not keys:
            return []
        held_keys = [self._held_key(key) for key in keys]
        answer = await self._call(self._release(self._client, keys=held_keys, args=[]))
        found: list[tuple[str, int] | None] = []
        for held in answer:
            if not held:
                found.append(None)
                continue
            tokens, _, tenant = bytes(held).decode().partition(":")
            found.append((tenant, int(tokens)))
        return found

    async def close(self) -> None:
        await self._client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose
