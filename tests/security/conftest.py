"""Registers the security fixtures; they live in ``fixtures.py`` so other folders can share them."""

from tests.gateway.fixtures import gateway
from tests.security.fixtures import ca, client_ssl, clock, jwks_server, keys, make_guard, redis_server, tokens

__all__ = [
    "ca",
    "client_ssl",
    "clock",
    "gateway",
    "jwks_server",
    "keys",
    "make_guard",
    "redis_server",
    "tokens",
]
