"""What the gateway knows about each endpoint of one scheduler's pool, and how it turns that into the
:class:`~igw.scheduling.types.EndpointView` the scheduler sees.

Mutable state lives here (updated by discovery, the scraper and the proxy); the scheduler only ever
gets frozen views, so a decision cannot observe a half-applied update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from igw.scheduling.slot_init import slot_constructor
from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics

_view = slot_constructor(EndpointView)
"""``EndpointView(key, metrics, scraped_at, scrape_failing, inflight, inflight_tokens, labels,
max_model_len, unreflected_dispatches)``, every field positionally, by slot writes
(:mod:`igw.scheduling.slot_init`)."""


def endpoint_key(host: str, port: int) -> EndpointKey:
    """``host:port`` of an endpoint, an IPv6 address in brackets (``[fd00::1]:8000``).

    Why the brackets: an IPv6 pod IP joined as it is (``fd00::1:8000``) is itself a valid IPv6
    address, so the proxy read it as a host on the default port 80 and sent every request to an
    address nobody listens on (502), while the scraper, splitting at the last colon, scraped the pod
    fine and kept it in scheduling."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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


VIEW_FIELDS = frozenset(
    {"key", "labels", "metrics", "scraped_at", "scrape_failing", "inflight", "inflight_tokens"}
    | {"max_model_len"}
)
"""The fields an :class:`EndpointView` is made of: writing one makes the state's cached view stale."""


