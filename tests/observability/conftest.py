"""Registers the gateway fixture (``tests/gateway/fixtures.py``) and the security fixtures
(``tests/security/fixtures.py``: a real HTTPS JWKS issuer, tokens and guards) for the tracing and
security-dashboard tests."""

from tests.gateway.fixtures import gateway
from tests.security.fixtures import ca, client_ssl, clock, jwks_server, keys, make_guard, tokens

__all__ = ["ca", "client_ssl", "clock", "gateway", "jwks_server", "keys", "make_guard", "tokens"]
