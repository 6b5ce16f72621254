"""Fetch model-server ``/metrics`` pages and tell which scheduling signals they really carry.

The gateway scores on queue depth, running batch size and KV-cache usage under engine-specific names (the
Gateway API Inference Extension's model-server protocol). A page can be up yet miss a signal: old vLLM uses
only ``vllm:gpu_cache_usage_perc``; SGLang without ``--enable-metrics`` serves no page at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

SIGNALS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "vllm": {
        "queue": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "kv-cache": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    "sglang": {
        "queue": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv-cache": ("sglang:token_usage",),
    },
}
"""Signal → accepted names, preferred first (a fallback name is reported as a warning)."""

MAX_PAGE_BYTES = 8 * 1024 * 1024
CONCURRENCY = 32


def metric_names(page: str) -> set[str]:
    """Family names present in a Prometheus text page (samples and ``# TYPE`` lines)."""
    names: set[str] = set()
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 3:
                names.add(parts[2])
            continue
        if not line or line[0] == "#":
            continue
        end = len(line)
        for sep in ("{", " "):
            pos = line.find(sep)
            if pos != -1:
                end = min(end, pos)
        names.add(line[:end])
    return names


@dataclass(frozen=True, slots=True)
class SignalReport:
    missing: tuple[str, ...]
    """Signals with none of their names on the page."""
    fallbacks: tuple[str, ...]
    """``signal: name`` where only a deprecated fallback name is present."""


def evaluate(engine: str, names: set[str]) -> SignalReport:
    missing: list[str] = []
    fallbacks: list[str] = []
    for signal, candidates in SIGNALS.get(engine, {}).items():
        present = [n for n in candidates if n in names]
        if not present:
            missing.append(f"{signal} ({' or '.join(candidates)})")
        elif present[0] != candidates[0]:
            fallbacks.append(f"{signal}: only {present[0]} (expected {candidates[0]})")
    return SignalReport(tuple(missing), tuple(fallbacks))


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    page: str | None
    error: str | None


async def _fetch_all(urls: Sequence[str], timeout_s: float) -> list[Fetched]:
    # deferred: optional dependency: aiohttp (ops extra) only for live probes; checks also run offline
    import aiohttp

    semaphore = asyncio.Semaphore(CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def one(session: aiohttp.ClientSession, url: str) -> Fetched:
        async with semaphore:
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status != 200:
                        return Fetched(url, None, f"HTTP {response.status}")
                    body = await response.content.read(MAX_PAGE_BYTES + 1)
                    if len(body) > MAX_PAGE_BYTES:
                        return Fetched(url, None, f"page larger than {MAX_PAGE_BYTES} bytes")
                    return Fetched(url, body.decode("utf-8", "replace"), None)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return Fetched(url, None, f"{type(exc).__name__}: {exc}".rstrip(": "))

    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(one(session, u) for u in urls)))


def fetch_pages(urls: Sequence[str], *, timeout_s: float) -> list[Fetched]:
    """Fetch every URL concurrently (bounded), no redirects followed; errors are values, not raised."""
    return asyncio.run(_fetch_all(urls, timeout_s))
