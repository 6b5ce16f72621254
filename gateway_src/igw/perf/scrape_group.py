"""``igw perf scrape --groups W,...``: what keeping N pods fresh costs a whole ``igw serve --workers W``.

:mod:`igw.perf.scrape` times the scraper inside the benchmark's own process. A gateway pod runs a
group of workers instead (:mod:`igw.gateway.workers`): worker 0 scrapes every pod and relays each
snapshot to the other workers (:mod:`igw.gateway.scrape_share`), so the host's scraping CPU is
worker 0's plus each follower's cost of applying what it is sent plus the parent's supervision.
Issue 16's bound ("1,000 pods kept fresh within the stale threshold on at most one core per host
for all workers together") is about that sum, so this measures it: for each fleet size and worker
count a real ``igw serve --workers W`` runs, without traffic, in front of the simulated fleet
(:func:`igw.perf.scrape_setup.fleet`, its own process: its CPU is reported apart), and the CPU of every
process of the group is read from ``/proc`` over the window. Each worker is named by its
``IGW_WORKER`` variable. Afterwards the group's ``/metrics`` (any worker answers for all, each
series with its ``worker`` label) is read a few times for every worker's oldest scrape
(``igw_pool_oldest_scrape_age_seconds``, each worker's own copy): its median and maximum over the reads
say whether the followers' copies stayed within the stale threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import yaml

from igw.gateway.workers import WorkerRole, WorkerSetupError
from igw.perf.gateway_load import cpu_seconds, group_pids
from igw.perf.load_policy import parse_switches
from igw.perf.scrape_setup import SCHEDULER, TARGET_FLEET_PODS, TARGET_HOST_CORES, config_doc, fleet
from igw.perf.serve_process import serve_process

SETTLE_S: Final = 4.0
"""Seconds between the group answering ``/readyz`` and the window: every worker started and every pod
scraped a few times (a worker's start-up imports are not scraping's cost)."""
AGE_READS: Final = 5
"""``/metrics`` reads after the window, 0.2 s apart, for the workers' oldest scrapes."""
_AGE_SERIES: Final = "igw_pool_oldest_scrape_age_seconds{"
PARENT: Final = "parent"
SINGLE: Final = "single process"


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One fleet size and worker count: CPU per process in percent of a core over the window, and
    each worker's oldest scrape (seconds) read from the group's ``/metrics`` after it."""

    pods: int
    workers: int
    seconds: float
    stale_threshold_s: float
    cpu_pct: dict[str, float]
    """``parent`` and ``worker N``; with one worker ``single process``."""
    fleet_pct: float
    ages_s: dict[str, list[float]]
    """The oldest scrape's age by ``worker`` label value, one per read (and pool)."""
    wakeups_per_s: dict[str, float] = field(default_factory=dict)
    """Each process's event-loop wake-ups per second over the window (its main thread's voluntary
    context switches): what the relay's batching is for - a follower woken for every few snapshots
    paid more for the wake-ups than for the snapshots (docs/gateway.md, "Relay batches")."""

    @property
    def group_pct(self) -> float:
        return sum(self.cpu_pct.values())

    @property
    def oldest_s(self) -> float:
        return max((max(a) for a in self.ages_s.values() if a), default=float("inf"))


def _worker_label(pid: int, parent: int) -> str:
    """``worker N`` from the role in the process's ``IGW_WORKER`` variable, read as the worker read it
    (:meth:`WorkerRole.from_env`); the group's parent (or a single process) is ``parent``."""
    if pid == parent:
        return PARENT
    environ: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = entry.partition(b"=")
            environ[name.decode(errors="replace")] = value.decode(errors="replace")
    with contextlib.suppress(WorkerSetupError):
        role = WorkerRole.from_env(environ)
        if role is not None:
            return f"worker {role.index}"
    return f"pid {pid}"


def _ages(page: str) -> dict[str, list[float]]:
    """Every ``igw_pool_oldest_scrape_age_seconds`` sample of a ``/metrics`` page by its ``worker``
    label (``0`` for a single process, which has none)."""
    found: dict[str, list[float]] = {}
    for line in page.splitlines():
        if not line.startswith(_AGE_SERIES):
            continue
        labels, _, value = line.rpartition(" ")
        worker = labels.split('worker="', 1)[1].split('"', 1)[0] if 'worker="' in labels else "0"
        found.setdefault(worker, []).append(float(value))
    return found


