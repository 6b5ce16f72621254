"""The compact prefix index: holders encoded per slot, slot reuse, and answers identical to a plain
set-per-hash model under random operations."""

from __future__ import annotations

import random
from collections import OrderedDict
from itertools import takewhile

import pytest

from igw.scheduling.plugins import prefix_index
from igw.scheduling.plugins.prefix_index import PrefixIndex


class SetPerHashIndex:
    """The straightforward structure the compact index replaces: one ``set`` of holders per hash."""

    def __init__(self) -> None:
        self.holders: dict[int, set[str]] = {}
        self.lru: dict[str, OrderedDict[int, None]] = {}

    def match(self, hashes: list[int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for h in hashes:
            eps = self.holders.get(h)
            if not eps:
                break
            for ep in eps:
                counts[ep] = counts.get(ep, 0) + 1
        return counts

    def insert(self, endpoint: str, hashes: list[int], *, capacity: int) -> None:
        lru = self.lru.setdefault(endpoint, OrderedDict())
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            self.holders.setdefault(h, set()).add(endpoint)
        while len(lru) > capacity:
            old, _ = lru.popitem(last=False)
            self._forget(old, endpoint)

    def remove_endpoint(self, endpoint: str) -> None:
        for h in self.lru.pop(endpoint, OrderedDict()):
            self._forget(h, endpoint)

    def _forget(self, h: int, endpoint: str) -> None:
        eps = self.holders[h]
        eps.discard(endpoint)
        if not eps:
            del self.holders[h]


@pytest.mark.parametrize(
    ("inserts", "removed", "query", "expected"),
    [
        pytest.param([("a", [1, 2, 3])], [], [1, 2, 3], {"a": 3}, id="single-holder"),
        pytest.param([("a", [1, 2]), ("b", [1])], [], [1, 2], {"a": 2, "b": 1}, id="two-holders-then-one"),
        pytest.param([("a", [1]), ("b", [1]), ("c", [1])], ["b"], [1], {"a": 1, "c": 1}, id="middle-removed"),
        pytest.param([("a", [1, 2])], ["a"], [1, 2], {}, id="only-holder-removed"),
        pytest.param([("a", [5]), ("b", [6])], [], [6, 5], {"b": 1, "a": 1}, id="holders-per-block"),
        pytest.param([("a", [1]), ("b", [2])], [], [1, 2, 3], {"a": 1, "b": 1}, id="any-holder-continues"),
        pytest.param([("a", [2])], [], [1, 2], {}, id="first-block-missing"),
    ],
)
def test_holders_table(
    inserts: list[tuple[str, list[int]]], removed: list[str], query: list[int], expected: dict[str, int]
) -> None:
    index = PrefixIndex()
    for endpoint, hashes in inserts:
        index.insert(endpoint, hashes, capacity=10)
    for endpoint in removed:
        index.remove_endpoint(endpoint)
    assert index.match(query) == expected


def test_removed_endpoint_slot_is_reused_without_inheriting_its_entries() -> None:
    index = PrefixIndex()
    index.insert("a", [1], capacity=10)
    index.insert("b", [1, 2], capacity=10)
    index.remove_endpoint("a")
    index.insert("c", [3], capacity=10)  # takes a's slot
    assert index.holders(1) == {"b"}
    assert index.holders(3) == {"c"}
    assert index.match([1, 2]) == {"b": 2}
    assert index.match([3]) == {"c": 1}


def test_eviction_leaves_the_other_holders_and_drops_empty_entries() -> None:
    index = PrefixIndex()
    index.insert("a", [1, 2], capacity=2)
    index.insert("b", [1], capacity=2)
    index.insert("a", [3], capacity=2)  # evicts a's oldest entry, hash 1
    assert index.holders(1) == {"b"}
    assert index.holders(2) == {"a"}
    index.insert("a", [4, 5], capacity=2)  # evicts 2 and 3: nobody holds them any more
    assert index.entries() == 3  # 1 (b), 4 and 5 (a)


def test_many_slots_encode_as_a_bitmask_beyond_the_cached_small_ints() -> None:
    index = PrefixIndex()
    endpoints = [f"e{i}" for i in range(300)]
    for endpoint in endpoints:
        index.insert(endpoint, [7], capacity=4)
    assert index.match([7]) == dict.fromkeys(endpoints, 1)
    for endpoint in endpoints[:-1]:
        index.remove_endpoint(endpoint)
    assert index.holders(7) == {"e299"}


@pytest.mark.parametrize("seed", range(5))
def test_answers_equal_a_set_per_hash_index_under_random_operations(seed: int) -> None:
    rng = random.Random(seed)
    compact, plain = PrefixIndex(), SetPerHashIndex()
    endpoints = [f"pod-{i}" for i in range(12)]
    for _ in range(3_000):
        op = rng.random()
        endpoint = rng.choice(endpoints)
        hashes = [rng.randrange(60) for _ in range(rng.randrange(1, 8))]
        if op < 0.6:
            capacity = rng.randrange(1, 40)
            compact.insert(endpoint, hashes, capacity=capacity)
            plain.insert(endpoint, hashes, capacity=capacity)
        elif op < 0.65:
            compact.remove_endpoint(endpoint)
            plain.remove_endpoint(endpoint)
        else:
            assert compact.match(hashes) == plain.match(hashes)
        assert compact.size(endpoint) == len(plain.lru.get(endpoint, ()))
    assert {h: compact.holders(h) for h in range(60) if compact.holders(h)} == plain.holders


def test_endpoints_kept_per_holders_value_stay_bounded_and_answers_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``match`` keeps each holders value's endpoints between calls; past ``HOLDER_KEYS_KEPT``
    values it starts over, and its answers stay those of a plain set-per-hash index."""
    monkeypatch.setattr(prefix_index, "HOLDER_KEYS_KEPT", 3)
    rng = random.Random(7)
    compact, plain = PrefixIndex(), SetPerHashIndex()
    endpoints = [f"pod-{i}" for i in range(6)]
    for _ in range(2_000):
        endpoint = rng.choice(endpoints)
        hashes = [rng.randrange(30) for _ in range(rng.randrange(1, 6))]
        if rng.random() < 0.5:
            compact.insert(endpoint, hashes, capacity=20)
            plain.insert(endpoint, hashes, capacity=20)
        else:
            assert compact.match(hashes) == plain.match(hashes)
        assert len(compact._holder_keys) <= 3


def walked_match(index: PrefixIndex, hashes: list[int]) -> list[tuple[str, int]]:
    """What ``match`` returned before its one-pass walk: a Python loop per hash, counts per holders
    value, then each value's endpoints in slot order (the answer's order included)."""
    per_value: dict[int, int] = {}
    for h in hashes:
        v = index._holders.get(h)
        if v is None:
            break
        per_value[v] = per_value.get(v, 0) + 1
    counts: dict[str, int] = {}
    for v, n in per_value.items():
        for slot in prefix_index._slots_of(v):
            endpoint = index._endpoints[slot]
            if endpoint is not None:
                counts[endpoint] = counts.get(endpoint, 0) + n
    return list(counts.items())


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_match_equals_the_per_hash_walk_order_included(seed: int) -> None:
    """Chains of shared prefixes (the case the one-value shortcut serves) and diverging tails, some
    endpoints removed: ``match`` gives the per-hash walk's counts in its order, whether the matched
    blocks have one holders value or several, and stops at the first block nobody holds."""
    rng = random.Random(seed)
    index = PrefixIndex()
    endpoints = [f"pod-{i}" for i in range(10)]
    shared = [[rng.getrandbits(64) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    one_value = several = 0
    for _ in range(2_000):
        tail = [rng.getrandbits(64) for _ in range(rng.randrange(3))]
        chain = rng.choice(shared)[: rng.randrange(1, 21)] + tail
        op = rng.random()
        if op < 0.45:
            index.insert(rng.choice(endpoints), chain, capacity=rng.randrange(5, 60))
        elif op < 0.48:
            index.remove_endpoint(rng.choice(endpoints))
        else:
            expected = walked_match(index, chain)
            assert list(index.match(chain).items()) == expected
            walked = list(takewhile(lambda v: v is not None, map(index._holders.get, chain)))
            one_value += len(set(walked)) == 1
            several += len(set(walked)) > 1
    assert one_value > 100  # both paths of ``match`` were compared
    assert several > 100
