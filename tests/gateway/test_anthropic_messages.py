"""The Anthropic Messages API (``POST /v1/messages``, which vLLM serves from 0.11.1) through the
gateway, driven by the real ``anthropic`` SDK as an agent built on it calls it, on both sides of the
``IGW_HTTP_SERVER`` switch, over loopback in front of fake model servers.

Before session s32 every call here was a 404 ``not_found``, and a stream the gateway had to end
early (a pod dying mid-stream) ended with an unnamed ``data: {"error": ...}`` event that the
Anthropic SDK skips: the caller got a truncated message and no error."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import orjson
import pytest

from igw.gateway.errors import sse_error_event
from igw.gateway.guards import GuardDenied, Principal
from igw.gateway.lean_server import SWITCH_ENV
from igw.scheduling.plugins.prefix_cache_scorer import TYPE as PREFIX
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from tests.gateway.fake_model_server import PROMPT_TOKENS, FakeModelServer, closed_port, running
from tests.gateway.support import config_doc, scheduler
from tests.gateway.test_openai_apis import metric
from tests.gateway.test_routing_and_guard import RecordingGuard

CHAT_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
OTHER_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DOC = config_doc([scheduler("coder", CHAT_MODEL), scheduler("llama", OTHER_MODEL)])
SWITCHES = pytest.mark.parametrize("switch", ["lean", "aiohttp"])


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)


@SWITCHES
async def test_a_message_whole_and_streamed_is_routed_by_model_and_counted(
    gateway: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    caplog.set_level(logging.INFO, logger="igw.access")
    slow_coder = FakeModelServer("coder", tokens=4, first_token_delay_s=0.2, token_delay_s=0.15)
    async with (
        running(slow_coder, FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        whole = await claude.messages.create(
            model=CHAT_MODEL,
            max_tokens=64,
            system="You are a careful engineer.",
            messages=[{"role": "user", "content": "Refactor this function."}],
        )
        assert whole.content[0].text == "tok0tok1tok2tok3"  # type: ignore[union-attr]
        assert (whole.usage.input_tokens, whole.usage.output_tokens) == (PROMPT_TOKENS, 4)
        async with claude.messages.stream(
            model=CHAT_MODEL, max_tokens=64, messages=[{"role": "user", "content": "Stream it."}]
        ) as stream:
            text = "".join([chunk async for chunk in stream.text_stream])
            final = await stream.get_final_message()
        assert text == "tok0tok1tok2tok3"
        assert final.usage.output_tokens == 4
        assert llama.received == []
        assert [r.path for r in coder.received] == ["/v1/messages", "/v1/messages"]
        sent = orjson.loads(coder.received[0].body)
        assert (sent["system"], sent["max_tokens"]) == ("You are a careful engineer.", 64)
        text_metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        # both answers' usage: the stream's input tokens from message_start, its output from message_delta
        assert metric(text_metrics, "igw_tokens_total", model=CHAT_MODEL, direction="in") == 2 * PROMPT_TOKENS
        assert metric(text_metrics, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 2 * 4
        lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        streamed = next(line for line in lines if line["stream"])
        # the first token is the first content_block_delta, after the pod's 0.2 s prefill, not
        # message_start / content_block_start / ping, which leave before it
        # (and not message_delta, which ends the stream 4 x 0.15 s later)
        assert 200 <= streamed["ttft_ms"] < 500
        assert (streamed["prompt_tokens"], streamed["completion_tokens"]) == (PROMPT_TOKENS, 4)


@SWITCHES
async def test_a_message_stream_cut_by_its_pod_ends_in_an_error_the_sdk_raises(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("coder", tokens=6, die_after=2), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        received: list[str] = []

        async def read_the_stream() -> None:
            async with claude.messages.stream(
                model=CHAT_MODEL, max_tokens=64, messages=[{"role": "user", "content": "go"}]
            ) as stream:
                async for chunk in stream.text_stream:
                    received.append(chunk)

        with pytest.raises(anthropic.APIStatusError, match="closed the stream") as cut:
            await read_the_stream()
        assert received == ["tok0", "tok1"]
        # Anthropic's error inside the event (since session s33): the type an agent reads
        assert isinstance(cut.value.body, dict)
        assert cut.value.body["error"]["type"] == "api_error"
        assert set(cut.value.body["error"]) == {"type", "message"}


async def anthropic_error(resp: Any) -> tuple[str, str]:
    """The type and message of an Anthropic-shaped error answer, its request id checked against the
    response's ``X-Request-Id``."""
    body = await resp.json()
    assert set(body) == {"type", "error", "request_id"}, body
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}, body
    assert body["request_id"] == resp.headers["X-Request-Id"]
    return body["error"]["type"], body["error"]["message"]


