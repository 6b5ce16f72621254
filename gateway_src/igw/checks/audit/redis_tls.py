"""IGW-AU309: Redis is reached over TLS.

Shared rate limits, tier-1 heartbeats and the global router reach Redis by URL. Over ``redis://``
everything travels in clear between the gateway and Redis: tenants' names and token counts, the
heartbeats the global router routes by (a forged one drains or attracts a cluster), and the AUTH
password itself whenever one is sent (``redis.passwordEnv``, the URL's user-info or its
``?password=``). ``rediss://`` (ElastiCache's in-transit encryption, which the global router
stack turns on) and a ``unix://`` socket pass, as does a loopback host (a local demo). Before session
s38 no check looked at the scheme: IGW-AU308 asks where the password is kept, not how it travels.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from igw.checks.audit._hosts import is_loopback
from igw.checks.audit._redis import redis_nodes
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU309",
    title="Redis reached over TLS",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="A redis:// URL to another host carries rate-limit state and heartbeats in clear; HIGH when "
    "the Redis AUTH password is sent over it too.",
    remediation="Use a rediss:// URL (ElastiCache with in-transit encryption, or Redis with TLS) for "
    "rateLimits, globalHeartbeat and the global router's heartbeats and rate limits.",
)


def _in_clear(node: Mapping[str, Any]) -> tuple[str, bool] | None:
    """``(host, sends a password)`` when the ``redis`` node's URL is plain ``redis://`` to another
    host; ``None`` when it is encrypted, a socket, loopback or unreadable (the schema reports that)."""
    try:
        url = urlsplit(str(node.get("url") or ""))
        host, password = url.hostname, url.password
        query = parse_qs(url.query)
    except ValueError:
        return None
    if url.scheme != "redis" or is_loopback(host):
        return None
    sends_password = bool(password or query.get("password") or node.get("passwordEnv"))
    return str(host), sends_password


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config, nodes in redis_nodes(ctx):
        plain: list[str] = []
        with_password = False
        for field, node in nodes:
            found = _in_clear(node)
            if found is not None:
                host, sends = found
                plain.append(f"{field} ({host})")
                with_password = with_password or sends
        if not plain:
            yield r.passed(ref(config), "every Redis URL is rediss://, a socket or loopback")
        elif with_password:
            yield r.fail(
                ref(config),
                f"{', '.join(plain)} sends the Redis AUTH password and its data in clear (redis://)",
                severity=Severity.HIGH,
            )
        else:
            yield r.fail(ref(config), f"{', '.join(plain)} carries its data in clear (redis://)")


CHECK = FunctionCheck(META, _run)
