"""``igw perf compiled``: the mypyc-compiled hot path against pure Python, in alternating pairs.

Builds (or reuses) a compiled copy of this checkout (:mod:`igw.perf.compiled_tree`; ``--modules``
compiles a subset of :data:`igw.compiled.COMPILED_MODULES`), then runs ``igw perf gateway`` once per
tree per pair, the trees alternating and their order swapped every pair (the machine's load drifts),
each in its own process with ``PYTHONPATH`` at that tree. Prints every run (UTC start, 1-minute load
at start and end, CPU per request at concurrency 32 and 1, added streamed TTFT p50, added p50 at
concurrency 1, decision p50 at 16 / 1,000 endpoints) and, per pair, compiled / pure CPU at
concurrency 32, then their median.

Without ``--peers`` no peer router runs (the comparison is between the gateway's own trees). With
``--peers`` each run starts the peer routers too (``IGW_PEERS_DIR``, as ``igw perf gateway`` finds
them), because issue 16's target is a ratio to the better peer *in the same run*: the peers' own
figures move between runs on a shared machine as much as the gateway's. Each run then also prints the
better peer's CPU per request at concurrency 32 and the gateway's ratio to it, each pair the compiled
/ pure ratio of those peer-normalised figures, and the end the median ratio to the peer per tree.
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
PEER_BOUND: Final = 2.0
"""Issue 16's bound: CPU per request at concurrency 32 at most this many times the better peer's."""
_NUMBER: Final = re.compile(r"[-+]?\d+(?:\.\d+)?")


class ComparisonRunError(IgwToolingError, RuntimeError):
    """A tree's ``igw perf gateway`` run failed, or measured code other than the tree it was given."""


def _first_number(value: str) -> float | None:
    found = _NUMBER.search(value.split("p50", 1)[-1])
    return float(found.group()) if found else None


def _load() -> float:
    return os.getloadavg()[0]


_PEER_CPU_32: Final = re.compile(r"^(?!gateway )(?P<peer>.+) CPU per request, concurrency 32$")
"""``igw perf gateway``'s row of one peer's CPU per request at concurrency 32 (not the gateway's)."""


def run_environment(tree: Path, *, peers: bool, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one tree's ``igw perf gateway`` run: ``PYTHONPATH`` at ``tree``; the peer
    routers' ``IGW_PEERS_DIR`` passed on only with ``peers`` (without it no peer is started: that
    run looks for them in ``.peers``, which holds none unless ``igw bench --peers`` made it)."""
    env = dict(os.environ if environ is None else environ)
    if not peers:
        env.pop("IGW_PEERS_DIR", None)
    env["PYTHONPATH"] = str(tree)
    return env


def better_peer(rows: dict[str, str]) -> tuple[str, float] | None:
    """The peer with the lowest CPU per request at concurrency 32 in one run's rows (label, µs), or
    ``None`` when no peer was measured."""
    found: list[tuple[float, str]] = []
    for metric, value in rows.items():
        matched = _PEER_CPU_32.match(metric)
        us = _first_number(value) if matched else None
        if matched and us is not None:
            found.append((us, matched.group("peer")))
    if not found:
        return None
    us, label = min(found)
    return label, us


def peer_ratio(gateway_us: float | None, peer: tuple[str, float] | None) -> float | None:
    """The gateway's CPU per request at concurrency 32 over the better peer's of the same run."""
    if gateway_us is None or peer is None or peer[1] <= 0:
        return None
    return gateway_us / peer[1]


def _perf_gateway(
    tree: Path, args: argparse.Namespace, out: Path
) -> tuple[dict[str, float | None], tuple[str, float] | None]:
    env = run_environment(tree, peers=args.peers)
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
    cells = {column: _first_number(rows.get(metric, "")) for column, metric in COLUMNS}
    return cells, better_peer(rows)


def run(args: argparse.Namespace) -> int:
    modules = tuple(args.modules) if args.modules else COMPILED_MODULES
    print(
        f"building the compiled copy in {args.tree} ({len(modules)} modules), load {_load():.1f}", flush=True
    )
    compiled, seconds = build_compiled_tree(Path(args.tree), modules)
    print(f"  {'reused (sources unchanged)' if seconds == 0 else f'built in {seconds:.0f} s'}", flush=True)
    trees = {"pure": REPO_ROOT / "gateway_src", "compiled": compiled}
    extra = ("peer c=32", "/ peer") if args.peers else ()
    header = f"{'pair':>4}  {'tree':<8}  {'UTC':<8}  {'load':<11}  " + "  ".join(
        f"{c:>13}" for c in (*(c for c, _ in COLUMNS), *extra)
    )
    print(header, flush=True)
    ratios: list[float] = []
    normalised: list[float] = []
    to_peer: dict[str, list[float]] = {"pure": [], "compiled": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(1, args.pairs + 1):
            order = ("pure", "compiled") if pair % 2 else ("compiled", "pure")
            cpu: dict[str, float | None] = {}
            for label in order:
                start, before = time.strftime("%H:%M:%S", time.gmtime()), _load()
                cells, peer = _perf_gateway(trees[label], args, Path(tmp) / f"{pair}-{label}.json")
                cpu[label] = cells["CPU c=32"]
                load = f"{before:.1f}->{_load():.1f}"
                text = "  ".join("-".rjust(13) if v is None else f"{v:>13g}" for v in cells.values())
                if args.peers:
                    ratio = peer_ratio(cells["CPU c=32"], peer)
                    text += "  " + ("-".rjust(13) if peer is None else f"{peer[1]:>13g}")
                    text += "  " + ("-".rjust(13) if ratio is None else f"{ratio:>13.2f}")
                    if ratio is not None:
                        to_peer[label].append(ratio)
                print(f"{pair:>4}  {label:<8}  {start:<8}  {load:<11}  {text}", flush=True)
                if args.peers and peer is not None:
                    print(f"      better peer: {peer[0]}", flush=True)
            pure_cpu, compiled_cpu = cpu["pure"], cpu["compiled"]
            if pure_cpu and compiled_cpu is not None:
                ratios.append(compiled_cpu / pure_cpu)
                print(f"      compiled / pure CPU per request at c=32: {ratios[-1]:.2f}", flush=True)
            if args.peers and len(to_peer["pure"]) == len(to_peer["compiled"]) == pair:
                normalised.append(to_peer["compiled"][-1] / to_peer["pure"][-1])
                print(f"      the same, each over its run's better peer: {normalised[-1]:.2f}", flush=True)
    if ratios:
        print(
            f"median of {len(ratios)} pair ratio(s), CPU per request at c=32: {statistics.median(ratios):.2f}"
        )
    for label, found in to_peer.items():
        if found:
            print(
                f"{label}: CPU per request at c=32 / the better peer's in the same run, median of "
                f"{len(found)}: {statistics.median(found):.2f} (target <= {PEER_BOUND:g})"
            )
    if normalised:
        median = statistics.median(normalised)
        print(f"median of {len(normalised)} peer-normalised pair ratio(s): {median:.2f}")
    return 0
