"""How a gateway pod shuts down: preStop sleep, drain, stream grace, and the pod's kill deadline.

After SIGTERM a gateway pod first sleeps in its preStop hook (the load balancer deregisters it), then
``igw serve`` answers ``/readyz`` with 503 for the drain period while still serving, gives in-flight
streams the stream grace, and ends what is left with SSE error events within
:data:`SHUTDOWN_RESERVE_S`. All of it must fit ``terminationGracePeriodSeconds`` or the kubelet
kills the process mid-stream.

Without ``spec.extensions.serverLimits.drainPeriod`` / ``streamGrace`` the drain is
:data:`DRAIN_S` and the stream grace is whatever the pod's grace period leaves. When the config sets
them, they are passed on as they are and the grace period is raised where it would not cover them
(the config asks for a longer shutdown; cutting it short would break that promise). The Helm chart's
gateway mode derives the same numbers in its template.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from igw.config.durations import parse_duration

DRAIN_S: Final = 5
"""Seconds ``/readyz`` answers 503 after SIGTERM while requests are still served (default)."""
SHUTDOWN_RESERVE_S: Final = 10
"""Seconds kept for ending the streams still running after the grace (SSE error events) and the exit."""


@dataclass(frozen=True, slots=True)
class ShutdownTiming:
    pre_stop_s: int
    drain_s: float
    stream_grace_s: float
    termination_grace_s: int
    """The pod's ``terminationGracePeriodSeconds``: at least the sum of the others plus the reserve."""

    def serve_args(self) -> list[str]:
        """``igw serve --drain-seconds D --stream-grace-seconds G``."""
        return ["--drain-seconds", f"{self.drain_s:g}", "--stream-grace-seconds", f"{self.stream_grace_s:g}"]


def shutdown_timing(spec: Mapping[str, Any], *, termination_grace_s: int, pre_stop_s: int) -> ShutdownTiming:
    """The timing for an InferenceGatewayConfig ``spec`` (already admitted, so its durations parse).

    Raises ``ValueError`` when, without a configured stream grace, ``termination_grace_s`` cannot
    hold the preStop sleep, the default drain and the reserve.
    """
    extensions = spec.get("extensions")
    limits = (extensions.get("serverLimits") if isinstance(extensions, Mapping) else None) or {}
    drain = parse_duration(limits["drainPeriod"]) if "drainPeriod" in limits else float(DRAIN_S)
    if "streamGrace" in limits:
        grace = parse_duration(limits["streamGrace"])
    else:
        grace = termination_grace_s - pre_stop_s - drain - SHUTDOWN_RESERVE_S
        if grace < 0 and "drainPeriod" not in limits:
            raise ValueError(
                f"termination grace {termination_grace_s}s must be at least the preStop sleep "
                f"({pre_stop_s}s) + {DRAIN_S + SHUTDOWN_RESERVE_S}s (drain and shutdown)"
            )
        grace = max(0.0, grace)
    needed = math.ceil(pre_stop_s + drain + grace + SHUTDOWN_RESERVE_S)
    return ShutdownTiming(
        pre_stop_s=pre_stop_s,
        drain_s=drain,
        stream_grace_s=grace,
        termination_grace_s=max(termination_grace_s, needed),
    )
