"""Column reads over one candidate list, shared by the plugins of one pick.

Why: every scorer of a pick reads a few fields of every candidate (its key, its scraped ``waiting``
or ``kv_usage``...). Read separately, a profile of five scorers walks a 1,000-endpoint pool a dozen
times for the same values. :class:`Columns` reads each field once per candidate list, on first use,
and :meth:`igw.scheduling.framework.CycleContext.columns` hands the same object to every plugin
that scores the same list within one pick. List comprehensions, not ``map(attrgetter(...))``: on
CPython 3.11+ the specialising interpreter makes the comprehension the faster of the two.

A column is ``None`` when the fast shape does not hold (an endpoint without metrics, a signal
missing on some endpoint); callers then take their per-endpoint code, which handles every case.

**Once per scrape.** Most of what the scorers read changes only when a scrape lands, yet a pick
happens far more often than a candidate's scrape. A :class:`ScrapeCache` (one per scheduler, handed
to each pick's :class:`Columns`) keeps the scrape-derived columns, and whatever a plugin derives
from the candidates' keys and scraped metrics alone (:meth:`Columns.per_scrape`), while the
candidates' keys and ``metrics`` objects stay the same; a new scrape (a new ``metrics`` object), a
new candidate or a reordering drops all of it. Plugins that do not use it keep working unchanged:
they read the views, as before.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable, Hashable, Sequence
from itertools import compress
from typing import Any, Final, Generic, TypeVar

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics

_UNSET: object = object()
_WAITING = "columns.waiting"
_KV_USAGE = "columns.kv_usage"
T = TypeVar("T")


class Present(Generic[T]):
    """One signal read from every endpoint, none missing, with its smallest and largest value.

    A plain class, not a frozen dataclass: mypyc cannot compile a generic frozen dataclass (it fails
    to import: "attribute '__dict__' of 'type' objects is not writable"; igw.compiled)."""

    __slots__ = ("hi", "lo", "values")

    def __init__(self, values: list[T], lo: T, hi: T) -> None:
        self.values: Final = values
        self.lo: Final = lo
        self.hi: Final = hi


class ScrapeCache:
    """Values derived from one candidate list's keys and scraped metrics, kept between picks while
    both stay the same (one per scheduler; see the module docstring).

    Valid while the candidates' keys are equal and their ``metrics`` are the same objects, in the
    same order, as when the values were computed. Identity, not equality, for the metrics: a scrape
    always makes a new object, and the check stays one C-level pass (``map(operator.is_not, ...)``)."""

    __slots__ = ("_keys", "_metrics", "changed", "previous", "values")

    def __init__(self) -> None:
        self._keys: list[EndpointKey] = []
        self._metrics: Sequence[EngineMetrics | None] = []
        self.values: dict[Hashable, object] = {}
        """Owner -> value, for the candidate list last validated (:meth:`Columns.per_scrape`)."""
        self.previous: dict[Hashable, object] = {}
        """The values before the last change, while ``changed`` says where they still hold."""
        self.changed: list[int] | None = None
        """Positions whose ``metrics`` object changed at the last validation, when the keys stayed
        the same (a scrape landed, nothing else); ``None`` after any other change."""

    def validate(
        self, keys: list[EndpointKey], metrics: Sequence[EngineMetrics | None]
    ) -> dict[Hashable, object]:
        """The kept values when ``keys`` and ``metrics`` are those they were computed from; else an
        emptied store, now keyed to these lists (with ``previous`` and ``changed`` set when only
        some ``metrics`` objects changed)."""
        old = self._metrics
        if len(old) == len(metrics) and self._keys == keys:
            # One pass finds the re-scraped positions (none: the kept values hold): C-level
            # iterators interpreted, a native loop compiled (:func:`_rescraped`).
            if NATIVE_RESCRAPED and isinstance(old, list) and isinstance(metrics, list):
                changed = _rescraped(old, metrics)
            else:
                changed = list(compress(range(len(metrics)), map(operator.is_not, old, metrics)))
            if not changed:
                return self.values
            self.previous, self.values, self.changed = self.values, {}, changed
        else:
            self.previous, self.values, self.changed = {}, {}, None
            self._keys = list(keys)  # a copy: callers share ``keys``
        self._metrics = metrics
        return self.values


def _rescraped(old: list[EngineMetrics | None], metrics: list[EngineMetrics | None]) -> list[int]:
    """The positions whose ``metrics`` object is not the one at the same position of ``old`` (both
    of one length): what :meth:`ScrapeCache.validate`'s ``compress``/``map(operator.is_not)`` pass
    gives, as a loop the mypyc build compiles to native code (:data:`NATIVE_RESCRAPED`), where each
    step of that pass was a C-level call of ``is_not`` through ``map``. Lists only: indexing a
    ``Sequence`` there boxes each index and goes through the generic subscript (slower than the
    ``compress`` pass on a 1,000-endpoint pool, measured)."""
    changed: list[int] = []
    for i in range(len(metrics)):
        if old[i] is not metrics[i]:
            changed.append(i)
    return changed


NATIVE_RESCRAPED = not isinstance(_rescraped, types.FunctionType)
"""Whether this module runs compiled: then :meth:`ScrapeCache.validate` finds the re-scraped
positions by :func:`_rescraped`; interpreted, the C-level iterator pass is the faster."""


class Columns:
    """Lazily read fields of ``endpoints`` (the list must not change while this object is used).

    ``scrape``: the scheduler's :class:`ScrapeCache`, through which the scrape-derived columns and
    :meth:`per_scrape` values are kept between picks; ``None`` computes them for this list only."""

    __slots__ = (
        "_kv_usage",
        "_scraped",
        "_unreflected",
        "_waiting",
        "endpoints",
        "keys",
        "metrics",
        "scrape",
    )

    def __init__(self, endpoints: Sequence[EndpointView], scrape: ScrapeCache | None = None) -> None:
        self.endpoints = endpoints
        self.scrape = scrape
        self.keys: list[EndpointKey] = [e.key for e in endpoints]
        """Every endpoint's key: read when the object is made (every pick reads them: the scrape
        cache's check and most plugins), so each read is a plain attribute, not a property call."""
        self._waiting: object = _UNSET
        self._kv_usage: object = _UNSET
        self._unreflected: list[int] | None = None
        self._scraped: dict[Hashable, object] | None = None
        self.metrics: list[EngineMetrics | None] = [e.metrics for e in endpoints]
        """``metrics`` of every endpoint (the objects themselves: the scrape cache's key), read
        when the object is made, as ``keys``."""

    def per_scrape(
        self, owner: Hashable, compute: Callable[[], T], update: Callable[[T, list[int]], T] | None = None
    ) -> T:
        """``compute()``, kept between picks while the candidates' keys and scraped ``metrics``
        objects stay the same (a new scrape, candidate or order computes it again).

        ``compute`` must depend on nothing but the candidates' keys and their ``metrics`` fields
        (and the owner's fixed settings): no time, no in-flight or dispatch counts, no other view
        field. ``owner`` names the value (the plugin itself, or a tuple of it and a name); the
        returned object is shared between picks and must not be changed.

        ``update(old, changed)``, if given, is called instead of ``compute`` when only some
        candidates were re-scraped since the value was last made (same keys, same order):
        ``old`` is that value, ``changed`` the positions with a new ``metrics`` object. It must
        return exactly what ``compute()`` would: a new object, or ``old`` itself when it is equal
        to what ``compute()`` would return (``old`` is never to be changed)."""
        scraped = self._scraped
        scrape = self.scrape
        if scraped is None:
            if scrape is None:
                scraped = self._scraped = {}
            else:
                scraped = self._scraped = scrape.validate(self.keys, self.metrics)
        kept: Any = scraped.get(owner, _UNSET)  # stored below for this owner: a T
        if kept is not _UNSET:  # the usual case: returned as is, no ``typing.cast`` call
            return kept  # type: ignore[no-any-return]  # a T (above)
        old: Any
        if (
            update is not None
            and scrape is not None
            and scraped is scrape.values
            and (changed := scrape.changed) is not None
            and (old := scrape.previous.get(owner, _UNSET)) is not _UNSET
        ):
            value = update(old, changed)
        else:
            value = compute()
        scraped[owner] = value
        return value

    @property
    def waiting(self) -> Present[int] | None:
        """Scraped ``waiting`` of every endpoint, or ``None`` when any endpoint lacks it."""
        if self._waiting is _UNSET:
            self._waiting = self.per_scrape(
                _WAITING,
                lambda: _every_present(lambda: [m.waiting for m in self.metrics]),  # type: ignore[union-attr]
                lambda old, changed: self._updated(old, changed, lambda m: m.waiting, _WAITING),
            )
        return self._waiting  # type: ignore[return-value]  # set just above

    @property
    def kv_usage(self) -> Present[float] | None:
        """Scraped KV-cache use of every endpoint, or ``None`` when any endpoint lacks it."""
        if self._kv_usage is _UNSET:
            self._kv_usage = self.per_scrape(
                _KV_USAGE,
                lambda: _every_present(lambda: [m.kv_usage for m in self.metrics]),  # type: ignore[union-attr]
                lambda old, changed: self._updated(old, changed, lambda m: m.kv_usage, _KV_USAGE),
            )
        return self._kv_usage  # type: ignore[return-value]  # set just above

    def _updated(
        self,
        old: Present[Any] | None,
        changed: list[int],
        read: Callable[[EngineMetrics], Any],
        name: str,
    ) -> Present[Any] | None:
        """The column ``name`` after the endpoints at ``changed`` were re-scraped: the old values
        with those positions read again and the bounds taken anew (the same list, element for
        element, as reading every endpoint, so the same bounds); read in full when a value was or
        is missing."""
        metrics = self.metrics
        if old is not None:
            values = old.values.copy()
            for i in changed:
                m = metrics[i]
                v = None if m is None else read(m)
                if v is None:
                    break
                values[i] = v
            else:
                return Present(values, min(values), max(values))
        return _every_present(lambda: [read(m) for m in metrics])  # type: ignore[arg-type]

    @property
    def unreflected(self) -> list[int]:
        """``unreflected_dispatches`` of every endpoint."""
        if self._unreflected is None:
            self._unreflected = [e.unreflected_dispatches for e in self.endpoints]
        return self._unreflected


