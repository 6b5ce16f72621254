"""OpenAI-shaped error responses (``{"error": {"message", "type", "param", "code"}}``).

OpenAI SDKs parse this body and raise typed exceptions from the status code, so every error the
gateway itself produces uses this shape, with a message that names the field or header at fault.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from aiohttp import web

JSON = "application/json"


def error_body(
    *, message: str, error_type: str, code: str | int | None = None, param: str | None = None
) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})


def error_response(
    status: int,
    *,
    message: str,
    error_type: str,
    code: str | int | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(message=message, error_type=error_type, code=code, param=param),
        content_type=JSON,
        headers=dict(headers or {}),
    )


def sse_error_event(*, message: str, error_type: str, code: str | int | None) -> bytes:
    """The terminal event of a stream whose upstream died: an OpenAI-style error, then ``[DONE]``."""
    body = error_body(message=message, error_type=error_type, code=code)
    return b"data: " + body + b"\n\ndata: [DONE]\n\n"
