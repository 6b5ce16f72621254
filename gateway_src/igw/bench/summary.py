"""One table across scenarios: AWS's claim next to what each policy achieved (from the JSON reports).

Built from the ``<scenario>.json`` files a run wrote, so it can be regenerated for any results
directory (``igw bench --summarize DIR``) without re-running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

BEST_PEER_POLICIES = ("random", "least-request", "power-of-two", "sglang-cache-aware", "vllm-cache-aware")
"""The policies people would pick instead of the gateway (the peers' algorithms, modelled)."""


def _red(doc: dict[str, Any], policy: str, field: str) -> float | None:
    entry = doc["policies"].get(policy)
    if entry is None or entry.get("unavailable"):
        return None
    value = entry["reduction_vs_baseline_pct"].get(field)
    return None if value is None else float(value)


def _mean(doc: dict[str, Any], policy: str, field: str) -> float | None:
    entry = doc["policies"].get(policy)
    est = None if entry is None else entry["estimates"].get(field)
    return None if est is None else float(est["mean"])


def _gap(doc: dict[str, Any], policy: str, field: str) -> float | None:
    entry = doc["policies"].get(policy)
    value = None if entry is None else entry["gap_to_oracle_pct"].get(field)
    return None if value is None else float(value)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{-v:+.1f} %"


def summary_rows(docs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| scenario | AWS claim (vs RR) | gateway-default p95 / p99 | gateway-tuned p95 / p99 "
        "| best peer policy (p99) | gateway-default p99 gap to oracle | gateway-tuned p99 gap to oracle "
        "| TTFT p50 / tok/s vs RR (default) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for doc in docs:
        params = doc["parameters"]
        claim = params.get("aws_claim") or "–"
        cells = []
        for pol in ("gateway-default", "gateway-tuned"):
            cells.append(f"{_pct(_red(doc, pol, 'ttft_p95_s'))} / {_pct(_red(doc, pol, 'ttft_p99_s'))}")
        peers = [(p, _mean(doc, p, "ttft_p99_s")) for p in BEST_PEER_POLICIES]
        measured = [(p, v) for p, v in peers if v is not None]
        best = min(measured, key=lambda pv: pv[1]) if measured else None
        best_cell = "–" if best is None else f"{best[0]}: {_pct(_red(doc, best[0], 'ttft_p99_s'))}"
        gaps = [_gap(doc, pol, "ttft_p99_s") for pol in ("gateway-default", "gateway-tuned")]
        gap_cells = ["–" if g is None else f"{g:+.0f} %" for g in gaps]
        p50 = _red(doc, "gateway-default", "ttft_p50_s")
        tok = _red(doc, "gateway-default", "output_tok_per_s")
        lines.append(
            f"| {doc['scenario']} | {claim} | {cells[0]} | {cells[1]} | {best_cell} | {gap_cells[0]} "
            f"| {gap_cells[1]} | {_pct(p50)} / {'–' if tok is None else f'{tok:+.1f} %'} |"
        )
    return lines


def write_summary(directory: Path) -> Path:
    docs = [orjson.loads(p.read_bytes()) for p in sorted(directory.glob("*.json"))]
    docs = [d for d in docs if isinstance(d, dict) and "policies" in d and d.get("mode") == "des"]
    text = [
        "# Routing benchmark summary",
        "",
        "Percentages are changes versus round-robin (negative = lower = better for TTFT; for tok/s",
        "positive = more throughput); gaps are how far a policy's TTFT p99 is above the oracle's.",
        "",
        *summary_rows(docs),
        "",
    ]
    out = directory / "summary.md"
    out.write_text("\n".join(text))
    return out
