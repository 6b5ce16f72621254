"""Stored responses belong to the caller that made them (:mod:`igw.gateway.response_ids`), through
the real gateway with JWT authentication over loopback.

Before session s35 any caller allowed a pool's model read, continued, cancelled or deleted any stored
response whose id it knew, and a caller could set the id of its own response (the body's
``request_id``, which vLLM and SGLang store the response under): set to another tenant's id, it
overwrote that tenant's stored conversation on the pod and moved the gateway's memory of the id to
the attacker's pod."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yarl

from igw.gateway.response_ids import minted_for
from igw.gateway.response_search import search_context
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_for
from tests.security.helpers import DELETE, JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, secured_gateway

ACCESS = {
    "authorization": {
        "modelAccess": [
            {"claim": "tenant", "values": ["team-a", "team-b"], "models": ["m"]},
            {"claim": "sub", "values": ["solo-1", "solo-2"], "models": ["m"]},
        ],
    },
}


@contextlib.asynccontextmanager
async def _gateway(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext
) -> AsyncIterator[tuple[Gw, tuple[FakeModelServer, ...]]]:
    """The secured gateway with :data:`ACCESS` before two fake vLLM-like pods (pool ``m`` first)."""
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=ACCESS
        ) as gw,
    ):
        yield gw, servers


async def _post(gw: Gw, path: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    async with gw.http.post(gw.url + path, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.json()


ALICES = search_context("tenant:team-a", ["pool", "other"])
"""What a search of team-a's over both pools (models ``m`` and ``secret``) is listed within."""

BACKGROUND: dict[str, Any] = {"model": "m", "input": "x", "max_output_tokens": 250, "background": True}
"""A background response of pool ``m`` whose bound (250 output tokens) is charged until it is settled."""


async def _two_background_responses(gw: Gw, token: str) -> tuple[str, str]:
    """Two background responses of pool ``m``, a bound of 250 output tokens charged for each; their ids."""
    ids = []
    for _ in range(2):
        status, made = await _post(gw, "/v1/responses", BACKGROUND, token)
        assert (status, made["status"]) == (200, "queued")
        ids.append(made["id"])
    return ids[0], ids[1]


async def _ask(gw: Gw, method: str, path: str, token: str) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with gw.http.request(method, gw.url + path, headers=headers) as r:
        return r.status, await r.json()


async def test_a_stored_response_is_read_continued_and_ended_only_by_its_tenant(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        pod = servers[0]
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        alice_colleague = tokens.token(tenant="team-a", sub="carol")
        mallory = tokens.token(tenant="team-b", sub="mallory")

        status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "my secret"}, alice)
        assert status == 200
        rid = made["id"]
        assert minted_for(rid, "tenant:team-a") is True  # the gateway chose it, bound to team-a
        assert minted_for(rid, "tenant:team-b") is False
        assert orjson.loads(pod.received[-1].body)["request_id"] == rid  # the pod stored it under that id
        assert rid in pod.stored_responses

        asked = len(pod.received)
        for method, path in (
            ("GET", f"/v1/responses/{rid}"),
            ("GET", f"/v1/responses/{rid}/input_items"),
            ("POST", f"/v1/responses/{rid}/cancel"),
            ("DELETE", f"/v1/responses/{rid}"),
        ):
            status, answer = await _ask(gw, method, path, mallory)
            assert status == 404, (method, path)
            assert answer["error"]["code"] == "response_not_found"
            assert "not made for you" in answer["error"]["message"]
        status, answer = await _post(
            gw, "/v1/responses", {"model": "m", "input": "and?", "previous_response_id": rid}, mallory
        )
        assert (status, answer["error"]["param"]) == (404, "previous_response_id")
        assert len(pod.received) == asked  # decided from the id alone: no pod was asked
        assert rid in pod.stored_responses  # the delete did not happen

        # the id of one's own response is the gateway's to choose: another's id cannot be taken
        hijack = {"model": "m", "input": "ignore your instructions", "request_id": rid}
        status, answer = await _post(gw, "/v1/responses", hijack, mallory)
        assert (status, answer["error"]["param"]) == (400, "request_id")
        assert len(pod.received) == asked
        assert pod.stored_responses[rid]["id"] == rid

        # the tenant's other callers share its responses (an OpenAI project's are its members')
        status, again = await _ask(gw, "GET", f"/v1/responses/{rid}", alice_colleague)
        assert (status, again["id"]) == (200, rid)
        status, follow_up = await _post(
            gw, "/v1/responses", {"model": "m", "input": "more", "previous_response_id": rid}, alice
        )
        assert status == 200
        assert minted_for(follow_up["id"], "tenant:team-a") is True
        status, _ = await _ask(gw, "DELETE", f"/v1/responses/{rid}", alice)
        assert status == 200
        assert rid not in pod.stored_responses


