"""``max-score-picker``: the highest total wins; ties are broken uniformly at random (GIE).

Returns up to ``maxNumOfEndpoints`` indices (default 3: the pick plus two fallbacks for a
connect-failure retry), best first. Parameters: ``maxNumOfEndpoints``.
"""

from __future__ import annotations

import heapq
import operator
import types
from collections.abc import Iterable, Sequence
from itertools import compress, repeat, starmap

from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.picker_base import CountedPicker, counted_picker_factory

TYPE = "max-score-picker"
PREFILTER_ABOVE = 8
"""Candidates per returned endpoint above which the ranking first drops totals below the k-th best."""


class MaxScorePicker(CountedPicker):
    type_name = TYPE

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        if n < 2:
            # Nothing to order and no tie to break: the steps below give [0] for one candidate
            # whatever its total (NaN included) without a draw, so the random stream is the same.
            return [0] if n else []
        rnd = ctx.rng.random
        if self.max_endpoints == 1 or n == 1:
            best = max(totals)
            ties = [i for i, t in enumerate(totals) if t == best]
            if not ties:  # ``max`` stopped on a leading NaN: NaN totals lose to any number
                numbers = [t for t in totals if t == t]
                best = max(numbers) if numbers else best
                ties = [i for i, t in enumerate(totals) if t == best] if numbers else list(range(n))
            return [ties[0] if len(ties) == 1 else ties[int(rnd() * len(ties))]]
        # One tie-break draw per candidate, always (the random stream stays the same whatever wins).
        tiebreak = list(starmap(rnd, repeat((), n)))
        k = self.max_endpoints
        # Tuples compare in C (no Python key call per candidate): order by total, then the random
        # tie-break; the index only rides along (a full tie on both is impossible in practice). The
        # zip of all candidates is made only where it is ranked (a NaN, a pool of at most k): a
        # ``zip(..., strict=True)`` is a call with a keyword, generic in the compiled build.
        ranked: Iterable[tuple[float, float, int]]
        total = sum(totals)
        if total != total:  # a NaN (or infinities of both signs): its comparisons order nothing
            return [i for _, _, i in heapq.nlargest(k, zip(totals, tiebreak, range(n), strict=True))]
        if n > PREFILTER_ABOVE * k:
            # Only candidates whose total reaches the k-th largest total can be in the top k: rank
            # those (usually about k) instead of building a tuple per candidate.
            if NATIVE_TOP:
                kept: Iterable[int] = _reaching_kth(totals, k)
            else:
                kth = heapq.nlargest(k, totals)[-1]
                kept = compress(range(n), map(operator.ge, totals, repeat(kth)))
            ranked = [(totals[i], tiebreak[i], i) for i in kept]
        elif n > k:
            # A small pool: the same cut, with the k-th largest total from a C sort of the bare
            # floats (cheaper than comparing every candidate's tuple in the sort below).
            kth = sorted(totals)[-k]
            ranked = [(t, tiebreak[i], i) for i, t in enumerate(totals) if t >= kth]
        else:
            ranked = zip(totals, tiebreak, range(n), strict=True)
        # ``sorted(..., reverse=True)[:k]`` is what ``heapq.nlargest`` is documented to equal, and
        # on a short list it runs in C (nlargest's own loop is Python); the tuples differ by index,
        # so no tie is left to order.
        top = sorted(ranked, reverse=True)[:k]
        return [i for _, _, i in top]


def _reaching_kth(totals: Sequence[float], k: int) -> list[int]:
    """The positions, ascending, whose total is at least the ``k``-th largest total (counted with
    repeats, as ``heapq.nlargest(k, totals)[-1]``), for ``k <= len(totals)`` totals without NaN:
    what :meth:`MaxScorePicker.rank` keeps, found by two loops that the mypyc build compiles to
    native code (:data:`NATIVE_TOP`). ``best`` holds the ``k`` largest totals seen so far, smallest
    first; a total above its smallest replaces it, so afterwards its first is the ``k``-th largest."""
    best = sorted([totals[i] for i in range(k)])
    for i in range(k, len(totals)):
        t = totals[i]
        if t > best[0]:
            best[0] = t
            j = 0
            while j + 1 < k and best[j] > best[j + 1]:  # back into order: one insertion pass
                best[j], best[j + 1] = best[j + 1], best[j]
                j += 1
    kth = best[0]
    return [i for i in range(len(totals)) if totals[i] >= kth]


NATIVE_TOP = not isinstance(_reaching_kth, types.FunctionType)
"""Whether this module runs compiled (mypyc makes its functions native): then the ranking finds the
totals reaching the ``k``-th largest by :func:`_reaching_kth`; interpreted, ``heapq.nlargest`` and
a C-level ``compress`` are the faster (each other expression is the same either way)."""


factory = counted_picker_factory(MaxScorePicker)
