"""The router's searches for a stored response it does not know, past what session s45 bounded
(``tests.global_router.test_stored_search_bounds``): a continuation's search, each caller scope's share
of the search places, and a frozen cluster's hold on one (``igw.global_router.server._forward_stored``).

Before session s46 (clusters on loopback: tier-1 gateways in miniature) a continuation
naming an unknown id asked every cluster on every request (3 cluster requests each, no list, no cap);
one tenant's 16 held searches took all 16 places, another tenant's retrieval then 429; a cluster that
accepts the connection and never answers held a search's place for ``requestTimeoutSeconds``
(600 s by default), then the search stopped at its 504 without asking the others.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from igw.gateway.response_ids import mint, minted_for
from igw.global_router.config import ClusterSpec
from tests.global_router.support import MODEL
from tests.global_router.test_stored_response_ids import Routed, routed
from tests.global_router.test_stored_search_bounds import Gated, _asked, _get, _searched_past_slow_east_a
from tests.security.helpers import JwksServer, ManualClock, TokenFactory, bearer


class Continuing(Gated):
    """A cluster whose gateway answers a continuation of a response it does not store 404."""

    def app(self) -> web.Application:
        app = super().app()

        @web.middleware
        async def continues(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method == "POST":
                previous = orjson.loads(await request.read()).get("previous_response_id")
                if previous is not None:
                    self.asked.append(f"CONTINUE {previous}")
                    scope = "tenant:" + request.headers.get("x-igw-tenant", "")
                    if previous not in self.stored or not minted_for(previous, scope):
                        message = f"previous response {previous!r} not found"
                        return web.json_response({"error": {"message": message}}, status=404)
            return await handler(request)

        app.middlewares.append(continues)
        return app


async def _continue(r: Routed, tenant: str, previous: str) -> tuple[int, dict[str, object]]:
    """``tenant``'s continuation of ``previous``: status and the error object (if any)."""
    headers = bearer(r.tokens.token(tenant=tenant, sub=tenant))
    body = {"model": MODEL, "input": "more", "previous_response_id": previous}
    async with r.http.post(f"{r.url}/v1/responses", json=body, headers=headers) as resp:
        return resp.status, orjson.loads(await resp.read()).get("error") or {}


def _continued(clusters: list[Gated], response_id: str) -> int:
    return sum(c.asked.count(f"CONTINUE {response_id}") for c in clusters)


