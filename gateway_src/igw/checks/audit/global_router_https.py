"""IGW-AU307: the tier-2 global router reaches every cluster's gateway over https.

A GlobalRouterConfig names each cluster by its tier-1 gateway's base URL; the router forwards every
request there, often across regions. Over ``http://`` the prompts and completions travel in clear,
and so does the caller's bearer token whenever the router passes it on: without ``spec.auth`` (the
router forwards the ``Authorization`` field as it came) or with
``spec.authorization.forwardAuthorization: true``. Loopback endpoints (a local demo) pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from igw.checks.audit._hosts import is_loopback
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.k8s import ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU307",
    title="Global router reaches clusters over https",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="A GlobalRouterConfig cluster endpoint over plain http carries prompts and completions in "
    "clear between regions; HIGH when the caller's bearer token is forwarded too (no spec.auth, or "
    "spec.authorization.forwardAuthorization).",
    remediation="Give each cluster's gateway an https URL (an ALB or NLB listener with an ACM certificate, "
    "or the gateway's own TLS termination) and use it in spec.clusters[].endpoint.",
)


def _forwards_tokens(config_spec: Mapping[str, Any]) -> bool:
    """Whether the caller's ``Authorization`` field reaches the clusters (see the module docstring)."""
    if not config_spec.get("auth"):
        return True
    authorization = config_spec.get("authorization")
    return isinstance(authorization, Mapping) and authorization.get("forwardAuthorization") is True


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("GlobalRouterConfig")):
        config_spec = spec(config)
        clusters = config_spec.get("clusters")
        plain: list[str] = []
        for cluster in clusters if isinstance(clusters, list) else []:
            if not isinstance(cluster, Mapping):
                continue
            endpoint = str(cluster.get("endpoint") or "")
            parts = urlsplit(endpoint)
            if parts.scheme == "http" and not is_loopback(parts.hostname):
                plain.append(f"{cluster.get('name', '?')} ({parts.hostname})")
        resource = ref(config)
        if not plain:
            yield r.passed(resource, "every cluster endpoint is https (or loopback)")
        elif _forwards_tokens(config_spec):
            yield r.fail(
                resource,
                f"plain-http cluster endpoint(s) {', '.join(plain)} receive the callers' bearer tokens "
                "(no spec.auth, or forwardAuthorization) and their prompts in clear",
                severity=Severity.HIGH,
            )
        else:
            yield r.fail(
                resource, f"plain-http cluster endpoint(s) {', '.join(plain)} carry prompts in clear"
            )


CHECK = FunctionCheck(META, _run)
