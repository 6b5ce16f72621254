from __future__ import annotations

import random

import pytest

from igw.bench.policies.cache_aware import CacheAwareConfig, CacheAwarePolicy
from igw.bench.policies.radix_tree import ApproximateRadixTree
from tests.bench.helpers import request, views

ALL = {"w1", "w2", "w3"}


def test_tree_matches_longest_prefix_and_splits_edges() -> None:
    tree = ApproximateRadixTree()
    tree.insert("hello world", "w1", now=1.0)
    tree.insert("hello there", "w2", now=2.0)
    m = tree.prefix_match("hello world again", allowed=ALL, now=3.0)
    assert (m.matched_chars, m.tenant) == (11, "w1")
    m = tree.prefix_match("hello thx", allowed=ALL, now=3.0)
    assert (m.matched_chars, m.tenant) == (8, "w2")  # partial edge "there" counts "th"
    # "hello " is shared: the deepest matched node holds both tenants, first recorded wins.
    m = tree.prefix_match("hello ", allowed=ALL, now=3.0)
    assert (m.matched_chars, m.tenant) == (6, "w1")
    assert tree.tenant_size("w1") == len("hello world")
    assert tree.tenant_size("w2") == len("hello there")


def test_tree_ignores_tenants_that_are_not_allowed() -> None:
    tree = ApproximateRadixTree()
    tree.insert("abcdef", "gone", now=0.0)
    tree.insert("abcxyz", "w1", now=0.0)
    m = tree.prefix_match("abcdef", allowed={"w1"}, now=1.0)
    assert (m.matched_chars, m.tenant) == (3, "w1")
    assert tree.prefix_match("zzz", allowed={"w1"}, now=1.0).tenant is None


def test_eviction_removes_least_recently_used_leaves_until_the_tenant_fits() -> None:
    tree = ApproximateRadixTree()
    tree.insert("aaaa1111", "w1", now=1.0)
    tree.insert("bbbb2222", "w1", now=2.0)
    tree.insert("cccc3333", "w1", now=3.0)
    tree.prefix_match("aaaa1111", allowed=ALL, now=4.0)  # refresh the oldest
    tree.evict_tenants_by_size(16)
    assert tree.tenant_size("w1") == 16
    assert tree.prefix_match("bbbb2222", allowed=ALL, now=5.0).tenant is None
    assert tree.prefix_match("aaaa1111", allowed=ALL, now=5.0).matched_chars == 8
    assert tree.prefix_match("cccc3333", allowed=ALL, now=5.0).matched_chars == 8


def test_eviction_of_one_tenant_keeps_shared_nodes_for_the_other() -> None:
    tree = ApproximateRadixTree()
    tree.insert("shared-prefix-A", "w1", now=1.0)
    tree.insert("shared-prefix-A", "w2", now=1.0)
    tree.evict_tenants_by_size(0)
    assert tree.tenant_size("w1") == 0
    assert tree.tenant_size("w2") == 0
    tree.insert("shared-prefix-A", "w2", now=2.0)
    tree.insert("shared-prefix-B", "w1", now=3.0)
    tree.evict_tenants_by_size(len("shared-prefix-A"))
    assert tree.prefix_match("shared-prefix-A", allowed={"w2"}, now=4.0).matched_chars == 15


def test_cache_misses_go_to_the_least_loaded_lowest_index_worker() -> None:
    policy = CacheAwarePolicy()
    eps = views(w1=0, w2=0, w3=0)
    # sglang-router's documented low-load behaviour: every distinct prompt lands on the first worker.
    picks = {policy.pick(request(f"distinct prompt {i:03d}" * 3), eps, now=0.0).endpoint for i in range(10)}
    assert picks == {"w1"}
    assert policy.pick(request("another one"), views(w1=3, w2=1, w3=1), now=0.0).endpoint == "w2"


def test_prefix_match_above_threshold_sticks_to_the_worker_that_saw_it() -> None:
    policy = CacheAwarePolicy()
    system = "You are a helpful assistant. " * 10
    assert policy.pick(request(system + "q1"), views(w1=5, w2=0, w3=9), now=0.0).endpoint == "w2"
    # Same prefix, w2 now busier than w1: the match (rate > 0.3) still wins while balanced.
    decision = policy.pick(request(system + "q2"), views(w1=0, w2=20, w3=9), now=1.0)
    assert decision.endpoint == "w2"
    assert decision.reason.startswith("prefix match")