async def measure_group(
    pods: int,
    workers: int,
    *,
    seconds: float,
    interval_s: float,
    stale_s: float,
    variants: int,
    busy: int,
) -> GroupRow:
    """Run ``igw serve --workers W`` idle before a fleet of ``pods`` simulated pods and measure it."""
    async with fleet(pods, variants, busy) as (fleet_pid, ports):
        with tempfile.TemporaryDirectory() as tmp:
            config, endpoints = Path(tmp) / "config.yaml", Path(tmp) / "endpoints.yaml"
            config.write_text(yaml.safe_dump(config_doc(interval_s, stale_s)))
            keys = [f"127.0.0.1:{p}" for p in ports]
            endpoints.write_text(yaml.safe_dump({"schedulers": {SCHEDULER: keys}}))
            args = ("--workers", str(workers)) if workers > 1 else ()
            async with serve_process(config, endpoints, *args, on_line=lambda _line: None) as served:
                await asyncio.sleep(SETTLE_S)
                pids = group_pids(served.pid)
                labels = {pid: _worker_label(pid, served.pid) if workers > 1 else SINGLE for pid in pids}
                before = {pid: cpu_seconds(pid) for pid in pids}
                sleeps_before = {pid: _loop_sleeps(pid) for pid in pids}
                fleet_before, t0 = cpu_seconds(fleet_pid), time.monotonic()
                await asyncio.sleep(seconds)
                after = {pid: cpu_seconds(pid) for pid in pids}
                sleeps_after = {pid: _loop_sleeps(pid) for pid in pids}
                fleet_after, wall = cpu_seconds(fleet_pid), time.monotonic() - t0
                ages: dict[str, list[float]] = {}
                async with aiohttp.ClientSession() as http:
                    for _ in range(AGE_READS):
                        async with http.get(f"{served.url}/metrics") as resp:
                            for worker, found in _ages(await resp.text()).items():
                                ages.setdefault(worker, []).extend(found)
                        await asyncio.sleep(0.2)
    return GroupRow(
        pods=pods,
        workers=workers,
        seconds=wall,
        stale_threshold_s=stale_s,
        cpu_pct={labels[pid]: 100 * (after[pid] - before[pid]) / wall for pid in sorted(pids)},
        fleet_pct=100 * (fleet_after - fleet_before) / wall,
        ages_s=ages,
        wakeups_per_s={labels[pid]: (sleeps_after[pid] - sleeps_before[pid]) / wall for pid in sorted(pids)},
    )


def _loop_sleeps(pid: int) -> int:
    """Voluntary context switches of ``pid``'s main thread (its event loop's), 0 when it is gone."""
    with contextlib.suppress(OSError):
        return parse_switches(Path(f"/proc/{pid}/status").read_text())[0]
    return 0


def print_group_row(row: GroupRow) -> None:
    """The row as printed while the benchmark runs: the group's CPU, split per process, and ages."""
    split = ", ".join(f"{name} {pct:.1f}" for name, pct in sorted(row.cpu_pct.items()))
    ages = "; ".join(
        f"worker {w} {statistics.median(a) * 1000:.0f} / {max(a) * 1000:.0f} ms"
        for w, a in sorted(row.ages_s.items())
        if a
    )
    print(
        f"{row.pods:>6} pods, {row.workers} worker(s): group {row.group_pct:.1f} % of a core ({split}); "
        f"fleet process {row.fleet_pct:.1f} %; oldest scrape p50 / max {ages or 'none read'}"
    )
    if row.wakeups_per_s:
        wakeups = ", ".join(f"{name} {rate:.0f}" for name, rate in sorted(row.wakeups_per_s.items()))
        print(f"{'':>6}       event-loop wake-ups per second: {wakeups}")


def print_group_targets(rows: list[GroupRow]) -> None:
    """Issue 16's host bound for every group measured at (or above) its fleet size."""
    if not any(row.pods >= TARGET_FLEET_PODS for row in rows):
        print(
            f"  none measured: the host bound is for {TARGET_FLEET_PODS:,} pods (--pods {TARGET_FLEET_PODS})"
        )
    for row in rows:
        if row.pods < TARGET_FLEET_PODS:
            continue
        cores = row.group_pct / 100
        fresh = row.oldest_s <= row.stale_threshold_s
        met = fresh and cores <= TARGET_HOST_CORES
        print(
            f"{row.pods:>6} pods, {row.workers} worker(s): {cores:.2f} cores for the whole group vs "
            f"{TARGET_HOST_CORES:g} = {cores / TARGET_HOST_CORES:.2f}×, oldest scrape of any worker "
            f"{row.oldest_s * 1000:.0f} ms vs {row.stale_threshold_s * 1000:.0f} ms "
            f"({'met' if met else 'MISSED'})"
        )