@SWITCHES
async def test_a_bad_message_body_is_an_anthropic_400_naming_the_field(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("coder"), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
    ):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            for body, field in (
                ({"model": CHAT_MODEL, "max_tokens": 8, "messages": "hi"}, "'messages'"),
                ({"model": CHAT_MODEL, "max_tokens": 8, "messages": [], "system": 3}, "'system'"),
                ("not json", "not valid JSON"),
            ):
                resp = (
                    await gw.post(path, body)
                    if isinstance(body, dict)
                    else await gw.http.post(
                        gw.url + path, data=body, headers={"Content-Type": "application/json"}
                    )
                )
                assert resp.status == 400, (path, body)
                kind, message = await anthropic_error(resp)
                assert kind == "invalid_request_error"
                assert field in message
        resp = await gw.post("/v1/messages", {"model": CHAT_MODEL, "max_tokens": "8", "messages": []})
        assert (resp.status, (await anthropic_error(resp))[0]) == (400, "invalid_request_error")
        async with client(gw.url) as claude:
            with pytest.raises(anthropic.NotFoundError) as missing:
                await claude.messages.create(
                    model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "x"}]
                )
            assert isinstance(missing.value.body, dict)
            assert missing.value.body["error"]["type"] == "not_found_error"
            with pytest.raises(anthropic.NotFoundError):
                await claude.messages.count_tokens(
                    model="no-such-model", messages=[{"role": "user", "content": "x"}]
                )
        # the OpenAI APIs beside it keep the OpenAI shape
        resp = await gw.post("/v1/chat/completions", {"model": CHAT_MODEL, "messages": "hi"})
        assert (resp.status, (await resp.json())["error"]["param"]) == (400, "messages")
        assert coder.received == llama.received == []


class LimitedGuard(RecordingGuard):
    """Bearer ``good`` is let in (``RecordingGuard``); the other model's requests are over a tenant
    limit: a 429 with ``Retry-After``, as the security package's rate limits answer."""

    async def admit(self, principal: Principal, *, model: str, est_tokens: int | None) -> None:
        await super().admit(principal, model=model, est_tokens=est_tokens)
        if model == OTHER_MODEL:
            raise GuardDenied(
                status=429,
                message=f"rate limit for {model} exceeded",
                error_type="rate_limit_error",
                headers={"Retry-After": "7"},
            )


