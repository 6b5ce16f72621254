"""Registers the gateway fixture (from ``tests/gateway/fixtures.py``) for the tracing tests."""

from tests.gateway.fixtures import gateway

__all__ = ["gateway"]
