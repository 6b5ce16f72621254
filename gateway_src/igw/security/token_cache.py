"""A bounded cache of verified tokens, so a client reusing its token skips signature verification.

Keyed by a 128-bit BLAKE2b digest of the exact token bytes (memory per entry stays small whatever
the token size). An entry is reused only while all of these hold:

- the clock is before ``min(exp + skew, verified_at + max_age_s)``: never past the token's expiry;
- the JWKS key set it was verified against is still the current one (``generation``): a key
  rotation or removal re-verifies every token against the new keys (attack case J26);
- the JWKS is still usable (not beyond max stale): the caller folds the key set's
  ``usable_until`` into ``expires_at`` when storing (it changes only with ``generation``);
- it has not been evicted.

Only successful verifications are cached; failures always take the full path (they are cheap and
must stay visible in metrics).

**Eviction** (session s49): when full, two distinct entries are drawn at random and the one unusable
(expired, or verified against another key set) or else the one used least recently is dropped
(sampled LRU, as Redis's). Pure LRU thrashed when more distinct tokens than ``maxEntries`` were used
in turn: every token was evicted just before its next use, so every look-up missed (``maxEntries + 1``
tokens cycled: test_token_cache.py); the random draw keeps most of them. A hot
token's entry counts as used now (:data:`IN_USE`), so it is dropped only when the other entry drawn
is hot too (before, a hit on the hot path did not refresh its recency, so a token sent on every
request was evicted after ``maxEntries`` other insertions and re-verified).

**Hot tokens.** Digesting a token costs more than the rest of a hit (≈ 1.1 µs for a 600-byte RS256
token, measured in docs/gateway.md round 15), and a client sends the same token on every request.
So the entries of the :data:`HOT_TOKENS` most recently hit tokens are also reachable by the exact
token string (one string hash and compare, ≈ 0.2 µs). It is the same entry object, checked against
the same bounds, so it never answers what the digest-keyed table would not: an evicted entry is
marked unusable, and any failed check falls back to the digest path, which drops it. Its memory is
bounded by ``HOT_TOKENS × maxTokenBytes`` (512 KiB at the default 8 KiB).

Compiled by the mypyc build (:data:`igw.compiled.COMPILED_MODULES`): a hit runs on every
authenticated request.
"""

from __future__ import annotations

import hashlib
import random
from typing import Final

from igw.gateway.guards import Principal

HOT_TOKENS: Final = 64
"""How many recently hit tokens are also kept by their exact string (emptied when full)."""

IN_USE: Final = float("inf")
"""The ``used_at`` of a hot token's entry: a hit on the hot path writes nothing (it costs what it did
before sampled eviction), so a hot entry counts as used now until the hot tokens are emptied, which
stamps each with that moment."""


class _Entry:
    """A verified token's principal and the bounds of its reuse, its last use (the clock reading),
    and its place in :attr:`VerifiedTokenCache._keys` (for a random draw). A plain class with a
    written-out ``__init__`` (compiled: a native object built without a dataclass's generic machinery)."""

    __slots__ = ("generation", "index", "key", "principal", "used_at", "valid_until")

    def __init__(
        self, principal: Principal, valid_until: float, generation: int, key: bytes, used_at: float
    ) -> None:
        self.principal = principal
        self.valid_until = valid_until
        self.generation = generation
        self.key = key
        self.used_at = used_at
        self.index = 0


class VerifiedTokenCache:
    def __init__(self, *, max_entries: int, max_age_s: float, rng: random.Random | None = None) -> None:
        self._max_entries = max_entries
        self._max_age_s = max_age_s
        self._entries: dict[bytes, _Entry] = {}
        self._keys: list[_Entry] = []
        """Every entry, in no order: :meth:`_evict` draws from it by index."""
        self._hot: dict[str, _Entry] = {}
        self._rng = random.Random() if rng is None else rng

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, token: str, *, now: float, generation: int) -> Principal | None:
        if not self._max_entries:
            return None
        hot = self._hot.get(token)
        if hot is not None and now < hot.valid_until and hot.generation == generation:
            return hot.principal
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is None:
            if hot is not None:
                del self._hot[token]
            return None
        if now >= entry.valid_until or entry.generation != generation:
            self._remove(entry)
            self._hot.pop(token, None)
            return None
        if hot is not entry:
            if hot is None and len(self._hot) >= HOT_TOKENS:
                for cooled in self._hot.values():
                    cooled.used_at = now  # used within the last HOT_TOKENS new hot tokens
                self._hot.clear()
            self._hot[token] = entry
        entry.used_at = IN_USE
        return entry.principal

    def put(
        self, token: str, principal: Principal, *, now: float, expires_at: float, generation: int
    ) -> None:
        if not self._max_entries:
            return
        valid_until = min(expires_at, now + self._max_age_s)
        if valid_until <= now:
            return
        key = self._key(token)
        replaced = self._entries.get(key)
        if replaced is not None:
            self._remove(replaced)
        while len(self._entries) >= self._max_entries:
            self._evict(now=now, generation=generation)
        entry = _Entry(principal, valid_until, generation, key, now)
        entry.index = len(self._keys)
        self._keys.append(entry)
        self._entries[key] = entry

    def _evict(self, *, now: float, generation: int) -> None:
        """Drop one of two distinct entries drawn at random: one no longer usable, else the one used
        least recently (the first drawn on a tie)."""
        keys = self._keys
        count = len(keys)
        first = keys[int(self._rng.random() * count)]
        victim = first
        if count > 1:
            other = int(self._rng.random() * (count - 1))
            second = keys[other + 1 if other >= first.index else other]
            first_usable = now < first.valid_until and first.generation == generation
            second_usable = now < second.valid_until and second.generation == generation
            if first_usable and (not second_usable or second.used_at < first.used_at):
                victim = second
        self._remove(victim)

    def _remove(self, entry: _Entry) -> None:
        """Drop ``entry`` from both tables (the last entry takes its place in :attr:`_keys`); marked
        unusable, so a hot copy of it answers nothing from now on."""
        entry.valid_until = float("-inf")
        del self._entries[entry.key]
        last = self._keys.pop()
        if last is not entry:
            last.index = entry.index
            self._keys[entry.index] = last

    def clear(self) -> None:
        self._entries.clear()
        self._keys.clear()
        self._hot.clear()
