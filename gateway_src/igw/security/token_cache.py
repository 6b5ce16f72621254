"""A bounded cache of verified tokens, so a client reusing its token skips signature verification.

Keyed by a 128-bit BLAKE2b digest of the exact token bytes (memory per entry stays small whatever
the token size). An entry is reused only while all of these hold:

- the clock is before ``min(exp + skew, verified_at + max_age_s)``: never past the token's expiry;
- the JWKS key set it was verified against is still the current one (``generation``): a key
  rotation or removal re-verifies every token against the new keys (attack case J26);
- the JWKS is still usable (not beyond max stale): checked by the caller.

Only successful verifications are cached; failures always take the full path (they are cheap and
must stay visible in metrics). Eviction is least-recently-used.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from igw.gateway.guards import Principal


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    valid_until: float
    generation: int


class VerifiedTokenCache:
    def __init__(self, *, max_entries: int, max_age_s: float) -> None:
        self._max_entries = max_entries
        self._max_age_s = max_age_s
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

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
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.valid_until or entry.generation != generation:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
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
        self._entries[key] = _Entry(principal=principal, valid_until=valid_until, generation=generation)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
