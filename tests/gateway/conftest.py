"""Registers the gateway fixtures; they live in ``fixtures.py`` so other folders can share them."""

from tests.gateway.fixtures import gateway

__all__ = ["gateway"]
