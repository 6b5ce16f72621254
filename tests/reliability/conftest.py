"""Registers shared fixtures: the request-security ones (a real HTTPS JWKS issuer with a trustme CA,
signing keys, token factory; ``tests/security/fixtures.py``) for the 401 path, and the in-process
gateway with hot reload (``tests/gateway/fixtures.py``)."""

from tests.gateway.fixtures import gateway
from tests.security.fixtures import ca, clock, jwks_server, keys, tokens

__all__ = ["ca", "clock", "gateway", "jwks_server", "keys", "tokens"]
