"""What bounds the router's search of the clusters for a stored response it does not know
(``igw.global_router.server._search_refusal``, tier 1's rules of ``igw.gateway.response_search``).

Until session s45 every retrieval, deletion or cancel of an id the router replica did not know asked
every eligible cluster, each of whose gateways searched its own pods: an attacker looping made-up ids
(measured: 200 ids, 3 clusters) cost 3 cluster requests per client request, all 200 searches at
once; a client polling a gone id, 3 per poll. The clusters are tier-1 gateways in miniature on
loopback (``tests.global_router.test_stored_response_ids.Tier1``).
"""

from __future__ import annotations

import asyncio
import ssl

import orjson
import pytest
from aiohttp import web
from aiohttp.typedefs import Handler

from igw.gateway.response_ids import mint
from igw.gateway.response_search import ResponseSearches
from tests.global_router.test_stored_response_ids import Routed, Tier1, routed
from tests.security.helpers import JwksServer, ManualClock, TokenFactory, bearer


class Gated(Tier1):
    """A cluster whose answers wait for :attr:`gate` (searches held in flight)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    def app(self) -> web.Application:
        app = super().app()

        @web.middleware
        async def held(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.waiting += 1
            try:
                await self.gate.wait()
            finally:
                self.waiting -= 1
            return await handler(request)

        app.middlewares.append(held)
        return app


async def _get(r: Routed, tenant: str, response_id: str) -> tuple[int, dict[str, object], str]:
    """``tenant``'s retrieval of ``response_id``: status, the error object (if any), Retry-After."""
    headers = bearer(r.tokens.token(tenant=tenant, sub=tenant))
    async with r.http.get(f"{r.url}/v1/responses/{response_id}", headers=headers) as resp:
        body = orjson.loads(await resp.read())
        return resp.status, body.get("error") or {}, resp.headers.get("Retry-After", "")


def _asked(clusters: list[Gated], response_id: str) -> int:
    return sum(c.asked.count(f"GET {response_id}") for c in clusters)


async def _searched_past_slow_east_a(r: Routed, other: Gated, *, search_timeout_s: float) -> tuple[str, str]:
    """With the search bounded at ``search_timeout_s`` and cluster ``east-a`` slow to answer (silent,
    or its body stalled or trickling): an id stored at ``other`` is found there (200), and one stored
    nowhere answers 504 ``upstream_timeout`` naming ``east-a`` (which may store it: never a 404 saying
    it is gone). The two ids, found and nowhere."""
    r.router.search_timeout_s = search_timeout_s
    found, nowhere = mint("tenant:t"), mint("tenant:t")
    other.stored.add(found)
    async with asyncio.timeout(10):
        assert (await _get(r, "t", found))[0] == 200
        status, error, _ = await _get(r, "t", nowhere)
    assert (status, error["code"]) == (504, "upstream_timeout"), (status, error)
    assert "east-a" in str(error["message"])
    return found, nowhere


