"""IGW-AU308: no Redis password is written into a configuration object.

Shared rate limits, tier-1 heartbeats and the global router reach Redis by URL, and a URL may hold
the password (``rediss://:<password>@host:6380/0``). Written there, the password is readable by
anyone who may read the object: the InferenceGatewayConfig and the ConfigMap its gateway serves
(every pod of the namespace that mounts it, every ``get configmaps`` grant), the GlobalRouterConfig.
``redis.passwordEnv`` names an environment variable filled from a Secret instead
(:mod:`igw.config.redis_password`). A password that is itself a variable reference (``$NAME`` or
``${NAME}``, expanded where the process starts, as the global router stack does with Secrets
Manager) passes. The finding names the field, never the password.

redis-py also takes the password from the query (``rediss://host:6380/0?password=…``, read by its
``parse_url`` like the user-info), so that spelling is looked at too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from igw.checks.audit._redis import redis_nodes
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU308",
    title="No Redis password in a configuration object",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="A Redis URL holding its password stores the password in the object and in the ConfigMap "
    "the gateway serves, readable by anyone who may read them.",
    remediation="Remove the password from the URL, put it in a Secret, expose it to the pods as an "
    "environment variable (spec.podDefaults.env with secretKeyRef) and name that variable in "
    "redis.passwordEnv.",
)

_REFERENCE: Final = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
"""A password that is a shell-style variable reference, expanded where the process starts."""


def _holds_password(node: Mapping[str, Any]) -> bool:
    """Whether the ``redis`` node's URL holds a literal password (user-info or ``?password=``)."""
    try:
        url = urlsplit(str(node.get("url") or ""))
        passwords = [url.password, *parse_qs(url.query).get("password", [])]
    except ValueError:
        return False
    return any(p and not _REFERENCE.match(p) for p in passwords)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config, nodes in redis_nodes(ctx):
        fields = [field for field, node in nodes if _holds_password(node)]
        if fields:
            yield r.fail(
                ref(config),
                # No "password:" before the advice: the report's redaction masks the word after it.
                f"{', '.join(fields)} holds the Redis password (use redis.passwordEnv with a Secret)",
            )
        else:
            yield r.passed(ref(config), "no Redis password in the object")


CHECK = FunctionCheck(META, _run)
