"""A near-free model-server stand-in for ``igw perf gateway`` (run as its own process).

``python -m igw.cli.perf_backend_process --chunks 20 --chunk-interval 0.005`` prints ``PORT <n>`` and
serves: ``POST /v1/completions`` and ``/v1/chat/completions`` (a fixed small JSON body, or an SSE
stream of ``--chunks`` events ``--chunk-interval`` seconds apart when ``"stream": true``),
``GET /health`` (for peer routers' worker probes) and ``GET /metrics`` (a realistic vLLM page,
rendered once by the simulator's page writer when it is installed). Its cost is the same for the
direct and the gateway path, so differences are the gateway's.
"""

from __future__ import annotations

import asyncio
import random

from aiohttp import web

from igw.perf.activity_page import ActivityPage
from igw.perf.raw_http import canned_answers, serve_backend

RESPONSE = (
    b'{"id":"cmpl-x","object":"text_completion","created":0,"model":"fake-model","choices":[{"index":0,'
    b'"text":"hello","finish_reason":"length","logprobs":null}],'
    b'"usage":{"prompt_tokens":4,"completion_tokens":4,"total_tokens":8}}'
)
STREAM_USAGE = (
    b'data: {"id":"cmpl-x","object":"text_completion","created":0,"model":"fake-model","choices":[],'
    b'"usage":{"prompt_tokens":4,"completion_tokens":4,"total_tokens":8}}\n\n'
)
"""The usage chunk a stream ends with when its body asks for it (``stream_options.include_usage``)."""


def realistic_vllm_page() -> str:
    """A vLLM 0.12 page of ~50 KB from the simulator; a minimal page if the simulator is absent."""
    try:
        # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
        from packaging.version import Version

        from igw.sim.engine import Engine
        from igw.sim.metrics_page import PageContext, render_vllm
        from igw.sim.pod_stats import PodStats
        from igw.sim.presets import get_preset
    except ImportError:
        return (
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
        )
    engine = Engine(preset=get_preset("llama-3.1-8b/h100"), rng=random.Random(1))
    stats = PodStats(max_model_len=32768)
    for handler in ("/v1/completions", "/v1/chat/completions", "/v1/models"):
        stats.on_http(handler=handler, method="POST", status=200, duration_s=0.2)
    ctx = PageContext(
        model_name="meta-llama/Llama-3.1-8B-Instruct",
        version=Version("0.12.0"),
        max_model_len=32768,
        gpu_memory_utilization=0.9,
        prefix_caching=True,
        created_unix=1.7e9,
        max_lora=0,
    )
    return render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.7e9 + 100, uptime_s=100.0)


def build_app(*, chunks: int, interval: float) -> web.Application:
    page = ActivityPage(realistic_vllm_page().encode())

    async def infer(request: web.Request) -> web.StreamResponse:
        page.served += 1
        body = await request.read()
        if b'"stream":true' not in body.replace(b" ", b""):
            return web.Response(body=RESPONSE, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(chunks):
            await resp.write(b'data: {"choices":[{"index":0,"text":"t%d"}]}\n\n' % i)
            await asyncio.sleep(interval)
        if b'"include_usage":true' in body:  # as vLLM: the usage chunk only when asked for
            await resp.write(STREAM_USAGE)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(body=page.render(), content_type="text/plain")

    async def health(request: web.Request) -> web.StreamResponse:
        # Peer routers (sglang-router, vllm-router) probe /health before sending a worker traffic.
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", infer)
    app.router.add_post("/v1/chat/completions", infer)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app


async def serve_forever_raw() -> None:
    """The same answers for non-streamed requests from :mod:`igw.perf.raw_http`'s backend (a fraction
    of aiohttp's CPU per request; no SSE): print ``PORT <n>`` and run until stopped."""
    page = realistic_vllm_page().encode()
    answers = canned_answers(completion=RESPONSE, metrics_page=page)
    server = await serve_backend(answers, metrics=ActivityPage(page))
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


async def serve_forever(chunks: int, interval: float) -> None:
    """Serve on a free loopback port and print ``PORT <n>``; runs until the process is stopped."""
    runner = web.AppRunner(build_app(chunks=chunks, interval=interval), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    print(f"PORT {sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()