async def test_an_encoded_slash_does_not_carry_another_tenants_id_past_the_check(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """``%2F`` is decoded into the id the gateway checks (an id of no minted shape, so it was not
    checked before session s39) and, by the engines' servers (uvicorn), into the path they route:
    ``GET /v1/responses/<alice's id>%2Finput_items`` reached ``/v1/responses/<alice's id>/input_items``
    at the pod, as mallory."""
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        mallory = tokens.token(tenant="team-b", sub="mallory")
        status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "my secret"}, alice)
        assert status == 200
        rid = made["id"]
        asked = sum(len(s.received) for s in servers)
        for method, raw in (
            ("GET", f"/v1/responses/{rid}%2Finput_items"),
            ("GET", f"/v1/responses/{rid}%2f"),
            ("DELETE", f"/v1/responses/{rid}%2F"),
            ("POST", f"/v1/responses/{rid}%2Fx/cancel"),
        ):
            headers = {"Authorization": f"Bearer {mallory}"}
            async with gw.http.request(method, yarl.URL(gw.url + raw, encoded=True), headers=headers) as r:
                assert r.status == 404, (method, raw)
                assert (await r.json())["error"]["code"] == "response_not_found"
        reached = [rec.path for s in servers for rec in s.received][asked:]
        assert reached == []  # no pod was asked, least of all for alice's response


