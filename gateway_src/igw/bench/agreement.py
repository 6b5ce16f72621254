"""Do DES and live mode rank the policies the same way? (The check the issue asks for.)

Rankings are compared pairwise: for every pair of policies measured in both modes, each mode says
"a better", "b better" or "tie" (means within ``tolerance`` of each other, relative). The modes
*disagree* only when one says a is better and the other says b is better; a tie in either mode is not
a contradiction (two configurations that route alike, for example, tie in the DES and then differ
by noise live).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from igw.bench.results import ScenarioRun

DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class Agreement:
    metric: str
    des_order: tuple[str, ...]
    live_order: tuple[str, ...]
    contradictions: tuple[tuple[str, str], ...]
    """Pairs (a, b) where the DES ranks a clearly better and live ranks b clearly better (or vice versa)."""

    @property
    def agrees(self) -> bool:
        return not self.contradictions

    def describe(self) -> str:
        des, live = " < ".join(self.des_order), " < ".join(self.live_order)
        verdict = (
            "AGREE" if self.agrees else "DISAGREE on " + ", ".join(f"{a}/{b}" for a, b in self.contradictions)
        )
        return f"{self.metric}: DES {des} | live {live} -> {verdict}"


def _means(run: ScenarioRun, metric: str, policies: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in policies:
        pol = run.policies.get(name)
        est = None if pol is None or pol.unavailable is not None else pol.estimate(metric)
        if est is not None:
            out[name] = est.mean
    return out


def ranking(run: ScenarioRun, *, metric: str, policies: Sequence[str]) -> tuple[str, ...]:
    """Policies measured in ``run`` ordered best first by the seed-mean of ``metric`` (lower is better)."""
    means = _means(run, metric, policies)
    return tuple(sorted(means, key=lambda n: (means[n], n)))


def _verdict(a: float, b: float, tolerance: float) -> int:
    """-1: a better, 1: b better, 0: within tolerance."""
    if abs(a - b) <= tolerance * max(abs(a), abs(b)):
        return 0
    return -1 if a < b else 1


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
        d, lv = _means(des, m, shared), _means(live, m, shared)
        both = [n for n in shared if n in d and n in lv]
        bad = tuple(
            (a, b)
            for a, b in itertools.combinations(both, 2)
            if _verdict(d[a], d[b], tolerance) * _verdict(lv[a], lv[b], tolerance) < 0
        )
        out.append(
            Agreement(
                metric=m,
                des_order=ranking(des, metric=m, policies=both),
                live_order=ranking(live, metric=m, policies=both),
                contradictions=bad,
            )
        )
    return out
