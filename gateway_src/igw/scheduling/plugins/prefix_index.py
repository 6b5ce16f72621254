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

import operator
import types
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import takewhile

import xxhash

from igw.scheduling.types import EndpointKey

DEFAULT_BLOCK_CHARS = 64
"""vLLM's default 16-token block x 4 characters per token."""
DEFAULT_MAX_BLOCKS = 256
DEFAULT_LRU_CAPACITY = 31_250
"""GIE's default: Llama-3-8B on an H100-80GB holds about 500K tokens = 31.25K 16-token blocks."""
HOLDER_KEYS_KEPT = 4096
"""Distinct holders values whose endpoints :class:`PrefixIndex` keeps for :meth:`PrefixIndex.match`
(a bound on memory; emptied when reached)."""
_held = partial(operator.is_not, None)
"""Whether a holders look-up found a holder (``takewhile``'s test in :meth:`PrefixIndex.match`)."""


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


HASHED_PREFIXES_KEPT = 256
"""Distinct first blocks whose last hashed prompt :class:`PrefixHasher` keeps (a bound on memory:
at most this many prompts' whole blocks, up to ``max_blocks`` each, 16 KB at the defaults; emptied
when reached)."""


class PrefixHasher:
    """:func:`prefix_hashes`, reusing the chain of the last prompt that began with the same block.

    Why: requests that share a prompt prefix (a system prompt, the earlier turns of a conversation)
    hash the same blocks again on every request, and the chain is deterministic: the hashes of the
    blocks a prompt shares with an earlier one (same model, block size and block bound) are that
    prompt's. Per first block the last prompt's bytes and hashes are kept; a new prompt finds how
    many of its leading blocks are byte-equal to them (one C-level comparison when all are, else a
    binary search of a few) and hashes only the rest. The chain does not depend on the block bound,
    so a kept chain serves any ``max_blocks``. The result is :func:`prefix_hashes`'s, hash for
    hash (a test compares them)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[bytes, tuple[str, int, bytes, list[int]]] = {}
        """First block -> (model, block size, whole blocks, their hashes) of the last prompt hashed
        that began with it."""

    def hashes(self, model: str, text: str, *, block_chars: int, max_blocks: int) -> list[int]:
        """``prefix_hashes(model, text, block_chars=block_chars, max_blocks=max_blocks)``."""
        data = text.encode()
        n_blocks = min(len(data) // block_chars, max_blocks)
        if n_blocks <= 0:
            return []
        end = n_blocks * block_chars
        first = data[:block_chars]
        kept = self._kept.get(first)
        done = 0
        out: list[int]
        if kept is not None and kept[0] == model and kept[1] == block_chars:
            kept_data, kept_hashes = kept[2], kept[3]
            shared = min(end, len(kept_data))
            if data[:shared] == kept_data[:shared]:
                done = shared // block_chars  # the usual case: every block the two have in common
            else:  # the largest count of equal leading blocks (the first is equal: the key)
                lo, hi = 1, shared // block_chars - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    cut = mid * block_chars
                    if data[:cut] == kept_data[:cut]:
                        lo = mid
                    else:
                        hi = mid - 1
                done = lo
            out = kept_hashes[:done]
            if done == n_blocks:
                return out
            h = out[-1]
        else:
            out = []
            h = xxhash.xxh64_intdigest(model.encode())
        append = out.append
        digest = xxhash.xxh64_intdigest
        for i in range(done * block_chars, end, block_chars):  # prefix_hashes's loop from ``done``
            h = digest(data[i : i + block_chars] + h.to_bytes(8, "little"))
            append(h)
        if len(self._kept) >= HASHED_PREFIXES_KEPT:
            self._kept.clear()
        self._kept[first] = (model, block_chars, data[:end], out.copy())
        return out


class PrefixIndex:
    """hash -> endpoints that were sent it, plus one LRU of hashes per endpoint.

    Built for memory: a full index holds one entry per KV block of every endpoint (tens of thousands
    each), so a per-entry object beyond the hash itself dominates the gateway's resident memory and
    its churn fragments the allocator. Each endpoint therefore gets a small integer *slot* (reused
    after the endpoint is removed) and the holders of a hash are one ``int`` in a single table:

    * ``v >= 0``: exactly one holder, slot ``v`` (the common case; CPython caches ints up to 256,
      so this costs nothing beyond the table entry for the first 257 slots);
    * ``v < 0``: two or more holders, the bitmask ``~v`` of their slots.

    No Python library offers an LRU with a shared reverse index, so this is written by hand; the
    per-endpoint LRU is the standard library's ``OrderedDict``.
    """

    __slots__ = ("_endpoints", "_free_slots", "_holder_keys", "_holders", "_lru", "_slots")

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}
        self._holder_keys: dict[int, tuple[EndpointKey, ...]] = {}
        """Holders value -> its endpoints, in slot order (what :meth:`match` reads per matched
        value: a shared prefix's blocks mostly have the same holders). Emptied whenever a slot
        changes hands, and when it reaches ``HOLDER_KEYS_KEPT`` values."""
        self._lru: dict[EndpointKey, OrderedDict[int, None]] = {}
        self._slots: dict[EndpointKey, int] = {}
        self._endpoints: list[EndpointKey | None] = []
        """Slot -> endpoint; ``None`` marks a free slot (also listed in ``_free_slots``)."""
        self._free_slots: list[int] = []

    def match(self, hashes: Sequence[int]) -> dict[EndpointKey, int]:
        """Longest-prefix match: blocks matched per endpoint, walking until a hash has no holder.

        The walk is one C-level pass (``takewhile`` over the holders' look-ups, stopping at the
        first hash nobody holds). A shared prefix's matched blocks usually all have one holders
        value: then the counts are that value's endpoints, each with the number of matched blocks,
        made in one call (what the general loop below gives, in the same order)."""
        matched: list[int]
        if NATIVE_WALK:
            matched = _held_values(self._holders, hashes)
        else:
            # ``_held`` stops the walk at the first ``None``: the list holds ints only.
            matched = list(takewhile(_held, map(self._holders.get, hashes)))  # type: ignore[arg-type]
        if not matched:
            return {}
        first = matched[0]
        if matched.count(first) == len(matched):  # one holders value (the usual case)
            keys = self._holder_keys.get(first)
            if keys is None:
                keys = self._keys_of(first)
            return dict.fromkeys(keys, len(matched))
        per_value: dict[int, int] = {}
        for v in matched:
            per_value[v] = per_value.get(v, 0) + 1
        counts: dict[EndpointKey, int] = {}
        kept = self._holder_keys
        for v, n in per_value.items():
            keys = kept.get(v)
            if keys is None:
                keys = self._keys_of(v)
            if not counts:
                # The first value's endpoints, each with ``n`` (what the loop below gives an empty
                # dict, in the same order), in one C-level call.
                counts = dict.fromkeys(keys, n)
                continue
            for ep in keys:
                counts[ep] = counts.get(ep, 0) + n
        return counts

    def _keys_of(self, v: int) -> tuple[EndpointKey, ...]:
        """The endpoints of holders value ``v`` in slot order (freed slots left out), kept in
        ``_holder_keys``."""
        endpoints = self._endpoints
        keys = tuple(
            [ep for slot in ((v,) if v >= 0 else _slots_of(v)) if (ep := endpoints[slot]) is not None]
        )
        kept = self._holder_keys
        if len(kept) >= HOLDER_KEYS_KEPT:
            kept.clear()
        kept[v] = keys
        return keys

    def insert(self, endpoint: EndpointKey, hashes: Iterable[int], *, capacity: int) -> list[int]:
        """Record that ``endpoint`` now (probably) caches ``hashes``; evict beyond ``capacity``.

        Returns the hashes ``endpoint`` did not hold before (what :meth:`forget` takes back when the
        request was never sent there)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            lru = self._lru[endpoint] = OrderedDict()
            self._slots[endpoint] = self._take_slot(endpoint)
        slot = self._slots[endpoint]
        holders = self._holders
        move_to_end = lru.move_to_end  # bound once: most hashes of a shared prefix are moved
        added: list[int] = []
        for h in hashes:
            if h in lru:
                move_to_end(h)
                continue
            lru[h] = None
            added.append(h)
            v = holders.get(h)
            holders[h] = slot if v is None else _with_slot(v, slot)
        while len(lru) > capacity:
            old, _ = lru.popitem(last=False)
            self._forget(old, slot)
        return added

    def forget(self, endpoint: EndpointKey, hashes: Iterable[int]) -> None:
        """Take ``hashes`` out of ``endpoint``'s entries (those it still holds): an insert whose
        request never reached it. An endpoint left with no entry leaves the index (its slot is
        freed, and it no longer counts among the holders sharing a block budget)."""
        lru = self._lru.get(endpoint)
        if lru is None:
            return
        slot = self._slots[endpoint]
        for h in hashes:
            if h in lru:
                del lru[h]
                self._forget(h, slot)
        if not lru:
            self.remove_endpoint(endpoint)

    def trim(self, capacity: int) -> int:
        """Evict every endpoint's oldest entries beyond ``capacity``; how many were evicted."""
        evicted = 0
        for endpoint, lru in self._lru.items():
            excess = len(lru) - capacity
            if excess <= 0:
                continue
            slot = self._slots[endpoint]
            for _ in range(excess):
                old, _ = lru.popitem(last=False)
                self._forget(old, slot)
            evicted += excess
        return evicted

    def remove_endpoint(self, endpoint: EndpointKey) -> None:
        lru = self._lru.pop(endpoint, None)
        if lru is None:
            return
        slot = self._slots.pop(endpoint)
        for h in lru:
            self._forget(h, slot)
        self._endpoints[slot] = None
        self._free_slots.append(slot)
        self._holder_keys.clear()

    def endpoint_count(self) -> int:
        """Endpoints with at least one entry."""
        return len(self._lru)

    def size(self, endpoint: EndpointKey) -> int:
        lru = self._lru.get(endpoint)
        return 0 if lru is None else len(lru)

    def holders(self, h: int) -> frozenset[EndpointKey]:
        """The endpoints recorded as holding ``h`` (for tests and diagnostics, not the hot path)."""
        v = self._holders.get(h)
        if v is None:
            return frozenset()
        return frozenset(ep for slot in _slots_of(v) if (ep := self._endpoints[slot]) is not None)

    def entries(self) -> int:
        """Distinct hashes held by at least one endpoint."""
        return len(self._holders)

    def _take_slot(self, endpoint: EndpointKey) -> int:
        self._holder_keys.clear()  # a slot changes hands (or is new): values may name other endpoints
        if self._free_slots:
            slot = self._free_slots.pop()
            self._endpoints[slot] = endpoint
        else:
            slot = len(self._endpoints)
            self._endpoints.append(endpoint)
        return slot

    def _forget(self, h: int, slot: int) -> None:
        v = self._holders.get(h)
        if v is None:
            return
        remaining = _without_slot(v, slot)
        if remaining is None:
            del self._holders[h]
        else:
            self._holders[h] = remaining


def _held_values(holders: dict[int, int], hashes: Sequence[int]) -> list[int]:
    """The holders values of ``hashes``' leading run of held hashes (up to the first hash nobody
    holds): what :meth:`PrefixIndex.match`'s ``takewhile`` walk gives, as a loop the mypyc build
    compiles to native code (:data:`NATIVE_WALK`), where the walk cost a C-level call of the
    ``partial`` test and of the bound ``get`` per hash."""
    out: list[int] = []
    for h in hashes:
        v = holders.get(h)
        if v is None:
            break
        out.append(v)
    return out


NATIVE_WALK = not isinstance(_held_values, types.FunctionType)
"""Whether this module runs compiled: then :meth:`PrefixIndex.match` walks the hashes by
:func:`_held_values`; interpreted, the ``takewhile`` walk, the faster there."""


def _slots_of(v: int) -> list[int]:
    """The slots encoded in a holders value (see :class:`PrefixIndex`)."""
    if v >= 0:
        return [v]
    mask = ~v
    slots = []
    while mask:
        low = mask & -mask
        slots.append(low.bit_length() - 1)
        mask ^= low
    return slots


def _with_slot(v: int, slot: int) -> int:
    """A holders value with ``slot`` added."""
    mask = (1 << v if v >= 0 else ~v) | (1 << slot)
    return slot if mask == 1 << slot else ~mask


def _without_slot(v: int, slot: int) -> int | None:
    """A holders value with ``slot`` removed; ``None`` when no holder is left."""
    mask = (1 << v if v >= 0 else ~v) & ~(1 << slot)
    if not mask:
        return None
    if mask & (mask - 1):
        return ~mask
    return mask.bit_length() - 1