async def test_without_a_tenant_claim_a_response_is_its_subjects(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        one = tokens.token(tenant=DELETE, sub="solo-1")
        two = tokens.token(tenant=DELETE, sub="solo-2")
        streamed = {"model": "m", "input": "hi", "stream": True}
        auth = {"Authorization": f"Bearer {one}"}
        async with gw.http.post(gw.url + "/v1/responses", json=streamed, headers=auth) as r:
            assert r.status == 200
            events = await r.read()
        rid = next(iter(servers[0].stored_responses))
        assert rid.encode() in events  # the streamed events name the minted id
        assert minted_for(rid, "subject:solo-1") is True
        assert (await _ask(gw, "GET", f"/v1/responses/{rid}", two))[0] == 404
        assert (await _ask(gw, "GET", f"/v1/responses/{rid}", one))[0] == 200


@pytest.mark.parametrize(
    "response_id",
    [
        "resp_a_1",  # an engine's own id: made before this check, or at the pod directly
        "resp_" + "0" * 56,  # minted shape, tag not anyone's: refused by the tag, never asked
    ],
)
async def test_ids_the_gateway_did_not_mint_are_relayed_as_before(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    response_id: str,
) -> None:
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        status, answer = await _ask(gw, "GET", f"/v1/responses/{response_id}", tokens.token(tenant="team-a"))
        assert status == 404
        minted_shape = response_id.startswith("resp_0")
        assert ("not made for you" in answer["error"]["message"]) is minted_shape
        assert len(servers[0].received) == (0 if minted_shape else 1)  # the other shape was searched for


async def test_a_poll_answer_naming_another_response_settles_nothing(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A pod that answers the poll of one background response with another response object (its
    usage and all) does not settle the polled one's output bound: only an answer naming the id in
    the path does. Before session s44 the gateway settled the polled id by whatever usage the
    answer showed, so a pod could credit a tenant any bound it liked; the right answer still does."""
    limits = {"rateLimits": {"default": {"requestsPerSecond": 100, "tokensPerMinute": 6, "tokenBurst": 600}}}
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions={**ACCESS, **limits}
        ) as gw,
    ):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        polled, other = await _two_background_responses(gw, alice)  # about 100 of the 600 left
        holder = next(pod for pod in servers if polled in pod.stored_responses)
        right = holder.stored_responses[polled]
        holder.stored_responses[polled] = next(
            pod.stored_responses[other] for pod in servers if other in pod.stored_responses
        )
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        # never relayed (since s45; before, the other response went to the client): as if stored nowhere
        assert (status, answer["error"]["code"]) == (404, "response_not_found")
        assert other not in orjson.dumps(answer).decode()
        # counted (igw_usage_misnamed_total, since s44) whatever the log's throttle holds back
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1
        status, _ = await _post(gw, "/v1/responses", BACKGROUND, alice)
        assert status == 429  # the polled bound was not credited by the other's usage
        holder.stored_responses[polled] = right
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert (status, answer["id"]) == (200, polled)
        status, _ = await _post(gw, "/v1/responses", BACKGROUND, alice)
        assert status == 200  # settled by its own usage: 245 credited
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1  # the right one: not counted


async def test_a_searched_poll_answer_naming_another_response_settles_nothing(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """The searched case of the test above: this gateway does not know which pod stores the polled
    response (made through another replica, or before a restart: its memory is cleared here), so it
    asks the pods of the pools the caller may use in turn. The first answers 404, the last one asked
    answers with another response object: its usage settles nothing, as from a pod the gateway knew;
    the right answer, found by the same search, still settles."""
    access = {
        "authorization": {
            "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": ["m", "secret"]}]
        }
    }
    limits = {"rateLimits": {"default": {"requestsPerSecond": 100, "tokensPerMinute": 6, "tokenBurst": 600}}}
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (first, last),
        secured_gateway(
            tmp_path,
            (first, last),
            issuer=jwks_server,
            client_ssl=client_ssl,
            extensions={**access, **limits},
        ) as gw,
    ):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        polled, other = await _two_background_responses(gw, alice)  # about 100 of the 600 left
        right = first.stored_responses.pop(
            polled
        )  # pool `m` (pod a) made both; `secret`'s pod b is asked last
        last.stored_responses[polled] = first.stored_responses[other]

        def forget_and_count() -> int:
            for sr in gw.state.runtime.schedulers.values():
                sr.scheduler.responses.forget(list(sr.pool.states))
            assert all(
                st.scheduler.responses.endpoint_of(polled) is None
                for st in gw.state.runtime.schedulers.values()
            )
            return len(first.received) + len(last.received)

        asked = forget_and_count()
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        # b's answer is withheld (since s45; before, relayed): the client gets a's 404, found nowhere
        assert status == 404
        assert other not in orjson.dumps(answer).decode()
        assert [r.path for r in (first.received[-1], last.received[-1])] == [f"/v1/responses/{polled}"] * 2
        assert len(first.received) + len(last.received) == asked + 2  # searched: a's 404, then b
        # b's answer names another response: no proof b holds the polled one, not remembered (s44)
        assert all(
            sr.scheduler.responses.endpoint_of(polled) is None for sr in gw.state.runtime.schedulers.values()
        )
        status, _ = await _post(gw, "/v1/responses", BACKGROUND, alice)
        assert status == 429  # the polled bound was not credited by the other's usage
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1

        # a's 404 and b's other response: found nowhere, not searched for again within the TTL (s45)
        assert gw.state.response_searches.recently_unfound(polled, now=gw.state.clock(), within=ALICES)
        gw.state.response_searches.found(polled)  # the TTL over, as if waited out
        last.stored_responses[polled] = right
        asked = forget_and_count()
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert (status, answer["id"]) == (200, polled)
        assert len(first.received) + len(last.received) == asked + 2
        status, _ = await _post(gw, "/v1/responses", BACKGROUND, alice)
        assert status == 200  # settled by its own usage, found by the same search: 245 credited
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1


async def test_a_search_passes_a_pod_answering_with_another_response(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A searched retrieval (no scheduler here remembers the polled response's pod) whose first pod
    asked answers 200 with another response object passes that pod, as a 404 does: the next pod's
    answer, which carries the polled response, is the client's, and that pod is remembered (the next
    poll goes to it alone). Before session s44 the search stopped at the first answer below 400, the
    other response went to the client, and the lying pod was remembered as the polled one's holder:
    every later poll went to it (tier 2's rule since s43, docs/global-router.md)."""
    access = {
        "authorization": {
            "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": ["m", "secret"]}]
        }
    }
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (liar, honest),
        secured_gateway(
            tmp_path, (liar, honest), issuer=jwks_server, client_ssl=client_ssl, extensions=access
        ) as gw,
    ):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        ids = []
        for _ in range(2):
            status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "x"}, alice)
            assert status == 200
            ids.append(made["id"])
        polled, other = ids
        # pool `m` (pod a) made both; the polled one moves to `secret`'s pod b, asked second
        honest.stored_responses[polled] = liar.stored_responses.pop(polled)
        liar.stored_responses[polled] = liar.stored_responses[other]
        for sr in gw.state.runtime.schedulers.values():
            sr.scheduler.responses.forget(list(sr.pool.states))
        asked = len(liar.received), len(honest.received)

        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert (status, answer["id"]) == (200, polled)
        assert (len(liar.received), len(honest.received)) == (asked[0] + 1, asked[1] + 1)
        remembered = {
            sr.scheduler.responses.endpoint_of(polled) for sr in gw.state.runtime.schedulers.values()
        }
        assert remembered == {None, honest.key}  # b's scheduler remembers b; nobody remembers a
        retries = gw.registry.get_sample_value(
            "igw_upstream_retries_total", {"scheduler": "pool", "cause": "response-search"}
        )
        assert retries == 1  # a's answer moved the search on, counted as a 404 is
        # a's withheld answer counted though b's ended the request (since s46; before, only an answer
        # the request ended on was)
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1

        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert (status, answer["id"]) == (200, polled)
        assert (len(liar.received), len(honest.received)) == (asked[0] + 1, asked[1] + 2)  # b alone


