"""Gateway test fixtures; they and the helpers tests import live in :mod:`tests.gateway.support`."""

from tests.gateway.support import gateway

__all__ = ["gateway"]
