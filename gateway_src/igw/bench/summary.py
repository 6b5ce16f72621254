"""One table across scenarios: AWS's claim next to what each policy achieved (from the JSON reports).

Built from the ``<scenario>.json`` files a run wrote, so it can be regenerated for any results
directory (``igw bench --summarize DIR``) without re-running anything.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from igw.bench.report import format_pct
from igw.bench.stats import gap_pct, reduction_pct

BEST_PEER_POLICIES = ("random", "least-request", "power-of-two", "sglang-cache-aware", "vllm-cache-aware")
"""The policies people would pick instead of the gateway (the peers' algorithms, modelled)."""
SERVICE_POLICY = "kube-service"
"""The faithful Kubernetes Service model (random pod per connection), beside per-request round-robin."""


def _red(doc: dict[str, Any], policy: str, field: str) -> float | None:
    """% lower than the run's baseline (round-robin), recomputed from the two across-seed means.

    Why not the JSON's ``reduction_vs_baseline_pct``: a failed percentile makes that reduction
    ``-inf``, which JSON writes as ``null``, the same as "not measured" - the summary printed "–" where
    the gateway's tail had failed (and "−100 %" only in the opposite case)."""
    return reduction_pct(
        _mean(doc, policy, field), baseline=_mean(doc, doc.get("baseline") or "round-robin", field)
    )


def _mean(doc: dict[str, Any], policy: str, field: str) -> float | None:
    """The across-seed mean of ``field``; an estimate whose mean is JSON ``null`` is a failure (the
    percentile reached into failed requests, written as infinity, which JSON cannot hold)."""
    entry = doc["policies"].get(policy)
    est = None if entry is None or entry.get("unavailable") else entry["estimates"].get(field)
    if est is None:
        return None
    return math.inf if est["mean"] is None else float(est["mean"])


def _per_seed(doc: dict[str, Any], policy: str, field: str) -> dict[int, float]:
    """``field`` of each seed ``policy`` ran, by seed; JSON ``null`` is a failure (infinity), as in
    :func:`_mean`."""
    entry = doc["policies"].get(policy)
    if entry is None or entry.get("unavailable"):
        return {}
    out: dict[int, float] = {}
    for seed, summary in zip(entry.get("seeds") or [], entry.get("per_seed") or [], strict=False):
        if field in summary:
            value = summary[field]
            out[int(seed)] = math.inf if value is None else float(value)
    return out


def _seed_range(doc: dict[str, Any], policy: str, field: str, *, baseline: str) -> str:
    """`` [lo … hi]``: the lowest and highest change of ``policy``'s ``field`` against ``baseline``'s,
    seed by seed (both replayed the same requests on each seed), shown as :func:`_pct` shows the mean;
    empty with fewer than two shared seeds.

    Why: the summary's changes are of across-seed means only, so "-12.2 %" read the same whether each
    seed gave about -12 % or one gave -30 % and another +5 %; a claimed improvement needs its spread
    beside it (before session s48 only the per-scenario reports showed intervals, of the latencies,
    not of the changes)."""
    mine = _per_seed(doc, policy, field)
    theirs = _per_seed(doc, baseline, field)
    changes = [
        c
        for seed in sorted(mine.keys() & theirs.keys())
        if (c := reduction_pct(mine[seed], baseline=theirs[seed])) is not None
    ]
    if len(changes) < 2:
        return ""
    # a reduction's sign is flipped for display (negative = lower TTFT), so its max is the low end
    return f" [{_pct(max(changes))} … {_pct(min(changes))}]"


def _gap(doc: dict[str, Any], policy: str, field: str) -> float | None:
    """% above the oracle's across-seed mean, recomputed from the means (a failed side is ``±inf``,
    which the JSON's ``gap_to_oracle_pct`` can only write as ``null``)."""
    oracle = doc.get("oracle")
    return None if oracle is None else gap_pct(_mean(doc, policy, field), oracle=_mean(doc, oracle, field))


def _pct(v: float | None) -> str:
    return "–" if v is None else format_pct(-v)


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return "failed" if math.isinf(v) else f"{v * 1000:.0f}"


def _share(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.0f} %"


def summary_rows(docs: list[dict[str, Any]]) -> list[str]:
    """One row per scenario for the gateway's default weights: TTFT against round-robin, the faithful
    Service model and the best peer; the gap to the oracle; ITL/E2E p99 against least-request's;
    SLO goodput beside the oracle's and round-robin's."""
    gw = "gateway-default"
    lines = [
        "| scenario | AWS claim (vs RR) | TTFT p95 / p99 vs RR | TTFT p99 vs kube-service "
        "| best peer (p99 vs RR) | TTFT p99 vs best peer | TTFT p99 gap to oracle (tuned) "
        "| ITL p99 / E2E p99 ms (least-request) | SLO goodput (oracle, RR) | TTFT p50 / tok/s vs RR |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for doc in docs:
        params = doc["parameters"]
        claim = params.get("aws_claim") or "–"
        rr = doc.get("baseline") or "round-robin"
        vs_rr = (
            f"{_pct(_red(doc, gw, 'ttft_p95_s'))} / {_pct(_red(doc, gw, 'ttft_p99_s'))}"
            f"{_seed_range(doc, gw, 'ttft_p99_s', baseline=rr)}"
        )
        p99 = _mean(doc, gw, "ttft_p99_s")
        vs_service = _pct(reduction_pct(p99, baseline=_mean(doc, SERVICE_POLICY, "ttft_p99_s")))
        peers = [(p, _mean(doc, p, "ttft_p99_s")) for p in BEST_PEER_POLICIES]
        measured = [(p, v) for p, v in peers if v is not None]
        best = min(measured, key=lambda pv: pv[1]) if measured else None
        best_cell = "–" if best is None else f"{best[0]}: {_pct(_red(doc, best[0], 'ttft_p99_s'))}"
        vs_best = (
            "–"
            if best is None
            else _pct(reduction_pct(p99, baseline=best[1]))
            + _seed_range(doc, gw, "ttft_p99_s", baseline=best[0])
        )
        gaps = [_gap(doc, pol, "ttft_p99_s") for pol in (gw, "gateway-tuned")]
        gap_cell = " (".join(format_pct(g) for g in gaps) + ")"
        lr = "least-request"
        speed = (
            f"{_ms(_mean(doc, gw, 'itl_p99_s'))} / {_ms(_mean(doc, gw, 'e2e_p99_s'))} "
            f"({_ms(_mean(doc, lr, 'itl_p99_s'))} / {_ms(_mean(doc, lr, 'e2e_p99_s'))})"
        )
        goodput = (
            f"{_share(_mean(doc, gw, 'goodput'))} ({_share(_mean(doc, 'oracle', 'goodput'))}, "
            f"{_share(_mean(doc, 'round-robin', 'goodput'))})"
        )
        p50 = _red(doc, gw, "ttft_p50_s")
        tok = _red(doc, gw, "output_tok_per_s")
        tok = None if tok is None else 0.0 - tok  # a rate: + = more throughput than the baseline
        lines.append(
            f"| {doc['scenario']} | {claim} | {vs_rr} | {vs_service} | {best_cell} | {vs_best} | {gap_cell} "
            f"| {speed} | {goodput} | {_pct(p50)} / {'–' if tok is None else f'{tok:+.1f} %'} |"
        )
    return lines


def write_summary(directory: Path) -> Path:
    docs = [orjson.loads(p.read_bytes()) for p in sorted(directory.glob("*.json")) if p.is_file()]
    docs = [d for d in docs if isinstance(d, dict) and "policies" in d and d.get("mode") == "des"]
    text = [
        "# Routing benchmark summary",
        "",
        "Rows are the gateway with default weights. Percentages are changes versus the named baseline",
        "(negative = lower = better for TTFT; for tok/s positive = more throughput); gaps are how far",
        "the gateway's TTFT p99 is above the oracle's. SLO goodput = share of all requests (failures",
        "included) meeting both the scenario's TTFT and time-per-output-token SLO. [lo … hi] after a",
        "TTFT p99 change: its lowest and highest value seed by seed (each seed's policies replay the",
        "same requests); none with one seed.",
        "",
        *summary_rows(docs),
        "",
    ]
    out = directory / "summary.md"
    out.write_text("\n".join(text))
    return out
