"""How igw's Redis clients spend round trips: none on a connection's handshake, one per script.

Every Redis the gateway and the global router talk to (shared rate limits, tier-1 heartbeats, the
router's heartbeat store) may be slow rather than down: a loaded ElastiCache node, a lossy path.
Then each round trip costs the whole delay, and redis-py 8's defaults spend several that igw does
not need: a new connection says ``HELLO 3`` and ``CLIENT SETINFO`` (two round trips before its first
command), and a registered script's first call on a server is ``EVALSHA``, ``NOSCRIPT``,
``SCRIPT LOAD``, ``EVALSHA`` (three). A rate-limit decision, bounded by ``connectTimeout`` +
``commandTimeout`` (0.5 s) and cancelled past it, which closes its connection, thus needed five
round trips on a fresh server and three on every new connection: until session s43 a Redis
answering each command in 200 ms (within ``commandTimeout``: 250 ms) failed every decision, each
on a new connection, and the gateway applied ``onRedisUnavailable`` for good; one answering in
100 ms failed the first.

:data:`lean_handshake` makes a connection's first command its first round trip (RESP2, no client
metadata; ``AUTH`` still when a password is set), and :class:`LuaScript` runs a script in one
round trip (``EVALSHA``, and ``EVAL`` of its text when the server does not hold it yet, which also
stores it there).
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any


def lean_handshake() -> dict[str, Any]:
    """Connection options for ``redis.asyncio`` clients and pools that send nothing on connect but
    ``AUTH`` (when a password is set): RESP2 (no ``HELLO``) and no ``CLIENT SETINFO``; for redis-py
    before ``driver_info`` (5.x), by its older ``lib_name``/``lib_version`` (deprecated since)."""
    # deferred: optional dependency: redis is imported only when a Redis feature is configured
    from redis.asyncio.connection import AbstractConnection

    options: dict[str, Any] = {"protocol": 2}
    if "driver_info" in inspect.signature(AbstractConnection.__init__).parameters:
        options["driver_info"] = None
    else:  # redis-py 5.x
        options["lib_name"] = None
        options["lib_version"] = None
    return options


class LuaScript:
    """A Lua script run in one round trip: by its SHA1 while the server holds it, else by its text.

    A server that requires a password refuses a command of more than 10 arguments from a connection
    that sent none with ``Protocol error: unauthenticated multibulk length`` rather than ``NOAUTH``;
    with no ``HELLO`` before it (:func:`lean_handshake`) a script's call is such a command, so that
    refusal is raised as ``AuthenticationError``, as ``NOAUTH`` is, and read as a missing password."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.sha = hashlib.sha1(body.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, client: Any, *, keys: list[str], args: list[Any]) -> Any:
        """The script's answer on ``client`` (a ``redis.asyncio.Redis``); Redis errors raise."""
        # deferred: optional dependency: redis is imported only when a Redis feature is configured
        from redis.exceptions import AuthenticationError, NoScriptError, ResponseError

        try:
            try:
                return await client.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                # EVAL stores the script as it runs it: the next EVALSHA finds it
                return await client.eval(self.body, len(keys), *keys, *args)
        except ResponseError as exc:
            if "unauthenticated" not in str(exc):
                raise
            raise AuthenticationError(f"Authentication required ({exc})") from exc
