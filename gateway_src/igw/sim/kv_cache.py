"""KV-cache block pool with automatic prefix caching (vLLM V1 ``BlockPool`` semantics, simplified).

Only blocks that carry a prefix hash need identity; every other block is interchangeable, so the pool
tracks *anonymous* free blocks as a count and cached blocks in a dict keyed by their chained hash.
A cached block whose reference count drops to zero stays in the cache ("cached-but-free") and is
evicted LRU when an allocation runs out of anonymous blocks - the behaviour that makes prefix-aware
routing pay off and makes ``kv_cache_usage_perc`` blind to cached prefixes (free includes them).

Simplification versus vLLM (documented in docs/simulator.md): allocation takes never-hashed free
blocks before evicting cached-free ones (vLLM pops one shared LRU queue), which retains slightly more
cache.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """Block accounting of one engine replica."""

    __slots__ = ("_evictable", "_refs", "free_anonymous", "num_blocks", "prefix_caching")

    def __init__(self, *, num_blocks: int, prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.prefix_caching = prefix_caching
        self.free_anonymous = num_blocks
        self._refs: dict[int, int] = {}
        """Reference count of every cached block (hash -> refs)."""
        self._evictable: OrderedDict[int, None] = OrderedDict()
        """Cached blocks with zero references, least recently freed first."""

    @property
    def num_free(self) -> int:
        """Blocks an allocation can use: anonymous free plus cached-but-free (evictable)."""
        return self.free_anonymous + len(self._evictable)

    @property
    def usage(self) -> float:
        """``1 - free/total`` with cached-free blocks counted as free, like vLLM's ``get_usage``."""
        if self.num_blocks == 0:
            return 0.0
        return 1.0 - self.num_free / self.num_blocks

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._refs

    def longest_cached_prefix(self, hashes: tuple[int, ...], *, max_blocks: int) -> int:
        """Number of leading blocks of ``hashes`` present in the cache (stops at the first miss)."""
        if not self.prefix_caching:
            return 0
        refs = self._refs
        n = 0
        limit = min(max_blocks, len(hashes))
        while n < limit and hashes[n] in refs:
            n += 1
        return n

    def acquire_cached(self, hashes: tuple[int, ...], count: int) -> None:
        """Reference the first ``count`` cached blocks of ``hashes`` (a cache hit "touches" them)."""
        refs = self._refs
        evictable = self._evictable
        for i in range(count):
            h = hashes[i]
            r = refs[h]
            if r == 0:
                del evictable[h]
            refs[h] = r + 1

    def allocate(self, count: int) -> bool:
        """Take ``count`` anonymous blocks, evicting LRU cached-free blocks if needed; False if impossible."""
        if count <= self.free_anonymous:
            self.free_anonymous -= count
            return True
        if count > self.num_free:
            return False
        shortfall = count - self.free_anonymous
        self.free_anonymous = 0
        refs = self._refs
        evictable = self._evictable
        for _ in range(shortfall):
            h, _none = evictable.popitem(last=False)
            del refs[h]
        return True

    def register_full_block(self, block_hash: int) -> bool:
        """Turn one of the caller's anonymous blocks into a cached block with ``block_hash``.

        Returns True when the caller now references a cached block instead of an anonymous one. When an
        identical block is already cached, the caller shares it and its anonymous block is released.
        """
        if not self.prefix_caching:
            return False
        refs = self._refs
        r = refs.get(block_hash)
        if r is None:
            refs[block_hash] = 1
            return True
        if r == 0:
            del self._evictable[block_hash]
        refs[block_hash] = r + 1
        self.free_anonymous += 1
        return True

    def release(self, cached: list[int], anonymous: int) -> None:
        """Free a request's blocks; cached ones join the LRU tail in reverse (last block evicted first)."""
        self.free_anonymous += anonymous
        refs = self._refs
        evictable = self._evictable
        for h in reversed(cached):
            r = refs[h] - 1
            refs[h] = r
            if r == 0:
                evictable[h] = None

    def reset_prefix_cache(self) -> None:
        """Drop every cached-but-free block (vLLM ``/reset_prefix_cache``)."""
        for h in list(self._evictable):
            del self._refs[h]
        self.free_anonymous += len(self._evictable)
        self._evictable.clear()
