"""The configuration ``igw serve`` reads only when it starts, and the digest that rolls its pods.

Most of an InferenceGatewayConfig is applied by a hot reload within about a second (schedulers,
weights, auth, rate limits, rewrites, flow control). Four extensions are not, each fixed by what
``igw serve`` builds when it starts: ``serverLimits`` (the listener's timeouts and connection
limit; all but :data:`LIVE_SERVER_LIMITS`, which a reload applies), ``tlsTermination`` (the
listener's TLS context; the certificate files themselves are re-read when they change),
``management`` (the management listener's port) and ``globalHeartbeat`` (the publisher). A reload
that changes them logs a warning and keeps the running values (:mod:`igw.gateway.reload`);
``igw operator`` puts :func:`restart_digest` on its gateway pods' template, so an edit of any rolls
the pods (a rolling update, as for an image change) instead of waiting, unannounced, for the next
restart while the object's status says ``Programmed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import orjson

RESTART_ONLY: Final[Mapping[str, str]] = {
    "serverLimits": "the listener keeps the limits it started with",
    "tlsTermination": "the listener keeps the TLS settings it started with",
    "management": "the management listener keeps the port it started on",
    "globalHeartbeat": "the heartbeat publisher keeps the settings it started with",
}
"""Each ``spec.extensions`` entry read only at start, with what a reload leaves running."""

SERVER_LIMITS: Final = "serverLimits"
LIVE_SERVER_LIMITS: Final = frozenset({"maxBodyBytesHeld"})
"""The ``serverLimits`` fields a hot reload applies (the body budget is a counter the handlers read
at each request, :mod:`igw.gateway.body_budget`): left out of the restart-only values, so an edit of
them alone neither warns on reload nor rolls the pods. Until session s50 ``maxBodyBytesHeld`` was
restart-only too: lowering it to relieve a pod short of memory took a restart (a roll under the
operator and the chart), which dropped the uploads in progress and the prefix indexes."""


def restart_only_values(extensions: Mapping[str, Any] | None) -> dict[str, Any]:
    """The restart-only entries present in ``extensions`` (a spec's ``extensions``), by name;
    ``serverLimits`` without its :data:`LIVE_SERVER_LIMITS` (left out when nothing else is set)."""
    if not isinstance(extensions, Mapping):
        return {}
    out = {name: extensions[name] for name in RESTART_ONLY if extensions.get(name) is not None}
    limits = out.get(SERVER_LIMITS)
    if isinstance(limits, Mapping):
        kept = {key: value for key, value in limits.items() if key not in LIVE_SERVER_LIMITS}
        if kept:
            out[SERVER_LIMITS] = kept
        else:
            del out[SERVER_LIMITS]
    return out


def restart_digest(extensions: Mapping[str, Any] | None) -> str | None:
    """A short digest of the restart-only entries of ``extensions``; ``None`` when none is set (so
    configurations without them carry no annotation, and adding the first one rolls the pods)."""
    values = restart_only_values(extensions)
    if not values:
        return None
    return hashlib.sha256(orjson.dumps(values, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
