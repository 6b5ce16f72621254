"""``GET /debug/decisions``: the decision log (:mod:`igw.gateway.decision_log`) for operators.

Registered only when the gateway runs with a decision log, and every call must present the
operator's debug token (``Authorization: Bearer <token>``; the token comes from the environment,
never from a command line, and is compared in constant time). The inference JWTs of
``spec.auth`` do not open it: tenants must not see each other's routing. Each refused call is one
WARNING line with the client's address (never what it presented), so someone guessing the token
leaves a trace: the access log holds inference requests only.
``?limit=N`` returns the newest N entries (default: all kept).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import orjson
from aiohttp import web

from igw.errors import IgwGatewayError
from igw.gateway.decision_log import DecisionLog
from igw.gateway.errors import JSON, gateway_error

log = logging.getLogger("igw.gateway")

DEBUG_DECISIONS_PATH: Final = "/debug/decisions"
DEBUG_TOKEN_ENV: Final = "IGW_DEBUG_TOKEN"
MIN_TOKEN_LENGTH: Final = 16


@dataclass(frozen=True, slots=True)
class DecisionDebug:
    """Turns the decision log on: how many decisions to keep and the token that reads them."""

    capacity: int
    token: str

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_LENGTH:
            raise IgwGatewayError(
                f"{DEBUG_TOKEN_ENV} must hold at least {MIN_TOKEN_LENGTH} characters "
                "when the decision log is on"
            )

    def __repr__(self) -> str:  # never print the token
        return f"DecisionDebug(capacity={self.capacity}, token=<redacted>)"


def _limit(raw: str, capacity: int) -> int | None:
    """``?limit=`` as a number of entries (at most ``capacity``), ``None`` when it is not a positive
    integer. ASCII digits only: ``str.isdigit`` also accepts ``²`` and other digits ``int`` refuses,
    and ``int`` refuses more than 4,300 digits; either was a 500 with a logged traceback (before
    session s39)."""
    digits = raw.lstrip("0")
    if not raw.isascii() or not raw.isdigit() or not digits:
        return None
    return capacity if len(digits) > len(str(capacity)) else min(int(digits), capacity)


def add_debug_routes(app: web.Application, decision_log: DecisionLog) -> None:
    async def decisions(request: web.Request) -> web.Response:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not decision_log.opens(presented):
            log.warning("refused %s from %s: no valid operator debug token", request.path, request.remote)
            return gateway_error(
                "debug_token_invalid",
                f"{DEBUG_DECISIONS_PATH} needs the operator debug token (Authorization: Bearer ...)",
                param="Authorization",
            )
        raw = request.query.get("limit")
        limit: int | None = None
        if raw is not None:
            limit = _limit(raw, decision_log.capacity)
            if limit is None:
                return gateway_error(
                    "invalid_request", f"limit must be a positive integer, got {raw[:40]!r}", param="limit"
                )
        body = {"capacity": decision_log.capacity, "decisions": decision_log.latest(limit)}
        return web.Response(body=orjson.dumps(body), content_type=JSON)

    app.router.add_get(DEBUG_DECISIONS_PATH, decisions)
