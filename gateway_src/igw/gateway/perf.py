"""``igw perf gateway``: what the gateway costs, measured against a direct connection in the same run.

Prints, on this machine and in one run: added latency p50/p99 at concurrency 1 and 32 (gateway path
minus direct path, same client, alternating rounds), the gateway's CPU microseconds per request,
added streaming TTFT, scheduler decision time at 16 and 1,000 endpoints, and the parse time of a
realistic vLLM ``/metrics`` page - each against a baseline from the same run, with the issue's
target and whether it was met. Peer routers (sglang-router, vllm-router) are measured only when
installed; otherwise the report says so.

Example::

    igw perf gateway --requests 2000 --rounds 3 --json perf-gateway.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

HELP = "Gateway overhead vs a direct connection: added latency, CPU/request, TTFT, decision and parse time."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests", type=int, default=2000, help="requests per phase at concurrency 1 (default 2000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/gateway rounds (default 3)")
    parser.add_argument("--stream-requests", type=int, default=200, help="streaming requests per phase")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--skip-load", action="store_true", help="only the in-process decision and parse benchmarks"
    )


def _row(name: str, value: str, baseline: str, target: str, met: bool | None) -> dict[str, Any]:
    verdict = "n/a" if met is None else ("met" if met else "MISSED")
    return {"metric": name, "value": value, "baseline": baseline, "target": target, "verdict": verdict}


def _micro(rows: list[dict[str, Any]]) -> None:
    from igw.gateway.perf_backend import realistic_vllm_page
    from igw.gateway.perf_micro import decision_time, page_parse_time

    for endpoints, picks, target_us in ((16, 3000, 200.0), (1000, 300, 2000.0)):
        t = decision_time(endpoints=endpoints, picks=picks)
        rows.append(
            _row(
                t.name,
                f"p50 {t.p50_us:.0f} µs, p99 {t.p99_us:.0f} µs, mean {t.mean_us:.0f} µs",
                f"{t.baseline}: {t.baseline_mean_us:.2f} µs ({t.ratio:.0f}x)",
                f"<= {target_us:.0f} µs",
                t.p50_us <= target_us,
            )
        )
    page = realistic_vllm_page()
    t = page_parse_time(page, runs=2000)
    rows.append(
        _row(
            t.name,
            f"p50 {t.p50_us:.0f} µs, p99 {t.p99_us:.0f} µs",
            f"{t.baseline}: {t.baseline_mean_us:.0f} µs (ours {1 / t.ratio:.0f}x faster)",
            "<= 500 µs",
            t.p50_us <= 500.0,
        )
    )


async def _load(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    import tempfile
    from pathlib import Path

    from igw.gateway.perf_load import backend_process, closed_loop, cpu_seconds, gateway_process, wait_ready

    with (
        tempfile.TemporaryDirectory() as tmp,
        backend_process(chunks=20, interval=0.005) as (backend, _),
        gateway_process(Path(tmp), backend=backend) as (gateway, proc),
    ):
        if True:
            await wait_ready(gateway)
            await closed_loop(gateway, concurrency=8, requests=500)  # warm-up (JIT-free, but pools/caches)
            await closed_loop(backend, concurrency=8, requests=500)
            for concurrency, per_round in ((1, args.requests), (32, args.requests * 2)):
                direct: list[float] = []
                via: list[float] = []
                cpu = 0.0
                served = 0
                for _ in range(args.rounds):
                    direct += (
                        await closed_loop(backend, concurrency=concurrency, requests=per_round)
                    ).latencies_ms
                    c0 = cpu_seconds(proc.pid)
                    via += (
                        await closed_loop(gateway, concurrency=concurrency, requests=per_round)
                    ).latencies_ms
                    cpu += cpu_seconds(proc.pid) - c0
                    served += per_round
                _p = _pct
                add50, add99 = _p(via, 50) - _p(direct, 50), _p(via, 99) - _p(direct, 99)
                rows.append(
                    _row(
                        f"added latency, concurrency {concurrency}",
                        f"p50 +{add50:.3f} ms, p99 +{add99:.3f} ms (gateway p50 {_p(via, 50):.3f} ms)",
                        f"direct p50 {_p(direct, 50):.3f} ms, p99 {_p(direct, 99):.3f} ms",
                        "p50 <= 0.5 ms" if concurrency == 1 else "(report)",
                        add50 <= 0.5 if concurrency == 1 else None,
                    )
                )
                rows.append(
                    _row(
                        f"gateway CPU per request, concurrency {concurrency}",
                        f"{cpu / served * 1e6:.0f} µs",
                        _peer_note(),
                        "<= sglang-router's (c=32)" if concurrency == 32 else "(report)",
                        None,
                    )
                )
            direct_t: list[float] = []
            via_t: list[float] = []
            for _ in range(args.rounds):
                n = args.stream_requests
                direct_t += (await closed_loop(backend, concurrency=1, requests=n, stream=True)).latencies_ms
                via_t += (await closed_loop(gateway, concurrency=1, requests=n, stream=True)).latencies_ms
            added = _pct(via_t, 50) - _pct(direct_t, 50)
            rows.append(
                _row(
                    "added streaming TTFT, concurrency 1",
                    f"p50 +{added:.3f} ms, p99 +{_pct(via_t, 99) - _pct(direct_t, 99):.3f} ms",
                    f"direct TTFT p50 {_pct(direct_t, 50):.3f} ms",
                    "p50 <= 1 ms",
                    added <= 1.0,
                )
            )


def _pct(values: list[float], q: float) -> float:
    from igw.bench.stats import percentile

    return percentile(values, q) or 0.0


def _peer_note() -> str:
    found = [name for name in ("smg", "sglang-router", "vllm-router") if shutil.which(name)]
    if not found:
        return "sglang-router / vllm-router not installed: peer CPU not measured"
    return f"peers on PATH but not driven by this version: {', '.join(found)}"


def run(args: argparse.Namespace) -> int:
    import asyncio

    rows: list[dict[str, Any]] = []
    _micro(rows)
    if not args.skip_load:
        asyncio.run(_load(rows, args))
    width = max(len(r["metric"]) for r in rows)
    for r in rows:
        print(f"{r['metric']:<{width}}  {r['value']}")
        print(f"{'':<{width}}    baseline: {r['baseline']}; target {r['target']}: {r['verdict']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    missed = [r["metric"] for r in rows if r["verdict"] == "MISSED"]
    if missed:
        print(f"\nmissed targets: {', '.join(missed)}", file=sys.stderr)
    return 0
