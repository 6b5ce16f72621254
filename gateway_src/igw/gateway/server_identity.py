"""What the gateway's HTTP servers say about themselves in the ``Server`` header: a product name, no version.

aiohttp's default (``Python/3.11 aiohttp/3.x``) tells anyone who sends one request which interpreter and
HTTP library versions answer, i.e. which published vulnerabilities to try; a model server's own
``Server`` (``uvicorn``, ``Python/… aiohttp/…``) relayed through the gateway does the same for the pods
behind it. Proxies in front of production services name themselves instead: nginx hides the upstream's
``Server`` by default and ``server_tokens off`` drops its own version; Envoy overwrites the upstream's
field with its own name. The gateway does both: every answer it writes carries ``Server: igw`` and the
model server's field is never forwarded.

Where each answer gets it: the lean server writes :data:`SERVER_FIELD` / :data:`SERVER_NAME` into the
heads it serialises itself; the forwarded answer and the relayed stream drop the upstream's field
(:data:`UPSTREAM_SERVER_FIELD`); every aiohttp application the product serves (the gateway's own routes,
the global router, the operator's health port) runs :func:`name_the_server` as an
``on_response_prepare`` signal; answers aiohttp's connection handler writes without an application
(malformed HTTP) set the field where they are built.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

SERVER_NAME: Final = "igw"
"""The ``Server`` header's value on every answer the product's HTTP servers write."""
SERVER_FIELD: Final = f"Server: {SERVER_NAME}\r\n".encode()
""":data:`SERVER_NAME` as a serialised HTTP/1.1 header line."""
UPSTREAM_SERVER_FIELD: Final = b"server"
"""The lower-case field name of a model server's own ``Server`` header, which is never forwarded."""


async def name_the_server(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` signal: the answer says :data:`SERVER_NAME` (aiohttp would add its own
    versioned default only where the field is missing)."""
    response.headers["Server"] = SERVER_NAME


def name_every_answer(app: web.Application) -> web.Application:
    """``app`` with :func:`name_the_server` on its ``on_response_prepare`` signal (returned for chaining)."""
    app.on_response_prepare.append(name_the_server)
    return app
