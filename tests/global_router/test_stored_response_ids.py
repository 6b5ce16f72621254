"""Which cluster stores a response, as far as the router believes a cluster's answer: an answer naming
another tenant's response id teaches the router nothing (igw.global_router.stored_ids).

The clusters are tier-1 gateways in miniature on loopback (aiohttp): the honest one mints each
response's id for the caller's scope as a real gateway does (``igw.gateway.response_ids.mint``, the
scope from the tenant header the router forwards) and answers a retrieval of an id it holds; the
hostile one (a compromised pod behind its gateway, whose answer the gateway relays unchanged) names
whatever id it was told to claim, and answers 200 to any retrieval.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import orjson
from aiohttp import web

from igw.gateway.response_ids import mint, minted_for
from igw.gateway.serving import serve_app
from igw.global_router.server import ROUTER_KEY, GlobalRouter
from tests.global_router.support import MODEL, global_doc, guarded_router
from tests.security.helpers import JwksServer, ManualClock, TokenFactory, bearer, jwt_auth


@dataclass
class Tier1:
    """A cluster's gateway in miniature: stores what it mints, or (``claims``) names another id."""

    name: str
    claims: str | None = None
    """Hostile: the id every answer names (else the one minted, or asked for)."""
    answers_any: bool = False
    """Hostile: every retrieval answered 200, whoever asks for whichever id."""
    stored: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)
    pad: int = 0
    """The bytes of output a retrieval's answer carries after its id (a large answer)."""
    comment_only: bool = False
    """A replay (``?stream=true``) of a comment alone, no event with data (a replay past its end)."""
    deltas: tuple[str, ...] = ()
    """Text deltas a replay sends before its events naming the response (a resumed replay's)."""
    held: asyncio.Event | None = None
    """A replay holds its events (after its first comment) until this is set, sending ``: ping``
    every 50 ms meanwhile, as a tier-1 gateway's keep-alives reach the router while its pod holds."""

    def app(self) -> web.Application:
        async def create(request: web.Request) -> web.Response:
            self.asked.append(f"POST {request.path}")
            scope = "tenant:" + request.headers.get("x-igw-tenant", "")
            response_id = self.claims or mint(scope)
            self.stored.add(response_id)
            return web.json_response({"id": response_id, "object": "response", "status": "completed"})

        async def retrieve(request: web.Request) -> web.StreamResponse:
            response_id = request.match_info["response_id"]
            self.asked.append(f"GET {response_id}")
            scope = "tenant:" + request.headers.get("x-igw-tenant", "")
            held = response_id in self.stored and minted_for(response_id, scope)
            if not held and not self.answers_any:
                return web.json_response({"error": {"message": "not found"}}, status=404)
            doc = {"id": self.claims or response_id, "object": "response", "output_text": "x" * self.pad}
            if request.query.get("stream") != "true":
                return web.json_response(doc)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b": replay\n\n")  # a comment first: nothing to check yet
            while self.held is not None and not self.held.is_set():
                await resp.write(b": ping\n\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.held.wait(), 0.05)
            for text in self.deltas:  # events naming no response
                delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": text}
                await resp.write(b"event: response.output_text.delta\ndata: " + orjson.dumps(delta) + b"\n\n")
            if self.deltas:
                await asyncio.sleep(0.1)  # the deltas read on their own, before the events naming it
            for kind in () if self.comment_only else ("response.created", "response.completed"):
                event = {"type": kind, "response": doc}
                await resp.write(f"event: {kind}\ndata: ".encode() + orjson.dumps(event) + b"\n\n")
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_post("/v1/responses", create)
        app.router.add_get("/v1/responses/{response_id}", retrieve)
        return app


@dataclass
class Routed:
    url: str
    router: GlobalRouter
    http: aiohttp.ClientSession
    tokens: TokenFactory

    async def create(self, tenant: str, *, at: str) -> str:
        """A response made for ``tenant``, sent until the cluster ``at`` answered it; its id."""
        for _ in range(200):
            body = {"model": MODEL, "input": "hi"}
            headers = bearer(self.tokens.token(tenant=tenant, sub=tenant))
            async with self.http.post(self.url + "/v1/responses", json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                if resp.headers["x-igw-cluster"] == at:
                    response_id: str = (await resp.json())["id"]
                    return response_id
        raise AssertionError(f"{at} never answered")

    async def retrieve(self, tenant: str, response_id: str) -> tuple[int, str]:
        """Who answered ``tenant``'s retrieval of ``response_id``: (status, cluster)."""
        headers = bearer(self.tokens.token(tenant=tenant, sub=tenant))
        async with self.http.get(f"{self.url}/v1/responses/{response_id}", headers=headers) as resp:
            await resp.read()
            return resp.status, resp.headers.get("x-igw-cluster", "")


@contextlib.asynccontextmanager
async def routed(
    clusters: list[Tier1],
    issuer: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
    *,
    upstream: dict[str, float] | None = None,
) -> AsyncIterator[Routed]:
    """A router replica (JWT auth, ``tenantClaim: tenant``) in front of ``clusters``, all in one region
    (``upstream``: its ``spec.upstream``, when given)."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(serve_app(c.app(), host="127.0.0.1", port=0)) for c in clusters
        ]
        doc = global_doc(
            [
                {"name": c.name, "region": "east", "endpoint": url, "models": [MODEL]}
                for c, url in zip(clusters, urls, strict=True)
            ],
            heartbeats={"required": False},
            auth=jwt_auth(issuer),
            authorization={"tenantClaim": "tenant"},
            **({} if upstream is None else {"upstream": upstream}),
        )
        url, app = await stack.enter_async_context(guarded_router(doc, clock=clock, client_ssl=client_ssl))
        app[ROUTER_KEY].clock = clock  # how long an id found nowhere is answered 404 without a search
        http = await stack.enter_async_context(aiohttp.ClientSession())
        yield Routed(url=url, router=app[ROUTER_KEY], http=http, tokens=tokens)


async def test_an_answer_naming_another_tenant_s_response_id_is_not_believed(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A hostile cluster that learnt the victim's response id names it in its answer to another
    tenant's request: before session s40 the router remembered that cluster as the response's holder,
    and sent the victim's retrievals (and continuations) of it there, never to the cluster storing it."""
    honest, hostile = Tier1("east-a"), Tier1("east-b")
    async with routed([honest, hostile], jwks_server, tokens, clock, client_ssl) as r:
        victims = await r.create("victim", at="east-a")
        hostile.claims = victims
        claimed = await r.create("attacker", at="east-b")
        assert claimed == victims  # relayed as it came: the answer is the attacker's own business
        assert r.router.responses.endpoint_of(victims) == "east-a"
        assert await r.retrieve("victim", victims) == (200, "east-a")
        # Named again in an answer to the victim's own request: the id is the victim's, but already
        # known from the answer that made it, and an id is made once.
        await r.create("victim", at="east-b")
        assert r.router.responses.endpoint_of(victims) == "east-a"
        assert hostile.asked.count(f"GET {victims}") == 0


async def test_a_search_answered_by_a_cluster_that_does_not_hold_the_response_steers_no_one(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A response this replica does not know is searched for. Before session s40 the first cluster
    answering 200 was remembered as its holder, whoever searched: an attacker's retrieval of the
    victim's id (the honest cluster's gateway answers it 404, the id not being the attacker's) made a
    hostile cluster answering 200 to anything the holder, and the victim's own retrievals went to it
    from then on, never to the cluster storing the response. Now a search remembers only an id
    minted for the searcher."""
    honest, hostile = Tier1("east-a"), Tier1("east-b", answers_any=True)
    victims = mint("tenant:victim")  # stored through another router replica
    honest.stored.add(victims)
    async with routed([honest, hostile], jwks_server, tokens, clock, client_ssl) as r:
        assert await r.retrieve("attacker", victims) == (200, "east-b")
        assert r.router.responses.endpoint_of(victims) is None
        assert await r.retrieve("victim", victims) == (200, "east-a")
        assert await r.retrieve("victim", victims) == (200, "east-a")  # remembered: straight there
        assert hostile.asked.count(f"GET {victims}") == 1


async def test_a_search_moves_on_from_an_answer_about_another_response(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A cluster answering a retrieval 200 with another response than the one asked for does not
    store it: the search goes on to the next cluster, as after a 404, and remembers the one whose
    answer names the id (before session s40 the wrong answer was relayed, and its cluster remembered
    as the holder). Such an answer is never relayed (since session s45), the last cluster's neither."""
    honest, hostile = Tier1("east-a"), Tier1("east-b", claims="resp_somewhere_else", answers_any=True)
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    async with routed([hostile, honest], jwks_server, tokens, clock, client_ssl) as r:
        assert await r.retrieve("victim", mine) == (200, "east-a")
        assert r.router.responses.endpoint_of(mine) == "east-a"
        # the withheld answer counted though a later one was relayed (since s46; before, only when
        # the request ended on it)
        assert r.router.metrics.usage_misnamed.labels("east-b")._value.get() == 1
        honest.stored.clear()
        unknown = mint("tenant:victim")
        assert await r.retrieve("victim", unknown) == (404, "east-a")  # the hostile answer is not relayed
        assert r.router.responses.endpoint_of(unknown) is None


async def test_an_answer_about_another_response_is_never_relayed(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """Every cluster asked answers a retrieval 200 with another response (confused or hostile pods):
    none of those answers is relayed - the client gets 404 ``response_not_found``, as for a response
    stored nowhere - and the event is counted (``igw_global_usage_misnamed_total``), searched or
    from the cluster the router remembers. Before session s45 the last cluster's answer, another
    response (maybe another tenant's), went to the client."""
    first = Tier1("east-a", claims="resp_somewhere_else", answers_any=True)
    second = Tier1("east-b", claims="resp_somewhere_else", answers_any=True)
    mine = mint("tenant:victim")
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    async with routed([first, second], jwks_server, tokens, clock, client_ssl) as r:
        misnamed = r.router.metrics.usage_misnamed
        for known in (False, True):
            if known:
                r.router.responses.remember(mine, "east-b")
            async with r.http.get(f"{r.url}/v1/responses/{mine}", headers=headers) as resp:
                status, body = resp.status, await resp.text()
            assert status == 404, body
            assert "response_not_found" in body
            assert "resp_somewhere_else" not in body
        assert (first.asked.count(f"GET {mine}"), second.asked.count(f"GET {mine}")) == (1, 2)
        # the remembered cluster named another: forgotten (since s45; before, every poll went to it)
        assert r.router.responses.endpoint_of(mine) is None
        assert misnamed.labels("east-b")._value.get() == 2
        assert misnamed.labels("east-a")._value.get() == 1  # each withheld answer (s46; before, the last)
        clock.advance(r.router.searches.ttl_s)  # the first search's miss no longer remembered
        async with r.http.get(f"{r.url}/v1/responses/{mine}", headers=headers) as resp:
            assert resp.status == 404
        assert (first.asked.count(f"GET {mine}"), second.asked.count(f"GET {mine}")) == (2, 3)  # searched


async def test_a_streamed_or_large_answer_about_another_response_is_never_relayed(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A replay (``?stream=true``) or a whole answer past ``WHOLE_ANSWER_BUFFER_BYTES`` (relayed as it
    arrives) naming another response is withheld as a small whole one is: the search moves on past
    it, and none of it reaches the client. Before session s45 both were relayed as their bytes came -
    the replay's first event before any was read - whatever response they named."""
    pad = 2 * 1024 * 1024  # past the router's 1 MiB buffer
    hostile = Tier1("east-a", claims="resp_somewhere_else", answers_any=True, pad=pad)
    honest = Tier1("east-b", pad=pad)
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    async with routed([hostile, honest], jwks_server, tokens, clock, client_ssl) as r:
        for query in ("?stream=true", ""):
            r.router.responses.disown(mine, "east-b")  # searched each time
            async with r.http.get(f"{r.url}/v1/responses/{mine}{query}", headers=headers) as resp:
                status, body = resp.status, await resp.read()
                assert (status, resp.headers["x-igw-cluster"]) == (200, "east-b"), body[:300]
            assert mine.encode() in body
            assert b"resp_somewhere_else" not in body
            assert len(body) > pad
        honest.stored.clear()  # the hostile cluster's answer alone: east-b's 404, nothing of it relayed
        for query in ("?stream=true", ""):
            r.router.responses.disown(mine, "east-b")
            clock.advance(r.router.searches.ttl_s)  # searched again, not answered from the unfound list
            async with r.http.get(f"{r.url}/v1/responses/{mine}{query}", headers=headers) as resp:
                status, body = resp.status, await resp.read()
            assert status == 404, body[:300]
            assert b"resp_somewhere_else" not in body
        assert hostile.asked.count(f"GET {mine}") == 4


async def test_a_replay_with_no_event_naming_a_response_is_relayed_to_its_end(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A replay whose events name no response (a comment alone: nothing to check) is relayed whole
    at its end: the events held for the check are not lost with the check."""
    honest = Tier1("east-a", comment_only=True)
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    async with (
        routed([honest], jwks_server, tokens, clock, client_ssl) as r,
        r.http.get(f"{r.url}/v1/responses/{mine}?stream=true", headers=headers) as resp,
    ):
        status, body = resp.status, await resp.read()
    assert (status, body) == (200, b": replay\n\n")


async def test_a_replay_going_on_with_another_response_is_cut_there(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A replay whose first events name no response (a resumed replay's deltas) is relayed as they
    come (a response still generating streams on); a later event naming another response than the
    one asked for is not: the stream ends there with an error event, the answer is counted as
    misnamed. Until session s46 the rest of such a replay was relayed unchecked, the other
    response's id and object included. An honest replay's deltas and events arrive whole."""
    hostile = Tier1("east-a", claims="resp_somewhere_else", answers_any=True, deltas=("another's text",))
    honest = Tier1("east-b", deltas=("mine",))
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    url = f"/v1/responses/{mine}?stream=true"
    async with routed([hostile, honest], jwks_server, tokens, clock, client_ssl) as r:
        async with r.http.get(r.url + url, headers=headers) as resp:
            status, body = resp.status, await resp.read()
        assert status == 200, body[:300]
        assert b"resp_somewhere_else" not in body
        assert b"response.completed" not in body
        assert b"named another response" in body
        assert r.router.metrics.usage_misnamed.labels("east-a")._value.get() == 1
    async with routed([honest], jwks_server, tokens, clock, client_ssl) as r:
        async with r.http.get(r.url + url, headers=headers) as resp:
            status, body = resp.status, await resp.read()
        assert status == 200, body[:300]
        assert b"mine" in body
        assert mine.encode() in body
        assert b"named another response" not in body


@contextlib.asynccontextmanager
async def _held_replay(
    r: Routed, response_id: str, headers: dict[str, str], holder: Tier1
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A replay of ``response_id`` whose cluster ``holder`` holds its events: its head awaited 5 s at
    most (a router that writes nothing while the replay is held sends no head either); the hold is
    released on the way out, so the cluster's handler ends whatever the test saw."""
    assert holder.held is not None
    try:
        url = f"{r.url}/v1/responses/{response_id}?stream=true"
        async with await asyncio.wait_for(r.http.get(url, headers=headers), timeout=5) as resp:
            yield resp
    finally:
        holder.held.set()


async def test_a_held_replay_gets_the_router_s_keepalives_then_its_events(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """A cluster that holds a replay's first event (its pod slow to start it) while its gateway sends
    ``: ping`` lines: the router holds those with the replay, and writes its own keep-alive
    ``replay_keepalive_s`` after its last write, the held comments first. Until session s47 the
    router sent a held replay no keep-alive (``keepalive_s=0``): its client got nothing, not even the
    head, until the first event with data came - a proxy's idle timeout gave up first."""
    honest = Tier1("east-a", held=asyncio.Event())
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    async with routed([honest], jwks_server, tokens, clock, client_ssl) as r:
        r.router.replay_keepalive_s = 0.1
        async with _held_replay(r, mine, headers, honest) as resp:
            first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=5)
            assert resp.status == 200
            assert first == b": replay\n\n"  # the held comment, before the router's ping
            second = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=5)
            assert second == b": ping\n\n"
            assert honest.held is not None
            honest.held.set()
            body = first + second + await resp.read()
        assert body.count(b"event: response.completed") == 1
        assert mine.encode() in body
        assert b"named another response" not in body
        assert r.router.metrics.usage_misnamed.labels("east-a")._value.get() == 0


async def test_the_replay_keepalive_comes_at_the_configured_interval(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """``spec.upstream.replayKeepAliveSeconds`` sets when a held replay's client gets the router's
    ``: ping``: at 0.2 s the first arrives well within 5 s (the default, 15 s, would send nothing
    for 15 s: the bound leaves a loaded box 5 s and more either side), and the next ones as often.
    Until session s48 the interval was a constant (``REPLAY_KEEPALIVE_S``), the configuration could
    not change it."""
    honest = Tier1("east-a", held=asyncio.Event())
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    upstream = {"replayKeepAliveSeconds": 0.2}
    async with routed([honest], jwks_server, tokens, clock, client_ssl, upstream=upstream) as r:
        assert r.router.replay_keepalive_s == 0.2
        started = time.monotonic()
        async with _held_replay(r, mine, headers, honest) as resp:
            assert resp.status == 200
            first = await asyncio.wait_for(resp.content.readuntil(b": ping\n\n"), timeout=5)
            assert first == b": replay\n\n: ping\n\n"  # the held comment, then the router's
            assert time.monotonic() - started < 5
            second = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=5)
            assert second == b": ping\n\n"
            assert honest.held is not None
            honest.held.set()
            body = await resp.read()
        assert body.count(b"event: response.completed") == 1


async def test_a_held_replay_started_by_a_keepalive_then_misnamed_is_cut_not_searched_on(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """Once the router's keep-alive has started a held replay, its answer can no longer be withheld:
    a first event naming another response is not relayed, the stream ends with an error event
    (counted as misnamed), and the search does not move on to the cluster that stores the response -
    it moves on only while nothing was sent to the client (the trade-off of the keep-alive)."""
    hostile = Tier1("east-a", claims="resp_somewhere_else", answers_any=True, held=asyncio.Event())
    honest = Tier1("east-b")
    mine = mint("tenant:victim")
    honest.stored.add(mine)
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    async with routed([hostile, honest], jwks_server, tokens, clock, client_ssl) as r:
        r.router.replay_keepalive_s = 0.1
        async with _held_replay(r, mine, headers, hostile) as resp:
            first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=5)
            assert (resp.status, resp.headers["x-igw-cluster"]) == (200, "east-a")
            assert hostile.held is not None
            hostile.held.set()
            body = first + await resp.read()
        assert b"resp_somewhere_else" not in body
        assert b"response.created" not in body
        assert b"named another response" in body
        assert r.router.metrics.usage_misnamed.labels("east-a")._value.get() == 1
        assert honest.asked.count(f"GET {mine}") == 0
        assert r.router.responses.endpoint_of(mine) is None


async def test_what_a_lying_cluster_shows_before_its_cut_is_its_deltas_before_the_event_naming_another(
    jwks_server: JwksServer, tokens: TokenFactory, clock: ManualClock, client_ssl: ssl.SSLContext
) -> None:
    """The documented limit of the replay check (docs/security.md): a resumed replay's deltas name no
    response (an ``output_text.delta`` carries ``item_id``, ``output_index``, ``content_index`` and
    ``sequence_number``, none bound to the response's id), so a cluster that sends N deltas of
    another response's text and then an event naming that response shows the client exactly those N
    events, byte for byte, and then the error event of the cut - nothing of the event naming the other
    response, nothing after it."""
    texts = ("another's ", "secret ", "text")
    hostile = Tier1("east-a", claims="resp_somewhere_else", answers_any=True, deltas=texts)
    mine = mint("tenant:victim")
    headers = bearer(tokens.token(tenant="victim", sub="victim"))
    shown = b": replay\n\n" + b"".join(
        b"event: response.output_text.delta\ndata: "
        + orjson.dumps({"type": "response.output_text.delta", "item_id": "msg_1", "delta": text})
        + b"\n\n"
        for text in texts
    )
    async with routed([hostile], jwks_server, tokens, clock, client_ssl) as r:
        async with r.http.get(f"{r.url}/v1/responses/{mine}?stream=true", headers=headers) as resp:
            status, body = resp.status, await resp.read()
        assert status == 200, body[:300]
        assert body.startswith(shown), body[:300]
        cut = body[len(shown) :]
        # the cut: the error event and [DONE], nothing else (the terminal event of sse_error_event)
        assert cut.startswith(b"event: error\ndata: ")
        assert cut.endswith(b"\n\ndata: [DONE]\n\n")
        assert cut.count(b"\n\n") == 2
        assert b"named another response" in cut
        assert b"resp_somewhere_else" not in body
        assert len(shown) == 355  # the comment and three deltas: all that reached the client before the cut
        assert r.router.metrics.usage_misnamed.labels("east-a")._value.get() == 1
