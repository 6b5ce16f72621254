"""Weight search for the gateway scheduler (``igw bench --tune``): candidates ranked against the oracle.

Each candidate weight vector runs the gateway's real scheduler on every chosen scenario (DES, the same
requests as round-robin and the oracle in that run). A candidate's score on a scenario is its TTFT p99
divided by the oracle's (1.0 = as good as perfect information); the objective is the geometric mean of
those ratios over the scenarios, so a 2x miss on one scenario weighs the same whatever its scale.
The best candidate is what ``gateway-tuned`` should carry (``policies.registry.TUNED_WEIGHTS``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from igw.bench.capacity import fleet_capacity
from igw.bench.des_runner import DesOptions, run_des
from igw.bench.scenarios import Scenario

DEFAULT_SCENARIOS: Final = (
    "homogeneous-steady",
    "mixed-fleet-8b",
    "mixed-fleet-32b",
    "shared-prefix-8b-high-cache",
)
DEFAULT_CANDIDATES: Final[tuple[Mapping[str, float], ...]] = (
    {"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 1, "prefill-collision-scorer": 2},
    {"queue": 2, "kvCache": 3, "prefix": 3, "predictedLatency": 2, "prefill-collision-scorer": 2},
    {"queue": 2, "kvCache": 3, "prefix": 3, "predictedLatency": 1, "prefill-collision-scorer": 2},
    {"queue": 3, "kvCache": 2, "prefix": 3, "predictedLatency": 1, "prefill-collision-scorer": 2},
    {"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 1},
    {"queue": 2, "kvCache": 4, "prefix": 3, "predictedLatency": 2, "active-request-scorer": 1},
    {"queue": 2, "kvCache": 1, "prefix": 3, "predictedLatency": 2, "active-request-scorer": 2},
    {"queue": 3, "kvCache": 1, "prefix": 3, "predictedLatency": 3, "active-request-scorer": 2},
    {"queue": 2, "kvCache": 4, "prefix": 3, "predictedLatency": 4, "active-request-scorer": 1},
    {"queue": 2, "kvCache": 4, "prefix": 2, "predictedLatency": 2},
)


@dataclass(slots=True)
class TuneRow:
    weights: Mapping[str, float]
    p99_s: dict[str, float] = field(default_factory=dict)
    ratio_to_oracle: dict[str, float] = field(default_factory=dict)

    @property
    def objective(self) -> float:
        """Geometric mean of TTFT p99 / oracle's p99 over the scenarios (lower is better)."""
        ratios = list(self.ratio_to_oracle.values())
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else math.inf


def tune(
    scenarios: Sequence[Scenario],
    *,
    candidates: Sequence[Mapping[str, float]] = DEFAULT_CANDIDATES,
    seeds: Sequence[int] = (1,),
    duration_scale: float = 0.25,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[TuneRow], dict[str, dict[str, float]]]:
    """Rows sorted best first, and per scenario the baselines' p99 (round-robin, oracle)."""
    say = progress or (lambda _m: None)
    rows = [TuneRow(weights=dict(w)) for w in candidates]
    baselines: dict[str, dict[str, float]] = {}
    for scenario in scenarios:
        cap = fleet_capacity(scenario)
        say(f"{scenario.name}: round-robin and oracle")
        base = run_des(
            scenario,
            options=DesOptions(
                policies=["round-robin", "oracle"], seeds=seeds, duration_scale=duration_scale
            ),
            capacity=cap,
        )
        oracle = _p99(base.policies["oracle"].estimate("ttft_p99_s"))
        baselines[scenario.name] = {
            "round-robin": _p99(base.policies["round-robin"].estimate("ttft_p99_s")),
            "oracle": oracle,
        }
        for i, row in enumerate(rows):
            say(f"{scenario.name}: candidate {i + 1}/{len(rows)}")
            run = run_des(
                scenario,
                options=DesOptions(
                    policies=["gateway-tuned"],
                    seeds=seeds,
                    duration_scale=duration_scale,
                    weights=dict(row.weights),
                ),
                capacity=cap,
            )
            p99 = _p99(run.policies["gateway-tuned"].estimate("ttft_p99_s"))
            row.p99_s[scenario.name] = p99
            row.ratio_to_oracle[scenario.name] = p99 / oracle if oracle > 0 else math.inf
    rows.sort(key=lambda r: r.objective)
    return rows, baselines


def _p99(est: object) -> float:
    mean = getattr(est, "mean", None)
    return float(mean) if mean is not None else math.inf
