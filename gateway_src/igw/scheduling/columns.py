"""Column reads over one candidate list, shared by the plugins of one pick.

Why: every scorer of a pick reads a few fields of every candidate (its key, its scraped ``waiting``
or ``kv_usage``...). Read separately, a profile of five scorers walks a 1,000-endpoint pool a dozen
times for the same values. :class:`Columns` reads each field once per candidate list, on first use,
and :meth:`igw.scheduling.framework.CycleContext.columns` hands the same object to every plugin
that scores the same list within one pick. List comprehensions, not ``map(attrgetter(...))``: on
CPython 3.11+ the specialising interpreter makes the comprehension the faster of the two.

A column is ``None`` when the fast shape does not hold (an endpoint without metrics, a signal
missing on some endpoint); callers then take their per-endpoint code, which handles every case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from igw.scheduling.types import EndpointKey, EndpointView

_UNSET: object = object()
T = TypeVar("T")


class Columns:
    """Lazily read fields of ``endpoints`` (the list must not change while this object is used)."""

    __slots__ = ("_keys", "_kv_usage", "_unreflected", "_waiting", "endpoints")

    def __init__(self, endpoints: Sequence[EndpointView]) -> None:
        self.endpoints = endpoints
        self._keys: list[EndpointKey] | None = None
        self._waiting: object = _UNSET
        self._kv_usage: object = _UNSET
        self._unreflected: list[int] | None = None

    @property
    def keys(self) -> list[EndpointKey]:
        if self._keys is None:
            self._keys = [e.key for e in self.endpoints]
        return self._keys

    @property
    def waiting(self) -> list[int] | None:
        """Scraped ``waiting`` of every endpoint, or ``None`` when any endpoint lacks it."""
        if self._waiting is _UNSET:
            self._waiting = _every_present(lambda: [e.metrics.waiting for e in self.endpoints])  # type: ignore[union-attr]
        return self._waiting  # type: ignore[return-value]  # a list of ints or None, set just above

    @property
    def kv_usage(self) -> list[float] | None:
        """Scraped KV-cache use of every endpoint, or ``None`` when any endpoint lacks it."""
        if self._kv_usage is _UNSET:
            self._kv_usage = _every_present(lambda: [e.metrics.kv_usage for e in self.endpoints])  # type: ignore[union-attr]
        return self._kv_usage  # type: ignore[return-value]  # a list of floats or None, set just above

    @property
    def unreflected(self) -> list[int]:
        """``unreflected_dispatches`` of every endpoint."""
        if self._unreflected is None:
            self._unreflected = [e.unreflected_dispatches for e in self.endpoints]
        return self._unreflected


def _every_present(read: Callable[[], list[T | None]]) -> list[T] | None:
    """``read()`` (one comprehension over the endpoints' metrics) when it has no ``None``; ``None``
    when a value is missing or an endpoint has no metrics at all (``None.waiting`` raises, so the
    comprehension needs no separate test per endpoint)."""
    try:
        values = read()
    except AttributeError:
        return None
    return None if None in values else values  # type: ignore[return-value]  # no None, checked
