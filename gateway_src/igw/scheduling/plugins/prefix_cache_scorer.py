"""``prefix-cache-scorer``: prefer endpoints that probably hold the request's prompt prefix in KV cache.

Formula (GIE approximate scorer): ``matched_blocks / total_blocks`` of the request, where matched is
the longest chain of the request's block hashes this gateway previously sent to the endpoint (see
:mod:`.prefix_index`); a prompt shorter than one block scores 0 everywhere. Category: affinity.
Signal: none required. Block size and LRU size are *auto-tuned* from ``cache_config_info``
(``block_size`` x 4 characters; ``num_gpu_blocks`` per endpoint) when the engine publishes it.

Parameters (all optional), under each name GIE has used for them: the block size as
``blockSizeTokens`` (tokens, GIE v1.4+; x 4 characters), ``blockSize`` (characters, GIE v1.1-v1.3) or
``hashBlockSize`` (characters, GIE v1.0), default 64 characters, the first of these given wins;
``autoTune`` (default true); ``maxPrefixBlocksToMatch`` (default 256), or ``maxPrefixTokensToMatch``
(GIE v1.5; when above 0 it wins: that many tokens over the block size in use); ``lruCapacityPerServer``
(default 31250). Until session s39 only ``blockSize`` was read: a GIE v1.4+ file's
``blockSizeTokens`` was ignored with a warning and the block size stayed 64 characters.

Publishes (declares it ``produces``) to the cycle state: ``prefix.hashes`` (list of ints) and
``prefix.any_hit`` (bool), read by ``no-hit-lru-scorer``, and ``prefix.match`` (endpoint -> matched
share of the prefix), read by ``backlog-ttft-scorer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.columns import Positions
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.prefix_index import (
    DEFAULT_BLOCK_CHARS,
    DEFAULT_LRU_CAPACITY,
    DEFAULT_MAX_BLOCKS,
    PrefixHasher,
    PrefixIndex,
)
from igw.scheduling.types import EndpointKey, EndpointView

TYPE = "prefix-cache-scorer"
CHARS_PER_TOKEN = 4
STATE_HASHES = "prefix.hashes"
STATE_ANY_HIT = "prefix.any_hit"
STATE_MATCH = "prefix.match"
"""Endpoint key -> share of this request's prefix blocks the index places there (0..1)."""
RECENT_PICKS_KEPT = 64
"""Picks whose insert :meth:`PrefixCacheScorer.on_not_sent` can still take back (the latest ones; a
bound on memory). A pick is given back within a loop turn or two of being made."""
_INT_ONLY: frozenset[type] = frozenset({int})
"""The one type a learned note's block hash may have."""


def _salted(model: str, salt: str) -> str:
    """The key a salted request's block hashes chain from: the engine keeps blocks of different
    salts apart (``RoutingRequest.cache_salt``), so the index must not match them."""
    return model + "\x00" + salt


class PrefixCacheScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    produces = frozenset({STATE_HASHES, STATE_ANY_HIT, STATE_MATCH})

    def __init__(
        self,
        *,
        name: str = TYPE,
        block_chars: int = DEFAULT_BLOCK_CHARS,
        auto_tune: bool = True,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        lru_capacity: int = DEFAULT_LRU_CAPACITY,
        max_tokens: int = 0,
    ) -> None:
        self.name = name
        self.block_chars = block_chars
        self.auto_tune = auto_tune
        self.max_blocks = max_blocks
        self.max_tokens = max_tokens
        """``maxPrefixTokensToMatch``: when above 0, the blocks matched are at most this many tokens'
        worth of the block size in use (auto-tuned or not), instead of ``max_blocks``."""
        self.lru_capacity = lru_capacity
        self.index = PrefixIndex()
        self.block_budget: int | None = None
        """The blocks the whole index may hold (``bound_index``; ``None``: each endpoint's own
        capacity). Shared equally by the endpoints it holds: an endpoint's LRU is cut to its share at
        its next insert."""
        self._hasher = PrefixHasher()
        """The request's block hashes, reusing the blocks a recent prompt shared (see its docstring)."""
        self._positions = Positions()
        self._recent: dict[str, tuple[EndpointKey, list[int], list[int], int]] = {}
        """Request id -> (endpoint, the pick's hashes, those the endpoint did not hold before, the
        endpoint's insert count after it) of the latest picks (at most ``RECENT_PICKS_KEPT``): what
        :meth:`on_not_sent` takes back."""
        self._inserts: dict[EndpointKey, int] = {}
        """Inserts per endpoint (own picks and learned ones): an insert after a pick's may have
        touched the blocks it added, so the pick is then no longer taken back."""

    def _block_chars(self, endpoints: Sequence[EndpointView]) -> int:
        if self.auto_tune:
            for e in endpoints:
                if e.metrics is not None and e.metrics.block_size:
                    return e.metrics.block_size * CHARS_PER_TOKEN
        return self.block_chars

    def _max_blocks(self, block_chars: int) -> int:
        """Most blocks hashed and matched for a request cut into ``block_chars``-character blocks."""
        if self.max_tokens > 0:
            return max(1, self.max_tokens * CHARS_PER_TOKEN // block_chars)
        return self.max_blocks

    def _hashes(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[int]:
        hashes: list[int] | None = ctx.state.get(STATE_HASHES)
        if hashes is None:
            req = ctx.request
            block_chars = self._block_chars(endpoints)
            hashes = self._hasher.hashes(
                req.model if req.cache_salt is None else _salted(req.model, req.cache_salt),
                req.prefix_text,
                block_chars=block_chars,
                max_blocks=self._max_blocks(block_chars),
            )
            ctx.state[STATE_HASHES] = hashes
        return hashes

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        state = ctx.state
        hashes: list[int] | None = state.get(STATE_HASHES)
        if hashes is None:  # _hashes, written out (this scorer is usually the first to hash)
            req = ctx.request
            block_chars = self._block_chars(endpoints)
            hashes = state[STATE_HASHES] = self._hasher.hashes(
                req.model if req.cache_salt is None else _salted(req.model, req.cache_salt),
                req.prefix_text,
                block_chars=block_chars,
                max_blocks=self._max_blocks(block_chars),
            )
        if not hashes:
            ctx.state[STATE_ANY_HIT] = False
            return UnitScores([0.0] * len(endpoints))
        counts = self.index.match(hashes)
        if not counts:
            ctx.state[STATE_ANY_HIT] = False
            return UnitScores([0.0] * len(endpoints))
        total = len(hashes)
        keys = ctx.columns(endpoints).keys
        index = self._positions.of(keys)
        if index is None:  # a key listed twice: score every candidate by its key
            get = counts.get
            # A matched chain is at most as long as the request's: every score is within [0, 1].
            scores = UnitScores([get(k, 0) / total for k in keys])
            ctx.state[STATE_ANY_HIT] = any(scores)
            ctx.state[STATE_MATCH] = {k: s for k, s in zip(keys, scores, strict=True) if s}
            return scores
        # Usually few endpoints hold the prefix: zeros everywhere, then their shares (each count is
        # at least 1, so a matched endpoint's score is never 0); the match map in candidate order.
        scores = UnitScores([0.0] * len(keys))
        matched = [i for k in counts if (i := index.get(k)) is not None]
        matched.sort()
        for i in matched:
            scores[i] = counts[keys[i]] / total
        ctx.state[STATE_ANY_HIT] = bool(matched)
        ctx.state[STATE_MATCH] = {keys[i]: scores[i] for i in matched}
        return scores

    def capacity_for(self, endpoint: EndpointView) -> int:
        m = endpoint.metrics
        if self.auto_tune and m is not None and m.num_gpu_blocks:
            return m.num_gpu_blocks
        return self.lru_capacity

    def bound_index(self, blocks: int | None) -> None:
        """Hold at most ``blocks`` in the index (``None``: no bound), shared equally by the endpoints
        it holds; what a tighter bound leaves over is evicted now, not at each endpoint's next pick."""
        self.block_budget = blocks
        self._trim_to_budget()

    def _trim_to_budget(self) -> None:
        """Cut every endpoint to its equal share of the budget: called when the budget is set and
        when an endpoint joins the index, so that the index keeps to the bound between picks too
        (an endpoint that is picked rarely kept its larger, older share until its next pick)."""
        budget = self.block_budget
        holders = self.index.endpoint_count()
        if budget is not None and holders:
            self.index.trim(max(1, budget // holders))

    def _insert(self, endpoint: EndpointKey, hashes: list[int], capacity: int) -> list[int]:
        """Insert within the budget; an endpoint new to the index shrinks the others' shares now.
        Returns the hashes ``endpoint`` did not hold before."""
        joins = self.block_budget is not None and self.index.size(endpoint) == 0
        added = self.index.insert(endpoint, hashes, capacity=self._within_budget(capacity, endpoint))
        self._inserts[endpoint] = self._inserts.get(endpoint, 0) + 1
        if joins:
            self._trim_to_budget()
        return added

    def _within_budget(self, capacity: int, endpoint: EndpointKey) -> int:
        """``capacity``, or ``endpoint``'s equal share of :attr:`block_budget` when smaller (counting
        ``endpoint`` among the index's endpoints when it is not yet)."""
        budget = self.block_budget
        if budget is None:
            return capacity
        holders = self.index.endpoint_count() + (1 if self.index.size(endpoint) == 0 else 0)
        return max(1, min(capacity, budget // holders))

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        hashes: list[int] | None = ctx.state.get(STATE_HASHES)  # made by score, usually
        if hashes is None:
            hashes = self._hashes(ctx, (endpoint,))
        if hashes:
            self._remember(ctx.request.request_id, endpoint, hashes)

    def _remember(self, request_id: str, endpoint: EndpointView, hashes: list[int]) -> None:
        """Insert a pick's ``hashes`` at ``endpoint`` and keep what :meth:`on_not_sent` needs."""
        key = endpoint.key
        added = self._insert(key, hashes, self.capacity_for(endpoint))
        recent = self._recent
        if len(recent) >= RECENT_PICKS_KEPT and request_id not in recent:
            del recent[next(iter(recent))]  # the oldest pick: given back by now, or sent
        recent[request_id] = (key, hashes, added, self._inserts[key])

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Take back the blocks the pick of ``request_id`` added at ``endpoint`` (the pod never got
        the prompt), and with ``sent_to`` insert the pick there (the pod that did).

        Only while no insert at ``endpoint`` followed the pick's (a later request sent there may have
        brought the same blocks): then the pick's blocks stay, as before session s41 every given-back
        pick's did. Blocks the pick's insert evicted from a full LRU are not restored."""
        kept = self._recent.pop(request_id, None)
        if kept is None or kept[0] != endpoint:
            return False
        _, hashes, added, inserts = kept
        if self._inserts.get(endpoint) != inserts:
            return False
        if added:
            self.index.forget(endpoint, added)
        if sent_to is not None:
            self._remember(request_id, sent_to, hashes)
        return True

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """The pick's block hashes and the pod's LRU capacity (``SharesPicks``): enough for another
        worker's index to place the same prefix on the same pod; the prompt text stays here."""
        hashes = self._hashes(ctx, (endpoint,))
        if not hashes:
            return None
        return {"h": hashes, "c": self.capacity_for(endpoint)}

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Insert another worker's pick into this index, as :meth:`on_picked` does for our own."""
        if not isinstance(note, dict):
            raise ValueError(f"{self.name}: a pick note is an object (got {type(note).__name__})")
        hashes, capacity = note.get("h"), note.get("c")
        # Exactly int (not bool), checked in C: {int} >= the set of the hashes' types.
        if not isinstance(hashes, list) or not _INT_ONLY.issuperset(map(type, hashes)):
            raise ValueError(f"{self.name}: pick note field 'h' must be a list of block hashes")
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"{self.name}: pick note field 'c' must be a positive integer")
        # a peer worker runs this configuration: its chain is at most max_blocks long, or with
        # maxPrefixTokensToMatch at most that many tokens of blocks of one character or more
        limit = self.max_tokens * CHARS_PER_TOKEN if self.max_tokens > 0 else self.max_blocks
        self._insert(endpoint, hashes[:limit], capacity)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self.index.remove_endpoint(key)
            self._inserts.pop(key, None)
        gone = set(keys)
        for request_id in [r for r, kept in self._recent.items() if kept[0] in gone]:
            del self._recent[request_id]  # its endpoint's insert count starts again if it comes back


def factory(name: str, params: Mapping[str, Any], path: str) -> PrefixCacheScorer:
    r = ParamReader(params, path=path)
    # each name is read (so none is reported unknown); 0: not given, or invalid (reported by the
    # reader); the newest name given wins
    block_tokens = r.integer("blockSizeTokens", 0, minimum=1)
    block_chars = r.integer("blockSize", 0, minimum=1)
    legacy_chars = r.integer("hashBlockSize", 0, minimum=1)
    plugin = PrefixCacheScorer(
        name=name,
        block_chars=block_tokens * CHARS_PER_TOKEN or block_chars or legacy_chars or DEFAULT_BLOCK_CHARS,
        auto_tune=r.boolean("autoTune", True),
        max_blocks=r.integer("maxPrefixBlocksToMatch", DEFAULT_MAX_BLOCKS, minimum=1),
        lru_capacity=r.integer("lruCapacityPerServer", DEFAULT_LRU_CAPACITY, minimum=1),
        max_tokens=r.integer("maxPrefixTokensToMatch", 0, minimum=0),
    )
    r.finish()
    return plugin
