"""Whole-host ``/metrics`` for ``igw serve --workers N``: every worker answers for all of them.

A Prometheus scrape of the pod reaches one worker (the kernel picks it per connection). That worker
collects the other workers' expositions over their unix sockets (each worker serves its own rendered
registry on ``metrics-<index>.sock`` in the group's private directory) and answers one page in which
every sample carries a ``worker="<index>"`` label: ``sum without (worker) (...)`` gives the host's
counters and histograms, and every page shows every worker, so counters never appear to reset when
consecutive scrapes land on different workers. A worker whose socket does not answer (still starting,
stopped, stuck) is left out, and the page's ``igw_worker_metrics_up{worker}`` says so with a 0.

Why not ``prometheus_client``'s multiprocess mode: it replaces every metric's storage with
memory-mapped files chosen by an environment variable before the library is imported, supports only
its own metric classes (the gateway's per-endpoint gauges are a custom collector over live state),
and needs a per-gauge aggregation mode; relabelling whole pages keeps each worker's registry as it
is. The merge is written here because it is a line-level relabelling of the text format (group each
family's samples under one ``# HELP``/``# TYPE`` header), not a parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

log = logging.getLogger("igw.gateway.worker_metrics")

WORKER_LABEL: Final = "worker"
UP_FAMILY: Final = "igw_worker_metrics_up"
"""The gauge each merged page ends with: per worker of the group, 1 when its series are in this page,
0 when its metrics socket did not answer (still starting, stopped, stuck). Without it a worker left
out looked to Prometheus like a worker that never existed (session s42: for the 4 s a three-worker
group took to start, every scrape that reached worker 0 held worker 0's series alone, and said so
only in worker 0's log)."""
FETCH_TIMEOUT_S: Final = 2.0
MAX_PAGE_BYTES: Final = 64 * 1024 * 1024
_LENGTH: Final = struct.Struct(">Q")
"""Each page on a worker's socket follows its length: a reader then knows it has the whole page (at
1,000 endpoints a worker's page is hundreds of KiB, more than one read of a unix socket returns, and
a worker that stops mid-page must not pass for one with fewer samples)."""


def label_page(page: bytes, worker: int) -> dict[bytes, list[bytes]]:
    """``page``'s lines grouped by family (header lines first), each sample labelled with ``worker``."""
    families: dict[bytes, list[bytes]] = {}
    current: list[bytes] = families.setdefault(b"", [])
    label = f'{WORKER_LABEL}="{worker}"'.encode()
    for line in page.splitlines():
        if not line:
            continue
        if line.startswith(b"#"):
            parts = line.split(b" ", 3)
            if len(parts) >= 3 and parts[1] in (b"HELP", b"TYPE"):
                current = families.setdefault(parts[2], [])
                current.append(line)
            continue
        brace, space = line.find(b"{"), line.find(b" ")
        if brace != -1 and (space == -1 or brace < space):
            closing = b"" if line[brace + 1 : brace + 2] == b"}" else b","
            current.append(line[: brace + 1] + label + closing + line[brace + 1 :])
        elif space != -1:
            current.append(line[:space] + b"{" + label + b"}" + line[space:])
    return families


def merge_pages(pages: Sequence[tuple[int, bytes]]) -> bytes:
    """One exposition from several workers' pages: per family one header, then every worker's samples."""
    merged: dict[bytes, list[bytes]] = {}
    for worker, page in pages:
        for name, lines in label_page(page, worker).items():
            out = merged.get(name)
            if out is None:
                merged[name] = list(lines)
            else:
                out.extend(line for line in lines if not line.startswith(b"#"))
    return b"".join(line + b"\n" for lines in merged.values() for line in lines)


def up_family(count: int, answered: set[int]) -> bytes:
    """:data:`UP_FAMILY` for a group of ``count`` workers of which ``answered`` are in the page."""
    lines = [
        f"# HELP {UP_FAMILY} Whether this page holds the worker's series (0: its metrics socket did "
        "not answer: starting, stopped or stuck).",
        f"# TYPE {UP_FAMILY} gauge",
        *(f'{UP_FAMILY}{{{WORKER_LABEL}="{i}"}} {1 if i in answered else 0}' for i in range(count)),
    ]
    return "".join(line + "\n" for line in lines).encode()


class WorkerMetrics:
    """Serve this worker's page on its socket; gather every worker's page for ``/metrics``."""

    def __init__(self, *, index: int, sockets: Sequence[str], render: Callable[[], Awaitable[bytes]]) -> None:
        self._index = index
        self._sockets = sockets
        self._render = render
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=self._sockets[self._index])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            page = await self._render()
            writer.writelines((_LENGTH.pack(len(page)), page))
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _fetch(self, index: int) -> tuple[int, bytes] | None:
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self._sockets[index])
                try:
                    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                    if size > MAX_PAGE_BYTES:
                        raise ValueError(f"its page is {size} bytes, over {MAX_PAGE_BYTES}")
                    page = await reader.readexactly(size)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except asyncio.IncompleteReadError as exc:
            log.warning(
                "worker %d's metrics could not be read: it sent %d bytes and closed", index, len(exc.partial)
            )
            return None
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("worker %d's metrics could not be read: %s", index, exc)
            return None
        return index, page

    async def page(self) -> bytes:
        """Every reachable worker's metrics, labelled by worker (a missing worker is logged and left
        out, and shown as 0 in :data:`UP_FAMILY`)."""
        others = [self._fetch(i) for i in range(len(self._sockets)) if i != self._index]
        own, fetched = await asyncio.gather(self._render(), asyncio.gather(*others))
        pages = [(self._index, own)] + [p for p in fetched if p is not None]
        # The merge is bytes work over every worker's lines (16 workers at 1,000 endpoints: 128,000
        # lines, ≈ 100 ms): in a thread the event loop keeps serving requests meanwhile, taking the
        # interpreter back at every switch interval, instead of stalling them for the whole merge.
        merged = await asyncio.to_thread(merge_pages, sorted(pages))
        return merged + up_family(len(self._sockets), {index for index, _ in pages})

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
