"""Fetch model-server ``/metrics`` pages and tell which scheduling signals they really carry.

The gateway scores on queue depth, running batch size and KV-cache usage under engine-specific
names, which come from the engine catalogue (:mod:`igw.engines`) as they do for the gateway's parser.
A page can be up yet miss a signal: old vLLM uses only ``vllm:gpu_cache_usage_perc``; SGLang without
``--enable-metrics`` serves no page at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from igw.engines import ENGINES, Engine
from igw.engines import engine as lookup_engine

SIGNALS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    name: engine.signals() for name, engine in ENGINES.items()
}
"""Engine -> signal -> accepted names, preferred first (a fallback name is reported as a warning)."""

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


def evaluate(engine: str, names: set[str], catalogue: Mapping[str, Engine] = ENGINES) -> SignalReport:
    """Which of ``engine``'s routing signals the family ``names`` of a page lack or carry only under a
    deprecated name. ``ValueError`` for an engine the catalogue does not know."""
    missing: list[str] = []
    fallbacks: list[str] = []
    for signal, candidates in lookup_engine(engine, catalogue).signals().items():
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
