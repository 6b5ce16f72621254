"""The compact prefix index: holders encoded per slot, slot reuse, and answers identical to a plain
set-per-hash model under random operations."""

from __future__ import annotations

import random
from collections import OrderedDict
from itertools import takewhile

import pytest
import xxhash

from igw.scheduling.plugins import prefix_index
from igw.scheduling.plugins.prefix_index import PrefixHasher, PrefixIndex, prefix_hashes


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


@pytest.mark.parametrize("seed", range(4))
def test_reused_chains_equal_hashing_every_block(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts built from a few shared openings (as system prompts and conversations share them)
    that diverge at any block, in mid-block, or run past the block bound; two models, two block
    sizes, several bounds, multi-byte characters, the memo's bound reached: every answer of
    ``PrefixHasher`` is ``prefix_hashes``'s, and both ways of finding the shared blocks ran."""
    monkeypatch.setattr(prefix_index, "HASHED_PREFIXES_KEPT", 5)
    calls: list[bytes] = []
    digest = xxhash.xxh64_intdigest

    def counted(data: bytes) -> int:
        calls.append(data)
        return digest(data)

    monkeypatch.setattr(xxhash, "xxh64_intdigest", counted)
    rng = random.Random(seed)
    hasher = PrefixHasher()
    openings = ["".join(rng.choice("abé€ ") for _ in range(rng.randrange(1, 400))) for _ in range(8)]
    compared = set()
    for _ in range(1_500):
        opening = rng.choice(openings)
        cut = rng.randrange(len(opening) + 1)
        text = opening[:cut] + "".join(rng.choice("xyz") for _ in range(rng.randrange(0, 200)))
        model, block, bound = rng.choice(["m1", "m2"]), rng.choice([16, 64]), rng.choice([3, 8, 256])
        kept = hasher._kept.get(text.encode()[:block])
        expected = prefix_hashes(model, text, block_chars=block, max_blocks=bound)
        calls.clear()
        assert hasher.hashes(model, text, block_chars=block, max_blocks=bound) == expected
        reused = 0
        if kept is not None and kept[0] == model and kept[1] == block and expected:
            data = text.encode()[: len(expected) * block]
            shared = min(len(data), len(kept[2]))
            compared.add("whole" if data[:shared] == kept[2][:shared] else "search")
            while (
                reused < shared // block and data[: (reused + 1) * block] == kept[2][: (reused + 1) * block]
            ):
                reused += 1
        # Only the blocks past the longest shared run are hashed (plus the model's seed without one).
        assert len(calls) == len(expected) - reused + (1 if expected and not reused else 0)
        assert len(hasher._kept) <= 5
    assert compared == {"whole", "search"}


def test_a_reused_chain_is_not_the_callers_to_change() -> None:
    """The answer is a list of its own: a caller changing it does not change the next answer."""
    hasher = PrefixHasher()
    text = "s" * 300
    first = hasher.hashes("m", text, block_chars=64, max_blocks=256)
    first.append(0)
    first[0] = 1
    assert hasher.hashes("m", text, block_chars=64, max_blocks=256) == prefix_hashes(
        "m", text, block_chars=64, max_blocks=256
    )
