"""Tenant identity and the claim headers forwarded to model servers (attack case A11).

Forwarded headers are built from *verified* claims only. A value is sent as is when it is a
string, number or boolean, and as standard base64 of its compact JSON when it is an array or
object (Envoy's convention). A value that is not printable ASCII (CR, LF, NUL, other controls,
non-ASCII) or longer than ``maxForwardedHeaderBytes`` makes the whole token unacceptable (401):
forwarding it could split or smuggle headers, and silently dropping it would hide identity from
the model server. Client-supplied copies of every forwarded header name are stripped by the
gateway (``RequestGuard.stripped_request_headers``).

A tenant claim equal to ``rateLimits.anonymousTenant`` is refused (401 ``tenant_reserved``): the
name keys the bucket, limits and metric series of callers *without* a tenant, and an authenticated
caller must never be merged into them (it could drain their bucket, or take their limits). The
operator names anonymous callers with a value the issuer never mints.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from igw.gateway.cache_salt import scope_salt
from igw.gateway.guards import Principal, caller_scope
from igw.security.claims import claim_at
from igw.security.settings import AuthorizationSettings
from igw.security.token import reject

MAX_TENANT_CHARS: Final = 256
_PRINTABLE_ASCII: Final = re.compile(r"[\x20-\x7e]*")


def header_value(value: Any, *, max_bytes: int) -> str | None:
    """The header form of a claim value; ``None`` for an absent claim; rejects unsafe values."""
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            reject("claim_header_unsafe")
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        text = base64.b64encode(compact).decode("ascii")
    if len(text) > max_bytes or not _PRINTABLE_ASCII.fullmatch(text):
        reject("claim_header_unsafe")
    return text


def build_principal(claims: Mapping[str, Any], *, settings: AuthorizationSettings) -> Principal:
    tenant_value = claim_at(claims, settings.tenant_claim)
    tenant: str | None = None
    if tenant_value is not None:
        if not isinstance(tenant_value, str) or not tenant_value or len(tenant_value) > MAX_TENANT_CHARS:
            reject("bad_tenant_claim")
        if not _PRINTABLE_ASCII.fullmatch(tenant_value):
            reject("claim_header_unsafe")
        if tenant_value == settings.anonymous_tenant:
            reject("tenant_reserved")  # it would pass as, and be counted with, the anonymous callers
        tenant = tenant_value
    elif settings.require_tenant:
        reject("tenant_missing")
    headers: dict[str, str] = {}
    if settings.tenant_header and tenant is not None:
        headers[settings.tenant_header.lower()] = tenant
    for item in settings.forward_claims:
        text = header_value(claim_at(claims, item.claim), max_bytes=settings.max_forwarded_header_bytes)
        if text is not None:
            headers[item.header.lower()] = text
    sub = claims.get("sub")
    principal = Principal(
        subject=sub if isinstance(sub, str) else None,
        tenant=tenant,
        claims=claims,
        forward_headers=headers,
        authenticated=True,
        engine_fields=settings.allowed_engine_fields,
    )
    if settings.isolate_prefix_caches:  # once per verified token: the principal is cached with it
        principal = dataclasses.replace(principal, cache_salt=scope_salt(caller_scope(principal)))
    return principal
