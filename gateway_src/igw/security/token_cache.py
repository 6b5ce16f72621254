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
must stay visible in metrics). Eviction is least-recently-used.

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
from collections import OrderedDict
from typing import Final

from igw.gateway.guards import Principal

HOT_TOKENS: Final = 64
"""How many recently hit tokens are also kept by their exact string (emptied when full)."""


class _Entry:
    """A verified token's principal and the bounds of its reuse. A plain class with a written-out
    ``__init__`` (compiled: a native object built without a dataclass's generic machinery)."""

    __slots__ = ("generation", "principal", "valid_until")

    def __init__(self, principal: Principal, valid_until: float, generation: int) -> None:
        self.principal = principal
        self.valid_until = valid_until
        self.generation = generation


class VerifiedTokenCache:
    def __init__(self, *, max_entries: int, max_age_s: float) -> None:
        self._max_entries = max_entries
        self._max_age_s = max_age_s
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._hot: dict[str, _Entry] = {}

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
            del self._entries[key]
            self._hot.pop(token, None)
            return None
        self._entries.move_to_end(key)
        if hot is not entry:
            if hot is None and len(self._hot) >= HOT_TOKENS:
                self._hot.clear()
            self._hot[token] = entry
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
            replaced.valid_until = float("-inf")  # a hot copy of the old entry must not outlive it
        self._entries[key] = _Entry(principal, valid_until, generation)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            _, evicted = self._entries.popitem(last=False)
            evicted.valid_until = float("-inf")  # its hot copy (if any) is unusable from now on

    def clear(self) -> None:
        self._entries.clear()
        self._hot.clear()
