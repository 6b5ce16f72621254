"""Delivery of EMF documents to the CloudWatch agent's EMF listener over TCP or UDP.

On EKS the amazon-cloudwatch-observability add-on ships container stdout through Fluent Bit
inside its own JSON envelope, so CloudWatch does not extract EMF documents from stdout lines as
metrics. The CloudWatch agent instead listens for EMF on port 25888 (TCP and UDP) when its
configuration enables ``logs.metrics_collected.emf``; this module sends the gateway's documents
there, the way the ``aws-embedded-metrics`` libraries do when ``AWS_EMF_AGENT_ENDPOINT`` is set.

:class:`AgentHandler` is a :class:`logging.Handler` for the ``igw.emf`` logger: ``emit`` only
appends the line to a bounded queue (a full queue drops the line and counts it), so neither the
event loop nor the request path ever waits on the network. One daemon thread drains the queue:
newline-delimited documents over one persistent TCP connection (reconnecting with capped backoff
while the agent is away, every line meanwhile counted in :attr:`AgentHandler.dropped`), or one
UDP datagram per document. Written by hand because the ``aws-embedded-metrics`` sinks own their
documents' construction and flush cadence, while here the documents already exist as lines.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from igw.errors import IgwGatewayError
from igw.redaction import redact

ENDPOINT_ENV: Final = "AWS_EMF_AGENT_ENDPOINT"
"""The variable the ``aws-embedded-metrics`` libraries read for the agent's address."""

DEFAULT_AGENT_PORT: Final = 25888
"""The CloudWatch agent's EMF listener port (TCP and UDP)."""

DEFAULT_QUEUE_LINES: Final = 10_000
"""Documents held while the agent is unreachable before new ones are dropped."""

_STOP: Final = object()
# Not a child of "igw.emf": that logger carries the documents themselves, to this handler.
_log = logging.getLogger("igw.emf_sink")


class EmfEndpointError(IgwGatewayError, ValueError):
    """An EMF endpoint that is not ``tcp://HOST:PORT`` or ``udp://HOST:PORT``."""


@dataclass(frozen=True, slots=True)
class AgentEndpoint:
    """Where the CloudWatch agent's EMF listener is."""

    protocol: Literal["tcp", "udp"]
    host: str
    port: int

    @classmethod
    def parse(cls, value: str, *, source: str = "--emf-endpoint") -> AgentEndpoint:
        """``tcp://HOST[:PORT]`` or ``udp://HOST[:PORT]`` (port 25888 when omitted)."""
        parts = urlsplit(value.strip())
        shown = redact(value)  # an endpoint with user-info is refused, and quoted without it
        if parts.scheme not in ("tcp", "udp"):
            raise EmfEndpointError(f"{source}: {shown!r} must start with tcp:// or udp://")
        try:
            port = parts.port or DEFAULT_AGENT_PORT
        except ValueError as exc:
            raise EmfEndpointError(f"{source}: {shown!r} has an invalid port") from exc
        if not parts.hostname or parts.path not in ("", "/"):
            raise EmfEndpointError(f"{source}: {shown!r} must be tcp://HOST:PORT or udp://HOST:PORT")
        return cls(protocol=parts.scheme, host=parts.hostname, port=port)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.protocol}://{self.host}:{self.port}"


def endpoint_from(flag: str | None, environ: dict[str, str] | None = None) -> AgentEndpoint | None:
    """The endpoint named by ``--emf-endpoint``, else by ``$AWS_EMF_AGENT_ENDPOINT``, else ``None``
    (documents go to stdout)."""
    if flag:
        return AgentEndpoint.parse(flag)
    env = (os.environ if environ is None else environ).get(ENDPOINT_ENV, "")
    return AgentEndpoint.parse(env, source=ENDPOINT_ENV) if env.strip() else None


class AgentHandler(logging.Handler):
    """Sends each ``igw.emf`` record's message to the agent without blocking the caller."""

    def __init__(
        self,
        endpoint: AgentEndpoint,
        *,
        queue_lines: int = DEFAULT_QUEUE_LINES,
        connect_timeout_s: float = 2.0,
        max_backoff_s: float = 5.0,
    ) -> None:
        super().__init__(level=logging.INFO)
        self.endpoint = endpoint
        self.sent = 0
        self._dropped_full = 0  # written only by emit, which logging serialises with the handler lock
        self._dropped_unsent = 0  # written only by the drain thread
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_lines)
        self._connect_timeout_s = connect_timeout_s
        self._max_backoff_s = max_backoff_s
        self._closing = threading.Event()
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._drain, name="igw-emf-agent", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Documents that never reached the agent: buffer full, agent unreachable, or closing."""
        return self._dropped_full + self._dropped_unsent

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._queue.put_nowait(record.getMessage())
        except queue.Full:
            self._dropped_full += 1

    def close(self, timeout_s: float = 2.0) -> None:
        """Sends what is queued (waiting at most ``timeout_s``), then closes the connection."""
        if self._thread.is_alive():
            try:
                self._queue.put(_STOP, timeout=timeout_s)
            except queue.Full:
                self._closing.set()
                self._queue.put(_STOP)  # the drain thread now discards, so room appears at once
            self._thread.join(timeout_s)
            self._closing.set()
            self._thread.join()
        super().close()

    def _drain(self) -> None:
        backoff = 0.1
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            if self._closing.is_set():
                self._dropped_unsent += 1
                continue
            line = str(item)
            if self._send(line):
                self.sent += 1
                backoff = 0.1
            else:
                self._dropped_unsent += 1
                self._closing.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
        self._disconnect()

    def _send(self, line: str) -> bool:
        payload = (line + "\n").encode()
        try:
            if self.endpoint.protocol == "udp":
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.sendto(payload, (self.endpoint.host, self.endpoint.port))
                return True
            if self._socket is None:
                self._socket = socket.create_connection(
                    (self.endpoint.host, self.endpoint.port), timeout=self._connect_timeout_s
                )
                _log.info("connected to the CloudWatch agent at %s", self.endpoint)
            self._socket.sendall(payload)
            return True
        except OSError as exc:
            if self._socket is not None or self._dropped_unsent == 0:
                _log.warning(
                    "CloudWatch agent at %s unreachable (%s); dropping EMF documents", self.endpoint, exc
                )
            self._disconnect()
            return False

    def _disconnect(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
