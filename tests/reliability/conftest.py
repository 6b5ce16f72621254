"""Registers the request-security fixtures (a real HTTPS JWKS issuer with a trustme CA, signing keys,
token factory) for the reliability tests of the 401 path; they live in ``tests/security/fixtures.py``."""

from tests.security.fixtures import ca, clock, jwks_server, keys, tokens

__all__ = ["ca", "clock", "jwks_server", "keys", "tokens"]
