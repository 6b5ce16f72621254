"""Markdown report and ramp-up plot of a two-tier run (:mod:`igw.bench.global_run`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from igw.bench.plots import _pyplot


def _s(value: float | None, unit: str = "s", digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f} {unit}"


def plot_ramp(results: dict[str, Any], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    curve = results["ramp_curve"]
    if curve:
        ax.plot(
            [t for t, _ in curve],
            [v for _, v in curve],
            marker="o",
            label="share of requests served by east-a",
        )
    ramp = results["router_ramp"]
    if ramp:
        ax.plot([t for t, _ in ramp], [v for _, v in ramp], label="router's slow-start ramp (replica 0)")
    ax.axhline(0.5, color="grey", linewidth=0.6, linestyle="--", label="steady share (2 equal clusters)")
    ax.set_xlabel("seconds after east-a came back")
    ax.set_ylabel("share")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_global_report(results: dict[str, Any], out: Path, *, command: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "global-results.json").write_text(json.dumps(results, indent=2, default=str))
    plot = plot_ramp(results, out / "global-ramp.png")
    redirect = results["redirect_s"]
    region = results["regional_failover"]
    lines = [
        "# Tier-2 global router: failover run",
        "",
        f"Command: `{command}`",
        "",
        "Three clusters (east-a, east-b in the routers' region; west-a across a "
        f"{1000 * results['options']['link_delay_s']:.0f} ms one-way link), two router replicas, "
        f"{results['requests']} requests at {results['options']['rate']} req/s.",
        "",
        "| event | time to redirect (both replicas drained it) | AWS documented |",
        "|---|---|---|",
        *(f"| {k} | {_s(v)} | {results['aws_redirect_s']:.0f} s |" for k, v in redirect.items()),
        "",
        "| outcome | count |",
        "|---|---|",
        f"| non-streaming requests | {results['non_streaming']} |",
        f"| failed non-streaming requests | {results['failed_non_streaming']} |",
        f"| streams | {results['streams']} |",
        f"| streams ended with an SSE error event | {results['streams_ended_with_error_event']} |",
        f"| streams failed otherwise | {results['streams_failed_otherwise']} |",
        f"| requests served by east-a while it was down | {results['served_by_east_a_after_kill']} |",
        "",
        "## Regional failover (east down, everything to west-a)",
        "",
        "| | P50 | P99 |",
        "|---|---|---|",
        f"| same region (before the first kill) | {_s(region['baseline_p50_s'])} "
        f"| {_s(region['baseline_p99_s'])} |",
        f"| cross-region (east down) | {_s(region['cross_region_p50_s'])} "
        f"| {_s(region['cross_region_p99_s'])} |",
        "",
        f"Added P50 latency: {_s(region['added_p50_s'], digits=3)}; "
        f"requests served cross-region: {region['served_cross_region']}.",
        "",
        "## Ramp-up after east-a returned",
        "",
        f"![ramp-up]({plot.name})",
        "",
        "| seconds after return | share served by east-a |",
        "|---|---|",
        *(f"| {t:.1f} | {v:.2f} |" for t, v in results["ramp_curve"]),
        "",
        "## Cost policies (same load, every cluster up)",
        "",
        "| policy | cost per 1000 requests | P50 latency | P99 latency | P99 TTFT (streams) "
        "| share | failed |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {name} | ${p['cost_per_1k_requests_usd']:.5f} | {_s(p['latency_p50_s'])} "
            f"| {_s(p['latency_p99_s'])} | {_s(p['ttft_p99_s'])} | {p['share']} | {p['failed']} |"
            for name, p in results["policies"].items()
        ),
        "",
    ]
    path = out / "global-report.md"
    path.write_text("\n".join(lines))
    return path
