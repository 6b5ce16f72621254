"""The per-pick context every plugin of one scheduling cycle shares (:class:`CycleContext`).

Re-exported by :mod:`igw.scheduling.framework`, which defines the plugin contracts. It lives in a
module of its own because the framework module stays interpreted in the mypyc build (its
``@runtime_checkable`` protocols, :mod:`igw.compiled`) while the context is made on every pick and
read by every scorer: compiled, it is a native class, so making it and reading its fields in the
compiled scheduler and plugins are direct slot accesses instead of calls into the interpreter.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from igw.scheduling.columns import Columns, ScrapeCache
from igw.scheduling.values import EndpointView, RoutingRequest


@dataclass(slots=True, init=False)
class CycleContext:
    """Everything one scheduling cycle (one ``pick``) shares between plugins. The ``__init__`` is
    written out so that the mypyc build compiles it (as
    :class:`~igw.scheduling.values.RoutingRequest`'s); ``state`` defaults to a fresh dict."""

    request: RoutingRequest
    now: float
    rng: random.Random
    state: dict[str, Any]
    """Scratch space for plugins that cooperate within one pick (the prefix scorer publishes its
    hashes and hit flag here; the no-hit-LRU scorer reads them). Every key a plugin reads or writes
    is declared in its ``consumes`` / ``produces`` (see :class:`~igw.scheduling.framework.PluginHooks`)."""
    scrape: ScrapeCache | None
    """The scheduler's values kept from one scrape to the next (:meth:`Columns.per_scrape`);
    ``None``: nothing is kept beyond this pick."""
    _columns: Columns | None = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        request: RoutingRequest,
        now: float,
        rng: random.Random,
        state: dict[str, Any] | None = None,
        scrape: ScrapeCache | None = None,
    ) -> None:
        self.request = request
        self.now = now
        self.rng = rng
        self.state = {} if state is None else state
        self.scrape = scrape
        self._columns = None

    def columns(self, endpoints: Sequence[EndpointView]) -> Columns:
        """Fields of ``endpoints`` read once and shared by every plugin that scores the same list in
        this pick (see :mod:`igw.scheduling.columns`)."""
        cached = self._columns
        if cached is None or cached.endpoints is not endpoints:
            cached = self._columns = Columns(endpoints, self.scrape)
        return cached