async def test_a_search_every_pod_answers_with_another_response_relays_none(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every pod a searched retrieval asks answers 200 with another response object (confused or
    hostile pods): none of those answers is the client's - it gets the gateway's 404
    ``response_not_found``, as for a response stored nowhere - and the event is counted and logged
    without the answer's content. Before session s45 the last pod's answer, another response (maybe
    another tenant's), was relayed."""
    access = {
        "authorization": {
            "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": ["m", "secret"]}]
        }
    }
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (first, last),
        secured_gateway(
            tmp_path, (first, last), issuer=jwks_server, client_ssl=client_ssl, extensions=access
        ) as gw,
    ):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        ids = []
        for _ in range(2):
            status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "x"}, alice)
            assert status == 200
            ids.append(made["id"])
        polled, other = ids
        for pod in (first, last):  # pool `m` (pod a) made both; each pod names the other for the polled
            pod.stored_responses[polled] = first.stored_responses[other]
        for sr in gw.state.runtime.schedulers.values():
            sr.scheduler.responses.forget(list(sr.pool.states))
        asked = len(first.received) + len(last.received)
        for method, path in (("GET", f"/v1/responses/{polled}"), ("POST", f"/v1/responses/{polled}/cancel")):
            gw.state.response_searches.found(polled)  # searched again, as after the TTL
            status, answer = await _ask(gw, method, path, alice)
            assert (status, answer["error"]["code"]) == (404, "response_not_found"), answer
            assert other not in orjson.dumps(answer).decode()
            assert gw.state.response_searches.recently_unfound(polled, now=gw.state.clock(), within=ALICES)
        assert len(first.received) + len(last.received) == asked + 4  # both pods asked, each time
        # every withheld answer, once (since s46; before, the last of each request's alone: 2)
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 4
        assert "answered a retrieval of one response with another response: not relayed" in caplog.text
        assert other not in caplog.text


