"""Block pool: reference counts, cached-but-free blocks, LRU eviction in vLLM's order."""

from __future__ import annotations

import pytest

from igw.sim.kv_cache import BlockPool


def test_usage_counts_cached_free_blocks_as_free() -> None:
    pool = BlockPool(num_blocks=10)
    assert pool.allocate(3)
    for h in (1, 2, 3):
        assert pool.register_full_block(h)
    assert pool.usage == pytest.approx(0.3)
    pool.release([1, 2, 3], 0)
    assert pool.usage == 0.0
    assert pool.is_cached(1)
    assert pool.is_cached(3)


def test_eviction_is_lru_and_last_block_of_a_request_goes_first() -> None:
    pool = BlockPool(num_blocks=4)
    assert pool.allocate(2)
    pool.register_full_block(10)
    pool.register_full_block(11)
    pool.release([10, 11], 0)  # free queue: 11, 10 (reverse order)
    assert pool.allocate(2)
    pool.register_full_block(20)
    pool.register_full_block(21)
    pool.release([20, 21], 0)  # every block cached-free; queue: 11, 10, 21, 20
    assert pool.free_anonymous == 0
    assert pool.num_free == 4
    assert pool.allocate(1)  # evicts 11 (head)
    assert not pool.is_cached(11)
    assert pool.is_cached(10)
    assert pool.allocate(1)
    assert not pool.is_cached(10)
    assert pool.is_cached(21)
    assert pool.allocate(1)
    assert not pool.is_cached(21)
    assert pool.is_cached(20)


def test_hit_touches_blocks_out_of_the_free_queue() -> None:
    pool = BlockPool(num_blocks=2)
    assert pool.allocate(2)
    pool.register_full_block(1)
    pool.register_full_block(2)
    pool.release([1, 2], 0)
    assert pool.longest_cached_prefix((1, 2, 3), max_blocks=3) == 2
    pool.acquire_cached((1, 2), 2)
    assert not pool.allocate(1)  # both referenced: nothing evictable
    pool.release([1, 2], 0)
    assert pool.allocate(1)


def test_duplicate_block_is_shared_and_anonymous_block_returned() -> None:
    pool = BlockPool(num_blocks=4)
    assert pool.allocate(2)
    pool.register_full_block(7)
    pool.register_full_block(7)
    assert pool.num_free == 3
    pool.release([7, 7], 0)
    assert pool.num_free == 4
    assert pool.is_cached(7)


def test_prefix_lookup_stops_at_first_miss_and_can_be_disabled() -> None:
    pool = BlockPool(num_blocks=4)
    assert pool.allocate(2)
    pool.register_full_block(1)
    pool.register_full_block(3)
    assert pool.longest_cached_prefix((1, 2, 3), max_blocks=3) == 1
    off = BlockPool(num_blocks=4, prefix_caching=False)
    assert off.allocate(1)
    assert not off.register_full_block(1)
    assert off.longest_cached_prefix((1,), max_blocks=1) == 0


def test_reset_prefix_cache_frees_cached_blocks() -> None:
    pool = BlockPool(num_blocks=2)
    assert pool.allocate(1)
    pool.register_full_block(5)
    pool.release([5], 0)
    pool.reset_prefix_cache()
    assert not pool.is_cached(5)
    assert pool.free_anonymous == 2
