"""What the gateway knows about each endpoint of one scheduler's pool, and how it turns that into the
:class:`~igw.scheduling.types.EndpointView` the scheduler sees.

Mutable state lives here (updated by discovery, the scraper and the proxy); the scheduler only ever
gets frozen views, so a decision cannot observe a half-applied update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics


@dataclass(frozen=True, slots=True)
class DiscoveredEndpoint:
    """One ``host:port`` a discovery source says belongs to a scheduler."""

    key: EndpointKey
    labels: Mapping[str, str] = field(default_factory=dict)
    pod: str | None = None
    """``namespace/name`` of the pod, when discovered in-cluster (for logs)."""


@dataclass(slots=True)
class PageTracker:
    """How an endpoint's ``/metrics`` page changes (frozen-page detection, see the scraper)."""

    digest: int | None = None
    changed_at: float | None = None
    picks_seen: int = 0
    """``EndpointState.picks`` when the page last changed."""
    unseen_since: float | None = None
    """When a dispatch the page has not reflected was first noticed."""
    frozen: bool = False
    family_starts: dict[str, int] = field(default_factory=dict)
    """Where each routing family started on the previous page: the parser's search hints."""


@dataclass(slots=True)
class EndpointState:
    key: EndpointKey
    labels: Mapping[str, str]
    pod: str | None = None
    metrics: EngineMetrics | None = None
    scraped_at: float | None = None
    scrape_failing: bool = False
    last_error: str | None = None
    missing: frozenset[str] = frozenset()
    """Families absent from the latest page (see :mod:`igw.gateway.metrics_parser`)."""
    kv_source: str | None = None
    inflight: int = 0
    inflight_tokens: int = 0
    picks: int = 0
    page: PageTracker = field(default_factory=PageTracker)
    max_model_len: int | None = None
    """Longest prompt + output the model server accepts (from its ``/v1/models``), when known."""

    def dispatched(self, est_tokens: int) -> None:
        """A request was sent to this endpoint (``est_tokens``: prompt + max output tokens)."""
        self.inflight += 1
        self.inflight_tokens += est_tokens
        self.picks += 1

    def completed(self, est_tokens: int) -> None:
        self.inflight -= 1
        self.inflight_tokens -= est_tokens

    def view(self) -> EndpointView:
        return EndpointView(
            key=self.key,
            metrics=self.metrics,
            scraped_at=self.scraped_at,
            scrape_failing=self.scrape_failing,
            inflight=self.inflight,
            inflight_tokens=self.inflight_tokens,
            labels=self.labels,
            max_model_len=self.max_model_len,
        )


class EndpointPool:
    """The endpoints of one scheduler, keyed by ``host:port``."""

    def __init__(self) -> None:
        self.states: dict[EndpointKey, EndpointState] = {}

    def replace(
        self, discovered: Iterable[DiscoveredEndpoint]
    ) -> tuple[list[EndpointKey], list[EndpointKey]]:
        """Make the pool exactly ``discovered``; keep the state of endpoints that stay.

        Returns ``(added, removed)`` keys.
        """
        wanted = {d.key: d for d in discovered}
        removed = [k for k in self.states if k not in wanted]
        for key in removed:
            del self.states[key]
        added: list[EndpointKey] = []
        for key, d in wanted.items():
            state = self.states.get(key)
            if state is None:
                self.states[key] = EndpointState(key=key, labels=dict(d.labels), pod=d.pod)
                added.append(key)
            else:
                state.labels = dict(d.labels)
                state.pod = d.pod
        return added, removed

    def largest_context(self) -> int | None:
        """The largest ``max_model_len`` in the pool; ``None`` while any endpoint's is unknown."""
        lengths = [s.max_model_len for s in self.states.values()]
        if not lengths or None in lengths:
            return None
        return max(n for n in lengths if n is not None)

    def views(self) -> list[EndpointView]:
        return [s.view() for s in self.states.values()]

    def __len__(self) -> int:
        return len(self.states)