async def _until(condition: object, *, tries: int = 500) -> None:
    for _ in range(tries):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_continuation_of_an_id_found_nowhere_is_not_searched_for_again_for_a_while(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A continuation naming an id no cluster stores searches once; for ``UNFOUND_TTL_S`` after, the
    caller's continuations (and retrievals) of it are 404 ``response_not_found`` from the list.
    Before session s46 every continuation asked every cluster (3 here, per request)."""
    clusters: list[Gated] = [Continuing("east-a"), Continuing("east-b"), Continuing("east-c")]
    gone = mint("tenant:t")
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        assert (await _continue(r, "t", gone))[0] == 404  # the last cluster's own 404
        assert _continued(clusters, gone) == 3
        for _ in range(4):
            status, error = await _continue(r, "t", gone)
            assert (status, error["code"], error["param"]) == (
                404,
                "response_not_found",
                "previous_response_id",
            )
        assert (await _get(r, "t", gone))[1]["code"] == "response_not_found"  # the same clusters, listed
        assert _continued(clusters, gone) == 3
        assert _asked(clusters, gone) == 0
        assert r.router.metrics.searches_refused.labels("unfound")._value.get() == 5
        assert (await _continue(r, "other", gone))[0] == 404  # another scope's: its own search
        assert _continued(clusters, gone) == 6
        clock.advance(r.router.searches.ttl_s)
        clusters[1].stored.add(gone)
        assert (await _continue(r, "t", gone))[0] == 200  # searched again, found
        assert r.router.searches.in_flight == 0


async def test_continuations_searching_hold_places_and_past_the_limit_are_refused(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A continuation searching holds one of the replica's search places until it ends: past the
    caller's share, 429 ``response_searches_busy`` asking no cluster. Before session s46 any number
    ran at once."""
    clusters: list[Gated] = [Continuing("east-a"), Continuing("east-b")]
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        share = r.router.searches.per_scope
        assert share is not None
        for c in clusters:
            c.gate.clear()
        held = [asyncio.create_task(_continue(r, "t", mint("tenant:t"))) for _ in range(share)]
        await _until(lambda: sum(c.waiting for c in clusters) == share)
        extra = mint("tenant:t")
        status, error = await _continue(r, "t", extra)
        assert (status, error["code"]) == (429, "response_searches_busy")
        assert _continued(clusters, extra) == 0
        for c in clusters:
            c.gate.set()
        assert [s for s, _ in await asyncio.gather(*held)] == [404] * share
        assert r.router.searches.in_flight == 0


async def test_one_tenant_s_searches_cannot_take_every_place(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """One tenant looping made-up ids holds at most its share of the replica's search places: its
    further searches are 429 (counted ``scope_busy``), another tenant's still runs. Before session
    s46 the attacker's 16 held searches took every place and the victim's retrieval was 429."""
    clusters = [Gated("east-a"), Gated("east-b")]
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        searches = r.router.searches
        for c in clusters:
            c.gate.clear()
        flood = [
            asyncio.create_task(_get(r, "attacker", mint("tenant:attacker"))) for _ in range(searches.limit)
        ]
        await _until(lambda: clusters[0].waiting + sum(t.done() for t in flood) == searches.limit)
        refused = [t.result() for t in flood if t.done()]
        assert searches.per_scope is not None
        assert clusters[0].waiting == searches.per_scope
        assert {(s, e["code"]) for s, e, _ in refused} == {(429, "response_searches_busy")}
        assert searches_refused(r, "scope_busy") == searches.limit - searches.per_scope
        victims = mint("tenant:victim")
        clusters[1].stored.add(victims)
        for c in clusters:
            c.gate.set()  # the victim's search is asked of the clusters, not refused
        assert (await _get(r, "victim", victims))[0] == 200
        await asyncio.gather(*flood)
        assert searches_refused(r, "busy") == 0
        assert searches.in_flight == 0


def searches_refused(r: Routed, reason: str) -> float:
    return float(r.router.metrics.searches_refused.labels(reason)._value.get())


async def test_a_frozen_cluster_holds_a_search_for_the_search_timeout_only(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A cluster that takes the request and never answers is left after ``search_timeout_s`` and the
    search goes on: found at another cluster, its answer; every other one answering 404, 504
    ``upstream_timeout`` naming the frozen cluster (it may store the response: never a 404 saying it
    is gone), and the id is not listed as found nowhere. Before session s46 the search waited
    ``requestTimeoutSeconds`` (600 s by default) at the frozen cluster holding its place, then
    answered its 504 without asking the others."""
    frozen, other = Gated("east-a"), Gated("east-b")
    frozen.gate.clear()  # never answers
    async with routed([frozen, other], jwks_server, tokens, clock, client_ssl) as r:
        _, nowhere = await _searched_past_slow_east_a(r, other, search_timeout_s=0.2)
        async with asyncio.timeout(10):
            assert (await _get(r, "t", nowhere))[0] == 504  # searched again, not answered from the list
        assert _asked([other], nowhere) == 2
        assert r.router.searches.in_flight == 0


async def test_a_continuation_gives_its_search_place_back_while_its_answer_is_generated(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A continuation whose cluster has not answered within ``search_timeout_s`` (generating it, or
    frozen) gives its search place back and still gets its answer: held for the whole generation, a
    tenant's long answers would take its share of the places for minutes."""
    clusters: list[Gated] = [Continuing("east-a")]
    kept = mint("tenant:t")
    clusters[0].stored.add(kept)
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        r.router.search_timeout_s = 0.2
        clusters[0].gate.clear()  # the answer is being generated
        pending = asyncio.create_task(_continue(r, "t", kept))
        await _until(lambda: clusters[0].waiting == 1)
        await _until(lambda: r.router.searches.in_flight == 0)
        assert not pending.done()
        clusters[0].gate.set()
        assert (await pending)[0] == 200
        assert r.router.searches.in_flight == 0


async def test_a_search_that_finds_an_id_takes_it_off_every_caller_s_list(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """An id found by one search leaves the unfound list in every context (each scope's and set of
    clusters' searched), as tier 1's ``ResponseSearches.found``: until session s47 only the finder's
    entry, and a search of other clusters (a caller allowed other models) that missed it moments
    before went on answering 404 ``response_not_found`` for a response that exists."""
    clusters = [Gated("east-a"), Gated("east-b")]
    made = mint("tenant:t")
    async with routed(list(clusters), jwks_server, tokens, clock, client_ssl) as r:
        fleet = r.router.fleet
        every = fleet.searched
        narrow = False  # the second search's caller is allowed east-b's models only

        def searched(may_use: Callable[[str], bool]) -> list[ClusterSpec]:
            return [c for c in every(may_use) if c.name == "east-b" or not narrow]

        fleet.searched = searched  # type: ignore[method-assign]
        assert (await _get(r, "t", made))[0] == 404  # before it was stored: listed for both clusters
        clusters[1].stored.add(made)  # a streamed response stored at its end
        narrow = True
        assert (await _get(r, "t", made))[0] == 200  # another context's search finds it
        r.router.responses.disown(made, "east-b")  # forgotten (another replica): searched again
        narrow = False
        assert (await _get(r, "t", made))[0] == 200  # not 404 from the list
        assert r.router.metrics.searches_refused.labels("unfound")._value.get() == 0