def test_match_below_threshold_falls_back_to_least_loaded() -> None:
    policy = CacheAwarePolicy(config=CacheAwareConfig(cache_threshold=0.5))
    policy.pick(request("abcd" + "x" * 6), views(w1=5, w2=0), now=0.0)  # goes to w2
    decision = policy.pick(request("abcd" + "y" * 6), views(w1=0, w2=3), now=0.0)  # 4/10 = 0.4 match
    assert decision.endpoint == "w1"


def test_imbalance_overrides_the_prefix_match() -> None:
    cfg = CacheAwareConfig(balance_abs_threshold=4, balance_rel_threshold=1.5)
    policy = CacheAwarePolicy(config=cfg)
    text = "p" * 100
    policy.pick(request(text), views(w1=0, w2=1), now=0.0)  # w1
    # 10 - 5 = 5 > 4 and 10 > 1.5 * 5: imbalanced -> least loaded, and the text is recorded there.
    decision = policy.pick(request(text), views(w1=10, w2=5), now=0.0)
    assert decision.endpoint == "w2"
    assert policy.tree("m").tenant_size("w2") == 100
    # 10 - 6 = 4 is not > 4: balanced, the match wins.
    assert policy.pick(request(text), views(w1=10, w2=6), now=0.0).endpoint in {"w1", "w2"}
    assert policy.pick(request(text), views(w1=10, w2=6), now=0.0).reason.startswith("prefix match")


def test_trees_are_per_model_and_eviction_runs_on_the_interval() -> None:
    cfg = CacheAwareConfig(eviction_interval_s=10.0, max_tree_size=5)
    policy = CacheAwarePolicy(config=cfg)
    policy.pick(request("0123456789", model="a"), views(w1=0, w2=0), now=0.0)
    assert policy.tree("b").tenant_size("w1") == 0
    assert policy.tree("a").tenant_size("w1") == 10
    policy.pick(request("zz", model="a"), views(w1=1, w2=0), now=5.0)
    assert policy.tree("a").tenant_size("w1") == 10  # not yet due
    policy.pick(request("yy", model="a"), views(w1=1, w2=1), now=10.0)
    assert policy.tree("a").tenant_size("w1") <= 5


@pytest.mark.parametrize(
    "field_values",
    [
        {"cache_threshold": 1.5},
        {"balance_abs_threshold": -1},
        {"balance_rel_threshold": 0.5},
        {"eviction_interval_s": 0.0},
    ],
)
def test_config_rejects_out_of_range_values_naming_the_field(field_values: dict[str, float]) -> None:
    name = next(iter(field_values))
    with pytest.raises(ValueError, match=name.split("_")[0]):
        CacheAwareConfig(**field_values)  # type: ignore[arg-type]


def test_vllm_router_model_is_the_same_algorithm_with_its_own_defaults() -> None:
    import random

    from igw.bench.live_runner import DES_EQUIVALENT
    from igw.bench.policies.registry import POLICIES, PolicyContext, build_policy

    assert set(DES_EQUIVALENT.values()) <= set(POLICIES)
    policy = build_policy("vllm-cache-aware", PolicyContext(rng=random.Random(1)))
    assert isinstance(policy, CacheAwarePolicy)
    assert policy.name == "vllm-cache-aware"
    assert policy.config.eviction_interval_s == 120.0
    assert policy.config.max_tree_size == 33_554_432
    assert policy.config.cache_threshold == CacheAwareConfig().cache_threshold


def _scatter_free_memory(seed: int) -> None:
    """Free tree nodes in a shuffled order, so that nodes made next get addresses out of creation
    order (as in a long benchmark process, where earlier scenarios allocated and freed before)."""
    trees = []
    for i in range(256):
        tree = ApproximateRadixTree()
        tree.insert(f"{i:04d}", "w", now=0.0)
        trees.append(tree)
    random.Random(seed).shuffle(trees)
    while trees:
        trees.pop()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_eviction_ties_go_by_creation_order_not_by_object_address(seed: int) -> None:
    # Leaves used at the same instant: the oldest goes first, whatever the process allocated before.
    _scatter_free_memory(seed)
    tree = ApproximateRadixTree()
    texts = [f"{chr(ord('A') + i)}-prompt" for i in range(20)]
    for text in texts:
        tree.insert(text, "w1", now=1.0)
    tree.evict_tenants_by_size(5 * len(texts[0]))
    kept = [t for t in texts if tree.prefix_match(t, allowed={"w1"}, now=2.0).tenant == "w1"]
    assert kept == texts[-5:]
