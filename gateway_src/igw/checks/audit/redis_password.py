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
from typing import Final
from urllib.parse import parse_qs, urlsplit

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.redis_password import GATEWAY_REDIS_NODES, GLOBAL_ROUTER_REDIS_NODES, spec_node

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

_URLS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    "InferenceGatewayConfig": GATEWAY_REDIS_NODES,
    "GlobalRouterConfig": GLOBAL_ROUTER_REDIS_NODES,
}
"""Per kind, the spec paths of the ``redis`` nodes whose ``url`` may hold a password."""


def _with_password(config: Manifest, paths: tuple[tuple[str, ...], ...]) -> list[str]:
    """The ``spec.…redis.url`` fields of ``config`` whose URL holds a literal password."""
    found = []
    for path in paths:
        node = spec_node(spec(config), path)
        if node is None:
            continue
        try:
            url = urlsplit(str(node.get("url") or ""))
            passwords = [url.password, *parse_qs(url.query).get("password", [])]
        except ValueError:
            continue
        if any(p and not _REFERENCE.match(p) for p in passwords):
            found.append("spec." + ".".join(path) + ".url")
    return found


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    kinds = {kind: ctx.inventory.kube.of(kind) for kind in _URLS}
    configs = [(kind, c) for kind, objects in kinds.items() if isinstance(objects, list) for c in objects]
    if not configs:
        need(kinds["InferenceGatewayConfig"])  # nothing of either kind: skipped with the source's reason
    for kind, config in configs:
        fields = _with_password(config, _URLS[kind])
        if fields:
            yield r.fail(
                ref(config),
                # No "password:" before the advice: the report's redaction masks the word after it.
                f"{', '.join(fields)} holds the Redis password (use redis.passwordEnv with a Secret)",
            )
        else:
            yield r.passed(ref(config), "no Redis password in the object")


CHECK = FunctionCheck(META, _run)
