"""A client connection during its TLS handshake: counted against the connection cap from its accept.

The event loop's own TLS termination (``create_server(ssl=...)``) calls the connection's protocol
only once the handshake is done: until then the gateway could neither count the connection nor
close it, so the connection cap (``maxConnections``) held only for clients that finished their
handshake. A client that opened connections to the TLS port and sent nothing, or half a ClientHello,
held one file descriptor each until the handshake timeout, however many (before session s40: 50 such
connections open at once under a cap of 5, where a plain-TCP listener kept 5).

The gateway's TLS listener therefore accepts plain TCP and runs the handshake itself
(:meth:`asyncio.AbstractEventLoop.start_tls`, which asyncio and uvloop both provide):
:class:`TlsHandshake` is the connection's protocol from its accept, registered with the server as a
connection still in its handshake (counted, and closed first when the cap needs room), until the
handshake is done and the connection's HTTP handler takes the TLS transport over. The handshake
timeout still ends one that does not finish.

The handler gets the TLS transport wrapped in :class:`DrainingClose`: the TLS close (and with it the
``ssl_shutdown_timeout``, :data:`igw.gateway.serving.LINGER_S`, the wait for the client's
close_notify) begins only once the answer's bytes have left, both loops' TLS layers handing them to
the TCP transport, whose buffer outlives neither. Before session s49 that timeout counted from the
handler's close: a ``Connection: close`` answer larger than the socket buffers, to a client slower to
read than the timeout, was cut mid-body.

The TLS layer's write-buffer marks are 1 byte high and 0 low: it pauses the handler as soon as it
holds a byte, which happens only while the TCP transport below it is paused (over its 64 KiB mark;
otherwise each write is encrypted and handed on at once), and resumes it once it has handed every
byte on. The handler is thus paused exactly while the TCP transport is, as on plain TCP, and a slow
TLS reader holds as many unsent bytes as a plain-TCP one. Both loops' TLS layers default to a 512 KiB
high-water mark (before session s49: about 600 KiB held per slow stream against 64 KiB on plain TCP,
ten times the memory for many slow streaming clients); s49 gave the TLS layer the TCP transport's
marks, which still held both buffers' worth, about twice plain TCP's (before session s50).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterable
from typing import Any, Final, Protocol, cast

log = logging.getLogger("igw.gateway")


class HandshakeRegistry(Protocol):
    """What :class:`TlsHandshake` needs of the server it accepts for
    (:class:`igw.gateway.serving.GatewayServer`)."""

    def admit_handshake(self, handler: asyncio.Protocol, handshake: TlsHandshake) -> bool:
        """Count a connection whose handshake begins; ``False``: it is refused (the cap is reached
        and no other connection could be closed to make room)."""
        ...

    def handshake_ended(self, handler: asyncio.Protocol) -> None:
        """The connection's handshake is over (done, failed or the connection closed): no longer
        counted as a handshake (a connection that goes on is counted by its handler from then on)."""
        ...


class TlsHandshake(asyncio.Protocol):
    """The protocol of an accepted TLS connection until its handshake is done; then ``handler``'s.

    Two windows where bytes reach this object rather than the TLS layer or ``handler``:

    - before ``start_tls`` took the connection over: uvloop starts reading right after
      ``connection_made`` whatever the protocol asked (a ClientHello sent with the connection's first
      packet arrives here), so those bytes are kept and handed to the TLS layer once it is the
      connection's protocol (it keeps bytes that arrive before its own start);
    - between the handshake's end and the resumption of the coroutine awaiting it: the loop hands the
      first decrypted bytes (and a half-close) at once to the protocol ``start_tls`` was given, this
      object, which passes them on to ``handler`` once it has the TLS transport, so the handler sees
      the callbacks in the order a connection's protocol always does."""

    __slots__ = (
        "_context",
        "_early",
        "_ended",
        "_handler",
        "_received",
        "_registry",
        "_send_timeout_s",
        "_shutdown_timeout_s",
        "_task",
        "_timeout_s",
        "_tls_started",
        "_transport",
    )

    def __init__(
        self,
        registry: HandshakeRegistry,
        handler: asyncio.Protocol,
        context: ssl.SSLContext,
        *,
        timeout_s: float,
        shutdown_timeout_s: float,
        send_timeout_s: float,
    ) -> None:
        self._registry = registry
        self._handler = handler
        self._context = context
        self._timeout_s = timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        """How long a close waits for the client's close_notify (``ssl_shutdown_timeout``; both
        loops' default is 30 s, during which the connection still counts against
        ``maxConnections``: a client that never sends it held a slot that long, before session s48)."""
        self._send_timeout_s = send_timeout_s
        """Longest the answer's bytes below the TLS layer, or a close waiting for them, may wait
        without progress (:class:`DrainingClose`)."""
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._tls_started = False
        self._early = bytearray()
        """Raw bytes read before ``start_tls`` took the connection over (the ClientHello's start)."""
        self._received: list[bytes] = []
        """Decrypted bytes that arrived before ``handler`` had the TLS transport."""
        self._ended: tuple[bool, BaseException | None] | None = None
        """Set when the client ended the connection before ``handler`` had it: ``(True, None)`` for a
        half-close after the handshake, ``(False, exc)`` for a lost connection."""

    # ---- the raw TCP connection ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        self._transport = tcp
        tcp.pause_reading()  # (asyncio keeps it paused; uvloop resumes reading once this returns)
        if not self._registry.admit_handshake(self._handler, self):
            tcp.close()
            return
        task = self._task = asyncio.get_running_loop().create_task(self._handshake(tcp))
        task.add_done_callback(self._finished)

    def close(self) -> None:
        """End the connection (the connection cap needs room, or the server stops)."""
        if self._task is not None:
            self._task.cancel()  # start_tls closes the connection as it is cancelled
        if self._transport is not None:
            self._transport.close()  # also when the task never ran (cancelled before its start)

    async def _handshake(self, tcp: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        starting = loop.create_task(
            loop.start_tls(
                tcp,
                self,
                self._context,
                server_side=True,
                ssl_handshake_timeout=self._timeout_s,
                ssl_shutdown_timeout=self._shutdown_timeout_s,
            )
        )
        try:
            # start_tls makes its TLS layer the connection's protocol in its first step, which runs
            # before this coroutine's next one (the loop runs its callbacks in the order they came)
            await asyncio.sleep(0)
            self._tls_started = True
            early, self._early = bytes(self._early), bytearray()
            if early and not starting.done():
                layer = tcp.get_protocol()
                if layer is self:  # (not seen: the loop ran the callbacks out of order)
                    raise ConnectionAbortedError("the TLS layer did not take the connection over")
                _feed(layer, early)
            tls = await starting
        except OSError as exc:  # ssl.SSLError, ConnectionAbortedError (the timeout), a reset
            # A failed or timed-out handshake, or a client gone during it: closed (the loop logs it
            # at debug level, as for its own TLS termination).
            log.debug("TLS handshake with a client failed: %s", type(exc).__name__)
            return
        finally:
            if not starting.done():  # this coroutine was cancelled: so is the handshake
                starting.cancel()
        self._registry.handshake_ended(self._handler)
        ended = self._ended
        if tls is None or (ended is not None and not ended[0]):
            return  # lost before the handler had it: it never saw the connection, nothing to tell it
        handler = self._handler
        tls.set_write_buffer_limits(high=1, low=0)  # paused while the TCP transport is: see the module
        tls.set_protocol(handler)
        handler.connection_made(DrainingClose(tls, tcp, stall_s=self._send_timeout_s))
        received, self._received = self._received, []
        for data in received:
            handler.data_received(data)
        if ended is not None and not handler.eof_received():
            tls.close()

    def _finished(self, task: asyncio.Task[None]) -> None:
        """The handshake's task ended (done, failed, cancelled): no longer counted as a handshake; a
        connection whose handler did not take it over is closed."""
        self._registry.handshake_ended(self._handler)
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            log.error("TLS handshake task failed", exc_info=failure)
        if (task.cancelled() or failure is not None) and self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.close()

    # ---- bytes before the TLS layer or the handler took the connection over -------------------------
    def data_received(self, data: bytes) -> None:
        if self._tls_started:
            self._received.append(data)  # decrypted, for the handler
            return
        self._early += data  # raw (uvloop read them before start_tls paused the connection)
        if self._transport is not None:
            self._transport.pause_reading()
        if len(self._early) > _EARLY_LIMIT and self._transport is not None:
            self._transport.close()  # no ClientHello is that long

    def eof_received(self) -> bool:
        if not self._tls_started:
            return False  # the client ended the connection before the handshake: closed
        self._ended = (True, None)
        return True  # kept open: the handler decides once it has the connection

    def connection_lost(self, exc: BaseException | None) -> None:
        # The raw connection closed before the handshake began, or the TLS connection before its
        # handler had it: its handler never saw it and never will.
        self._ended = (False, exc)
        self._registry.handshake_ended(self._handler)
        if self._task is not None and not self._tls_started:
            self._task.cancel()


DRAIN_POLL_S: Final = 0.05
"""How often a closing :class:`DrainingClose` looks whether its unsent bytes are gone."""


class DrainingClose(asyncio.Transport):
    """A TLS connection's transport as its handler sees it: the send timeout holds for the bytes
    below the TLS layer, and ``close`` starts the TLS close only once every byte written has left
    (the TLS layer's buffer and the TCP transport's below it are empty).

    Both loops' TLS layers encrypt each write at once and hand it whole to the TCP transport while
    that one is not paused; only the TLS layer's own buffer counts towards the handler's
    ``pause_writing``, which starts its send timeout. One write larger than the socket buffers (a
    whole answer) thus went to the TCP transport's buffer with no pause reaching the handler: a
    keep-alive client that stopped reading held it (4.6 of 8 MiB unsent) until the keep-alive
    timeout, before session s49. So a write that leaves the TCP transport's buffer over its
    high-water mark starts a watch here: it ends once that buffer is back under the mark; a watch in
    which no byte left for ``stall_s`` (the send timeout) aborts the connection, as the handler's
    own send timeout aborts a plain-TCP one.

    The TLS close's bound (``ssl_shutdown_timeout``) is for the client's close_notify; both loops
    start it at the close and then drop the TCP transport's unsent bytes with the connection, so it
    must not start while the answer is still leaving. Until then the transport reads no more (as a
    plain TCP transport that closes) and is closing to its handler; the same ``stall_s`` without
    progress aborts the wait. Everything else is the TLS transport's own.

    Progress is a change of the TCP transport's buffer size: while over its high-water mark, that
    transport has paused the TLS layer, so the buffer changes only as the client reads (it shrinks,
    or, once drained to the low-water mark, the TLS layer refills it)."""

    __slots__ = (
        "_closing",
        "_last_unsent",
        "_poll",
        "_stall_s",
        "_stalled_at",
        "_tcp",
        "_tcp_high",
        "_tls",
    )

    def __init__(self, tls: asyncio.Transport, tcp: asyncio.Transport, *, stall_s: float) -> None:
        super().__init__()
        self._tls = tls
        self._tcp = tcp
        self._stall_s = stall_s
        self._tcp_high = tcp.get_write_buffer_limits()[1]
        """The TCP transport's high-water mark: past it, that transport pauses the TLS layer."""
        self._closing = False
        self._poll: asyncio.TimerHandle | None = None
        """The watch's (or the closing wait's) next look."""
        self._last_unsent = 0
        """The TCP transport's buffer size at the watch's last progress."""
        self._stalled_at = 0.0

    def _watch(self) -> None:
        """Look every :data:`DRAIN_POLL_S` whether the unsent bytes leave (:meth:`_check`)."""
        loop = asyncio.get_running_loop()
        self._last_unsent, self._stalled_at = self._tcp.get_write_buffer_size(), loop.time()
        self._poll = loop.call_later(DRAIN_POLL_S, self._check)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        tls = self._tls
        if tls.is_closing() or tls.get_write_buffer_size() + self._tcp.get_write_buffer_size() == 0:
            self._stop_watch()
            tls.close()
            return
        with contextlib.suppress(Exception):
            tls.pause_reading()
        if self._poll is None:
            self._watch()

    def _stop_watch(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None

    def _check(self) -> None:
        self._poll = None
        tls = self._tls
        if tls.is_closing():
            return  # lost (or aborted) meanwhile: nothing left to send
        unsent = self._tcp.get_write_buffer_size()
        if self._closing:
            if unsent + tls.get_write_buffer_size() == 0:
                tls.close()
                return
        elif unsent <= self._tcp_high:
            return  # the client reads: the watch ends (a write that fills the buffer starts another)
        loop = asyncio.get_running_loop()
        now = loop.time()
        if unsent != self._last_unsent:
            self._last_unsent, self._stalled_at = unsent, now
        elif now - self._stalled_at >= self._stall_s:
            log.warning(
                "aborted a %sTLS connection from %s whose client read none of its answer for %gs "
                "(send timeout)",
                "closing " if self._closing else "",
                tls.get_extra_info("peername"),
                self._stall_s,
            )
            tls.abort()
            return
        self._poll = loop.call_later(DRAIN_POLL_S, self._check)

    def abort(self) -> None:
        self._closing = True
        self._stop_watch()
        self._tls.abort()

    def is_closing(self) -> bool:
        return self._closing or self._tls.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._tls.write(data)
            if self._poll is None and self._tcp.get_write_buffer_size() > self._tcp_high:
                self._watch()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if not self._closing:
            self._tls.writelines(list_of_data)
            if self._poll is None and self._tcp.get_write_buffer_size() > self._tcp_high:
                self._watch()

    def write_eof(self) -> None:
        self._tls.write_eof()

    def can_write_eof(self) -> bool:
        return self._tls.can_write_eof()

    def get_write_buffer_size(self) -> int:
        """The answer's bytes not yet sent: the TLS layer's and, below it, the TCP transport's (a
        check against a plain-TCP high-water mark, as :class:`igw.gateway.lean_server.LeanStreamWriter`
        makes, counts every unsent byte on either listener)."""
        return self._tls.get_write_buffer_size() + self._tcp.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """The TCP transport's marks: they decide when the handler is paused (the TLS layer's are
        1 and 0 bytes, see the module)."""
        return self._tcp.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._tcp.set_write_buffer_limits(high, low)
        self._tcp_high = self._tcp.get_write_buffer_limits()[1]

    def pause_reading(self) -> None:
        self._tls.pause_reading()

    def resume_reading(self) -> None:
        if not self._closing:
            self._tls.resume_reading()

    def is_reading(self) -> bool:
        return self._tls.is_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._tls.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._tls.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._tls.get_protocol()


_EARLY_LIMIT: Final = 2**16
"""Raw bytes kept before the TLS layer takes a connection over: a ClientHello is at most 16 KiB plus
the record's header in practice; uvloop reads at most 256 KiB at once."""


def _feed(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    """Hand ``data`` to ``protocol`` as its transport would: through its buffer when it reads into one
    (both loops' TLS layers do; uvloop's is no :class:`asyncio.BufferedProtocol` subclass)."""
    get_buffer = getattr(protocol, "get_buffer", None)
    if get_buffer is None:
        cast(asyncio.Protocol, protocol).data_received(data)
        return
    view = memoryview(data)
    while view:
        buffer = memoryview(get_buffer(len(view)))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        cast(asyncio.BufferedProtocol, protocol).buffer_updated(size)
        view = view[size:]
