"""A TCP proxy on loopback that delays every reply of the server behind it: a slow Redis.

A loaded ElastiCache node or a lossy network path answers every command, late. The proxy forwards
what clients send at once and each chunk the server answers ``delay_s`` after it arrived (chunks
keep their order; a pipelined reply is not delayed once per command), so a command's round trip
takes ``delay_s`` more. It runs its own event loop on a thread, so the code under test (on the
test's loop) cannot slow it down, and ``delay_s`` may be changed while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator


class DelayProxy:
    """Listens on a free loopback port and forwards to ``127.0.0.1:<target_port>``."""

    def __init__(self, target_port: int, *, delay_s: float) -> None:
        self.delay_s = delay_s
        self._target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="delay-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Connections accepted so far (each a client's connect)."""
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("the delay proxy did not start")

    def stop(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def open_server() -> None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        self._loop.run_until_complete(open_server())
        self._ready.set()
        self._loop.run_forever()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target_port)
        except OSError:
            client_w.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(
                self._pipe(client_r, server_w, delayed=False), self._pipe(server_r, client_w)
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_w, server_w):
                writer.close()
            self._tasks.discard(task)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool = True
    ) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay_s`` after it arrived when ``delayed``."""
        if not delayed:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
            with contextlib.suppress(OSError):
                writer.write_eof()
            return
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((time.monotonic() + self.delay_s, chunk))
            queue.put_nowait((time.monotonic() + self.delay_s, b""))
            await sender
        finally:
            sender.cancel()


@contextlib.contextmanager
def delay_proxy(target_port: int, *, delay_s: float) -> Iterator[DelayProxy]:
    """A started :class:`DelayProxy` in front of ``target_port``, stopped on exit."""
    proxy = DelayProxy(target_port, delay_s=delay_s)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
