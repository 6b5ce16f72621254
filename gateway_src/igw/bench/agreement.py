"""Do DES and live mode rank the policies the same way? (The check the issue asks for.)

Rankings are compared pairwise. For every pair of policies measured in both modes, each mode says
"a better", "b better" or "tie". A mode *separates* a pair only when

* the seed-means differ by more than ``tolerance`` (relative), and
* with at least two seeds on each side, Welch's t-test rejects equal means at the 5 % level
  (two-sided) — the per-seed values are what vary between repeats, so that is the noise to beat.

The modes *disagree* only when both separate a pair and in opposite directions; a tie in either
mode is not a contradiction. Why a statistical tie rule: two policies that route alike (sglang-router
and vllm-router both run ``cache_aware``) differ from seed to seed by more than 10 % at p99 on a few
hundred requests, so one seed per mode made the verdict a coin toss for that pair (measured: the same
command agreed once and disagreed once). With a single seed the t-test cannot run and only the
tolerance applies; :attr:`Agreement.single_seed` says so in the verdict.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from igw.bench.results import ScenarioRun
from igw.bench.stats import t_critical_975

DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class Agreement:
    metric: str
    des_order: tuple[str, ...]
    live_order: tuple[str, ...]
    contradictions: tuple[tuple[str, str], ...]
    """Pairs (a, b) that both modes separate, in opposite directions."""
    confirmed: tuple[tuple[str, str], ...] = ()
    """Pairs (better, worse) that both modes separate in the same direction."""
    ties: tuple[tuple[str, str], ...] = ()
    """Pairs at least one mode cannot separate (within tolerance or not significant)."""
    single_seed: bool = False
    """At least one mode ran one seed: verdicts rest on the tolerance alone, not on a test."""
    des_unseparated: int = 0
    """Pairs the DES does not separate (some of :attr:`ties`; the rest the live run does not)."""
    live_unseparated: int = 0
    """Pairs the live run does not separate."""
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def agrees(self) -> bool:
        return not self.contradictions

    def describe(self) -> str:
        """One line: each mode's order by seed-mean, then the verdict on the pairs.

        The orders are by mean alone; the verdict counts the pairs each mode *separates* (tolerance
        and test). Until session s50 a pair one mode could not separate read "AGREE (0 pairs ordered
        alike, 1 tied in a mode)" under two identical orders - both true, read together a
        contradiction; now the line says which mode left how many pairs unseparated, and why."""
        des, live = " < ".join(self.des_order), " < ".join(self.live_order)
        pairs = len(self.confirmed) + len(self.ties) + len(self.contradictions)
        if self.agrees:
            verdict = (
                f"AGREE: no pair in opposite order; of {pairs} {'pair' if pairs == 1 else 'pairs'}, "
                f"{len(self.confirmed)} separated in both modes, in the same order"
            )
            if self.ties:
                verdict += (
                    f"; not separated (within {self.tolerance:.0%} or not significant): "
                    f"{self.des_unseparated} in DES, {self.live_unseparated} live"
                )
        else:
            verdict = "DISAGREE on " + ", ".join(f"{a}/{b}" for a, b in self.contradictions)
        if self.single_seed:
            # not in [brackets]: rich (the terminal's console) read it as markup and dropped it
            verdict += " (one seed in a mode: tolerance only, no significance test)"
        return f"{self.metric}: by mean, DES {des} | live {live} -> {verdict}"


def _values(run: ScenarioRun, metric: str, policies: Sequence[str]) -> dict[str, list[float]]:
    """Per-seed values of ``metric`` for every policy that measured it."""
    out: dict[str, list[float]] = {}
    for name in policies:
        pol = run.policies.get(name)
        if pol is None or pol.unavailable is not None:
            continue
        values = [v for s in pol.summaries if (v := getattr(s, metric)) is not None]
        if values:
            out[name] = values
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def ranking(run: ScenarioRun, *, metric: str, policies: Sequence[str]) -> tuple[str, ...]:
    """Policies measured in ``run`` ordered best first by the seed-mean of ``metric`` (lower is better)."""
    means = {n: _mean(v) for n, v in _values(run, metric, policies).items()}
    return tuple(sorted(means, key=lambda n: (means[n], n)))


def welch_significant(a: Sequence[float], b: Sequence[float]) -> bool:
    """Welch's two-sample t-test at 5 % (two-sided): are the means of ``a`` and ``b`` different?

    Needs two or more values on each side. Zero variance on both sides with different means counts
    as significant (a deterministic difference); equal means never do.
    """
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's test needs at least two values per side")
    ma, mb = _mean(a), _mean(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    if va + vb == 0.0:
        return ma != mb
    t = abs(ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    return t > t_critical_975(df)


def separation(a: Sequence[float], b: Sequence[float], *, tolerance: float) -> int:
    """-1: a clearly better (lower), 1: b clearly better, 0: not separated (see the module docstring).

    A percentile that reached into failed requests is infinite (:data:`igw.bench.stats.FAILED`), and
    one such seed makes its side's mean a failure, as in the reports: a failed side is separated
    from a finite one (the finite one is better) and not from another failed one. Why: the tolerance
    test read ``inf <= tolerance * inf`` as "within 10 %", so a live router that lost requests tied
    with the gateway that served them all, and two failed sides over two or more seeds sent Welch's
    test ``nan`` degrees of freedom: a ``ValueError`` after the whole live run."""
    ma, mb = _mean(a), _mean(b)
    if math.isinf(ma) or math.isinf(mb):
        if math.isinf(ma) and math.isinf(mb):
            return 0
        return 1 if math.isinf(ma) else -1
    if abs(ma - mb) <= tolerance * max(abs(ma), abs(mb)):
        return 0
    if len(a) >= 2 and len(b) >= 2 and not welch_significant(a, b):
        return 0
    return -1 if ma < mb else 1


def compare(
    des: ScenarioRun,
    live: ScenarioRun,
    *,
    metrics: Sequence[str] = ("ttft_p95_s", "ttft_p99_s"),
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Agreement]:
    """Pairwise ranking agreement of the policies both runs measured, per metric."""
    shared = [n for n in des.policies if n in live.policies and live.policies[n].unavailable is None]
    out: list[Agreement] = []
    for m in metrics:
        d, lv = _values(des, m, shared), _values(live, m, shared)
        both = [n for n in shared if n in d and n in lv]
        bad: list[tuple[str, str]] = []
        confirmed: list[tuple[str, str]] = []
        ties: list[tuple[str, str]] = []
        unseparated = {"des": 0, "live": 0}
        for a, b in itertools.combinations(both, 2):
            sd = separation(d[a], d[b], tolerance=tolerance)
            sl = separation(lv[a], lv[b], tolerance=tolerance)
            unseparated["des"] += sd == 0
            unseparated["live"] += sl == 0
            if sd * sl < 0:
                bad.append((a, b))
            elif sd * sl > 0:
                confirmed.append((a, b) if sd < 0 else (b, a))
            else:
                ties.append((a, b))
        out.append(
            Agreement(
                metric=m,
                des_order=ranking(des, metric=m, policies=both),
                live_order=ranking(live, metric=m, policies=both),
                contradictions=tuple(bad),
                confirmed=tuple(confirmed),
                ties=tuple(ties),
                single_seed=any(len(d[n]) < 2 or len(lv[n]) < 2 for n in both),
                des_unseparated=unseparated["des"],
                live_unseparated=unseparated["live"],
                tolerance=tolerance,
            )
        )
    return out
