"""A stream's usage is asked of vLLM and SGLang pools and read, not relayed, when the client did not ask
(:mod:`igw.gateway.stream_usage`); the relay writes complete events only
(:class:`igw.gateway.upstream.StreamEvents`).

Before session s36 a stream whose client did not set ``stream_options.include_usage`` was counted one
output token per event: a pod under speculative decoding, three tokens per event, was counted a third
of what it generated. And an event split across the relay's reads was written in part, so a keep-alive
comment or the terminal error event of an upstream that died landed inside it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from igw.gateway import upstream
from igw.gateway.inference_apis import InferenceApi
from igw.gateway.stream_usage import RELAY_USAGE, RELAY_USAGE_HEADER, StreamUsage, stream_usage_of
from igw.gateway.upstream import MAX_PARTIAL_EVENT_BYTES, StreamEvents
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import data_events
from tests.gateway.test_response_ids import engines_doc

USAGE = {"prompt_tokens": 7, "completion_tokens": 30, "total_tokens": 37}


def _event(doc: object) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


TOKEN = _event({"id": "c", "choices": [{"index": 0, "text": "tok0tok1tok2"}]})
USAGE_CHUNK = _event({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": USAGE})
DONE = b"data: [DONE]\n\n"


def test_the_usage_chunk_the_gateway_asked_for_is_read_and_not_written() -> None:
    events = StreamEvents(strip_usage=True)
    assert events.feed(TOKEN) == TOKEN
    assert events.usage is None
    assert events.feed(TOKEN + USAGE_CHUNK + DONE) == TOKEN + DONE
    assert events.usage == USAGE
    assert events.rest() == b""


def test_the_usage_chunk_the_client_asked_for_is_read_and_written() -> None:
    events = StreamEvents()
    assert events.feed(TOKEN + USAGE_CHUNK + DONE) == TOKEN + USAGE_CHUNK + DONE
    assert events.usage == USAGE


def test_only_a_usage_chunk_is_left_out() -> None:
    """SGLang writes ``"usage":null`` in every chunk, and a chunk with ``continuous_usage_stats``
    carries its choices and the usage so far: each is a token's event, written."""
    sglang = _event({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None})
    continuous = _event({"id": "c", "choices": [{"index": 0, "text": "x"}], "usage": USAGE})
    unparsed = b'data: {"choices":[],"usage":{\n\n'
    events = StreamEvents(strip_usage=True)
    assert events.feed(sglang + continuous + unparsed) == sglang + continuous + unparsed
    assert events.usage == USAGE


def test_chunks_whose_usage_is_null_are_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's every chunk says ``"usage":null``: one JSON parse per event for nothing, before s36."""
    parsed: list[bytes] = []

    def recorded(data: bytes, **_: bool) -> tuple[None, None]:
        parsed.append(data)
        return None, None

    monkeypatch.setattr(upstream, "_usage_in_events", recorded)
    sglang = _event({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None})
    events = StreamEvents(strip_usage=True)
    assert events.feed(sglang * 3) == sglang * 3
    assert parsed == []
    assert events.feed(sglang + USAGE_CHUNK + DONE) == sglang + DONE
    assert events.usage == USAGE


def test_a_responses_event_names_its_stored_response_whatever_its_usage() -> None:
    created = {"type": "response.created", "response": {"id": "resp_1", "object": "response", "usage": None}}
    event = b"event: response.created\n" + _event(created)
    events = StreamEvents()
    assert events.feed(event) == event
    assert events.response_id == "resp_1"