@SWITCHES
async def test_the_gateways_own_errors_take_the_anthropic_shape_the_sdk_reads(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """Refusals the gateway makes itself on the Messages API's routes (its guard's, its router's, a
    pod it cannot reach, a method it does not serve) carry Anthropic's error types for their statuses,
    which the Anthropic SDK maps to its exception classes and agents read (a rate limit's
    ``Retry-After`` kept); before session s33 they were OpenAI-shaped."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    doc = config_doc(
        [scheduler("coder", CHAT_MODEL), scheduler("llama", OTHER_MODEL), scheduler("gone", "gone-model")]
    )
    message = {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    async with (
        running(FakeModelServer("coder"), FakeModelServer("llama")) as (coder, llama),
        gateway(
            doc,
            {"coder": [coder.key], "llama": [llama.key], "gone": [f"127.0.0.1:{closed_port()}"]},
            guard=LimitedGuard(deny_model=CHAT_MODEL),
            wait_fresh=False,
        ) as gw,
    ):
        good = {"Authorization": "Bearer good"}
        cases: tuple[tuple[dict[str, Any], dict[str, str], int | None, str], ...] = (
            ({"model": CHAT_MODEL, **message}, {}, 401, "authentication_error"),
            ({"model": CHAT_MODEL, **message}, good, 403, "permission_error"),
            ({"model": OTHER_MODEL, **message}, good, 429, "rate_limit_error"),
            ({"model": "gone-model", **message}, good, None, ""),  # 502 or 503: no pod answers
        )
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            for body, headers, status, kind in cases:
                resp = await gw.post(path, body, headers=headers)
                assert resp.status == status if status is not None else resp.status in (502, 503)
                # no pod: 502 an api_error, 503 (none left in the pool) an overloaded_error, retried
                kind = kind or {502: "api_error", 503: "overloaded_error"}[resp.status]
                assert (await anthropic_error(resp))[0] == kind, (path, body["model"], status)
                if status == 429:
                    assert resp.headers["Retry-After"] == "7"
            resp = await gw.http.get(gw.url + path)  # a method the route does not serve
            assert resp.status == 405
            assert (await anthropic_error(resp))[0] == "invalid_request_error"
        async with anthropic.AsyncAnthropic(
            base_url=gw.url, auth_token="good", max_retries=0, timeout=30
        ) as claude:
            hello = [{"role": "user", "content": "x"}]
            with pytest.raises(anthropic.PermissionDeniedError):
                await claude.messages.create(model=CHAT_MODEL, max_tokens=8, messages=hello)  # type: ignore[arg-type]
            with pytest.raises(anthropic.RateLimitError) as limited:
                await claude.messages.create(model=OTHER_MODEL, max_tokens=8, messages=hello)  # type: ignore[arg-type]
            assert limited.value.response.headers["Retry-After"] == "7"
        # the OpenAI routes keep their shape for the same refusals
        resp = await gw.post("/v1/chat/completions", {"model": OTHER_MODEL, "messages": []}, headers=good)
        assert (resp.status, (await resp.json())["error"]["type"]) == (429, "rate_limit_error")
        assert "type" not in await resp.json()
        assert coder.received == llama.received == []


async def test_a_model_servers_own_error_is_relayed_as_it_came(gateway: Any) -> None:
    """vLLM's ``/v1/messages`` answers its errors in Anthropic's shape already: the gateway passes a
    pod's refusal through untouched (only errors the gateway makes are re-rendered)."""
    refusing = FakeModelServer("coder", infer_status=400)
    async with (
        running(refusing, FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
    ):
        resp = await gw.post("/v1/messages", {"model": CHAT_MODEL, "max_tokens": 8, "messages": []})
        assert resp.status == 400
        assert (await resp.json())["server"] == "coder"  # the pod's own body


@SWITCHES
async def test_a_token_count_is_routed_by_model_and_counts_no_tokens_and_no_cached_prefix(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """``messages.count_tokens`` (an agent checking that its conversation fits) reaches a pod of the
    model's pool. The pod only tokenizes, so the gateway counts no tokens for it (not in
    ``igw_tokens_total``, not against the tenant's token limits) and does not record its conversation
    as cached on that pod (the next message would be drawn there for a prefix hit that is not
    there). A message beside it does both, so the test can fail."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    guard = RecordingGuard()
    async with (
        running(FakeModelServer("coder"), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}, guard=guard) as gw,
        anthropic.AsyncAnthropic(base_url=gw.url, auth_token="good", max_retries=0, timeout=30) as claude,
    ):
        sched = gw.state.runtime.schedulers["coder"].scheduler
        prefix = next(ws.scorer for ws in sched.profile.scorers if ws.scorer.type_name == PREFIX)
        assert isinstance(prefix, PrefixCacheScorer)
        conversation = [{"role": "user", "content": "How long is this conversation? " * 40}]
        counted = await claude.messages.count_tokens(
            model=CHAT_MODEL,
            system="You are terse.",
            messages=conversation,  # type: ignore[arg-type]
        )
        assert counted.input_tokens == PROMPT_TOKENS
        assert [r.path for r in coder.received] == ["/v1/messages/count_tokens"]
        assert orjson.loads(coder.received[0].body)["system"] == "You are terse."
        assert llama.received == []
        page = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(page, "igw_tokens_total", model=CHAT_MODEL, direction="in") == 0
        assert guard.accounted == [(CHAT_MODEL, 0, 0)]
        assert prefix.index.size(coder.key) == 0
        await claude.messages.create(model=CHAT_MODEL, max_tokens=8, messages=conversation)  # type: ignore[arg-type]
        assert guard.accounted[-1] == (CHAT_MODEL, PROMPT_TOKENS, 5)
        page = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(page, "igw_tokens_total", model=CHAT_MODEL, direction="in") == PROMPT_TOKENS
        assert prefix.index.size(coder.key) > 0


@pytest.mark.parametrize(
    ("code", "kind"),
    [("shutting_down", "overloaded_error"), ("upstream_error", "api_error"), ("route_timeout", "api_error")],
)
def test_a_messages_streams_terminal_event_carries_anthropics_error_type(code: str, kind: str) -> None:
    """A gateway shutting down mid-stream says ``overloaded_error`` (agents retry it elsewhere), a
    pod that broke the stream or a timeout ``api_error``; an OpenAI stream's event is unchanged."""
    event = sse_error_event(code, "ended", anthropic=True)
    head, data, done = event.split(b"\n\n")[:3]
    assert head.startswith(b"event: error\ndata: ")
    assert orjson.loads(head.removeprefix(b"event: error\ndata: ")) == {
        "type": "error",
        "error": {"type": kind, "message": "ended"},
    }
    assert (data, done) == (b"data: [DONE]", b"")
    openai_shaped = orjson.loads(sse_error_event(code, "ended").split(b"\n\n")[0].split(b"data: ")[1])
    assert openai_shaped["error"]["code"] == code


async def test_the_sdks_other_calls_under_the_messages_path_get_anthropic_shaped_404s(gateway: Any) -> None:
    """The Anthropic SDK's message batches (``/v1/messages/batches`` and its ids) are not routed; the
    404 says so in Anthropic's shape, whose ``error.type`` the SDK and agents read (it was
    OpenAI-shaped before session s39, as for any unknown path); the OpenAI paths' 404 keeps its
    shape."""
    async with (
        running(FakeModelServer("coder"), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        request = {"custom_id": "a", "params": {"model": CHAT_MODEL, "max_tokens": 8, "messages": []}}
        with pytest.raises(anthropic.NotFoundError) as missing:
            await claude.messages.batches.create(requests=[request])  # type: ignore[list-item]
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["error"]["type"] == "not_found_error"
        for method, path in (("GET", "/v1/messages/batches/msgbatch_1"), ("DELETE", "/v1/messages/x")):
            resp = await gw.http.request(method, gw.url + path)
            assert resp.status == 404
            assert (await anthropic_error(resp))[0] == "not_found_error"
        resp = await gw.http.post(gw.url + "/v1/chat/completions/x", json={})
        assert (resp.status, (await resp.json())["error"]["code"]) == (404, "not_found")
        assert coder.received == llama.received == []


@SWITCHES
async def test_the_sdk_reads_the_request_id_of_every_answer_from_its_request_id_header(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """The Anthropic SDK reads a request's id from ``request-id`` (Anthropic's field), not
    ``X-Request-Id``: a message's ``_request_id`` and an error's ``request_id``, which a user quotes
    to find the request in the access log. Before session s48 every one of them was ``None``."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("coder", tokens=6, die_after=2), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        raw = await claude.messages.with_raw_response.create(
            model=OTHER_MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
        whole = await raw.parse()
        assert whole._request_id == raw.headers["x-request-id"]
        with pytest.raises(anthropic.NotFoundError) as unknown:
            await claude.messages.create(
                model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert unknown.value.request_id == unknown.value.response.headers["x-request-id"]
        assert isinstance(unknown.value.body, dict)
        assert unknown.value.body["request_id"] == unknown.value.request_id
        # a stream its pod cut: the error the SDK raises from the terminal event names the request too

        async def read_the_stream() -> None:
            async with claude.messages.stream(
                model=CHAT_MODEL, max_tokens=64, messages=[{"role": "user", "content": "go"}]
            ) as stream:
                async for _ in stream.text_stream:
                    pass

        with pytest.raises(anthropic.APIStatusError, match="closed the stream") as cut:
            await read_the_stream()
        assert cut.value.request_id == cut.value.response.headers["x-request-id"]
        assert cut.value.request_id is not None
