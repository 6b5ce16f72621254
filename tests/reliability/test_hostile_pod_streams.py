"""A model server's stream events of a shape no engine sends are relayed, not trusted.

The relay reads the events it forwards (the first token, the usage): before session s40 an event
whose ``choices`` was not a list (``{"choices": 5}``, ``{"choices": true}``) raised TypeError inside
the relay, which cut the client's stream without its terminal event or ``[DONE]``, logged a
traceback and skipped the request's accounting."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from igw.gateway.upstream import _carries_token
from tests.reliability.harness import gateway_doc, in_process_gateway, scripted_upstream

ODD_EVENTS = (b'data: {"choices": 5}\n\n', b'data: {"choices": true}\n\n', b'data: {"choices": "x"}\n\n')


async def odd_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in ODD_EVENTS:
        await resp.write(event)
    await resp.write(b'data: {"choices": [{"index": 0, "text": "hi"}]}\n\ndata: [DONE]\n\n')
    await resp.write_eof()
    return resp


async def test_events_whose_choices_are_not_a_list_are_relayed_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        scripted_upstream({"POST /v1/completions": odd_stream}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        for _ in range(2):
            resp = await gw.complete("hello", stream=True)
            assert resp.status == 200
            streamed = await resp.read()
            assert all(event in streamed for event in ODD_EVENTS)
            assert streamed.endswith(b"data: [DONE]\n\n")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
    assert "unhandled error" not in caplog.text
    # each stream was counted (its first token observed, its outcome recorded)
    (ttft,) = [m for m in metrics.splitlines() if m.startswith("igw_time_to_first_token_seconds_count")]
    assert float(ttft.split()[-1]) == 2


@pytest.mark.parametrize("event", ODD_EVENTS)
def test_an_event_of_another_shape_counts_as_output(event: bytes) -> None:
    assert _carries_token(event) is True
