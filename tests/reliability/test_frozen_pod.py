"""A model server that stops answering with requests in flight (SIGSTOP: the kernel still accepts
connections and answers TCP keep-alive probes, nothing answers HTTP), behind a real ``igw serve``:
its requests end with 504 ``upstream_unresponsive`` (a stream: a final SSE error event) once it has
been excluded, and silent, for ``unresponsiveTimeout``; a long silent generation on a healthy pod is
not cut; a pod that answers nothing within ``responseTimeout`` gets 504 ``upstream_timeout``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from tests.gateway.support import data_events
from tests.reliability.harness import (
    MODEL,
    fleet_child,
    gateway_doc,
    igw_serve,
    scripted_upstream,
    wait_until,
)

UNRESPONSIVE = {"unresponsiveTimeout": "2s"}
"""Short for the test (the default is 10 s); a simulated token takes ~10 ms at time scale 1."""


def fleet(time_scale: float = 1.0) -> dict[str, object]:
    pod = {"name": "p0", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL}
    return {"time_scale": time_scale, "seed": 7, "pods": [pod]}


async def stalled_count(http: aiohttp.ClientSession, url: str, reason: str) -> float:
    page = await (await http.get(url + "/metrics")).text()
    found = re.search(rf'igw_upstream_stalled_total{{reason="{reason}"}} (\S+)', page)
    return float(found.group(1)) if found else 0.0


async def test_requests_in_flight_to_a_stopped_pod_end_with_504_and_a_terminal_event(tmp_path: Path) -> None:
    with fleet_child(tmp_path, fleet()) as pods:
        async with (
            igw_serve(tmp_path, gateway_doc(routing=UNRESPONSIVE), pods.keys) as gw,
            aiohttp.ClientSession() as http,
        ):
            url = gw.url + "/v1/completions"
            whole = asyncio.create_task(
                http.post(
                    url,
                    json={"model": MODEL, "prompt": "a", "max_tokens": 4000},
                    headers={"X-Request-Id": "whole-1"},
                )
            )
            stream = await http.post(
                url, json={"model": MODEL, "prompt": "b", "max_tokens": 4000, "stream": True}
            )
            assert stream.status == 200
            first = await stream.content.readany()
            assert first.startswith(b"data: ")
            os.kill(pods.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            resp = await asyncio.wait_for(whole, timeout=30)
            waited = time.monotonic() - stopped
            assert resp.status == 504
            assert resp.headers["X-Request-Id"] == "whole-1"
            error = (await resp.json())["error"]
            assert (error["code"], error["type"]) == ("upstream_unresponsive", "timeout")
            assert resp.headers["X-Igw-Error-Code"] == "upstream_unresponsive"
            assert "stopped responding" in error["message"]
            assert "scrapes fail" in error["message"]
            # excluded after one scrape timeout (200 ms), then 2 s, then within a sweep (1 s) or two
            assert 2 <= waited < 6, waited
            rest = await asyncio.wait_for(stream.read(), timeout=30)
            events = data_events(first + rest)
            assert events[-1] == b"data: [DONE]"
            assert (
                orjson.loads(events[-2].removeprefix(b"data: "))["error"]["code"] == "upstream_unresponsive"
            )
            assert await stalled_count(http, gw.url, "unresponsive") == 2
            await wait_until(
                lambda: '"request_id":"whole-1"' in gw.output, within=10, what="the access log line"
            )
            access = [line for line in gw.lines if '"request_id":"whole-1"' in line]
            assert len(access) == 1
            assert '"status":504' in access[0]
            assert "unresponsive" in access[0]
            # stderr has a writer thread of its own (since s42): the WARNING may follow the access line
            await wait_until(
                lambda: (
                    re.search(
                        r"WARNING .*ended [12] request\(s\) in flight: their endpoint stayed excluded",
                        gw.output,
                    )
                    is not None
                ),
                within=10,
                what="the in-flight requests' WARNING",
            )


async def test_a_long_silent_generation_on_a_healthy_pod_is_not_cut(tmp_path: Path) -> None:
    """Non-streamed, ~5 s of generation with no byte on its connection: longer than
    unresponsiveTimeout, but the pod's scrapes succeed, so it is answered."""
    with fleet_child(tmp_path, fleet()) as pods:
        async with (
            igw_serve(tmp_path, gateway_doc(routing=UNRESPONSIVE), pods.keys) as gw,
            aiohttp.ClientSession() as http,
        ):
            started = time.monotonic()
            resp = await http.post(
                gw.url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 700}
            )
            assert resp.status == 200, await resp.text()
            assert time.monotonic() - started > 3  # silent for longer than unresponsiveTimeout + a sweep
            assert await stalled_count(http, gw.url, "unresponsive") == 0


async def test_a_pod_that_never_answers_one_request_gets_504_after_response_timeout(tmp_path: Path) -> None:
    """Scrapes succeed (the pod is not excluded), the completion never comes: responseTimeout ends it."""

    async def never(request: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with (
        scripted_upstream({"POST /v1/completions": never}) as key,
        igw_serve(tmp_path, gateway_doc(routing={"responseTimeout": "2s"}), [key]) as gw,
        aiohttp.ClientSession() as http,
    ):
        started = time.monotonic()
        resp = await http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 4}
        )
        waited = time.monotonic() - started
        assert resp.status == 504
        error = (await resp.json())["error"]
        assert error["code"] == "upstream_timeout"
        assert "no response within 2s" in error["message"]
        assert resp.headers["X-Request-Id"]
        assert 2 <= waited < 5, waited
        assert await stalled_count(http, gw.url, "response_timeout") == 1
