"""Live-mode load generator: replays timed OpenAI completion requests over real HTTP and measures them.

Each request is sent at its scheduled offset (open loop, like inference-perf's Poisson stages), with
``stream: true``; TTFT is the time to the first SSE chunk carrying text, ITL the mean gap between
later chunks, and the serving pod comes from a response header (``x-igw-backend`` from our proxy,
the gateway's destination header, or a peer router's). The clock is injected for testability.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
import orjson

from igw.bench.stats import RequestSample

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class LiveRequest:
    at_s: float
    """Send time, seconds after the start of the run."""
    model: str
    prompt: str
    max_tokens: int
    prompt_tokens: int
    headers: tuple[tuple[str, str], ...] = ()


async def _one(
    session: aiohttp.ClientSession,
    *,
    url: str,
    req: LiveRequest,
    start: float,
    clock: Clock,
    endpoint_headers: Sequence[str],
    deadline: float | None,
) -> RequestSample:
    payload = {
        "model": req.model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    headers = {"Content-Type": "application/json", **dict(req.headers)}
    sent = clock()
    first: float | None = None
    last = sent
    chunks = 0
    usage: dict[str, object] = {}
    endpoint = "?"
    ok = False
    timed_out = False
    try:
        async with (
            asyncio.timeout_at(deadline),
            session.post(url, data=orjson.dumps(payload), headers=headers) as resp,
        ):
            endpoint = next((resp.headers[h] for h in endpoint_headers if h in resp.headers), "?")
            if resp.status == 200:
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        ok = True
                        break
                    event = orjson.loads(data)
                    if event.get("usage"):
                        usage = event["usage"]
                    choices = event.get("choices") or []
                    if choices and choices[0].get("text"):
                        now = clock()
                        chunks += 1
                        first = now if first is None else first
                        last = now
            else:
                await resp.read()
    except TimeoutError:
        ok = False
        timed_out = True
    except (aiohttp.ClientError, ValueError):
        ok = False
    done = clock()
    output = int(usage.get("completion_tokens", chunks) or chunks)  # type: ignore[call-overload]
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens", 0) or 0) if isinstance(details, dict) else 0
    itl = (last - first) / (chunks - 1) if first is not None and chunks > 1 else None
    return RequestSample(
        endpoint=endpoint,
        ok=ok and first is not None,
        arrival_s=sent - start,
        ttft_s=(done - sent if timed_out else None) if first is None else first - sent,
        e2e_s=done - sent,
        itl_s=itl,
        prompt_tokens=int(usage.get("prompt_tokens", req.prompt_tokens) or req.prompt_tokens),  # type: ignore[call-overload]
        output_tokens=output if ok else 0,
        cached_tokens=cached,
        timed_out=timed_out,
    )


async def drive(
    *,
    base_url: str,
    requests: Sequence[LiveRequest],
    endpoint_headers: Sequence[str],
    clock: Clock = time.perf_counter,
    on_done: Callable[[RequestSample], None] | None = None,
    deadline_s: float | None = None,
) -> list[RequestSample]:
    """Send every request at its offset from now; return samples in request order.

    Requests unanswered ``deadline_s`` seconds after the start are cancelled (``timed_out``).
    """
    url = base_url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        start = clock()
        loop = asyncio.get_running_loop()
        deadline = None if deadline_s is None else loop.time() + deadline_s

        async def timed(req: LiveRequest) -> RequestSample:
            delay = req.at_s - (clock() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            sample = await _one(
                session,
                url=url,
                req=req,
                start=start,
                clock=clock,
                endpoint_headers=endpoint_headers,
                deadline=deadline,
            )
            if on_done is not None:
                on_done(sample)
            return sample

        return list(await asyncio.gather(*(timed(r) for r in requests)))
