"""Small helpers every baseline policy shares: building decisions and keeping in-flight order."""

from __future__ import annotations

from collections.abc import Sequence

from igw.scheduling.types import DecisionKind, EndpointKey, EndpointView, RoutingDecision


def no_endpoints(reason: str = "no endpoints") -> RoutingDecision:
    """The 503 answer: nothing to route to."""
    return RoutingDecision(kind=DecisionKind.NO_ENDPOINTS, reason=reason)


def picked(chosen: EndpointKey, endpoints: Sequence[EndpointView], *, reason: str = "") -> RoutingDecision:
    """A ``PICKED`` decision whose fallbacks are the other endpoints, least in-flight first.

    Fallbacks matter only when connecting to the chosen endpoint fails; ordering them by the
    router's own in-flight count is what any of these baselines would do on retry.
    """
    others = sorted((e for e in endpoints if e.key != chosen), key=lambda e: (e.inflight, e.key))
    return RoutingDecision(
        kind=DecisionKind.PICKED,
        endpoint=chosen,
        fallbacks=tuple(e.key for e in others),
        reason=reason,
    )
