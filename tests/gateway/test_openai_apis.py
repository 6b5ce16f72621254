"""Unchanged OpenAI client code - the real ``openai`` SDK - pointed at the gateway, for the APIs besides
the two completion ones: embeddings and the Responses API, whole and streamed, on both sides of the
``IGW_HTTP_SERVER`` switch, over real loopback HTTP in front of fake model servers.

Before session s31 every call here answered 404 ``not_found`` (only ``/v1/chat/completions`` and
``/v1/completions`` were routed), although the pools behind the gateway served these APIs."""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

import openai
import orjson
import pytest

from igw.gateway.inference_apis import INFERENCE_PATHS, InferenceApi, operation_name
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.response_ids import response_ref
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

CHAT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EMBEDDING_MODEL = "BAAI/bge-m3"
DOC = config_doc([scheduler("llama", CHAT_MODEL), scheduler("bge", EMBEDDING_MODEL)])
SWITCHES = pytest.mark.parametrize("switch", ["lean", "aiohttp"])
OPENING = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
"""A streamed response's events before its first delta, in OpenAI's and vLLM's order."""
CLOSING = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


def holder(pods: list[FakeModelServer], response_id: str) -> str:
    """The name of the pod that made response ``response_id`` (the gateway chooses the ids)."""
    (name,) = [p.name for p in pods if response_id in p.made_responses]
    return name


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` whose labels include ``labels`` (0 when there is none)."""
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@SWITCHES
async def test_embeddings_are_routed_by_model_to_their_pool(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("llama"), FakeModelServer("bge")) as (llama, bge),
        gateway(DOC, {"llama": [llama.key], "bge": [bge.key]}) as gw,
    ):
        async with client(gw.url) as oai:
            one = await oai.embeddings.create(model=EMBEDDING_MODEL, input="what is a KV cache?")
            many = await oai.embeddings.create(model=EMBEDDING_MODEL, input=["first", "second", "third"])
        assert one.data[0].embedding == [0.5, 0.25, 0.125, 0.0]
        assert [d.index for d in many.data] == [0, 1, 2]
        assert [r.path for r in bge.received] == ["/v1/embeddings"] * 2
        assert llama.received == []
        sent = orjson.loads(bge.received[1].body)
        assert (sent["model"], sent["input"]) == (EMBEDDING_MODEL, ["first", "second", "third"])
        assert bge.received[0].headers["X-Gateway-Model-Name"] == EMBEDDING_MODEL
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_requests_total", model=EMBEDDING_MODEL, code="200") == 2
        assert metric(text, "igw_tokens_total", model=EMBEDDING_MODEL, direction="in") == 7 + 21
        assert metric(text, "igw_endpoint_picks_total", scheduler="bge", endpoint=bge.key) == 2


@SWITCHES
async def test_a_response_whole_counts_its_usage_under_the_completion_names(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("a", tokens=4)) as (a,),
        gateway(DOC, {"llama": [a.key], "bge": []}) as gw,
    ):
        async with client(gw.url) as oai:
            response = await oai.responses.create(
                model=CHAT_MODEL, instructions="Answer briefly.", input="What is prefix caching?"
            )
        assert response.output_text == "tok0tok1tok2tok3"
        assert response.usage is not None
        assert response.usage.output_tokens == 4
        assert [r.path for r in a.received] == ["/v1/responses"]
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="in") == 7
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 4


@SWITCHES
async def test_a_streamed_response_is_relayed_event_by_event_and_its_ttft_is_the_first_delta(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, switch: str
) -> None:
    """``response.created`` leaves the model server before the prefill (vLLM sends it at once): the
    TTFT is the first ``response.output_text.delta``, 0.3 s later here, not the created event."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("a", tokens=3, first_token_delay_s=0.3, token_delay_s=0.02)) as (a,),
        gateway(DOC, {"llama": [a.key], "bge": []}) as gw,
    ):
        async with client(gw.url) as oai:
            stream = await oai.responses.create(model=CHAT_MODEL, input="hi", stream=True)
            kinds = [event.type async for event in stream]
        assert kinds == [*OPENING, *["response.output_text.delta"] * 3, *CLOSING]
        (line,) = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        assert line["path"] == "/v1/responses"
        assert line["stream"] is True
        assert line["ttft_ms"] >= 300
        assert line["completion_tokens"] == 3
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_time_to_first_token_seconds_count", model=CHAT_MODEL) == 1
        # the 0.25 s bucket holds no observation: the created event did not count as the first token
        assert metric(text, "igw_time_to_first_token_seconds_bucket", model=CHAT_MODEL, le="0.25") == 0
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 3


@SWITCHES
async def test_the_sdks_response_stream_helper_builds_the_response_through_the_gateway(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """``client.responses.stream`` (the SDK's accumulating helper) gets every event it needs to build
    the response: it raised on a delta before its output item when the fake sent only created,
    deltas and completed."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("a", tokens=4)) as (a,),
        gateway(DOC, {"llama": [a.key], "bge": []}) as gw,
    ):
        async with client(gw.url) as oai, oai.responses.stream(model=CHAT_MODEL, input="hi") as stream:
            texts = [event.delta async for event in stream if event.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        assert texts == ["tok0", "tok1", "tok2", "tok3"]
        assert final.output_text == "tok0tok1tok2tok3"
        assert final.usage is not None
        assert final.usage.output_tokens == 4
        assert final.id in a.made_responses


async def test_bad_bodies_of_the_new_apis_get_openai_errors_naming_the_field(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "bge": []}) as gw:
        cases = [
            ("/v1/embeddings", {"model": EMBEDDING_MODEL}, "input"),
            ("/v1/embeddings", {"model": EMBEDDING_MODEL, "input": 3}, "input"),
            ("/v1/responses", {"model": CHAT_MODEL, "messages": []}, "input"),
            (
                "/v1/responses",
                {"model": CHAT_MODEL, "input": "x", "max_output_tokens": "9"},
                "max_output_tokens",
            ),
            ("/v1/responses", {"model": CHAT_MODEL, "input": "x", "instructions": ["a"]}, "instructions"),
        ]
        for path, body, param in cases:
            resp = await gw.post(path, body)
            assert resp.status == 400, (path, body)
            error = (await resp.json())["error"]
            assert (error["code"], error["param"]) == ("invalid_request", param)
        unknown = await gw.post("/v1/responses", {"model": "nope", "input": "x"})
        assert unknown.status == 404
        assert (await unknown.json())["error"]["code"] == "model_not_found"
        async with client(gw.url) as oai:
            with pytest.raises(openai.BadRequestError, match="'input' must be"):
                await oai.embeddings.create(model=EMBEDDING_MODEL, input=3)  # type: ignore[arg-type]
        assert a.received == []  # nothing reached the model server


async def test_a_response_stream_cut_by_its_pod_ends_in_an_error_the_sdk_raises(gateway: Any) -> None:
    """The relay's terminal event (``data: {"error": ...}``) is what the SDK raises for on any stream."""
    async with (
        running(FakeModelServer("a", tokens=5, die_after=2)) as (a,),
        gateway(DOC, {"llama": [a.key], "bge": []}) as gw,
    ):
        seen: list[str] = []

        async def read_the_stream() -> None:
            async with client(gw.url) as oai:
                stream = await oai.responses.create(model=CHAT_MODEL, input="hi", stream=True)
                async for event in stream:
                    seen.append(event.type)

        with pytest.raises(openai.APIError, match="upstream model server closed the stream"):
            await read_the_stream()
        assert seen == [*OPENING, "response.output_text.delta", "response.output_text.delta"]


@SWITCHES
async def test_a_conversation_continued_by_previous_response_id_stays_on_the_pod_that_stored_it(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """vLLM keeps stored responses in the serving process's memory: a continuation anywhere else is
    a 404. Without the affinity about two of three continuations failed on three idle pods."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    pods = [FakeModelServer(name) for name in ("a", "b", "c")]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as gw:
        async with client(gw.url) as oai:
            for conversation in range(3):
                previous = None
                for turn in range(4):
                    stream = turn % 2 == 1
                    if stream:
                        events = await oai.responses.create(
                            model=CHAT_MODEL, input=f"turn {turn}", previous_response_id=previous, stream=True
                        )
                        completed = [e async for e in events if e.type == "response.completed"]
                        previous = completed[0].response.id
                    else:
                        answer = await oai.responses.create(
                            model=CHAT_MODEL, input=f"turn {turn}", previous_response_id=previous
                        )
                        previous = answer.id
                    assert previous.startswith("resp_"), conversation
        for pod in pods:  # every turn of a conversation on the pod of its first
            first_turns = [
                r for r in pod.received if orjson.loads(r.body).get("previous_response_id") is None
            ]
            assert len(pod.received) == 4 * len(first_turns)


async def test_a_continuation_of_a_response_made_elsewhere_finds_its_pod(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A response made through another gateway replica (here: straight at a pod) is unknown to this
    one: the pool's pods are asked in the decision's order until one has it, and the conversation
    then stays there. Without the search about three of four such continuations failed."""
    caplog.set_level(logging.INFO, logger="igw.access")
    pods = [FakeModelServer(name) for name in ("a", "b", "c", "d")]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as gw:
        made = []
        for pod in pods * 2:  # two conversations started on each pod, not through this gateway
            async with gw.http.post(
                f"http://{pod.key}/v1/responses", json={"model": CHAT_MODEL, "input": "hi"}
            ) as r:
                made.append((pod.name, (await r.json())["id"]))
        async with client(gw.url) as oai:
            for made_on, previous in made:
                answer = await oai.responses.create(
                    model=CHAT_MODEL, input="next", previous_response_id=previous
                )
                assert holder(pods, answer.id) == made_on
                follow_up = await oai.responses.create(
                    model=CHAT_MODEL, input="more", previous_response_id=answer.id
                )
                assert holder(pods, follow_up.id) == made_on
        lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        assert all(line["status"] == 200 for line in lines)
        assert max(line["attempts"] for line in lines) > 1  # some were searched for
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        searched = metric(text, "igw_upstream_retries_total", cause="response-search")
        assert searched == sum(line["attempts"] - 1 for line in lines)
        assert gw.state.runtime.schedulers["llama"].scheduler.outliers.ejected == {}


async def test_a_continuation_no_pod_stores_is_relayed_404_and_ejects_nobody(gateway: Any) -> None:
    """A 404 for a continuation says the response is not stored there (another gateway replica's
    conversation, a restarted pod), not that the pod lacks the model: not an outlier failure, not a
    pod fault, however many arrive."""
    pods = [FakeModelServer(name) for name in ("a", "b")]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as gw:
        for i in range(12):
            resp = await gw.post(
                "/v1/responses", {"model": CHAT_MODEL, "input": "x", "previous_response_id": f"resp_{i}"}
            )
            assert resp.status == 404
            assert "not found" in (await resp.json())["error"]["message"]
        scheduler = gw.state.runtime.schedulers["llama"].scheduler
        assert scheduler.outliers.ejected == {}
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_endpoint_ejections_total") == 0
        assert (await gw.post("/v1/responses", {"model": CHAT_MODEL, "input": "new"})).status == 200


async def test_a_stored_response_is_retrieved_cancelled_and_deleted_on_the_pod_that_stored_it(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Background mode polls ``GET /v1/responses/{id}``: only the pod that stored it can answer."""
    caplog.set_level(logging.INFO, logger="igw.access")
    pods = [FakeModelServer(name) for name in ("a", "b", "c")]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as gw:
        async with client(gw.url) as oai:
            made = [await oai.responses.create(model=CHAT_MODEL, input=f"q{i}") for i in range(6)]
            for response in made:
                again = await oai.responses.retrieve(response.id)
                assert (again.id, again.output_text) == (response.id, response.output_text)
                items = await oai.responses.input_items.list(response.id)
                assert items.data == []
            cancelled = await oai.responses.cancel(made[0].id)
            assert cancelled.status == "cancelled"
            await oai.responses.delete(made[1].id)
            with pytest.raises(openai.NotFoundError, match="not found"):
                await oai.responses.retrieve(made[1].id)  # the pod's own 404, relayed
            with pytest.raises(openai.NotFoundError, match="not found"):
                await oai.responses.retrieve("resp_nobody_made")  # searched: every pod's 404
        for pod in pods:  # every request about a response went to the pod that stored it
            for r in pod.received:
                if r.path.startswith("/v1/responses/") and "nobody" not in r.path:
                    assert r.path.split("/")[3] in pod.made_responses, (pod.name, r.path)
        asked = [r for p in pods for r in p.received if r.path.startswith("/v1/responses/")]
        assert len(asked) == 6 * 2 + 3 + len(pods)  # ... and the search for resp_nobody_made
        resumed = await gw.http.get(gw.url + f"/v1/responses/{made[2].id}?stream=true")
        assert resumed.headers["Content-Type"].startswith("text/event-stream")
        assert b"response.completed" in await resumed.read()
        lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        # the id left out, its one-way reference in its place (until session s50 the id, which
        # reads and deletes the response, was in every such line)
        # (the gateway's records: the test's own client, httpx, logs each URL it asks at INFO when
        # another test left the root logger there)
        ours = [r for r in caplog.records if r.name == "igw" or r.name.startswith("igw.")]
        assert not [r for r in ours if any(m.id in r.getMessage() for m in made)]
        logged = f"/v1/responses/{{response_id:{response_ref(made[3].id)}}}"
        retrieval = [line for line in lines if line["path"] == logged]
        assert retrieval[0]["model"] == CHAT_MODEL
        assert retrieval[0]["method"] == "GET"
        assert retrieval[0]["status"] == 200
        # generated once, counted once: 6 responses of 7 + 5 tokens; the retrievals and the resumed
        # stream add none
        assert {
            line["completion_tokens"] for line in lines if line["method"] == "GET" and line["status"] == 200
        } == {0}
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="in") == 6 * 7
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 6 * 5


@SWITCHES
async def test_a_stored_response_made_through_another_replica_is_found_and_remembered(
    gateway: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """Two gateway replicas (the chart's default) in front of one pool: background mode polls
    whichever replica the load balancer picks. Before session s32 the replica that had not made the
    response answered 404 ``response_not_found`` to every poll, half of them on two replicas."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    caplog.set_level(logging.INFO, logger="igw.access")
    pods = [FakeModelServer(name) for name in ("a", "b", "c", "d")]
    async with (
        running(*pods),
        gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as one,
        gateway(DOC, {"llama": [p.key for p in pods], "bge": []}) as two,
    ):
        async with client(one.url) as via_one, client(two.url) as via_two:
            made = [await via_one.responses.create(model=CHAT_MODEL, input=f"q{i}") for i in range(8)]
            assert len({holder(pods, r.id) for r in made}) > 1  # stored on several pods
            caplog.clear()
            for response in made:
                for _ in range(3):  # polled three times through the other replica
                    again = await via_two.responses.retrieve(response.id)
                    assert (again.id, again.output_text) == (response.id, response.output_text)
            assert (await via_two.responses.input_items.list(made[0].id)).data == []
            assert (await via_two.responses.cancel(made[1].id)).status == "cancelled"
            # the conversation goes on through the replica that found it, on its pod
            follow_up = await via_two.responses.create(
                model=CHAT_MODEL, input="more", previous_response_id=made[2].id
            )
            assert holder(pods, follow_up.id) == holder(pods, made[2].id)
        lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        polls = [line for line in lines if line["method"] == "GET"]
        assert [line["status"] for line in polls] == [200] * len(polls)
        firsts = polls[0:24:3]
        assert all(line["attempts"] == 1 for line in polls if line not in firsts)  # remembered
        assert any(line["attempts"] > 1 for line in firsts)  # searched for
        assert all(line["model"] == CHAT_MODEL for line in polls)
        text = await (await two.http.get(two.url + "/metrics")).text()
        searched = metric(text, "igw_upstream_retries_total", scheduler="llama", cause="response-search")
        assert searched == sum(line["attempts"] - 1 for line in firsts) > 0
        assert metric(text, "igw_endpoint_ejections_total") == 0
        assert metric(text, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 5  # the follow-up
        assert two.state.runtime.schedulers["llama"].scheduler.outliers.ejected == {}


async def test_a_search_for_a_stored_response_asks_only_pools_the_caller_may_use(gateway: Any) -> None:
    """A retrieval names no model: the pools searched are those of the models the caller's token
    allows, so a stored response of a pool it may not use is a 404 and that pool's pods never see
    the request."""
    from tests.gateway.test_routing_and_guard import RecordingGuard

    secret_model = "team-b/secret-model"
    doc = config_doc([scheduler("llama", CHAT_MODEL), scheduler("secret", secret_model)])
    auth = {"authorization": "Bearer good"}
    async with (
        running(FakeModelServer("a"), FakeModelServer("s")) as (a, s),
        gateway(
            doc, {"llama": [a.key], "secret": [s.key]}, guard=RecordingGuard(deny_model=secret_model)
        ) as gw,
    ):
        async with gw.http.post(
            f"http://{s.key}/v1/responses", json={"model": secret_model, "input": "x"}
        ) as r:
            theirs = (await r.json())["id"]
        async with gw.http.post(
            f"http://{a.key}/v1/responses", json={"model": CHAT_MODEL, "input": "x"}
        ) as r:
            mine = (await r.json())["id"]
        s.received.clear()
        assert (await gw.http.get(f"{gw.url}/v1/responses/{mine}", headers=auth)).status == 200
        denied = await gw.http.get(f"{gw.url}/v1/responses/{theirs}", headers=auth)
        assert denied.status == 404
        assert s.received == []
        assert (await gw.http.get(f"{gw.url}/v1/responses/{theirs}")).status == 401
    async with (
        running(FakeModelServer("s")) as (s,),
        gateway(
            config_doc([scheduler("secret", secret_model)]),
            {"secret": [s.key]},
            guard=RecordingGuard(deny_model=secret_model),
        ) as gw,
    ):
        nothing = await gw.http.get(f"{gw.url}/v1/responses/resp_x", headers=auth)
        assert nothing.status == 404
        assert (await nothing.json())["error"]["code"] == "response_not_found"
        assert s.received == []


async def test_a_search_for_a_stored_response_passes_a_pod_that_is_gone(gateway: Any) -> None:
    """A pod that no longer accepts connections took its stored responses with it: the search asks
    the next one (a poll is not failed by a dead pod ahead of the one that has the response)."""
    from tests.gateway.support import wait_for

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    async with (
        running(FakeModelServer("b")) as (b,),
        gateway(DOC, {"llama": [dead, b.key], "bge": []}, wait_fresh=False) as gw,
    ):
        await wait_for(lambda: gw.fresh("llama", b.key), what="b scraped")
        assert next(iter(gw.state.runtime.schedulers["llama"].pool.states)) == dead  # asked first
        async with gw.http.post(
            f"http://{b.key}/v1/responses", json={"model": CHAT_MODEL, "input": "x"}
        ) as r:
            stored = (await r.json())["id"]
        found = await gw.http.get(f"{gw.url}/v1/responses/{stored}")
        assert found.status == 200
        assert (await found.json())["id"] == stored


@SWITCHES
async def test_rerank_and_score_are_routed_by_model_to_the_reranker_pool(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """A RAG pipeline's reranking step, as Jina's, Cohere's and vLLM's own clients send it (vLLM
    serves rerank under three paths, score under two); before session s32 each was a 404."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    reranker = "BAAI/bge-reranker-v2-m3"
    doc = config_doc([scheduler("llama", CHAT_MODEL), scheduler("rerank", reranker)])
    documents = ["vLLM is an inference engine.", {"text": "Paris is in France."}, "Cats purr."]
    async with (
        running(FakeModelServer("llama"), FakeModelServer("rr")) as (llama, rr),
        gateway(doc, {"llama": [llama.key], "rerank": [rr.key]}) as gw,
    ):
        for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
            resp = await gw.post(path, {"model": reranker, "query": "what is vLLM?", "documents": documents})
            assert resp.status == 200, await resp.text()
            assert [r["index"] for r in (await resp.json())["results"]] == [0, 1, 2]
        for path in ("/score", "/v1/score"):
            resp = await gw.post(path, {"model": reranker, "text_1": "what is vLLM?", "text_2": ["a", "b"]})
            assert resp.status == 200, await resp.text()
            assert [d["score"] for d in (await resp.json())["data"]] == [1.0, 0.5]
        assert [r.path for r in rr.received] == ["/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score"]
        assert llama.received == []
        bad = await gw.post("/v1/rerank", {"model": reranker, "query": "q", "documents": []})
        assert bad.status == 400
        assert (await bad.json())["error"]["param"] == "documents"
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        # rerank reports only total_tokens: counted as the prompt's (3 x 7 per request); score: 2 x 7
        assert metric(text, "igw_tokens_total", model=reranker, direction="in") == 3 * 3 * 7 + 2 * 2 * 7
        assert metric(text, "igw_tokens_total", model=reranker, direction="out") == 0
        assert metric(text, "igw_requests_total", model=reranker, code="200") == 5


def test_every_route_has_an_operation_name_of_its_api() -> None:
    assert {path: operation_name(path) for path in INFERENCE_PATHS} == {
        "/v1/chat/completions": "chat",
        "/v1/completions": "text_completion",
        "/v1/embeddings": "embeddings",
        "/v1/responses": "responses",
        "/rerank": "rerank",
        "/v1/rerank": "rerank",
        "/v2/rerank": "rerank",
        "/score": "score",
        "/v1/score": "score",
        "/v1/messages": "chat",  # the Anthropic Messages API: a chat, as the GenAI conventions name it
        "/v1/messages/count_tokens": "count_tokens",  # its token count: no GenAI operation covers it
    }
    assert set(INFERENCE_PATHS.values()) == set(InferenceApi)
    assert all(re.fullmatch(r"(/v[12])?/[a-z/_]+", path) for path in INFERENCE_PATHS)


@SWITCHES
async def test_the_sdk_does_not_retry_a_request_the_gateway_stopped_waiting_for(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """A 504 for a request its model server had until ``responseTimeout`` says ``X-Should-Retry:
    false``, which the SDK obeys before the status. Before session s48 the SDK retried it as any
    5xx (twice by default): the pod got the request three times and the caller waited three
    timeouts, a retry neither tier of the gateway makes."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    doc = config_doc(
        [scheduler("llama", CHAT_MODEL), scheduler("bge", EMBEDDING_MODEL)],
        routing={"responseTimeout": "300ms"},
    )
    async with (
        running(FakeModelServer("a", first_token_delay_s=5.0)) as (a,),
        gateway(doc, {"llama": [a.key], "bge": []}) as gw,
    ):
        # the SDK's default retries; the backoff it would wait between them is not the test's to sit out
        oai = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=2, timeout=30)
        monkeypatch.setattr(oai, "_calculate_retry_timeout", lambda *args, **kw: 0.0)
        async with oai:
            with pytest.raises(openai.InternalServerError) as stopped:
                await oai.chat.completions.create(
                    model=CHAT_MODEL, messages=[{"role": "user", "content": "hi"}]
                )
        assert (stopped.value.status_code, stopped.value.code) == (504, "upstream_timeout")
        assert [r.path for r in a.received] == ["/v1/chat/completions"]
        assert stopped.value.response.headers["x-should-retry"] == "false"