def _every_present(read: Callable[[], list[Any]]) -> Present[Any] | None:
    """``read()`` (one comprehension over the endpoints' metrics) with its bounds when no value is
    ``None``; ``None`` when one is, when an endpoint has no metrics at all, or when there are no
    endpoints. No separate test per endpoint: ``None.waiting`` raises ``AttributeError``, and a
    ``None`` among numbers makes ``min`` or ``max`` raise ``TypeError`` (a lone ``None`` is caught by
    the comparison after them). NaN is not detected: the scheduler catches a NaN in the totals."""
    try:
        values = read()
        lo, hi = min(values), max(values)
        if lo is None or hi is None:
            return None
    except (AttributeError, TypeError, ValueError):
        return None
    return Present(values, lo, hi)


class Positions:
    """Key -> position in a candidate list, kept by a plugin between picks while its candidates'
    keys stay the same (the usual case: the pool changes far less often than a pick happens).

    Why: a plugin whose state covers few endpoints (those holding a prefix, those with dispatches
    still prefilling) can then visit only those, where finding them by testing every candidate's
    key would cost a pass over the whole pool. Checking that the keys are unchanged is one list
    comparison in C (the same string objects compare by identity)."""

    __slots__ = ("_index", "_keys", "version")

    def __init__(self) -> None:
        self._keys: list[EndpointKey] | None = None
        self._index: dict[EndpointKey, int] = {}
        self.version = 0
        """Counts the candidate lists seen: a cache derived from the positions is stale when the
        version it was built at differs."""

    def of(self, keys: list[EndpointKey]) -> dict[EndpointKey, int] | None:
        """Each key's position in ``keys``; ``None`` when a key is listed twice (then a key does
        not name one position, and the caller takes its per-candidate path)."""
        if self._keys is None or self._keys != keys:
            self._keys = list(keys)
            self._index = {k: i for i, k in enumerate(keys)}
            self.version += 1
        return self._index if len(self._index) == len(keys) else None


