"""How rate-limit keys are made of their parts, injectively: no two parts make one key.

A bucket or reservation key joins parts (a tenant, a model, a response id, a tier) with ``|``;
each part is escaped first (``%`` as ``%25``, ``|`` as ``%7C``), so a ``|`` in a key only ever
separates parts, and a key of one part (a tenant's own bucket) holds none. Until session s44 the
parts were joined as they came: a tenant claim is any printable ASCII, so tenant
``team-a|model=llama``'s own bucket was tenant ``team-a``'s bucket for model ``llama`` at the
global router, which the first could drain (``tenantClaim: sub`` with self-chosen user names).

A part with neither character (every tenant, model and minted response id in practice) is its own
escape, so those keys are what they were before: only a tenant, model or id holding ``%`` or ``|``
moved to a new key, whose buckets start full.
"""

from __future__ import annotations

import re
from typing import Final

SEPARATOR: Final = "|"
MODEL_PART: Final = "model="
"""Before the model in a per-model bucket key (``<tenant>|model=<model>``)."""

_ESCAPED: Final = re.compile(r"%(25|7C)")


def escape(part: str) -> str:
    """``part`` with no ``|`` left in it, one to one (``%`` escaped too, so that it decodes)."""
    if "%" not in part and SEPARATOR not in part:
        return part
    return part.replace("%", "%25").replace(SEPARATOR, "%7C")


def unescape(part: str) -> str:
    """The part :func:`escape` made ``part`` of."""
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else SEPARATOR, part)


def join(*parts: str) -> str:
    """The key of ``parts`` (one to one: :func:`split` reads them back)."""
    return SEPARATOR.join(escape(p) for p in parts)


def split(key: str) -> list[str]:
    """The parts :func:`join` made ``key`` of."""
    return [unescape(p) for p in key.split(SEPARATOR)]


def tenant_key(tenant: str) -> str:
    """A tenant's own buckets (tier 1's and the global router's tenant-wide limits)."""
    return escape(tenant)


def model_key(tenant: str, model: str) -> str:
    """The global router's buckets for ``tenant`` and ``model`` (``spec.modelRateLimits``)."""
    return f"{escape(tenant)}{SEPARATOR}{MODEL_PART}{escape(model)}"


def model_key_parts(key: str) -> tuple[str, str] | None:
    """The (tenant, model) of a :func:`model_key`; ``None`` for any other key."""
    tenant, sep, model = key.partition(SEPARATOR + MODEL_PART)
    if not sep or SEPARATOR in tenant or SEPARATOR in model:
        return None
    return unescape(tenant), unescape(model)


def reservation_key(response_id: str, *scope: str) -> str:
    """Where a background response's charge is held: its id, then the holder's ``scope`` (none
    for a cluster gateway, ``tier2`` for the global router's tenant-wide limits, ``tier2``,
    ``model=`` for its per-model ones), so the holders of one response (which may share a Redis
    key prefix) never meet, nor does a response whose id names another's scope."""
    return join(response_id, *scope)
