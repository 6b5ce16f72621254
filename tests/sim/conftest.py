"""Simulator test fixtures; they and the helpers tests import live in :mod:`tests.sim.support`."""

from tests.sim.support import text_of

__all__ = ["text_of"]
