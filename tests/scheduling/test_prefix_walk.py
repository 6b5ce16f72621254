"""``prefix_index._held_values`` (the compiled build's walk in ``PrefixIndex.match``) against the
``takewhile`` walk it stands for, and ``match`` itself with the walk switched either way."""

from __future__ import annotations

import random
from itertools import takewhile

import pytest

from igw.scheduling.plugins import prefix_index
from igw.scheduling.plugins.prefix_index import PrefixIndex, _held, _held_values


def test_held_values_equal_the_takewhile_walk() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        holders = {h: rng.choice([0, 1, 5, -7, 255, 256]) for h in rng.sample(range(40), rng.randint(0, 30))}
        hashes = [rng.randrange(40) for _ in range(rng.randint(0, 25))]
        expected = list(takewhile(_held, map(holders.get, hashes)))
        assert _held_values(holders, hashes) == expected


@pytest.mark.parametrize("native", [True, False])
def test_match_is_the_same_with_either_walk(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    index = PrefixIndex()
    for step in range(400):
        hashes = [rng.randrange(60) for _ in range(rng.randint(1, 12))]
        endpoint = f"e{rng.randrange(6)}"
        if step % 3:
            index.insert(endpoint, hashes, capacity=rng.randint(5, 40))
        monkeypatch.setattr(prefix_index, "NATIVE_WALK", native)
        got = index.match(hashes)
        monkeypatch.setattr(prefix_index, "NATIVE_WALK", not native)
        assert got == index.match(hashes)
        assert list(got) == list(index.match(hashes))  # the same order too