class EndpointState:
    """One endpoint's mutable state, and its latest :class:`EndpointView` (made on demand, kept until a
    field the view carries is written).

    Why a cached view: the scheduler is handed every endpoint's view on every request, and a frozen
    view costs about a microsecond to build, per endpoint per request; most endpoints' fields do not
    change between two requests (a scrape lands every 50 ms, a dispatch touches one endpoint). Each
    field a view carries (:data:`VIEW_FIELDS`) is a property whose setter drops the view and tells the
    pool (:attr:`on_view_change`), so no writer has to remember to.

    Why properties and not an own ``__setattr__`` (as before session s26): a class with one stays a
    Python class in the compiled build (mypyc refuses ``object.__setattr__`` on a native class), and
    every read and write of its fields - per request by the proxy, per scrape by the scraper, per
    relayed snapshot by each other worker of a group - was then a generic attribute look-up."""

    def __init__(
        self,
        key: EndpointKey,
        labels: Mapping[str, str],
        pod: str | None = None,
        metrics: EngineMetrics | None = None,
        scraped_at: float | None = None,
        scrape_failing: bool = False,
        last_error: str | None = None,
        missing: frozenset[str] = frozenset(),
        kv_source: str | None = None,
        inflight: int = 0,
        inflight_tokens: int = 0,
        picks: int = 0,
        page: PageTracker | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.on_view_change: Callable[[EndpointKey], None] | None = None
        """Called with the key when the view goes stale (the pool's list of views is updated from it)."""
        self.cached_view: EndpointView | None = None
        self._key = key
        self._labels = labels
        self.pod = pod
        self._metrics = metrics
        self._scraped_at = scraped_at
        self._scrape_failing = scrape_failing
        self.last_error = last_error
        self.missing = missing
        """Families absent from the latest page (see :mod:`igw.gateway.metrics_parser`)."""
        self.kv_source = kv_source
        self._inflight = inflight
        self._inflight_tokens = inflight_tokens
        self.picks = picks
        """Requests sent here that its ``/metrics`` page should reflect: every dispatch, less those the
        model server refused with an error head (:meth:`refused`). Frozen-page detection and scrape
        pacing read it (with ``--workers``, summed over the workers)."""
        self.page = PageTracker() if page is None else page
        self._max_model_len = max_model_len
        """Longest prompt + output the model server accepts (from its ``/v1/models``), when known."""

    def __repr__(self) -> str:
        return (
            f"EndpointState(key={self._key!r}, pod={self.pod!r}, scraped_at={self._scraped_at!r}, "
            f"scrape_failing={self._scrape_failing!r}, inflight={self._inflight!r}, picks={self.picks!r})"
        )

    # ---- the fields a view carries: each write drops the view ---------------------------------------
    @property
    def key(self) -> EndpointKey:
        return self._key

    @key.setter
    def key(self, value: EndpointKey) -> None:
        self._key = value
        self._view_changed()

    @property
    def labels(self) -> Mapping[str, str]:
        return self._labels

    @labels.setter
    def labels(self, value: Mapping[str, str]) -> None:
        self._labels = value
        self._view_changed()

    @property
    def metrics(self) -> EngineMetrics | None:
        return self._metrics

    @metrics.setter
    def metrics(self, value: EngineMetrics | None) -> None:
        self._metrics = value
        self._view_changed()

    @property
    def scraped_at(self) -> float | None:
        return self._scraped_at

    @scraped_at.setter
    def scraped_at(self, value: float | None) -> None:
        self._scraped_at = value
        self._view_changed()

    @property
    def scrape_failing(self) -> bool:
        return self._scrape_failing

    @scrape_failing.setter
    def scrape_failing(self, value: bool) -> None:
        self._scrape_failing = value
        self._view_changed()

    @property
    def inflight(self) -> int:
        return self._inflight

    @inflight.setter
    def inflight(self, value: int) -> None:
        self._inflight = value
        self._view_changed()

    @property
    def inflight_tokens(self) -> int:
        return self._inflight_tokens

    @inflight_tokens.setter
    def inflight_tokens(self, value: int) -> None:
        self._inflight_tokens = value
        self._view_changed()

    @property
    def max_model_len(self) -> int | None:
        return self._max_model_len

    @max_model_len.setter
    def max_model_len(self, value: int | None) -> None:
        self._max_model_len = value
        self._view_changed()

    # ---- writes of several fields at once: the view dropped once ---------------------------------
    def dispatched(self, est_tokens: int) -> None:
        """A request was sent to this endpoint (``est_tokens``: prompt + max output tokens)."""
        self._inflight += 1
        self._inflight_tokens += est_tokens
        self.picks += 1
        self._view_changed()

    def refused(self) -> None:
        """The model server answered a request sent here with an error head (4xx, 5xx) and nothing
        generated: a refusal at its HTTP layer (validation, a dead engine) moves no counter of its
        page, so it is taken back from :attr:`picks`. Counted, it made a pod that answered errors look
        frozen and left it out of scheduling until its page moved by itself, which an idle pod's page
        never does (found by probing, 2026-12-05, session s29)."""
        self.picks -= 1

    def completed(self, est_tokens: int) -> None:
        self._inflight -= 1
        self._inflight_tokens -= est_tokens
        self._view_changed()

    def take_scrape(
        self,
        metrics: EngineMetrics | None,
        kv_source: str | None,
        scraped_at: float | None,
        scrape_failing: bool,
        last_error: str | None,
        missing: frozenset[str],
        max_model_len: int | None,
    ) -> None:
        """Write a scrape's fields at once (a follower taking worker 0's snapshot,
        :mod:`igw.gateway.scrape_share`), the view dropped once, not per field."""
        self._metrics = metrics
        self.kv_source = kv_source
        self._scraped_at = scraped_at
        self._scrape_failing = scrape_failing
        self.last_error = last_error
        self.missing = missing
        self._max_model_len = max_model_len
        self._view_changed()

    def _view_changed(self) -> None:
        """Forget the cached view and tell the pool (what setting a view field does)."""
        self.cached_view = None
        notify = self.on_view_change
        if notify is not None:
            notify(self.key)

    def view(self) -> EndpointView:
        """The endpoint as the scheduler sees it (the same object until a field it carries changes)."""
        view = self.cached_view
        if view is None:
            view = self.cached_view = self.new_view()
        return view

    def new_view(self) -> EndpointView:
        """A view built from the current fields (what :meth:`view` keeps until they change).

        By slot writes (:data:`_view`): a request changes its endpoint's in-flight counts twice, so
        the pool makes a view per request and endpoint; the frozen constructor costs about twice."""
        return _view(
            self._key,
            self._metrics,
            self._scraped_at,
            self._scrape_failing,
            self._inflight,
            self._inflight_tokens,
            self._labels,
            self._max_model_len,
            0,  # unreflected_dispatches: the scheduler's own ledger fills it in
        )


def _largest_of(views: list[EndpointView]) -> int | None:
    """The largest ``max_model_len`` of ``views``; ``None`` when there are none or any is unknown."""
    lengths = [v.max_model_len for v in views]
    if not lengths or None in lengths:
        return None
    return max(n for n in lengths if n is not None)


class EndpointPool:
    """The endpoints of one scheduler, keyed by ``host:port``.

    :meth:`views` keeps the list it hands out between calls and replaces only the views of the
    endpoints whose state changed since (they report it through ``on_view_change``): a request costs
    O(changed endpoints) plus one list copy, not a new view per endpoint."""

    def __init__(self) -> None:
        self.states: dict[EndpointKey, EndpointState] = {}
        self._views: list[EndpointView] | None = None
        """Every state's view in ``states`` order; ``None``: rebuild on the next :meth:`views`."""
        self._positions: dict[EndpointKey, int] = {}
        self._changed: set[EndpointKey] = set()
        self._largest: int | None = None
        """:meth:`largest_context` of the views in ``_views``: recomputed when they are rebuilt or a
        replaced view's ``max_model_len`` differs from the one it replaces."""

    def replace(
        self, discovered: Iterable[DiscoveredEndpoint]
    ) -> tuple[list[EndpointKey], list[EndpointKey]]:
        """Make the pool exactly ``discovered``; keep the state of endpoints that stay. An address now
        naming another pod (both known) is a new endpoint: its key is both removed and added.

        Returns ``(added, removed)`` keys.
        """
        wanted = {d.key: d for d in discovered}
        removed = [k for k in self.states if k not in wanted]
        for key in removed:
            self.states.pop(key).on_view_change = None
        added: list[EndpointKey] = []
        for key, d in wanted.items():
            state = self.states.get(key)
            if state is not None and state.pod is not None and d.pod is not None and state.pod != d.pod:
                # Another pod behind the same address (its IP reused, seen in one report, as after a
                # watch outage): a new endpoint. Kept, the new pod inherited the old one's ejection,
                # its prefix-cache entries, its frozen-page and failure state, and its context window.
                self.states.pop(key).on_view_change = None
                removed.append(key)
                state = None
            if state is None:
                state = self.states[key] = EndpointState(key=key, labels=dict(d.labels), pod=d.pod)
                state.on_view_change = self._changed.add
                added.append(key)
            else:
                # Written only when changed: a label write drops the endpoint's view, and discovery
                # reports the whole pool on every change of any pod, so writing them all made every
                # request after a pod event rebuild every view (and every per-scrape cache).
                if state.labels != d.labels:
                    state.labels = dict(d.labels)
                if state.pod != d.pod:
                    state.pod = d.pod
        if added or removed:
            self._views = None
        return added, removed

    def largest_context(self) -> int | None:
        """The largest ``max_model_len`` in the pool; ``None`` while any endpoint's is unknown.

        Read from the kept views (:meth:`_current_views`), recomputed only when an endpoint's length
        or the membership changed: every request asks it before its pick, and a pass over the states
        (a property read each) grew with the pool (one per endpoint per request, where the views are
        kept up to date per changed endpoint)."""
        self._current_views()
        return self._largest

    def views(self) -> list[EndpointView]:
        """Every endpoint's current view, in pool order (a new list; the views are shared)."""
        return list(self._current_views())

    def _current_views(self) -> list[EndpointView]:
        """The kept list of views, brought up to date (the pool's own: :meth:`views` copies it), and
        :attr:`_largest` with it."""
        views, changed = self._views, self._changed
        if views is None or len(views) != len(self.states):
            # First call, or the membership changed (or ``states`` was edited directly).
            views = self._views = [s.view() for s in self.states.values()]
            self._positions = {k: i for i, k in enumerate(self.states)}
            for state in self.states.values():
                state.on_view_change = changed.add
            changed.clear()
            self._largest = _largest_of(views)
        elif changed:
            states, positions = self.states, self._positions
            lengths_moved = False
            for key in changed:
                i = positions.get(key)
                changed_state = states.get(key)
                if i is None or changed_state is None:  # ``states`` was edited directly: start again
                    self._views = None
                    return self._current_views()
                view = changed_state.view()
                if view.max_model_len != views[i].max_model_len:
                    lengths_moved = True
                views[i] = view
            changed.clear()
            if lengths_moved:
                self._largest = _largest_of(views)
        return views

    def __len__(self) -> int:
        return len(self.states)