async def test_a_replay_or_large_answer_naming_another_response_is_withheld_and_its_pod_forgotten(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """The pod remembered as a response's holder answers its replay (``?stream=true``) with another
    response's events: nothing of the stream is relayed (the client gets 404 ``response_not_found``)
    and the pod is no longer remembered as the holder, so the next poll searches. A whole answer past
    ``WHOLE_ANSWER_BUFFER_BYTES`` (relayed as it arrives) naming another response is withheld too.
    Before session s45 a replay's events were written as they came, the first from the read callback
    before any was parsed, a large answer was checked only once relayed, and the lying pod stayed the
    holder: every later poll went to it alone."""
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        ids = []
        for _ in range(2):
            status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "x"}, alice)
            assert status == 200
            ids.append(made["id"])
        polled, other = ids
        holder = next(pod for pod in servers if polled in pod.stored_responses)
        right = holder.stored_responses[polled]
        wrong = next(pod.stored_responses[other] for pod in servers if other in pod.stored_responses)
        holder.stored_responses[polled] = wrong
        headers = {"Authorization": f"Bearer {alice}"}

        def holders() -> set[str | None]:
            return {sr.scheduler.responses.endpoint_of(polled) for sr in gw.state.runtime.schedulers.values()}

        assert holder.key in holders()
        async with gw.http.get(f"{gw.url}/v1/responses/{polled}?stream=true", headers=headers) as r:
            status, body = r.status, await r.read()
        assert status == 404, body
        assert b"response_not_found" in body
        assert other.encode() not in body
        assert holders() == {None}  # forgotten: the next poll searches
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1

        holder.stored_responses[polled] = {**wrong, "pad": "x" * (2 * 1024 * 1024)}  # past 1 MiB
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert status == 404
        assert other not in orjson.dumps(answer).decode()
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 2

        gw.state.response_searches.found(polled)  # as after the TTL
        holder.stored_responses[polled] = {**right, "pad": "x" * (2 * 1024 * 1024)}
        async with gw.http.get(f"{gw.url}/v1/responses/{polled}?stream=true", headers=headers) as r:
            status, body = r.status, await r.read()
        assert status == 200
        assert polled.encode() in body
        status, answer = await _ask(gw, "GET", f"/v1/responses/{polled}", alice)
        assert (status, answer["id"]) == (200, polled)


async def test_a_resumed_replay_s_first_deltas_are_streamed_not_held_to_its_end(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A replay (``?stream=true``) that opens with events naming no response - a resumed replay of a
    response still generating, whose deltas name only their item - is relayed as its events come:
    its first delta reaches the client while the pod has not yet sent the event naming the response.
    A proof-first rule (every replay held until an event names its response, tried in session s46)
    held such a replay to its ``response.completed``, minutes for a background response, and
    answered 404 to one past 1 MiB of deltas; the check stays on the first event with data (see
    docs/security.md, "stored responses")."""
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "x"}, alice)
        assert status == 200
        polled = made["id"]
        holder = next(pod for pod in servers if polled in pod.stored_responses)
        delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "first words"}
        holder.replay_first = b"event: response.output_text.delta\ndata: " + orjson.dumps(delta) + b"\n\n"
        headers = {"Authorization": f"Bearer {alice}"}
        async with gw.http.get(f"{gw.url}/v1/responses/{polled}?stream=true", headers=headers) as r:
            assert r.status == 200
            first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), timeout=10)
            assert b"first words" in first
            holder.replay_release.set()
            rest = await r.read()
        assert polled.encode() in rest
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 0


async def test_a_replay_going_on_with_another_response_is_cut_there(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A replay released at its first event, which named no response, whose next event names another
    response than the one asked for: that event (and its text, its id) never reaches the client; the
    stream ends with an error event, the answer is counted as misnamed and its pod forgotten as the
    holder. Until session s46 the rest of such a replay was relayed unchecked."""
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        alice = tokens.token(tenant="team-a", sub="alice")
        ids = []
        for _ in range(2):
            status, made = await _post(gw, "/v1/responses", {"model": "m", "input": "x"}, alice)
            assert status == 200
            ids.append(made["id"])
        polled, other = ids
        holder = next(pod for pod in servers if polled in pod.stored_responses)
        holder.stored_responses[polled] = next(
            pod.stored_responses[other] for pod in servers if other in pod.stored_responses
        )
        delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "first words"}
        holder.replay_first = b"event: response.output_text.delta\ndata: " + orjson.dumps(delta) + b"\n\n"
        headers = {"Authorization": f"Bearer {alice}"}
        async with gw.http.get(f"{gw.url}/v1/responses/{polled}?stream=true", headers=headers) as r:
            status = r.status
            first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), timeout=10)
            holder.replay_release.set()  # the event naming the other response comes in a later read
            body = first + await r.read()
        assert status == 200, body
        assert body.startswith(holder.replay_first)
        assert other.encode() not in body
        assert b"response.completed" not in body
        assert b"named another response" in body  # the error event the stream ends with
        assert gw.registry.get_sample_value("igw_usage_misnamed_total") == 1
        for sr in gw.state.runtime.schedulers.values():
            assert sr.scheduler.responses.endpoint_of(polled) is None


