"""Where endpoints come from: a static file (local use) or the Kubernetes API (in-cluster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from igw.config.model import SchedulerSpec
from igw.gateway.endpoints import DiscoveredEndpoint


class DiscoverySink(Protocol):
    """What a discovery source reports to (the gateway state)."""

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None: ...

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None: ...

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        """Named plain backends (``host:port`` lists), e.g. ``spec.bbr.defaultBackend`` locally."""
        ...


class DiscoverySource(Protocol):
    async def start(self, sink: DiscoverySink) -> None: ...

    async def stop(self) -> None: ...

    def retarget(self, schedulers: tuple[SchedulerSpec, ...]) -> None:
        """A reloaded configuration changed the schedulers: follow the new names and selectors."""
        ...

    def describe(self) -> str: ...
