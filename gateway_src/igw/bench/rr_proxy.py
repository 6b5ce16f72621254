"""The Kubernetes-Service baseline in live mode: a round-robin HTTP proxy on loopback.

It does what kube-proxy (IPVS ``rr``) does for an OpenAI client — pick the next backend in turn,
blind to GPU state — and streams the response through unchanged (SSE chunks are forwarded as they
arrive, so TTFT is measured honestly). It adds ``x-igw-backend`` to each response so the load
generator can attribute requests to pods, the same header the benchmark reads from the gateway.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections import Counter
from collections.abc import Sequence

import aiohttp
from aiohttp import web

BACKEND_HEADER = "x-igw-backend"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade", "te", "trailer"}
)


class RoundRobinProxy:
    """``async with RoundRobinProxy(backends=[...]) as proxy: proxy.url`` — binds an ephemeral port."""

    def __init__(self, *, backends: Sequence[str], host: str = "127.0.0.1") -> None:
        if not backends:
            raise ValueError("backends: at least one backend URL is required")
        self._backends = [b.rstrip("/") for b in backends]
        self._cycle = itertools.cycle(self._backends)
        self._host = host
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""
        self.dispatched: Counter[str] = Counter()

    async def __aenter__(self) -> RoundRobinProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        port = sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        backend = next(self._cycle)
        self.dispatched[backend] += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        try:
            upstream = await self._session.request(
                request.method, backend + request.rel_url.path_qs, headers=headers, data=body
            )
        except aiohttp.ClientError as exc:
            return web.json_response(
                {"error": {"message": f"upstream {backend} unreachable: {exc}", "type": "bad_gateway"}},
                status=502,
                headers={BACKEND_HEADER: backend},
            )
        async with upstream:
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers[key] = value
            response.headers[BACKEND_HEADER] = backend
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


LISTENING_PREFIX = "igw-rr-proxy listening on "


async def serve_until_signalled(backends: Sequence[str]) -> None:
    """Serve on a free loopback port, print it after :data:`LISTENING_PREFIX`, stop on SIGTERM/SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with RoundRobinProxy(backends=backends) as proxy:
        print(LISTENING_PREFIX + proxy.url, flush=True)
        await stop.wait()
