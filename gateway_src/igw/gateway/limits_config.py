"""The listener's timeouts and limits from ``spec.extensions.serverLimits`` and ``igw serve`` options.

Precedence, lowest first: :class:`~igw.gateway.serving.ServerLimits`' defaults (the schema states
the same ones; a test keeps them equal), the configuration's ``spec.extensions.serverLimits``, then
each ``igw serve`` option given on the command line. The operator and the Helm chart pass
``--drain-seconds`` / ``--stream-grace-seconds`` (the config's ``drainPeriod`` / ``streamGrace`` when
set, else derived from the pod's ``terminationGracePeriodSeconds``; see
:mod:`igw.operator.shutdown_timing`), which is why an explicit option wins: the pod's kill deadline
is the one number the process cannot change.

Problems are reported all at once and each names where the bad value came from: the config path
(``spec.extensions.serverLimits.keepAliveTimeout``) or the command-line option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from igw.config.durations import parse_duration
from igw.config.model import GatewayConfig
from igw.config.rules import (
    AUTHORIZATION_HEADER_OVERHEAD_BYTES,
    SERVER_LIMITS_MAX_KEEPALIVE_S,
    default_max_token_bytes,
)
from igw.errors import IgwGatewayError
from igw.gateway.serving import MAX_REQUEST_LINE_BYTES, ServerLimits

EXTENSION_NAME: Final = "serverLimits"
PATH: Final = f"spec.extensions.{EXTENSION_NAME}"
MAX_KEEPALIVE_S: Final = SERVER_LIMITS_MAX_KEEPALIVE_S
"""Longest keep-alive idle time accepted (the admission rule's bound, also for ``igw serve`` options)."""


class ServerLimitsError(IgwGatewayError, ValueError):
    """Invalid timeouts or limits; ``problems`` lists each one with the field or option at fault."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True, slots=True)
class LimitField:
    """One :class:`ServerLimits` field, its config key and whether the config states it as a duration."""

    attribute: str
    key: str
    duration: bool


FIELDS: Final = (
    LimitField("header_timeout_s", "headerTimeout", duration=True),
    LimitField("body_timeout_s", "bodyTimeout", duration=True),
    LimitField("send_timeout_s", "sendTimeout", duration=True),
    LimitField("keepalive_timeout_s", "keepAliveTimeout", duration=True),
    LimitField("max_connections", "maxConnections", duration=False),
    LimitField("max_headers", "maxHeaders", duration=False),
    LimitField("max_header_field_bytes", "maxHeaderBytes", duration=False),
    LimitField("max_body_bytes_held", "maxBodyBytesHeld", duration=False),
    LimitField("drain_s", "drainPeriod", duration=True),
    LimitField("stream_grace_s", "streamGrace", duration=True),
)
POSITIVE_DURATIONS: Final = frozenset({"headerTimeout", "bodyTimeout", "sendTimeout", "keepAliveTimeout"})


def _from_extension(raw: Mapping[str, Any], problems: list[str], path: str) -> dict[str, float | int]:
    """The fields ``raw`` sets, converted; range problems (beyond the schema's) go to ``problems``."""
    values: dict[str, float | int] = {}
    for f in FIELDS:
        if f.key not in raw:
            continue
        value = raw[f.key]
        where = f"{path}.{f.key}"
        if f.duration:
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if f.key in POSITIVE_DURATIONS and seconds <= 0:
                problems.append(f"{where}: must be greater than 0s (got {value!r})")
            elif f.key == "keepAliveTimeout" and seconds > MAX_KEEPALIVE_S:
                problems.append(f"{where}: at most {MAX_KEEPALIVE_S:g}s (got {value!r})")
            values[f.attribute] = seconds
        elif isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{where}: must be an integer (got {value!r})")
        elif f.key == "maxHeaderBytes" and value == MAX_REQUEST_LINE_BYTES:
            # Not expressible in a structural CRD schema (no ``not``), so checked here.
            problems.append(
                f"{where}: must differ from {MAX_REQUEST_LINE_BYTES}, the request-line limit (got {value})"
            )
        else:
            values[f.attribute] = value
    return values


def server_limits(
    extension: Mapping[str, Any] | None,
    overrides: Mapping[str, float | int | None],
    *,
    path: str = PATH,
    max_token_bytes: int | None = None,
) -> ServerLimits:
    """Defaults, then ``extension`` (``spec.extensions.serverLimits``, schema-validated or not),
    then every non-``None`` entry of ``overrides`` (``ServerLimits`` field name -> command-line value).

    ``max_token_bytes``: the JWT size cap in force (``spec.extensions.authorization.maxTokenBytes``
    or its default; ``None`` without ``spec.auth``). A ``--max-header-bytes`` that leaves no room
    for a token of that size is a problem (:func:`token_room_problem`).

    Raises :class:`ServerLimitsError` listing every problem; nothing is half-applied.
    """
    problems: list[str] = []
    values: dict[str, Any] = _from_extension(extension or {}, problems, path)
    known = {f.name for f in fields(ServerLimits)}
    values.update({name: value for name, value in overrides.items() if value is not None and name in known})
    if problems:
        raise ServerLimitsError(problems)
    limits = replace(ServerLimits(), **values)
    # Whatever is still wrong came from the command line (the config's values were checked above).
    problems = limits.problems()
    if max_token_bytes is not None and overrides.get("max_header_field_bytes") is not None:
        room = token_room_problem(max_token_bytes, limits.max_header_field_bytes)
        if room is not None:
            problems.append(room)
    if problems:
        raise ServerLimitsError(problems)
    return limits


def token_room_problem(max_token_bytes: int, max_header_field_bytes: int) -> str | None:
    """Why ``--max-header-bytes max_header_field_bytes`` cannot carry a bearer token of
    ``max_token_bytes``; ``None`` when it can.

    Why: the listener answers 431 to a header field longer than the limit before the guard sees it,
    so the option silently lowered the token cap (before session s41 ``igw serve --max-header-bytes
    4096`` served with ``maxTokenBytes: 8192``, refusing every token over 4,075 bytes with a 431 that
    names no token). The configuration's ``serverLimits.maxHeaderBytes`` is held to the same bound
    by the rule ``token-fits-header-limit``; the command line bypassed it."""
    needed = max_token_bytes + AUTHORIZATION_HEADER_OVERHEAD_BYTES
    if needed <= max_header_field_bytes:
        return None
    return (
        f"--max-header-bytes: spec.extensions.authorization.maxTokenBytes {max_token_bytes} needs at "
        f"least {needed} (the field name and 'Bearer ' take {AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes), "
        f"got {max_header_field_bytes}: the listener would answer 431 to every token over "
        f"{max_header_field_bytes - AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes before the token check; "
        "raise --max-header-bytes or lower maxTokenBytes"
    )


def token_cap(config: GatewayConfig) -> int | None:
    """The JWT size cap the guard of ``config`` enforces (``spec.extensions.authorization.maxTokenBytes``
    or the schema's default); ``None`` without ``spec.auth`` (no tokens to carry)."""
    if config.auth is None:
        return None
    stated = (config.extensions.get("authorization") or {}).get("maxTokenBytes")
    return default_max_token_bytes() if stated is None else int(stated)


def reload_token_room_problem(config: GatewayConfig, running_header_field_bytes: int) -> str | None:
    """Why a reloaded ``config`` cannot be applied to a listener that runs with
    ``running_header_field_bytes`` (its ``maxHeaderBytes``, fixed at start: ``serverLimits`` is
    restart-only); ``None`` when its token cap fits.

    Why: ``igw serve`` checks the cap against the listener at start (:func:`token_room_problem`, rule
    ``token-fits-header-limit``), but a reload that raised ``maxTokenBytes`` (or added ``spec.auth``
    with a cap the listener cannot carry) was applied unchecked before session s42: the guard took the
    new cap while the listener kept answering 431 to every token over the old limit, naming no token."""
    cap = token_cap(config)
    if cap is None:
        return None
    needed = cap + AUTHORIZATION_HEADER_OVERHEAD_BYTES
    if needed <= running_header_field_bytes:
        return None
    return (
        f"spec.extensions.authorization.maxTokenBytes {cap} needs a header limit of at least {needed} "
        f"(the field name and 'Bearer ' take {AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes), but the "
        f"listener runs with maxHeaderBytes {running_header_field_bytes} (--max-header-bytes or "
        f"{PATH}.maxHeaderBytes, read only at start) and would answer 431 to every token over "
        f"{running_header_field_bytes - AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes before the token "
        "check; lower maxTokenBytes, or restart igw serve with a larger header limit"
    )
