"""Registers the security fixtures (a real HTTPS JWKS issuer and tokens) for the security dashboard test."""

from tests.security.fixtures import ca, clock, jwks_server, keys, tokens

__all__ = ["ca", "clock", "jwks_server", "keys", "tokens"]