class MeasuredColumn:
    """Each candidate's value in a change-tracking :class:`~igw.scheduling.ewma.EndpointEwma`, or a
    fallback for the unmeasured ones, kept between picks.

    Why: reading the mean of every candidate on every pick is a dictionary lookup per candidate,
    yet between two picks only the endpoints that completed a request change. While the candidate
    keys stay the same, only those (reported by the EWMA's ``changed`` set) are read again, and the
    unmeasured positions are rewritten when the fallback changes. The returned list is this
    object's own: read it within the pick, do not keep or change it.
    """

    __slots__ = ("_ewma", "_fallback", "_missing", "_positions", "_values", "_version")

    def __init__(self, ewma: EndpointEwma) -> None:
        if ewma.changed is None:
            raise ValueError("MeasuredColumn needs an EWMA that tracks its changes (track_changes=True)")
        self._ewma = ewma
        self._positions = Positions()
        self._version = -1
        self._values: list[float] = []
        self._missing: set[int] = set()
        self._fallback = 0.0

    def forget(self) -> None:
        """Endpoints left the pool (the EWMA forgot them, and their changes): the next :meth:`of`
        reads every candidate again. A removal changes the candidate list, which does so anyway,
        except for an endpoint that left and came back between two picks (its kept value is
        stale)."""
        self._version = -1

    def of(self, keys: list[EndpointKey], fallback: float) -> list[float]:
        """``[ewma.values.get(k, fallback) for k in keys]``."""
        values = self._ewma.values
        changed = self._ewma.changed
        assert changed is not None  # checked in __init__
        index = self._positions.of(keys)
        if index is None:  # a key listed twice: no position per key, read every candidate
            self._version = -1
            changed.clear()
            return [values.get(k, fallback) for k in keys]
        if self._version != self._positions.version:
            self._version = self._positions.version
            changed.clear()
            self._values = [values.get(k, fallback) for k in keys]
            self._missing = {i for i, k in enumerate(keys) if k not in values}
            self._fallback = fallback
            return self._values
        out, missing = self._values, self._missing
        for key in changed:
            i = index.get(key)
            if i is None:
                continue
            value = values.get(key)
            if value is None:
                out[i] = fallback
                missing.add(i)
            else:
                out[i] = value
                missing.discard(i)
        changed.clear()
        if missing and fallback != self._fallback:  # a NaN is never equal: rewritten
            for i in missing:
                out[i] = fallback
        self._fallback = fallback
        return out