@pytest.mark.parametrize("cut", [1, 7, len(TOKEN) // 2, len(TOKEN) - 1])
def test_an_event_split_across_reads_is_written_when_it_ends(cut: int) -> None:
    events = StreamEvents(strip_usage=True)
    whole = TOKEN + USAGE_CHUNK + DONE
    written = b""
    for at in range(0, len(whole), cut):  # the stream in reads of ``cut`` bytes
        part = events.feed(whole[at : at + cut])
        assert part == b"" or part.endswith(b"\n\n")  # complete events only
        written += part
    assert written == TOKEN + DONE
    assert events.usage == USAGE


@pytest.mark.parametrize("ending", [b"\r\n\r\n", b"\r\r"])
def test_streams_that_end_their_events_otherwise_are_aligned_too(ending: bytes) -> None:
    first = b"data: one" + ending
    events = StreamEvents(strip_usage=True)
    assert events.feed(first + b"data: tw") == first
    assert events.feed(b"o" + ending) == b"data: two" + ending


def test_an_unfinished_event_is_held_within_a_bound_and_relayed_at_the_end() -> None:
    events = StreamEvents()
    assert events.feed(b"data: {") == b""
    assert events.rest() == b"data: {"  # at the stream's end: relayed as it came
    huge = b"data: " + b"x" * MAX_PARTIAL_EVENT_BYTES  # not an event stream as expected
    assert events.feed(huge) == huge


@pytest.mark.parametrize(
    ("body", "api", "expected"),
    [
        ({"stream": True}, InferenceApi.CHAT, StreamUsage.UNASKED),
        ({"stream": True, "stream_options": {}}, InferenceApi.COMPLETIONS, StreamUsage.OTHER_OPTIONS),
        ({"stream_options": {"include_usage": False}}, InferenceApi.CHAT, StreamUsage.OTHER_OPTIONS),
        ({"stream_options": None}, InferenceApi.CHAT, StreamUsage.OTHER_OPTIONS),
        ({"stream_options": {"include_usage": True}}, InferenceApi.CHAT, StreamUsage.ASKED),
        ({"stream_options": {"continuous_usage_stats": True}}, InferenceApi.CHAT, StreamUsage.LEFT),
        ({"stream_options": "yes"}, InferenceApi.CHAT, StreamUsage.LEFT),
        ({"stream": True}, InferenceApi.RESPONSES, None),
        ({"stream": True}, InferenceApi.MESSAGES, None),
    ],
)
def test_what_a_body_says_of_its_usage(
    body: dict[str, Any], api: InferenceApi, expected: StreamUsage
) -> None:
    assert stream_usage_of(body, api=api, stream=True) is expected
    assert stream_usage_of(body, api=api, stream=False) is None


def _doc() -> dict[str, Any]:
    return engines_doc(sseKeepAliveInterval="50ms")


def _counted_out(metrics: str, model: str) -> float:
    line = f'igw_tokens_total{{direction="out",model="{model}"}} '
    return sum(float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line))


async def test_a_speculative_decoding_stream_is_counted_by_its_usage_not_its_events(gateway: Any) -> None:
    """30 tokens in 10 events: counted 30 (the usage chunk the gateway asked for), and the client,
    which did not ask for it, receives the stream without it."""
    pods = {
        "v": FakeModelServer("v", tokens=30, tokens_per_event=3),
        "s": FakeModelServer("s", engine="sglang", tokens=30, tokens_per_event=3),
        "g": FakeModelServer("g", tokens=30, tokens_per_event=3),
    }
    pools = {"v": "vllm-pool", "s": "sglang-pool", "g": "generic-pool"}
    async with (
        running(*pods.values()),
        gateway(_doc(), {pools[m]: [pod.key] for m, pod in pods.items()}) as gw,
    ):
        for model, pod in pods.items():
            sent = {"model": model, "prompt": "hello", "stream": True}
            answer = await gw.post("/v1/completions", sent)
            assert answer.status == 200, model
            events = data_events(await answer.read())
            assert len(events) == 11, model  # 10 token events, [DONE]: no usage chunk
            assert all(b'"usage"' not in e for e in events), model
            forwarded = orjson.loads(pod.received[-1].body)
            if model == "g":  # another engine: the body as the client sent it
                assert forwarded == sent
            else:
                assert forwarded == {"stream_options": {"include_usage": True}, **sent}
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert _counted_out(metrics, "v") == 30
        assert _counted_out(metrics, "s") == 30
        assert _counted_out(metrics, "g") == 0  # no usage: the token series counts none, as before


async def test_a_client_s_own_stream_options_are_kept(gateway: Any) -> None:
    pod = FakeModelServer("v", tokens=6, tokens_per_event=2)
    async with (
        running(pod),
        gateway(_doc(), {"vllm-pool": [pod.key], "sglang-pool": [], "generic-pool": []}) as gw,
    ):
        asked = {"model": "v", "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}}
        events = data_events(await (await gw.post("/v1/completions", asked)).read())
        assert orjson.loads(events[-2][6:])["usage"]["completion_tokens"] == 6  # asked: relayed
        assert orjson.loads(pod.received[-1].body) == asked
        other = {"model": "v", "prompt": "hi", "stream": True, "stream_options": {"include_usage": False}}
        events = data_events(await (await gw.post("/v1/completions", other)).read())
        assert len(events) == 4
        assert all(b'"usage"' not in e for e in events)
        forwarded = orjson.loads(pod.received[-1].body)
        assert forwarded == {**other, "stream_options": {"include_usage": True}}
        null = {"model": "v", "prompt": "hi", "stream": True, "stream_options": None}
        events = data_events(await (await gw.post("/v1/completions", null)).read())
        assert all(b'"usage"' not in e for e in events)
        assert orjson.loads(pod.received[-1].body) == {**null, "stream_options": {"include_usage": True}}
        continuous = {
            "model": "v",
            "prompt": "hi",
            "stream": True,
            "stream_options": {"continuous_usage_stats": True},
        }
        await (await gw.post("/v1/completions", continuous)).read()
        assert orjson.loads(pod.received[-1].body) == continuous  # would change every chunk: left


async def test_the_tier_2_router_s_request_for_the_usage_is_asked_of_the_pool_and_relayed(
    gateway: Any,
) -> None:
    """The tier-2 router does not know a cluster's engines: it asks the cluster's gateway with a
    header, which asks a vLLM pool for the usage chunk and relays it (the router keeps it from its
    client), and leaves another engine's body as the client sent it."""
    v, g = FakeModelServer("v", tokens=6, tokens_per_event=2), FakeModelServer("g", tokens=6)
    async with (
        running(v, g),
        gateway(_doc(), {"vllm-pool": [v.key], "sglang-pool": [], "generic-pool": [g.key]}) as gw,
    ):
        for model, pod in (("v", v), ("g", g)):
            sent = {"model": model, "prompt": "hi", "stream": True}
            answer = await gw.http.post(
                gw.url + "/v1/completions", json=sent, headers={RELAY_USAGE_HEADER: RELAY_USAGE}
            )
            events = data_events(await answer.read())
            received = pod.received[-1]
            assert RELAY_USAGE_HEADER not in {k.lower() for k in received.headers}  # never forwarded
            if model == "v":
                assert orjson.loads(received.body) == {"stream_options": {"include_usage": True}, **sent}
                assert orjson.loads(events[-2][6:])["usage"]["completion_tokens"] == 6  # relayed
            else:
                assert orjson.loads(received.body) == sent


async def test_a_keep_alive_comment_never_lands_inside_an_event(gateway: Any) -> None:
    """Each event arrives in two halves 150 ms apart, past the 50 ms keep-alive interval: the pings
    fall between events, and every event the client reads parses."""
    pod = FakeModelServer("v", tokens=3, split_event_pause_s=0.15)
    async with (
        running(pod),
        gateway(_doc(), {"vllm-pool": [pod.key], "sglang-pool": [], "generic-pool": []}) as gw,
    ):
        body = await (await gw.post("/v1/completions", {"model": "v", "prompt": "hi", "stream": True})).read()
        assert body.count(b": ping\n\n") >= 3
        events = data_events(body)
        assert [orjson.loads(e[6:])["choices"][0]["text"] for e in events[:-1]] == ["tok0", "tok1", "tok2"]
        assert events[-1] == b"data: [DONE]"


async def test_an_upstream_that_dies_inside_an_event_ends_the_stream_with_an_error_event_of_its_own(
    gateway: Any,
) -> None:
    pod = FakeModelServer("v", tokens=4, split_event_pause_s=0.01, die_after=2)
    async with (
        running(pod),
        gateway(_doc(), {"vllm-pool": [pod.key], "sglang-pool": [], "generic-pool": []}) as gw,
    ):
        body = await (await gw.post("/v1/completions", {"model": "v", "prompt": "hi", "stream": True})).read()
        *events, done = data_events(body)
        assert done == b"data: [DONE]"
        parsed = [orjson.loads(e[6:]) for e in events]  # every one parses
        assert [e["choices"][0]["text"] for e in parsed[:-1]] == ["tok0", "tok1"]
        assert parsed[-1]["error"]["code"] == "upstream_error"


def test_a_responses_generation_names_its_response_without_usage() -> None:
    """``seeks_id`` (a Responses API generation): the id is read from ``response.created`` though no
    event says ``usage`` (before session s48 only an event with ``usage`` was read for it), and the
    deltas after it are not read (one parse, for the event that named it)."""
    created = {"type": "response.created", "response": {"id": "resp_1", "object": "response"}}
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "hi"}
    events = StreamEvents(seeks_id=True)
    events.feed(b"event: response.created\n" + _event(created))
    assert events.response_id == "resp_1"
    assert not events.seeking
    events.feed(_event(delta) * 3)
    assert events.response_id == "resp_1"
