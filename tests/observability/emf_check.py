"""EMF document checks and a loopback stand-in for the CloudWatch agent's EMF listener."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import jsonschema
import orjson

from igw.gateway.emf import EMF_SCHEMA
from tests.observability.live_gateway import MODEL, wait_ready


def check_emf(document: dict[str, Any]) -> None:
    """Valid per the schema, and every metric a directive names is a member of the document."""
    jsonschema.validate(document, EMF_SCHEMA)
    aws = document["_aws"]
    assert isinstance(aws, dict)
    for directive in aws["CloudWatchMetrics"]:
        for dimension_set in directive["Dimensions"]:
            assert all(isinstance(document[d], str) for d in dimension_set)
        for metric in directive["Metrics"]:
            assert isinstance(document[metric["Name"]], float | int)


async def one_completion(gateway: AbstractAsyncContextManager[str]) -> None:
    """Start ``gateway`` (yielding its URL), answer one completion through it, stop it."""
    async with gateway as url, aiohttp.ClientSession() as http:
        await wait_ready(http, url)
        resp = await http.post(
            url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}
        )
        assert resp.status == 200
        await resp.read()


class AgentListener:
    """A real TCP or UDP listener on 127.0.0.1 collecting newline-delimited EMF documents, as the
    CloudWatch agent's port 25888 does; ``port=0`` picks one, a given port is re-bound."""

    def __init__(self, protocol: str, port: int = 0) -> None:
        kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
        self.protocol = protocol
        self.documents: list[dict[str, Any]] = []
        self._server = socket.socket(socket.AF_INET, kind)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.settimeout(0.1)
        if protocol == "tcp":
            self._server.listen()
        self.port: int = self._server.getsockname()[1]
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._spawn(self._accept if protocol == "tcp" else self._datagrams)

    @property
    def endpoint(self) -> str:
        return f"{self.protocol}://127.0.0.1:{self.port}"

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 30.0) -> None:
        """Until ``predicate(documents)`` holds; a generous deadline, only a hang fails it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if predicate(list(self.documents)):
                    return
            time.sleep(0.02)
        raise AssertionError(f"the listener got {len(self.documents)} documents, not what was awaited")

    def close(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join()
        for connection in self._connections:
            connection.close()
        self._server.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _add(self, line: bytes) -> None:
        if line.strip():
            with self._lock:
                self.documents.append(orjson.loads(line))

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            connection.settimeout(0.1)
            self._connections.append(connection)
            self._spawn(self._read, connection)

    def _read(self, connection: socket.socket) -> None:
        buffered = b""
        while not self._stopping.is_set():
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            *lines, buffered = (buffered + chunk).split(b"\n")
            for line in lines:
                self._add(line)

    def _datagrams(self) -> None:
        while not self._stopping.is_set():
            try:
                datagram = self._server.recv(65536)
            except TimeoutError:
                continue
            for line in datagram.split(b"\n"):
                self._add(line)
