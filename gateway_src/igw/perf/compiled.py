"""``igw perf compiled``: the mypyc-compiled hot path against pure Python, in alternating pairs.

Builds (or reuses) a compiled copy of this checkout (:mod:`igw.perf.compiled_tree`; ``--modules``
compiles a subset of :data:`igw.compiled.COMPILED_MODULES`), then runs ``igw perf gateway`` once per
tree per pair, the trees alternating and their order swapped every pair (the machine's load drifts),
each in its own process with ``PYTHONPATH`` at that tree and no peer routers (the comparison is
between the gateway's own trees). Prints every run (UTC start, 1-minute load at start and end, CPU
per request at concurrency 32 and 1, added streamed TTFT p50, added p50 at concurrency 1, decision
p50 at 16 / 1,000 endpoints) and, per pair, compiled / pure CPU at concurrency 32, then their median.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from igw.compiled import COMPILED_MODULES, inspect_tree
from igw.config.paths import REPO_ROOT
from igw.errors import IgwToolingError
from igw.perf.compiled_tree import build_compiled_tree

HELP = "mypyc-compiled hot path against pure Python: alternating igw perf gateway runs per tree."
RUN_TIMEOUT_S: Final = 1200.0
COLUMNS: Final = (
    ("CPU c=32", "gateway CPU per request, concurrency 32"),
    ("CPU c=1", "gateway CPU per request, concurrency 1"),
    ("TTFT+ p50", "added streaming TTFT, concurrency 1"),
    ("added p50 c=1", "added latency, concurrency 1"),
    ("decide 16", "scheduler decision, 16 endpoints"),
    ("decide 1000", "scheduler decision, 1000 endpoints"),
)
"""(column, ``igw perf gateway`` row): each cell is the row's first number (its p50 where it has one)."""
_NUMBER: Final = re.compile(r"[-+]?\d+(?:\.\d+)?")


class ComparisonRunError(IgwToolingError, RuntimeError):
    """A tree's ``igw perf gateway`` run failed, or measured code other than the tree it was given."""


def _first_number(value: str) -> float | None:
    found = _NUMBER.search(value.split("p50", 1)[-1])
    return float(found.group()) if found else None


def _load() -> float:
    return os.getloadavg()[0]


def _perf_gateway(tree: Path, args: argparse.Namespace, out: Path) -> dict[str, float | None]:
    env = {k: v for k, v in os.environ.items() if k != "IGW_PEERS_DIR"}
    env["PYTHONPATH"] = str(tree)
    argv = [
        sys.executable, "-m", "igw.cli.main", "perf", "gateway", "--requests", str(args.requests),
        "--rounds", str(args.rounds), "--stream-requests", str(args.stream_requests), "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ComparisonRunError(f"igw perf gateway on {tree} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    rows = {row["metric"]: str(row["value"]) for row in json.loads(out.read_text())}
    measured = inspect_tree(tree / "igw").describe()
    if rows.get("gateway code") != measured:
        raise ComparisonRunError(
            f"{tree}: igw perf gateway measured {rows.get('gateway code')!r}, not {measured!r}"
        )
    return {column: _first_number(rows.get(metric, "")) for column, metric in COLUMNS}


def run(args: argparse.Namespace) -> int:
    modules = tuple(args.modules) if args.modules else COMPILED_MODULES
    print(
        f"building the compiled copy in {args.tree} ({len(modules)} modules), load {_load():.1f}", flush=True
    )
    compiled, seconds = build_compiled_tree(Path(args.tree), modules)
    print(f"  {'reused (sources unchanged)' if seconds == 0 else f'built in {seconds:.0f} s'}", flush=True)
    trees = {"pure": REPO_ROOT / "gateway_src", "compiled": compiled}
    header = f"{'pair':>4}  {'tree':<8}  {'UTC':<8}  {'load':<11}  " + "  ".join(
        f"{c:>13}" for c, _ in COLUMNS
    )
    print(header, flush=True)
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(1, args.pairs + 1):
            order = ("pure", "compiled") if pair % 2 else ("compiled", "pure")
            cpu: dict[str, float | None] = {}
            for label in order:
                start, before = time.strftime("%H:%M:%S", time.gmtime()), _load()
                cells = _perf_gateway(trees[label], args, Path(tmp) / f"{pair}-{label}.json")
                cpu[label] = cells["CPU c=32"]
                load = f"{before:.1f}->{_load():.1f}"
                values = "  ".join("-".rjust(13) if v is None else f"{v:>13g}" for v in cells.values())
                print(f"{pair:>4}  {label:<8}  {start:<8}  {load:<11}  {values}", flush=True)
            pure_cpu, compiled_cpu = cpu["pure"], cpu["compiled"]
            if pure_cpu and compiled_cpu is not None:
                ratios.append(compiled_cpu / pure_cpu)
                print(f"      compiled / pure CPU per request at c=32: {ratios[-1]:.2f}", flush=True)
    if ratios:
        print(
            f"median of {len(ratios)} pair ratio(s), CPU per request at c=32: {statistics.median(ratios):.2f}"
        )
    return 0