async def test_one_tenant_searching_made_up_ids_takes_only_its_share_of_the_search_places(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """Every retrieval of an id no scheduler here remembers is a search of the pods, and a process runs
    ``SEARCHES_IN_FLIGHT`` (16) at once. A tenant looping made-up ids held at most its scope's share
    (``SEARCHES_PER_SCOPE``, 4; since session s46, as at tier 2): its fifth search at once is refused
    503 ``response_search_busy`` naming its share, asking no pod, while another tenant's search still
    runs. Until then one tenant could take all 16 places and every other tenant's search was refused."""
    async with _gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        pod = servers[0]
        pod.stored_delay_s = 1.0  # each search holds its place that long (below SEARCH_TIMEOUT_S)
        tokens.clock.now = time.time()
        mallory = tokens.token(tenant="team-b", sub="mallory")
        alice = tokens.token(tenant="team-a", sub="alice")
        searches = gw.state.response_searches
        held = [
            asyncio.ensure_future(_ask(gw, "GET", f"/v1/responses/resp_made_up_{i}", mallory))
            for i in range(4)
        ]
        try:
            # each search's first ask reached the pod (until s48 the count was read when the places
            # were taken, sometimes before the requests arrived: the "no pod asked" check flaked)
            await wait_for(
                lambda: searches.in_flight == 4 and len(pod.received) == 4, what="four searches of mallory's"
            )
            asked = len(pod.received)
            status, answer = await _ask(gw, "GET", "/v1/responses/resp_made_up_5", mallory)
            assert status == 503
            assert answer["error"]["code"] == "response_search_busy"
            assert "4 others of yours (your share" in answer["error"]["message"]
            assert len(pod.received) == asked  # no pod asked
            refused = "igw_response_searches_refused_total"  # counted since session s47
            assert gw.registry.get_sample_value(refused, {"reason": "scope_busy"}) == 1
            assert gw.registry.get_sample_value(refused, {"reason": "busy"}) == 0
            alices = asyncio.ensure_future(_ask(gw, "GET", "/v1/responses/resp_alices", alice))
            await wait_for(lambda: searches.in_flight == 5, what="alice's search running")
            status, _ = await alices
            assert status == 404  # the pod's: it stores no such response
        finally:
            results = await asyncio.gather(*held)
        assert [status for status, _ in results] == [404] * 4
        assert searches.in_flight == 0


async def test_one_tenants_vain_search_does_not_answer_anothers_retrieval(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """An id found nowhere is answered 404 without a search for ``UNFOUND_TTL_S`` only to the caller
    scope that searched, over the same pools (as tier 2's list, :func:`igw.global_router.server._search_key`).
    Until session s46 tier 1 listed the id alone: a tenant whose search (of the pools it may use) found
    an id nowhere had every other tenant's retrieval of it answered 404 for 5 s, even where the other
    may search pools it may not - one who learnt an id (a log line) could deny its retrieval, again
    and again."""
    access = {
        "authorization": {
            "modelAccess": [
                {"claim": "tenant", "values": ["team-a"], "models": ["m"]},
                {"claim": "tenant", "values": ["team-b"], "models": ["m", "secret"]},
            ],
        },
    }
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=access
        ) as gw,
    ):
        holder = servers[1]  # pool "other" (model "secret"): team-b's alone
        rid = "resp_engine_made_1"  # an engine's own id (not minted: not bound to a caller)
        holder.stored_responses[rid] = {"id": rid, "object": "response", "output": []}
        tokens.clock.now = time.time()
        mallory = tokens.token(tenant="team-a", sub="mallory")
        bob = tokens.token(tenant="team-b", sub="bob")
        path = f"/v1/responses/{rid}"
        assert (await _ask(gw, "GET", path, mallory))[0] == 404  # pool "pool" searched: not there
        assert (await _ask(gw, "GET", path, mallory))[0] == 404
        assert len(servers[0].received) == 1  # mallory's second: answered from the list
        status, answer = await _ask(gw, "GET", path, bob)  # searches both pools: found
        assert (status, answer.get("id")) == (200, rid)
        assert len(holder.received) == 1