async def test_an_id_found_nowhere_is_not_searched_for_again_for_a_while(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A search every cluster answered 404 leaves the id (for that caller) answered 404 without
    asking any cluster for ``UNFOUND_TTL_S``; then it is searched again, and found, leaves the list.
    Before session s45 each poll of a gone id asked every cluster (3 requests per poll here)."""
    clusters = [Gated("east-a"), Gated("east-b"), Gated("east-c")]
    gone = mint("tenant:t")
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        unfound = r.router.metrics.searches_refused.labels("unfound")
        assert (await _get(r, "t", gone))[0] == 404  # the last cluster's own 404
        for _ in range(4):
            status, error, _ = await _get(r, "t", gone)
            assert (status, error["code"]) == (404, "response_not_found")
        assert _asked(clusters, gone) == 3  # the first poll's search only
        assert unfound._value.get() == 4
        clock.advance(r.router.searches.ttl_s)
        clusters[2].stored.add(gone)  # made since (a streamed response stored at its end)
        assert (await _get(r, "t", gone))[0] == 200
        assert _asked(clusters, gone) == 6
        r.router.responses.disown(gone, "east-c")  # forgotten (another replica's restart): searched
        assert (await _get(r, "t", gone))[0] == 200
        assert unfound._value.get() == 4


async def test_one_tenant_s_misses_do_not_answer_another_s_retrieval(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """The unfound list is per caller scope: the attacker's retrieval of the victim's id (answered 404
    by the cluster's gateway: not minted for the attacker) does not make the victim's own retrieval
    of it a 404 - keyed by the id alone, the attacker could hide any response it learnt the id of."""
    clusters = [Gated("east-a"), Gated("east-b")]
    victims = mint("tenant:victim")
    clusters[1].stored.add(victims)  # stored through another router replica
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        assert (await _get(r, "attacker", victims))[0] == 404
        assert (await _get(r, "attacker", victims))[0] == 404
        assert _asked(clusters, victims) == 2  # the attacker's second: from the list
        assert (await _get(r, "victim", victims))[0] == 200


async def test_searches_past_the_limit_are_refused_429_with_retry_after(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """At most ``searches.limit`` searches in flight per replica: a further one asks no cluster and is
    answered 429 ``response_searches_busy`` (OpenAI-shaped, ``Retry-After``), counted; the held
    searches end normally and free their places. Before session s45 any number ran at once (200 made-up
    ids sent together: every one searching every cluster)."""
    clusters = [Gated("east-a"), Gated("east-b")]
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        r.router.searches = ResponseSearches(limit=2)
        for c in clusters:
            c.gate.clear()
        held = [asyncio.create_task(_get(r, "t", mint("tenant:t"))) for _ in range(2)]
        for _ in range(500):
            if clusters[0].waiting == 2:
                break
            await asyncio.sleep(0.01)
        assert clusters[0].waiting == 2
        extra = mint("tenant:t")
        status, error, retry_after = await _get(r, "t", extra)
        assert status == 429
        assert (error["type"], error["code"]) == ("rate_limit_error", "response_searches_busy")
        assert retry_after in ("1", "2")
        assert _asked(clusters, extra) == 0
        assert r.router.metrics.searches_refused.labels("busy")._value.get() == 1
        for c in clusters:
            c.gate.set()
        assert [s for s, _, _ in await asyncio.gather(*held)] == [404, 404]
        assert r.router.searches.in_flight == 0
        assert (await _get(r, "t", extra))[0] == 404  # searched now
        assert _asked(clusters, extra) == 2


class Stalling(Gated):
    """A cluster whose gateway answers a retrieval's head at once, then stalls its body (``trickle_s``
    ``None``) or trickles it a byte every ``trickle_s`` seconds - never silent long."""

    def __init__(self, name: str, trickle_s: float | None = None) -> None:
        super().__init__(name)
        self.trickle_s = trickle_s

    def app(self) -> web.Application:
        app = super().app()

        @web.middleware
        async def stalls(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method != "GET":
                return await handler(request)
            self.asked.append(f"GET {request.match_info.get('response_id', '')}")
            resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "4096"})
            await resp.prepare(request)
            await resp.write(b'{"id": "')
            for _ in range(4000):
                if self.trickle_s is None:
                    await asyncio.sleep(3600)
                await resp.write(b"x")
                await asyncio.sleep(self.trickle_s or 0)
            return resp

        app.middlewares.insert(0, stalls)
        return app


@pytest.mark.parametrize("trickle_s", [None, 0.05])
async def test_a_cluster_stalling_its_answer_s_body_is_given_up_at_the_search_bound(
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
    trickle_s: float | None,
) -> None:
    """A cluster whose answer's head comes at once and whose body then stalls (or trickles a byte at a
    time) is given up at the search's bound, as a silent one is, and the search asks the next
    cluster: found there, its answer; else the stalling cluster's 504 ``upstream_timeout``, the id not
    listed as found nowhere. Until session s47 only the head was bounded by it: the body by
    ``requestTimeoutSeconds`` alone (600 s by default), a trickle by nothing (no answer within 10 s)."""
    stalling, other = Stalling("east-a", trickle_s), Gated("east-b")
    async with routed([stalling, other], jwks_server, tokens, clock, client_ssl) as r:
        found, nowhere = await _searched_past_slow_east_a(r, other, search_timeout_s=0.3)
        assert _asked([stalling], found) == _asked([other], nowhere) == 1
        assert nowhere not in r.router.searches._contexts  # not listed as found nowhere
        assert r.router.searches.in_flight == 0
