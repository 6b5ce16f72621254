"""The asynchronous JWKS cache: keys of one issuer, fetched over HTTPS and kept fresh.

Why not PyJWT's ``PyJWKClient``: it is synchronous (it would block the event loop), refetches on
every unknown ``kid`` and dropped its cache on a fetch error (CVE-2026-48524). Behaviour here:

- **Single flight**: at most one fetch in progress; concurrent callers wait for it.
- **TTL with background refresh**: the refresh task refetches ``ttl_s`` after the last success.
- **Failure backoff**: after a failed fetch the next attempt waits 0.5 s, doubling, capped at 2 s
  while no usable keys exist (so the gateway becomes ready within ~2 s of the issuer recovering)
  and at ``min(ttl_s, 30 s)`` while stale keys are still in use.
- **Unknown ``kid``**: triggers one refetch, at most once per ``unknown_kid_cooldown_s`` for the whole
  cache (so a flood of random kids costs at most one fetch per cooldown window); not when the set
  names none of its keys and has keys without ``kid`` for the token's algorithm, which may verify it
  (:meth:`KeySet.candidates <igw.security.jwk.KeySet.candidates>`).
- **Stale while error**: a failed refresh keeps the last good keys; they are used for at most
  ``max_stale_s`` after their fetch, then the cache fails closed (every token is refused, not ready).
- **Replacement on success**: a fetched set that parses to zero usable keys counts as a failure;
  otherwise it replaces the old one entirely (removed keys stop verifying - attack case J26).
  Such a failed fetch still drops the old keys it no longer lists, and those whose ``kid`` it
  reuses for other key material (:meth:`JwksCache._withdraw_unlisted`).
- **OIDC discovery** (optional): ``<issuer>/.well-known/openid-configuration`` is fetched, its
  ``issuer`` must equal the configured one exactly, and its ``jwks_uri`` (HTTPS) is used; if
  discovery fails the configured ``remoteJWKS.uri`` is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Sequence
from typing import Final

import aiohttp

from igw.errors import IgwSecurityError
from igw.redaction import redact_url
from igw.security.clock import Clock
from igw.security.fetch import FetchError, fetch_json, require_https
from igw.security.jwk import KeySet, VerificationKey, parse_jwks, same_keys, still_listed
from igw.security.metrics import SecurityMetrics
from igw.security.settings import JwksSettings

log = logging.getLogger("igw.security.jwks")

FIRST_RETRY_S: Final = 0.5
COLD_RETRY_CAP_S: Final = 2.0
STALE_RETRY_CAP_S: Final = 30.0
DISCOVERY_PATH: Final = "/.well-known/openid-configuration"


class JwksUnavailable(IgwSecurityError):
    """No usable keys: never fetched successfully, or the last good set is older than max stale."""


class JwksCache:
    def __init__(
        self,
        *,
        jwks_uri: str,
        issuer: str,
        settings: JwksSettings,
        algorithms: Sequence[str],
        oidc_discovery: bool = False,
        clock: Clock,
        rng: random.Random,
        ssl_context: ssl.SSLContext | None = None,
        metrics: SecurityMetrics | None = None,
    ) -> None:
        try:
            require_https(jwks_uri)
        except FetchError as exc:
            raise ValueError(f"spec.auth.jwt.provider.remoteJWKS.uri: {exc.reason}") from None
        self._configured_uri = jwks_uri
        self._issuer = issuer
        self._settings = settings
        self._algorithms = tuple(algorithms)  # ordered: binds keys published without alg (jwk.py)
        self._discovery = oidc_discovery
        self._clock = clock
        self._rng = rng
        self._ssl_context = ssl_context
        self._metrics = metrics
        self._session: aiohttp.ClientSession | None = None
        self._keys: KeySet | None = None
        self._fetched_at: float | None = None
        self.generation = 0
        """Increments whenever the usable key set changes (a fetch returning the same keys leaves it:
        :func:`~igw.security.jwk.same_keys`); verified-token caches key on it. A plain
        attribute, not a property: the verifier reads it for every authenticated request, and this
        module stays interpreted (a property is a Python call per read)."""
        self._inflight: asyncio.Task[None] | None = None
        self._waiters = 0
        """Callers of :meth:`refresh` waiting on :attr:`_inflight` (see :meth:`close`)."""
        self._closed = False
        """Set by :meth:`close`: a fetch finishing after it no longer sets the shared key gauge (the
        guard replacing this one owns it)."""
        self._failures = 0
        self._next_attempt_at = float("-inf")
        self._last_kid_refetch_at = float("-inf")
        self._refresher: asyncio.Task[None] | None = None
        self._crowded_warning: str | None = None
        """The last :meth:`_warn_if_crowded` line logged: repeated only when the set's shape changes."""
        self.fetch_count = 0
        """Fetch attempts so far (tests use it to bound refetches; the metric is jwks_fetch_total)."""
        self.last_error: str | None = None
        self._rotated_note = ""
        """Why the last failed fetch withdrew keys whose ``kid`` it reuses for other material (kids
        only, never key material), for :meth:`readiness_detail` while no key is left."""
        if metrics is not None:
            metrics.jwks_age.set_function(lambda: -1.0 if (age := self.age_s()) is None else age)
            metrics.jwks_ready.set_function(lambda: 1.0 if self.ready() else 0.0)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, *, background: bool = True) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=4, ttl_dns_cache=60),
                raise_for_status=False,
            )
        if background and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="igw-jwks-refresh")

    async def close(self) -> None:
        """Stop refreshing and close the HTTP session. A fetch that requests are waiting on (a new
        ``kid``, keys not loaded yet) is let finish (``fetchTimeout`` bounds it), so they are answered
        by its keys: a hot reload closes the replaced guard at once, and cancelling the fetch under
        them dropped their connections without an answer (before session s40). One nobody waits on
        (the background refresh's) is cancelled."""
        self._closed = True
        refresher, inflight = self._refresher, self._inflight
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
        if inflight is not None and not inflight.done():
            if self._waiters:
                await asyncio.wait({inflight})
            else:
                inflight.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await inflight
        self._refresher = self._inflight = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- state ---------------------------------------------------------------------------------

    def age_s(self) -> float | None:
        return None if self._fetched_at is None else self._clock() - self._fetched_at

    def usable_keys(self) -> KeySet | None:
        age = self.age_s()
        if self._keys is None or age is None or age > self._settings.max_stale_s:
            return None
        return self._keys

    def ready(self) -> bool:
        return self.usable_keys() is not None

    def usable_until(self) -> float:
        """The clock reading from which the current key set counts as too stale (``-inf`` before the
        first load). It only moves later between changes of :attr:`generation` (a refetch of the same
        keys), so a verified-token cache may bound an entry by it once, when storing, instead of
        asking :meth:`ready` on every hit (an entry bound by an earlier reading is re-verified
        sooner than needed, never later); an entry is then reused only while
        ``now < usable_until()``, while :meth:`ready` holds up to ``now == usable_until()`` (the
        cache is the stricter one at the boundary)."""
        if self._keys is None or self._fetched_at is None:
            return float("-inf")
        return self._fetched_at + self._settings.max_stale_s

    def readiness_detail(self) -> str:
        age = self.age_s()
        if self._keys is None:
            why = f": {self.last_error}" if self.last_error else ""
            if age is not None:
                # loaded once, then every key withdrawn (_withdraw_unlisted): not a cold start, and
                # an operator reading /readyz must not look for a network fault (before session s48)
                return (
                    "JWKS: the issuer no longer lists any key in use, none left (fail closed)"
                    f"{self._rotated_note}{why}"
                )
            return f"JWKS not loaded yet{why}"
        assert age is not None
        if age > self._settings.max_stale_s:
            return (
                f"JWKS is {age:.0f} s old, beyond max stale {self._settings.max_stale_s:.0f} s (fail closed)"
            )
        stale = " (stale: refresh failing)" if self.last_error else ""
        return f"JWKS: {len(self._keys)} keys, {age:.0f} s old{stale}"

    def load_document(self, document: object) -> None:
        """Install a JWKS document as if just fetched (a static JWKS, or keys for a benchmark).

        Raises ``ValueError`` when the document has no usable key.
        """
        keys = parse_jwks(document, allowed_algorithms=self._algorithms, max_keys=self._settings.max_keys)
        if not len(keys):
            raise ValueError("JWKS has no usable keys")
        self._install(keys)

    def _install(self, keys: KeySet) -> None:
        if self._keys is None or not same_keys(self._keys, keys):
            self.generation += 1  # an unchanged set keeps the verdicts cached against it
        self._keys = keys
        self._fetched_at = self._clock()
        self._failures = 0
        self._next_attempt_at = float("-inf")
        self.last_error = None
        self._rotated_note = ""
        if self._metrics is not None and not self._closed:
            self._metrics.jwks_keys.set(len(keys))
        self._warn_if_crowded(keys)

    def _warn_if_crowded(self, keys: KeySet) -> None:
        """Log, once per shape of key set, the algorithms whose tokens naming no key are refused
        (``kid_required``): more keys qualify than ``jwks.maxKeysPerToken``.

        Why: the refusal is by design (a signature check per key is a cost an unauthenticated caller
        chooses), but an issuer that stamps no ``kid`` and publishes more keys than the cap made every
        one of its tokens a 401 while nothing in the log said why (before session s41). Counts and
        algorithm names only; no key material."""
        cap = self._settings.max_keys_per_token
        crowded = keys.crowded(cap)
        if not crowded:
            self._crowded_warning = None
            return
        parts = []
        for alg, (every, without_kid) in crowded.items():
            refused = "a token without kid"
            if without_kid > cap:
                refused += f" or with a kid no key carries ({without_kid} keys have no kid)"
            parts.append(f"{alg}: {every} keys, {refused}")
        line = (
            f"JWKS of issuer {self._issuer}: more keys than jwks.maxKeysPerToken ({cap}) for "
            f"{'; '.join(parts)} is refused (kid_required) without a signature check; have the issuer "
            "stamp a kid that names its key, or raise spec.extensions.authorization.jwks.maxKeysPerToken"
        )
        if line != self._crowded_warning:
            self._crowded_warning = line
            log.warning("%s", line)

    # -- lookups -------------------------------------------------------------------------------

    async def candidates(self, *, kid: str | None, alg: str) -> tuple[VerificationKey, ...]:
        """Keys that may verify a token with ``kid``/``alg``; raises :class:`JwksUnavailable`."""
        keys = self.usable_keys()
        if keys is None:
            if self._fetching() is not None or self._clock() >= self._next_attempt_at:
                await self.refresh()
            keys = self.usable_keys()
            if keys is None:
                raise JwksUnavailable(self.readiness_detail())
        found = keys.candidates(kid=kid, alg=alg)
        if kid is None or kid in keys.by_kid or (found and not keys.by_kid):
            # A kid no key carries, answered by keys published without one, is not taken for a
            # rotation while the issuer names none of its keys (Envoy refetches in no such case).
            return found
        if self._fetching() is None:
            now = self._clock()
            if now - self._last_kid_refetch_at < self._settings.unknown_kid_cooldown_s:
                return found
            self._last_kid_refetch_at = now
        await self.refresh()
        keys = self.usable_keys()
        return () if keys is None else keys.candidates(kid=kid, alg=alg)

    # -- fetching ------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Fetch now (joining a fetch already in flight); never raises for issuer failures."""
        inflight = self._fetching()
        if inflight is None:
            inflight = self._inflight = asyncio.create_task(self._fetch_and_install(), name="igw-jwks-fetch")
            inflight.add_done_callback(self._clear_inflight)
        self._waiters += 1
        try:
            await asyncio.shield(inflight)
        finally:
            self._waiters -= 1

    def _fetching(self) -> asyncio.Task[None] | None:
        """The fetch in progress, if any. A finished one is none: its done callback clears
        :attr:`_inflight` only when the event loop next turns, and a caller running before that (a
        request handled in the same pass of the loop as the fetch's end, a burst of lookups that never
        suspends) joined the finished fetch instead of starting its own: an unknown ``kid`` then
        refetched nothing and did not start its cooldown, and every such lookup until the loop turned
        was refused without a refetch (before session s41)."""
        inflight = self._inflight
        return None if inflight is None or inflight.done() else inflight

    def _clear_inflight(self, task: asyncio.Task[None]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _fetch_and_install(self) -> None:
        if self._session is None:
            await self.start(background=False)
        assert self._session is not None
        self.fetch_count += 1
        try:
            uri = await self._jwks_uri(self._session)
            document = await fetch_json(
                self._session,
                uri,
                timeout_s=self._settings.fetch_timeout_s,
                max_bytes=self._settings.max_bytes,
                ssl_context=self._ssl_context,
            )
            try:
                keys = parse_jwks(
                    document, allowed_algorithms=self._algorithms, max_keys=self._settings.max_keys
                )
            except ValueError as exc:
                raise FetchError(str(exc)) from None
            if not len(keys):
                self._withdraw_unlisted(document)
                raise FetchError("JWKS has no usable keys")
        except FetchError as exc:
            self._on_failure(exc.reason)
            return
        except Exception as exc:
            # A bug (or a response shape nothing above foresaw) is still a failed fetch: logged
            # loudly, and retried with the same backoff. Escaping, it skipped that backoff, so every
            # request waiting for keys started another fetch (one per request, before session s39).
            log.exception("JWKS fetch from issuer %s crashed", self._issuer)
            self._on_failure(f"unexpected error: {type(exc).__name__}")
            return
        was_ready = self.ready()
        self._install(keys)
        if self._metrics is not None:
            self._metrics.jwks_fetch.labels(result="success").inc()
        if not was_ready:
            # The URI's user-info and query values masked: a JWKS URI may carry an API key or a
            # signature (?api_key=, ?sig=), and a handler without igw's redacting formatter
            # (an embedding application's) would print it whole.
            log.info("JWKS loaded from %s: %d usable keys", redact_url(uri), len(keys))

    def _withdraw_unlisted(self, document: object) -> None:
        """A fetched document without a usable key is a failure (the last good keys keep serving),
        but the keys it no longer lists are dropped now: an issuer withdrawing a compromised key
        beside keys we cannot use (``use: enc``, RSA under 2048 bits, an empty set) is obeyed at once,
        not after ``maxStale`` (before session s48). So is a key whose ``kid`` the document reuses for
        other material, usable or not: the issuer rotated it out (before session s49 it kept
        verifying). Dropping every key fails closed (not ready). The key set's age is kept;
        :attr:`generation` moves, so cached verdicts are re-verified."""
        current = self._keys
        if current is None:
            return
        kept, rotated = still_listed(current, document)
        if len(kept) == len(current):
            return
        # kids only (issuer-chosen names, repr-quoted), never the key material
        self._rotated_note = (
            f"; kid {', '.join(repr(kid) for kid in rotated)} now names different key material (rotated out)"
            if rotated
            else ""
        )
        log.warning(
            "JWKS of issuer %s no longer lists %d of the %d keys in use%s: they stop verifying now",
            self._issuer,
            len(current) - len(kept),
            len(current),
            self._rotated_note,
        )
        self._keys = kept if len(kept) else None
        self.generation += 1
        if self._metrics is not None and not self._closed:
            self._metrics.jwks_keys.set(len(kept))

    def _on_failure(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        cap = COLD_RETRY_CAP_S if self.usable_keys() is None else min(self._settings.ttl_s, STALE_RETRY_CAP_S)
        delay = min(cap, FIRST_RETRY_S * 2 ** (self._failures - 1))
        delay *= 0.8 + 0.4 * self._rng.random()
        self._next_attempt_at = self._clock() + delay
        if self._metrics is not None:
            self._metrics.jwks_fetch.labels(result="failure").inc()
        log.warning(
            "JWKS fetch from issuer %s failed (%s); %s; retry in %.1f s",
            self._issuer,
            reason,
            self.readiness_detail(),
            delay,
        )

    async def _jwks_uri(self, session: aiohttp.ClientSession) -> str:
        if not self._discovery:
            return self._configured_uri
        url = self._issuer.rstrip("/") + DISCOVERY_PATH
        try:
            meta = await fetch_json(
                session,
                url,
                timeout_s=self._settings.fetch_timeout_s,
                max_bytes=self._settings.max_bytes,
                ssl_context=self._ssl_context,
            )
            if not isinstance(meta, dict) or meta.get("issuer") != self._issuer:
                raise FetchError("discovery document issuer does not equal the configured issuer")
            uri = meta.get("jwks_uri")
            if not isinstance(uri, str):
                raise FetchError("discovery document has no jwks_uri")
            require_https(uri)
            return uri
        except FetchError as exc:
            log.warning("OIDC discovery at %s failed (%s); using remoteJWKS.uri", redact_url(url), exc.reason)
            return self._configured_uri

    # -- background refresh --------------------------------------------------------------------

    def _next_refresh_in(self) -> float:
        now = self._clock()
        if self._fetched_at is None or self._failures:
            return max(0.0, self._next_attempt_at - now)
        return max(0.0, self._fetched_at + self._settings.ttl_s - now)

    async def _refresh_loop(self) -> None:
        while True:
            delay = self._next_refresh_in()
            if delay > 0:
                # Sleep, then recompute: an on-demand fetch meanwhile may have moved the due time.
                await asyncio.sleep(delay)
                continue
            try:
                await self.refresh()
            except Exception:  # a bug must not kill the refresher; log it loudly and keep going
                log.exception("JWKS refresh crashed")
                await asyncio.sleep(COLD_RETRY_CAP_S)
