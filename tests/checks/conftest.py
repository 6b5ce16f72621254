"""Fixtures for the check tests (helpers live in tests/checks/helpers.py)."""

from __future__ import annotations

import pytest

from igw.checks.inventory import Inventory
from igw.checks.sources.manifests import load_manifests
from tests.checks.helpers import SECURE


@pytest.fixture
def secure_inventory() -> Inventory:
    return load_manifests(SECURE)
