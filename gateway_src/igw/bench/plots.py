"""PNG plots of a scenario run: TTFT CDF per policy and per-pod queue depth over time.

matplotlib is imported lazily with the Agg backend so that nothing needs a display and importing the
benchmark package stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from igw.bench.results import ScenarioRun
from igw.bench.stats import RequestSample

MAX_QUEUE_PANELS = 6
"""At most this many policies get a queue-depth panel (baseline, gateway and oracle come first)."""


def _pyplot() -> Any:
    # deferred: matplotlib (sim extra) loads only when plotting, its Agg backend chosen before pyplot
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib (sim extra) loads only when plotting, its Agg backend chosen before pyplot
    import matplotlib.pyplot as plt

    return plt


def ttft_cdf_points(samples: Sequence[RequestSample]) -> tuple[list[float], list[float], int]:
    """CDF points (TTFT seconds, cumulative fraction of *all* samples) and the count not answered."""
    ttft = sorted(s.ttft_s for s in samples if s.ok and s.ttft_s is not None)
    offered = len(samples)
    ys = [(i + 1) / offered for i in range(len(ttft))]
    return [max(t, 1e-4) for t in ttft], ys, offered - len(ttft)


def plot_ttft_cdf(run: ScenarioRun, path: Path) -> Path:
    """Empirical CDF of TTFT (first seed) per policy, log-scaled time axis.

    The denominator is *every* request the policy was offered, so a policy whose requests failed or
    were never answered plateaus below 1.0 instead of looking fast on the few it did serve.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, pol in run.policies.items():
        xs, ys, unanswered = ttft_cdf_points(pol.samples)
        if not xs:
            continue
        offered = len(pol.samples)
        label = name if unanswered == 0 else f"{name} ({unanswered} of {offered} failed or unanswered)"
        ax.step(xs, ys, where="post", label=label)
    ax.set_ylim(0.0, 1.02)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{run.scenario} ({run.mode}): TTFT CDF per policy")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize="small")
    else:
        # no policy had an answered request (a demo whose --drain ran out first): an empty legend
        # was matplotlib's "No artists with labels found" UserWarning on the user's terminal
        ax.text(0.5, 0.5, "no request answered", transform=ax.transAxes, ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel_order(run: ScenarioRun) -> list[str]:
    first = [run.baseline, *(n for n in run.policies if n.startswith("gateway")), run.oracle or ""]
    rest = [n for n in run.policies if n not in first]
    names = [n for n in (*first, *rest) if n in run.policies and run.policies[n].queue_series]
    return list(dict.fromkeys(names))[:MAX_QUEUE_PANELS]


def plot_queue_depth(run: ScenarioRun, path: Path) -> Path:
    """Per-pod queue depth (waiting + running) over time, one panel per policy, shared y axis."""
    plt = _pyplot()
    names = _panel_order(run)
    rows = max(1, len(names))
    fig, axes = plt.subplots(rows, 1, figsize=(9, 2.3 * rows), sharex=True, sharey=True, squeeze=False)
    for ax, name in zip((a[0] for a in axes), names, strict=False):
        for pod, series in sorted(run.policies[name].queue_series.items()):
            if series:
                ax.plot([t for t, _ in series], [d for _, d in series], linewidth=0.8, label=pod)
        ax.set_title(name, fontsize="small", loc="left")
        ax.set_ylabel("in engine")
        ax.grid(True, alpha=0.3)
    axes[-1][0].set_xlabel("time (s)")
    if names:
        pods = len(run.policies[names[0]].queue_series)
        if pods <= 16:
            axes[0][0].legend(loc="upper right", fontsize="x-small", ncol=min(4, pods))
    fig.suptitle(f"{run.scenario} ({run.mode}): per-pod queue depth (waiting + running)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
