"""Per-endpoint exponentially weighted means of what the gateway measures on completed requests.

Shared by the plugins and layers that learn an endpoint's speed from ``RequestOutcome`` (time to
first token for :mod:`igw.scheduling.dispatch_ledger` and ``predicted-ttft-scorer``), so they age
samples the same way and forget removed endpoints the same way.

Each mean also carries its own *noise*: an exponentially weighted variance of the samples, from which
:meth:`EndpointEwma.standard_error` gives how far the mean typically strays from the endpoint's true
value. Why: per-request TTFTs vary several-fold with prompt length and step timing, so the means of
identical pods differ by chance, and a scorer that reads every difference as a speed difference keeps
sending traffic to whichever pod was lucky last (docs/scheduler-design.md,
``predicted-ttft-scorer``). Consumers compare differences against this noise before trusting them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from math import sqrt

from igw.scheduling.types import EndpointKey


class EndpointEwma:
    """``mean += alpha * (sample - mean)`` per endpoint; the first sample is taken as is.

    Alongside, ``var = (1 - alpha) * (var + alpha * (sample - old_mean) ** 2)`` (the exponentially
    weighted variance of the samples, West 1979), 0 after the first sample.
    """

    def __init__(self, *, alpha: float, track_changes: bool = False) -> None:
        self._alpha = alpha
        self._window = _window_factor(alpha)
        self._settled = _settled_count(alpha)
        self.values: dict[EndpointKey, float] = {}
        self.variances: dict[EndpointKey, float] = {}
        self.counts: dict[EndpointKey, int] = {}
        self.errors: dict[EndpointKey, float] = {}
        """:meth:`standard_error` per endpoint, computed when a sample arrives rather than on every
        read (a scheduler reads it for every candidate of every pick)."""
        self.changed: set[EndpointKey] | None = set() if track_changes else None
        """With ``track_changes``: endpoints whose state was set since the owner last cleared this
        set (an owner that keeps something derived from every endpoint updates only what changed).
        ``None`` otherwise, so an owner that never clears it holds nothing. Forgotten endpoints leave
        it (their owner drops what it derived from them itself, told of the removal as the EWMA
        is): it names only endpoints the EWMA has a state for, however long the owner goes without
        reading it (a pool whose picks all fall back to in-flight counts, a pool of one)."""

    @property
    def alpha(self) -> float:
        """The weight of a new sample (set anew, the noise's window factor follows)."""
        return self._alpha

    @alpha.setter
    def alpha(self, alpha: float) -> None:
        self._alpha = alpha
        self._window = _window_factor(alpha)
        self._settled = _settled_count(alpha)

    def observe(self, key: EndpointKey, sample: float) -> None:
        """Take in one sample: :meth:`set_state` with the updated mean, variance and count.

        Written out (:meth:`set_state` and :meth:`_standard_error` inline, each expression theirs,
        in the same order, so the same floats): every outcome updates three or four of these, and
        the two calls per sample were most of the cost. The window's factor
        ``sqrt(alpha / (2 - alpha))`` is the one worked out when ``alpha`` was set (the same float),
        and a known endpoint's variance and count are read by subscript: :meth:`set_state`, this
        method and :meth:`forget` keep the four dicts' keys the same, so a mean has both."""
        values = self.values
        variances = self.variances
        counts = self.counts
        old = values.get(key)
        if old is None:
            mean, variance, count = sample, 0.0, 1
        else:
            a = self._alpha
            diff = sample - old
            mean = old + a * diff
            variance = (1.0 - a) * (variances[key] + a * diff * diff)
            count = counts[key] + 1
        values[key] = mean
        variances[key] = variance
        counts[key] = count
        if count <= 1:
            error = math.inf
        else:
            sd = sqrt(variance)
            window_error = sd * self._window
            error = sd / sqrt(count)
            if not error > window_error:  # max(window_error, error): the first unless the second is larger
                error = window_error
        self.errors[key] = error
        if self.changed is not None:
            self.changed.add(key)

    def set_state(self, key: EndpointKey, *, mean: float, variance: float, count: int) -> None:
        """Set one endpoint's mean, variance and sample count (at least 1), and its standard error."""
        if count < 1:
            raise ValueError(f"an EWMA state needs at least one sample, got count {count}")
        self.values[key] = mean
        self.variances[key] = variance
        self.counts[key] = count
        self.errors[key] = self._standard_error(variance=variance, count=count)
        if self.changed is not None:
            self.changed.add(key)

    @property
    def settled_count(self) -> int:
        """Samples after which the mean spans its full window (``2 / alpha - 1``, at least 2: one
        sample has no spread to estimate noise from)."""
        return self._settled

    def count(self, key: EndpointKey) -> int:
        return self.counts.get(key, 0)

    def get(self, key: EndpointKey) -> float | None:
        return self.values.get(key)

    def standard_error(self, key: EndpointKey) -> float | None:
        """Typical error of the mean (see :meth:`_standard_error`); ``None`` without a sample."""
        return self.errors.get(key)

    def _standard_error(self, *, variance: float, count: int) -> float:
        """Typical error of the mean: ``sd * sqrt(alpha / (2 - alpha))`` once it spans its window.

        While fewer samples than the EWMA's effective window (``2 / alpha - 1``) have arrived, the
        mean is one of only ``n`` samples, so ``sd / sqrt(n)`` is used instead (the larger one).
        With one sample the error is unknown and reported as infinite.
        """
        if count <= 1:
            return math.inf
        sd = math.sqrt(variance)
        window_error = sd * self._window
        return max(window_error, sd / math.sqrt(count))

    def forget(self, keys: Sequence[EndpointKey]) -> None:
        """Drop the state of endpoints that left their pool, and their pending changes.

        Until session s40 a forgotten endpoint was added to ``changed`` instead: an owner that did
        not read the set for a while (no scored pick) kept every address its pool ever had."""
        changed = self.changed
        for key in keys:
            self.values.pop(key, None)
            self.variances.pop(key, None)
            self.counts.pop(key, None)
            self.errors.pop(key, None)
            if changed is not None:
                changed.discard(key)


def _window_factor(alpha: float) -> float:
    """``sqrt(alpha / (2 - alpha))``, the factor from a sample's spread to the error of a mean that
    spans its window; 1.0 (``sd * 1.0`` is ``sd``) for an ``alpha`` of 2 or more, where the formula
    has no meaning. Worked out once per ``alpha``, not per sample."""
    return sqrt(alpha / (2.0 - alpha)) if alpha < 2.0 else 1.0


def _settled_count(alpha: float) -> int:
    """:attr:`EndpointEwma.settled_count` for ``alpha`` (read on every outcome, set with ``alpha``)."""
    return max(2, math.ceil(2.0 / alpha - 1.0)) if alpha > 0 else 2
