"""The OpenAI-compatible surface over real loopback HTTP: routing, streaming, headers, errors."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import zlib
from typing import Any

import orjson
import pytest
from yarl import URL

from igw.gateway.inference_apis import InferenceApi
from igw.gateway.model_router import NO_MATCH_MESSAGE
from igw.gateway.request_body import DECODED_CONTENT_CODINGS, parse_body
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

DOC = config_doc(
    [
        scheduler("llama", "meta-llama/Llama-3.1-8B-Instruct", loraAdapters=["sql-lora"]),
        scheduler("qwen", "qwen3"),
    ],
    bbr={"maxRequestBodyBytes": 4096},
)


def completion(model: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": "Hello there, how are you?", "max_tokens": 5, **extra}
    if model is not None:
        body["model"] = model
    return body


async def test_streaming_is_relayed_byte_for_byte_and_event_by_event(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", tokens=4, token_delay_s=0.05)) as (a,),
        gateway(DOC, {"llama": [a.key], "qwen": []}) as gw,
    ):
        direct = await gw.http.post(f"http://{a.key}/v1/completions", json=completion("x", stream=True))
        expected = await direct.read()
        resp = await gw.post("/v1/completions", completion("meta-llama/Llama-3.1-8B-Instruct", stream=True))
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        chunks: list[bytes] = []
        async for chunk in resp.content.iter_any():
            chunks.append(chunk)
        assert b"".join(chunks).replace(b'"x"', b"") == expected.replace(b'"x"', b"")
        # 50 ms between tokens upstream: arriving as separate chunks proves nothing was buffered
        assert len(chunks) >= 4
        assert b"".join(chunks).endswith(b"data: [DONE]\n\n")


async def test_routes_by_model_field_and_header_and_sets_gateway_headers(gateway: Any) -> None:
    async with (
        running(FakeModelServer("llama"), FakeModelServer("qwen")) as (llama, qwen),
        gateway(DOC, {"llama": [llama.key], "qwen": [qwen.key]}) as gw,
    ):
        spoof = {"X-Gateway-Model-Name": "evil", "x-gateway-base-model-name": "evil"}
        r1 = await gw.post("/v1/completions", completion("qwen3"), headers=spoof)
        assert (await r1.json())["server"] == "qwen"
        r2 = await gw.post(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
            headers={"x-gateway-model-name": "sql-lora"},
        )
        assert r2.status == 200
        assert (await r2.json())["server"] == "llama"
        sent_q = qwen.received[-1].headers
        assert sent_q["X-Gateway-Model-Name"] == "qwen3"
        assert sent_q["X-Gateway-Base-Model-Name"] == "qwen3"
        sent_l = llama.received[-1].headers
        assert (sent_l["X-Gateway-Model-Name"], sent_l["X-Gateway-Base-Model-Name"]) == (
            "sql-lora",
            "meta-llama/Llama-3.1-8B-Instruct",
        )
        # the client's copies were replaced, not duplicated
        assert [v for k, v in qwen.received[-1].headers.items() if k.lower() == "x-gateway-model-name"] == [
            "qwen3"
        ]
        assert r1.headers["X-Request-Id"]
        # a model named by the header only is written into the body: the model server, which serves its
        # base model for a body without one, serves the adapter routed and authorized (session s34)
        assert orjson.loads(llama.received[-1].body) == {
            "messages": [{"role": "user", "content": "hi"}],
            "model": "sql-lora",
        }
        assert qwen.received[-1].body == json.dumps(completion("qwen3")).encode()  # a body naming it: as sent


@pytest.mark.parametrize("none", [None, ""], ids=["null", "empty"])
async def test_a_null_model_is_no_model_so_the_header_names_it(gateway: Any, none: str | None) -> None:
    """``"model": null`` is read as vLLM and SGLang read it, as no model: the request is routed by
    its ``x-gateway-model-name`` header and the header's model is written into the body forwarded
    (else the pod would serve its base model for the adapter routed and authorized). Before session
    s39 the null was taken as the name: 404 ``model_not_found`` whatever the header said; so was an
    empty name, which vLLM also reads as none (its base model), until later in s39."""
    async with (
        running(FakeModelServer("llama"), FakeModelServer("qwen")) as (llama, qwen),
        gateway(DOC, {"llama": [llama.key], "qwen": [qwen.key]}) as gw,
    ):
        chat = {"model": none, "messages": [{"role": "user", "content": "hi"}]}
        resp = await gw.post("/v1/chat/completions", chat, headers={"x-gateway-model-name": "sql-lora"})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "llama"
        assert orjson.loads(llama.received[-1].body) == {**chat, "model": "sql-lora"}
        assert llama.received[-1].headers["X-Gateway-Model-Name"] == "sql-lora"
        resp = await gw.post("/v1/chat/completions", chat)  # no header either: no model
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == "model_not_found"
        assert len(llama.received) == 1
        assert qwen.received == []


async def test_error_paths_have_openai_shape(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        cases = [
            (completion("nope"), 404, NO_MATCH_MESSAGE),
            (completion(None), 404, NO_MATCH_MESSAGE),
            (b"{not json", 400, "request body is not valid JSON"),
            (b"[1, 2]", 400, "request body must be a JSON object, got list"),
            (b"", 400, "request body is empty"),
            (completion("qwen3", stream="yes"), 400, "'stream' must be true or false"),
            ({"model": "qwen3"}, 400, "'prompt' is required"),
            (completion("qwen3"), 503, "no model server endpoint available for 'qwen3'"),
            (
                completion("qwen3", prompt="x" * 5000),
                413,
                "request body exceeds bbr.maxRequestBodyBytes (4096 bytes)",
            ),
        ]
        for body, status, message in cases:
            resp = await gw.post("/v1/completions", body)
            err = (await resp.json())["error"]
            assert resp.status == status, (body, await resp.text())
            assert err["message"].startswith(message), err
            assert set(err) == {"message", "type", "param", "code"}
        assert a.received == []  # none of them reached a model server
        resp = await gw.http.get(gw.url + "/v1/nothing")
        assert resp.status == 404
        assert (await resp.json())["error"]["message"] == "GET /v1/nothing: Not Found"
        # A '/' sent percent-encoded is not a separator: the decoded path in the message would read
        # as if the real route were missing, so the message says why.
        resp = await gw.http.post(URL(gw.url + "/v1%2Fcompletions", encoded=True), json=completion("qwen3"))
        assert resp.status == 404
        message = (await resp.json())["error"]["message"]
        assert message.startswith("POST /v1/completions: Not Found (the path as decoded: its %2F"), message
        assert a.received == []


async def test_a_body_in_a_coding_the_gateway_does_not_decode_is_a_415_naming_the_header(
    gateway: Any,
) -> None:
    """A gzip body is decoded and routed; a body whose ``Content-Encoding`` the gateway does not
    decode (a coding aiohttp passes by as if none: ``x-gzip``, ``compress``, two codings, junk) is a
    415 naming the header, with ``Accept-Encoding`` listing what it decodes, in the API's shape.
    Before session s39 such a body was read as not encoded: a compressed one got 400 "request body
    is not valid JSON", and a plain one under a junk coding was served."""
    chat = {"model": "qwen3", "messages": [{"role": "user", "content": "hi"}]}
    async with running(FakeModelServer("q")) as (q,), gateway(DOC, {"llama": [], "qwen": [q.key]}) as gw:
        zipped = gzip.compress(orjson.dumps(chat))
        resp = await gw.post("/v1/chat/completions", zipped, headers={"Content-Encoding": "gzip"})
        assert resp.status == 200, await resp.text()
        assert orjson.loads(q.received[-1].body) == chat
        for coding, body in [
            ("x-gzip", zipped),
            ("compress", zipped),
            ("gzip, deflate", zipped),
            ("junk", orjson.dumps(chat)),
        ]:
            resp = await gw.post("/v1/chat/completions", body, headers={"Content-Encoding": coding})
            assert resp.status == 415, (coding, await resp.text())
            error = (await resp.json())["error"]
            assert (error["code"], error["param"]) == ("unsupported_content_encoding", "Content-Encoding")
            assert error["message"].startswith(f"Content-Encoding {coding!r} is not supported"), error
            assert "gzip" in resp.headers["Accept-Encoding"].split(", ")
        messages = {"model": "qwen3", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        resp = await gw.post("/v1/messages", orjson.dumps(messages), headers={"Content-Encoding": "junk"})
        assert resp.status == 415
        assert (await resp.json())["type"] == "error"  # Anthropic's shape on its route
        assert len(q.received) == 1


async def test_a_body_in_br_or_zstd_without_their_decoder_is_a_415_not_a_malformed_request(
    gateway: Any,
) -> None:
    """aiohttp's parser refuses a head whose ``Content-Encoding`` is ``br`` or ``zstd`` when their
    decoder is not installed (the gateway image ships neither): that was a 400 "malformed HTTP
    request" naming nothing before session s39, OpenAI-shaped on ``/v1/messages`` too. It is the 415
    of any other coding the gateway does not decode, in the API's shape; a deflate body cut short
    (aiohttp raises the same exception class) stays a 400."""
    codings = [coding for coding in ("br", "zstd") if coding not in DECODED_CONTENT_CODINGS]
    if not codings:
        pytest.skip("brotli and zstd decoders are installed: aiohttp decodes both")
    said = [{"role": "user", "content": "hi"}]
    chat = orjson.dumps({"model": "qwen3", "messages": said})
    messages = orjson.dumps({"model": "qwen3", "max_tokens": 5, "messages": said})
    async with running(FakeModelServer("q")) as (q,), gateway(DOC, {"llama": [], "qwen": [q.key]}) as gw:
        for coding in codings:
            resp = await gw.post("/v1/chat/completions", chat, headers={"Content-Encoding": coding})
            assert resp.status == 415, (coding, await resp.text())
            error = (await resp.json())["error"]
            assert (error["code"], error["param"]) == ("unsupported_content_encoding", "Content-Encoding")
            assert error["message"].startswith(f"Content-Encoding {coding!r} is not supported"), error
            assert resp.headers["Accept-Encoding"].split(", ") == sorted(DECODED_CONTENT_CODINGS)
            resp = await gw.post("/v1/messages", messages, headers={"Content-Encoding": coding})
            assert resp.status == 415, (coding, await resp.text())
            assert (await resp.json())["error"]["type"] == "invalid_request_error"  # Anthropic's shape
        cut_short = zlib.compress(chat)[:-6]
        resp = await gw.post("/v1/chat/completions", cut_short, headers={"Content-Encoding": "deflate"})
        assert resp.status == 400, await resp.text()
        assert (await resp.json())["error"]["code"] == "bad_http_request"
        assert q.received == []


async def test_json_bombs_are_400s_and_a_repeated_model_routes_as_the_server_reads_it(gateway: Any) -> None:
    """Bodies built to hurt a parser (probed against a real igw serve, 2026-12-03) get a 400 naming the
    problem and never reach a model server; a repeated member is not refused: the last one counts, as
    in the JSON parsers of vLLM and SGLang (Python's), so the model the gateway authorizes and routes
    is the one the model server reads."""
    async with (
        running(FakeModelServer("llama"), FakeModelServer("qwen")) as (llama, qwen),
        gateway(DOC, {"llama": [llama.key], "qwen": [qwen.key]}) as gw,
    ):
        head = b'{"model": "qwen3", "prompt": '
        bombs = {
            "nesting past 1,024 levels": head + b"[" * 1100 + b"]" * 1100 + b"}",
            "a number past a double": head + b'"x", "max_tokens": 1e400}',
            "a 600-digit integer": head + b'"x", "max_tokens": ' + b"9" * 600 + b"}",
            "NaN": head + b'"x", "max_tokens": NaN}',
            "Infinity": head + b'"x", "max_tokens": Infinity}',
            "invalid UTF-8": head + b'"\xff\xfe"}',
            "a lone surrogate escape": head + b'"\\ud800"}',
        }
        for case, body in bombs.items():
            resp = await gw.post("/v1/completions", body)
            err = (await resp.json())["error"]
            assert resp.status == 400, (case, err)
            assert (err["code"], err["type"]) == ("invalid_request", "invalid_request_error"), case
            assert err["message"].startswith("request body is not valid JSON: "), (case, err)
        assert llama.received == qwen.received == []
        twice = (
            b'{"model": "meta-llama/Llama-3.1-8B-Instruct", "model": "qwen3", "prompt": "x", "max_tokens": 2}'
        )
        resp = await gw.post("/v1/completions", twice)
        assert resp.status == 200
        assert (await resp.json())["server"] == "qwen"
        assert json.loads(qwen.received[-1].body)["model"] == "qwen3"  # what the server's parser reads
        assert llama.received == []


async def test_oversized_chunked_body_is_refused_without_reading_it_all(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = 0
        answer = b""
        while sent < 1_000_000 and not answer:
            writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n")  # chunks of 1 KiB, no Content-Length
            await writer.drain()
            sent += 1024
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(reader.read(200), timeout=0.01)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 413")
        assert sent <= 4096 + 8 * 1024  # answered right after the limit, not after reading everything
        assert a.received == []


async def test_models_lists_configured_models_and_adapters(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        resp = await gw.http.get(gw.url + "/v1/models")
        data = (await resp.json())["data"]
        assert [(m["id"], m["parent"]) for m in data] == [
            ("meta-llama/Llama-3.1-8B-Instruct", None),
            ("qwen3", None),
            ("sql-lora", "meta-llama/Llama-3.1-8B-Instruct"),
        ]


async def test_a_model_is_retrieved_as_listed_and_an_unknown_one_is_model_not_found(gateway: Any) -> None:
    """``GET /v1/models/{model}`` (the OpenAI SDK's ``models.retrieve``, which sends a name's ``/`` as
    ``%2F``; curl sends it as it is) answers the entry ``GET /v1/models`` lists; a name the gateway
    does not serve is an OpenAI-shaped 404 ``model_not_found`` naming ``model``. Before session s39
    every retrieval was 404 ``not_found``: no such route."""
    import openai

    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(DOC, {"llama": [a.key], "qwen": []}) as gw,
        openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as client,
    ):
        listed = (await (await gw.http.get(gw.url + "/v1/models")).json())["data"]
        for entry in listed:
            model = await client.models.retrieve(entry["id"])
            assert model.model_dump(exclude_unset=True) == entry
        resp = await gw.http.get(gw.url + "/v1/models/meta-llama/Llama-3.1-8B-Instruct")  # '/' as sent
        assert resp.status == 200
        assert await resp.json() == listed[0]
        with pytest.raises(openai.NotFoundError) as missing:
            await client.models.retrieve("nope/model")
        assert missing.value.code == "model_not_found"
        assert missing.value.body == {
            "message": "The model 'nope/model' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        assert a.received == []


async def test_a_request_for_n_answers_counts_n_output_bounds_in_flight(gateway: Any) -> None:
    """The tokens an endpoint has in flight (what the token-load scorer reads) count each of a
    request's ``n`` answers: a request for four answers of up to 50 tokens may generate 200. Before
    session s39 it counted as one answer (50)."""
    async with (
        running(FakeModelServer("a", first_token_delay_s=0.5)) as (a,),
        gateway(DOC, {"llama": [a.key], "qwen": []}) as gw,
    ):
        body = completion("meta-llama/Llama-3.1-8B-Instruct", max_tokens=50, n=4)
        prompt = parse_body(orjson.dumps(body), api=InferenceApi.COMPLETIONS, header_model=None).prompt_tokens
        state = gw.state.runtime.schedulers["llama"].pool.states[a.key]
        sent = asyncio.ensure_future(gw.post("/v1/completions", body))
        await wait_for(lambda: state.view().inflight == 1, what="the request in flight")
        assert state.view().inflight_tokens == prompt + 4 * 50
        assert (await sent).status == 200
        await wait_for(lambda: state.view().inflight == 0, what="the request completed")
        assert state.view().inflight_tokens == 0


async def test_non_streaming_usage_metrics_and_nodelay_keepalive(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a", tokens=3)) as (a,),
        gateway(DOC, {"llama": [a.key], "qwen": []}) as gw,
    ):
        for _ in range(3):
            resp = await gw.post("/v1/completions", completion("meta-llama/Llama-3.1-8B-Instruct"))
            assert (await resp.json())["usage"]["completion_tokens"] == 3
        assert all(r.nodelay for r in a.received)  # TCP_NODELAY on the gateway's upstream sockets
        ports = {r.headers.get("X-Forwarded-Port") for r in a.received}
        assert ports == {None}
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        llama = "meta-llama/Llama-3.1-8B-Instruct"
        assert f'igw_requests_total{{code="200",model="{llama}",requested_model="{llama}"}} 3.0' in text
        assert 'igw_tokens_total{direction="out",model="meta-llama/Llama-3.1-8B-Instruct"} 9.0' in text
        assert f'igw_endpoint_picks_total{{endpoint="{a.key}",scheduler="llama"}} 3.0' in text
        assert "igw_scheduler_decision_seconds_count" in text
        assert f'igw_endpoint_queue_depth{{endpoint="{a.key}",scheduler="llama"}}' in text


async def test_upstream_connections_are_kept_alive_and_reused(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        for _ in range(5):
            await (await gw.post("/v1/completions", completion("meta-llama/Llama-3.1-8B-Instruct"))).read()
        assert len(a.received) == 5
        assert len({r.peer_port for r in a.received}) == 1  # one pooled connection served all five
