"""Builders of routing inputs shared by the benchmark tests."""

from __future__ import annotations

from igw.scheduling.types import EndpointView, RoutingRequest


def views(**inflight: int) -> list[EndpointView]:
    """Endpoint views keyed by name with the given in-flight counts."""
    return [EndpointView(key=k, metrics=None, scraped_at=None, inflight=n) for k, n in inflight.items()]


def request(text: str = "hello", *, model: str = "m", rid: str = "r") -> RoutingRequest:
    return RoutingRequest(
        request_id=rid, model=model, base_model=model, prefix_text=text, prompt_tokens=len(text) // 4
    )
