"""A Redis password from the environment (``redis.passwordEnv``) instead of the configuration.

A Redis URL may carry a password (``rediss://:<password>@host:6379/0``), but a configuration is kept
where many can read it: an InferenceGatewayConfig object and the ConfigMap its gateway serves, a
GlobalRouterConfig, a chart's values. ``passwordEnv`` names an environment variable that holds the
password instead; a pod fills it from a Secret (``env[].valueFrom.secretKeyRef``: for the gateways
``igw operator`` runs, ``spec.podDefaults.env``), an ECS task from Secrets Manager. The URL keeps
the host, port, database and a user name (ElastiCache RBAC). It is read when the Redis client is
made (at start and at each reload that changes the settings), so a rotated Secret takes effect with
the pods' next restart. Used by shared rate limits (``spec.extensions.rateLimits.redis``, also the
global router's ``spec.rateLimits.redis``), tier-1 heartbeats (``spec.extensions.globalHeartbeat.redis``)
and the global router's heartbeat store (``spec.heartbeats.redis``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from igw.errors import IgwConfigError

GATEWAY_REDIS_NODES: Final = (
    ("extensions", "rateLimits", "redis"),
    ("extensions", "globalHeartbeat", "redis"),
)
"""The spec paths of an InferenceGatewayConfig's ``redis`` nodes (``url``, ``passwordEnv``)."""
GLOBAL_ROUTER_REDIS_NODES: Final = (("heartbeats", "redis"), ("rateLimits", "redis"))
"""The spec paths of a GlobalRouterConfig's ``redis`` nodes."""


def spec_node(spec: object, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The object at ``path`` below ``spec``, when every step is one (``None`` otherwise)."""
    node: object = spec
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def url_holds_password(url: str) -> bool:
    """Whether the Redis URL ``url`` carries a password: in its user-info or as ``?password=``.

    redis-py takes a password from the query as from the user-info, and the URL's wins over the
    client's own argument: either one would override ``passwordEnv`` (before session s38 the query's
    was not looked at). ``False`` for a malformed URL (its validation reports it)."""
    try:
        parts = urlsplit(url)
        return parts.password is not None or "password" in parse_qs(parts.query)
    except ValueError:
        return False


class RedisPasswordError(IgwConfigError, ValueError):
    """``passwordEnv`` names an unset variable, or the URL holds a password too; the message names the
    field, never the password."""


def redis_password(
    url: str, password_env: str | None, *, path: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """The password for the Redis at ``url`` from the variable ``password_env`` names (``None``: not
    configured, the URL's own if any); ``path`` names the ``redis`` node in messages."""
    if password_env is None:
        return None
    if url_holds_password(url):
        raise RedisPasswordError(
            f"{path}: url holds a password and passwordEnv names one; keep only passwordEnv "
            "(a password in the configuration is readable wherever the configuration is)"
        )
    value = (os.environ if environ is None else environ).get(password_env)
    if not value:
        raise RedisPasswordError(
            f"{path}.passwordEnv: environment variable {password_env} is not set or empty"
        )
    return value
