"""The approximate prefix index behind ``prefix-cache-scorer`` (GIE's approximate scheme).

No tokenizer: the prompt text is cut into fixed-size blocks of UTF-8 bytes (one byte per character
for ASCII, about 4 characters per token), and blocks are chained with xxhash64 so a block's hash
identifies the whole prefix up to it::

    h0 = xxh64(model)                         # prefixes never match across models
    hi = xxh64(block_i || le64(h_{i-1}))      # trailing partial block is ignored

The index remembers which endpoint was *sent* which hashes (optimistically, at pick time) in a
per-endpoint LRU whose capacity approximates that endpoint's KV cache in blocks, so that entries age
out roughly when the server would have evicted them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

import xxhash

from igw.scheduling.types import EndpointKey

DEFAULT_BLOCK_CHARS = 64
"""vLLM's default 16-token block x 4 characters per token."""
DEFAULT_MAX_BLOCKS = 256
DEFAULT_LRU_CAPACITY = 31_250
"""GIE's default: Llama-3-8B on an H100-80GB holds about 500K tokens = 31.25K 16-token blocks."""


def prefix_hashes(model: str, text: str, *, block_chars: int, max_blocks: int) -> list[int]:
    """Chained block hashes of ``text`` for ``model`` (at most ``max_blocks``)."""
    data = text.encode()
    n_blocks = min(len(data) // block_chars, max_blocks)
    h = xxhash.xxh64_intdigest(model.encode())
    out: list[int] = []
    append = out.append
    digest = xxhash.xxh64_intdigest
    for i in range(0, n_blocks * block_chars, block_chars):
        h = digest(data[i : i + block_chars] + h.to_bytes(8, "little"))
        append(h)
    return out


class PrefixIndex:
    """hash -> endpoints that were sent it, plus one LRU of hashes per endpoint."""

    def __init__(self) -> None:
        self._holders: dict[int, set[EndpointKey]] = {}
        self._lru: dict[EndpointKey, OrderedDict[int, None]] = {}

    def match(self, hashes: Sequence[int]) -> dict[EndpointKey, int]:
        """Longest-prefix match: blocks matched per endpoint, walking until a hash has no holder."""
        counts: dict[EndpointKey, int] = {}
        holders = self._holders
        for h in hashes:
            eps = holders.get(h)
            if not eps:
                break
            for ep in eps:
                counts[ep] = counts.get(ep, 0) + 1
        return counts

    def insert(self, endpoint: EndpointKey, hashes: Iterable[int], *, capacity: int) -> None:
        """Record that ``endpoint`` now (probably) caches ``hashes``; evict beyond ``capacity``."""
        lru = self._lru.get(endpoint)
        if lru is None:
            lru = self._lru[endpoint] = OrderedDict()
        holders = self._holders
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            eps = holders.get(h)
            if eps is None:
                holders[h] = {endpoint}
            else:
                eps.add(endpoint)
        while len(lru) > capacity:
            old, _ = lru.popitem(last=False)
            self._forget(old, endpoint)

    def remove_endpoint(self, endpoint: EndpointKey) -> None:
        lru = self._lru.pop(endpoint, None)
        if lru is None:
            return
        for h in lru:
            self._forget(h, endpoint)

    def size(self, endpoint: EndpointKey) -> int:
        lru = self._lru.get(endpoint)
        return 0 if lru is None else len(lru)

    def _forget(self, h: int, endpoint: EndpointKey) -> None:
        eps = self._holders.get(h)
        if eps is not None:
            eps.discard(endpoint)
            if not eps:
                del self._holders[h]
