"""TCP keep-alive probe timing for a connected socket: one place for the socket options, two timings.

The kernel's own default (first probe after two hours of silence) finds nothing in time: a peer whose
host vanished (a terminated instance, a partition: no RST ever comes) leaves the connection open for
as long as the other side waits, and a silent connection through an AWS load balancer is cut when the
balancer's idle timeout passes (an NLB's 350 s, an ALB's 60 s by default) - silently, so the next
bytes meet a reset. Probes sent before either limit find a dead peer and keep the balancer's flow
open (keep-alive packets reset an NLB's idle timer).

- Upstream, to model servers (:data:`UPSTREAM`): a dead pod must fail its requests fast - 15 s of
  silence, then 3 probes 5 s apart.
- Client connections (:data:`CLIENT`): a non-streamed answer can be silent for minutes while the
  model generates. The first probe after 60 s of silence keeps such a connection's flow open through
  the chart's NLB (350 s idle timeout); 6 probes 10 s apart end a connection whose client vanished
  after two minutes more, and its request with it (the handler is cancelled, the upstream request
  aborted, so the model server stops generating for nobody). An ALB is different: it terminates TCP
  and counts only data against its idle timeout (60 s by default), so behind an ALB long
  non-streamed answers need a raised ``idle_timeout.timeout_seconds`` or streaming.
"""

from __future__ import annotations

import socket
from typing import NamedTuple


class KeepAliveTiming(NamedTuple):
    """Seconds of silence before the first probe, seconds between unanswered probes, probes sent
    before the connection is declared dead."""

    idle_s: int
    interval_s: int
    probes: int


UPSTREAM = KeepAliveTiming(idle_s=15, interval_s=5, probes=3)
"""For connections to model servers (see the module docstring)."""
CLIENT = KeepAliveTiming(idle_s=60, interval_s=10, probes=6)
"""For accepted client connections (see the module docstring)."""


def probe_silent_peer(sock: socket.socket, timing: KeepAliveTiming) -> None:
    """Turn on keep-alive probes with ``timing`` on a TCP socket (the per-socket options exist on
    Linux, where the gateway runs; elsewhere the system's timing applies). Other sockets (a Unix
    socket) are left as they are."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", timing.idle_s),
        ("TCP_KEEPINTVL", timing.interval_s),
        ("TCP_KEEPCNT", timing.probes),
    ):
        number = getattr(socket, option, None)
        if number is not None:
            sock.setsockopt(socket.IPPROTO_TCP, number, value)
