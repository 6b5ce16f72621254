"""Report writer: Markdown with PNG plots and a JSON file holding every number and parameter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import orjson

from igw.bench.plots import plot_queue_depth, plot_ttft_cdf
from igw.bench.results import LATENCY_FIELDS, PolicyRun, ScenarioRun
from igw.bench.stats import Estimate

_HEADERS = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p95_s": "TTFT p95",
    "ttft_p99_s": "TTFT p99",
    "itl_p50_s": "ITL p50",
    "itl_p99_s": "ITL p99",
    "e2e_p99_s": "E2E p99",
    "output_tok_per_s": "out tok/s",
    "goodput": "goodput",
    "prefix_hit_rate": "prefix hit",
}


def format_value(field: str, est: Estimate | None) -> str:
    """Seconds as ms or s, fractions as %, rates as integers; ``±`` half-width when n > 1."""
    if est is None:
        return "–"
    if math.isinf(est.mean):
        return "failed"  # the percentile reaches into failed requests (infinite latency)

    def one(v: float) -> str:
        if field in LATENCY_FIELDS:
            return f"{v * 1000:.0f} ms" if abs(v) < 1.0 else f"{v:.2f} s"
        if field in ("goodput", "prefix_hit_rate"):
            return f"{v * 100:.1f} %"
        return f"{v:,.0f}"

    text = one(est.mean)
    if est.n > 1:
        half = (est.hi - est.lo) / 2
        text += f" ±{one(half).replace(' ', '')}"
    return text


def format_pct(v: float | None, *, unit: str = " %") -> str:
    """A signed percentage; ``±∞`` where one side of the comparison is a failure."""
    if v is None:
        return "–"
    if math.isinf(v):
        return ("+∞" if v > 0 else "−∞") + unit
    return f"{v:+.1f}{unit}"


def _pct(v: float | None) -> str:
    return format_pct(v)


def requests_per_seed(pol: PolicyRun) -> str:
    """The requests each seed of ``pol`` measured (``"12"``, or ``"9-14"`` when seeds differ): what
    its percentiles rest on. ``--duration-scale 1e-300`` ran one request per seed and printed p95 and
    p99 of that one request with nothing in the table to say so."""
    counts = [s.requests for s in pol.summaries]
    if not counts:
        return "-"
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}-{high}"


def _metrics_table(run: ScenarioRun) -> list[str]:
    fields = list(_HEADERS)
    lines = [
        "| policy | " + " | ".join(_HEADERS[f] for f in fields) + " | requests/seed | errors |",
        "|---|" + "---:|" * (len(fields) + 2),
    ]
    for name, pol in run.policies.items():
        if pol.unavailable is not None:
            lines.append(f"| {name} | not run: {pol.unavailable} |" + " |" * (len(fields) + 1))
            continue
        cells = [format_value(f, pol.estimate(f)) for f in fields]
        errors = sum(s.errors for s in pol.summaries)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {requests_per_seed(pol)} | {errors} |")
    return lines


def _comparison_table(run: ScenarioRun) -> list[str]:
    lines = [
        f"| policy | TTFT p50 vs {run.baseline} | TTFT p95 vs {run.baseline} | TTFT p99 vs {run.baseline}"
        f" | out tok/s vs {run.baseline} | TTFT p95 gap to oracle | TTFT p99 gap to oracle |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, pol in run.policies.items():
        if pol.unavailable is not None:
            continue
        lines.append(
            f"| {name} | "
            + " | ".join(
                _pct(run.reduction_vs_baseline(name, f)) for f in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")
            )
            + f" | {_pct(run.reduction_vs_baseline(name, 'output_tok_per_s'))}"
            + "".join(f" | {_pct(run.gap_to_oracle(name, f))}" for f in ("ttft_p95_s", "ttft_p99_s"))
            + " |"
        )
    return lines


def _share_table(run: ScenarioRun) -> list[str]:
    measured: list[tuple[str, PolicyRun]] = [(n, p) for n, p in run.policies.items() if p.summaries]
    if not measured:
        return []
    pods = sorted({k for _, p in measured for k in p.mean_load_share()})
    lines = ["| pod | " + " | ".join(n for n, _ in measured) + " |", "|---|" + "---:|" * len(measured)]
    for pod in pods:
        lines.append(
            f"| {pod} | "
            + " | ".join(f"{p.mean_load_share().get(pod, 0.0) * 100:.1f} %" for _, p in measured)
            + " |"
        )
    return lines


def render_markdown(run: ScenarioRun, *, images: Sequence[str] = ()) -> str:
    """The scenario's report as Markdown (images are paths relative to the Markdown file)."""
    out = [f"## {run.scenario} ({run.mode} mode)", ""]
    for key, value in run.parameters.items():
        out.append(f"- **{key}**: {value}")
    out += [
        "",
        "Latency and rate columns are means across seeds with the 95 % t-interval half-width (±).",
        "Reductions are % lower than round-robin (for tok/s: % higher); gaps are % above the oracle.",
        "",
        *_metrics_table(run),
        "",
        *_comparison_table(run),
        "",
        "Per-pod share of requests:",
        "",
        *_share_table(run),
        "",
    ]
    out += [f"![{Path(img).stem}]({img})" for img in images]
    return "\n".join(out) + "\n"


def write_report(run: ScenarioRun, out_dir: Path) -> Path:
    """Write ``<scenario>.md``, ``<scenario>.json`` and the PNG plots into ``out_dir``; returns the .md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = run.scenario
    cdf = plot_ttft_cdf(run, out_dir / f"{stem}-ttft-cdf.png")
    queue = plot_queue_depth(run, out_dir / f"{stem}-queue-depth.png")
    (out_dir / f"{stem}.json").write_bytes(
        orjson.dumps(run.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    )
    md = out_dir / f"{stem}.md"
    md.write_text(render_markdown(run, images=[cdf.name, queue.name]))
    return md
