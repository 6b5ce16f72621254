"""Simulator test fixtures; the helpers tests import live in :mod:`tests.sim.support`."""

from __future__ import annotations

import random

import pytest

from igw.sim.tokens import synthetic_text


@pytest.fixture
def text_of() -> object:
    rng = random.Random(1234)

    def make(tokens: int) -> str:
        return synthetic_text(tokens=tokens, rng=rng)

    return make
