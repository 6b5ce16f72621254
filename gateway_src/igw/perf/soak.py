"""``igw perf soak``: run ``igw serve`` for a long time in front of a simulated fleet and check that
it neither loses requests nor leaks memory or file descriptors.

Phases, all against the same gateway process:

1. *calibrate*: a closed loop of many concurrent clients measures what the fleet completes per
   second (its capacity; also warms every pool and cache);
2. *steady*: open-loop (Poisson) arrivals at 80 % of that capacity for ``--minutes``;
3. *overload*: arrivals at 150 % for ``--minutes``: the gateway must answer the excess with fast 429s.

A request is *lost* when it gets neither a complete 2xx answer nor a 429 with ``Retry-After``: a 5xx,
a connection error, a broken stream or no answer at all. The gateway's resident memory and open file
descriptors are read from ``/proc``: memory once a phase has warmed up and again at its end (both
under that phase's load), descriptors before and after each phase once idle connections have closed.
The command exits 1 when a request was lost, RSS grew by 5 % or more within a phase, or the
descriptor count grew by more than :data:`FD_SLACK`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import aiohttp
import orjson
import yaml

from igw.perf.serve_process import serve_process
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec

HELP = "Endurance: igw serve at 80 % then 150 % of the simulated fleet's capacity; lost requests, RSS, fds."
MODEL: Final = "soak-model"
FD_SLACK: Final = 32
RSS_GROWTH_LIMIT: Final = 0.05
REQUEST_TIMEOUT_S: Final = 120.0
WARM_UP_SHARE: Final = 0.2
"""RSS growth is measured from this share of a phase to its end, both under the phase's load."""
SETTLE_S: Final = 65.0
"""Idle wait before counting descriptors: aiohttp closes pooled upstream connections idle for 30 s
on a timer with the same period, so up to 60 s after their last use."""


@dataclass(slots=True)
class Tally:
    sent: int = 0
    ok: int = 0
    rejected: int = 0
    lost: int = 0
    lost_reasons: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)

    def lose(self, reason: str) -> None:
        self.lost += 1
        self.lost_reasons[reason] = self.lost_reasons.get(reason, 0) + 1


@dataclass(slots=True)
class PhaseReport:
    name: str
    rate_rps: float
    seconds: float
    tally: Tally
    rss_warm_kib: int
    """Resident memory once the phase has run for :data:`WARM_UP_SHARE` of its length (under load)."""
    rss_end_kib: int
    """Resident memory just before the phase's arrivals stop (under the same load)."""
    fds_start: int
    fds_end: int
    """Open descriptors before the phase and after it, each once idle connections have closed."""

    @property
    def rss_growth(self) -> float:
        return (self.rss_end_kib - self.rss_warm_kib) / max(1, self.rss_warm_kib)

    @property
    def fd_growth(self) -> int:
        return self.fds_end - self.fds_start


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+)", status)
    return int(found.group(1)) if found else 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _body(rng: random.Random, i: int) -> dict[str, object]:
    words = " ".join(f"w{rng.randrange(500)}" for _ in range(rng.randrange(50, 400)))
    return {
        "model": MODEL,
        "prompt": f"request {i}: {words}",
        "max_tokens": rng.randrange(16, 96),
        "stream": i % 2 == 0,
    }


async def _one(http: aiohttp.ClientSession, url: str, body: dict[str, object], tally: Tally) -> None:
    tally.sent += 1
    t0 = time.perf_counter()
    try:
        async with http.post(url, json=body) as resp:
            payload = await resp.read()
            if resp.status == 429 and "Retry-After" in resp.headers:
                tally.rejected += 1
            elif resp.status != 200:
                tally.lose(f"HTTP {resp.status}")
            elif body["stream"] and (not payload.rstrip().endswith(b"[DONE]") or b'"error"' in payload):
                tally.lose("broken stream")
            else:
                tally.ok += 1
                tally.latencies_ms.append((time.perf_counter() - t0) * 1000)
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.lose(type(exc).__name__)


async def closed_loop(url: str, *, seconds: float, concurrency: int, rng: random.Random) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:

        async def client() -> None:
            while time.monotonic() < deadline:
                await _one(http, url, _body(rng, tally.sent), tally)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return tally


async def open_loop(url: str, *, rate: float, seconds: float, rng: random.Random) -> Tally:
    """Poisson arrivals at ``rate`` per second; waits for every request to finish or time out."""
    tally = Tally()
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        start = time.monotonic()
        due = start
        i = 0
        while due < start + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            task = asyncio.create_task(_one(http, url, _body(rng, i), tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
            due += rng.expovariate(rate)
        if tasks:
            await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 10)
    return tally


@contextlib.asynccontextmanager
async def gateway_process(
    workdir: Path, endpoints: list[str], log_path: Path
) -> AsyncIterator[tuple[str, int]]:
    """``igw serve`` for the fleet; its log and access log (one line per request) go to a file."""
    config = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "soak", "namespace": "soak"},
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [
                {"name": "soak", "modelName": MODEL, "modelSelector": {"matchLabels": {"app": "soak"}}}
            ],
        },
    }
    (workdir / "igwc.yaml").write_text(yaml.safe_dump(config))
    (workdir / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {"soak": endpoints}}))
    with log_path.open("w") as log:
        async with serve_process(
            workdir / "igwc.yaml", workdir / "endpoints.yaml", on_line=log.write
        ) as served:
            yield served.url, served.pid


async def _phase(
    name: str, url: str, pid: int, *, rate: float, seconds: float, settle_s: float, rng: random.Random
) -> PhaseReport:
    fds_start = open_fds(pid)
    run = asyncio.create_task(open_loop(url, rate=rate, seconds=seconds, rng=rng))
    await asyncio.sleep(seconds * WARM_UP_SHARE)
    warm = rss_kib(pid)
    await asyncio.sleep(seconds * (0.99 - WARM_UP_SHARE))
    end = rss_kib(pid)
    tally = await run
    await asyncio.sleep(settle_s)
    return PhaseReport(name, rate, seconds, tally, warm, end, fds_start, open_fds(pid))


async def soak(args: argparse.Namespace) -> list[PhaseReport]:
    rng = random.Random(args.seed)
    pods = [
        {"name": f"h100-{i}", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL}
        for i in range(args.pods)
    ]
    spec = FleetSpec.from_mapping({"time_scale": args.time_scale, "seed": args.seed, "pods": pods})
    reports: list[PhaseReport] = []
    with tempfile.TemporaryDirectory(prefix="igw-soak-") as tmp:
        async with (
            run_fleet(spec, admin=False) as fleet,
            gateway_process(Path(tmp), [p.key for p in fleet.pods], args.log or Path(tmp) / "gw.log") as (
                base,
                pid,
            ),
        ):
            url = base + "/v1/completions"
            fds = open_fds(pid)
            calib = await closed_loop(
                url, seconds=args.calibrate_seconds, concurrency=args.concurrency, rng=rng
            )
            capacity = calib.ok / args.calibrate_seconds
            await asyncio.sleep(args.settle_seconds)
            rss = rss_kib(pid)
            reports.append(
                PhaseReport(
                    "calibrate", capacity, args.calibrate_seconds, calib, rss, rss, fds, open_fds(pid)
                )
            )
            for name, share in (("steady 80%", 0.8), ("overload 150%", 1.5)):
                seconds = args.minutes * 60
                rate = capacity * share
                phase = await _phase(
                    name, url, pid, rate=rate, seconds=seconds, settle_s=args.settle_seconds, rng=rng
                )
                reports.append(phase)
    return reports


def render(reports: list[PhaseReport]) -> str:
    lines = [
        "| phase | rate (req/s) | sent | ok | 429 | lost | p50 ms | p99 ms "
        "| RSS warm→end MiB (growth) | fds before→after (idle) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        lat = sorted(r.tally.latencies_ms)
        p50 = statistics.median(lat) if lat else 0.0
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
        lines.append(
            f"| {r.name} | {r.rate_rps:.1f} | {r.tally.sent} | {r.tally.ok} | {r.tally.rejected} | "
            f"{r.tally.lost} | {p50:.0f} | {p99:.0f} "
            f"| {r.rss_warm_kib / 1024:.1f}→{r.rss_end_kib / 1024:.1f} ({r.rss_growth:+.1%}) "
            f"| {r.fds_start}→{r.fds_end} |"
        )
    lost = {k: v for r in reports for k, v in r.tally.lost_reasons.items()}
    if lost:
        lines.append(f"lost by reason: {orjson.dumps(lost).decode()}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    reports = asyncio.run(soak(args))
    print(render(reports))
    load = reports[1:]
    failed = [
        f"{r.name}: {problem}"
        for r in load
        for problem in (
            f"{r.tally.lost} lost requests" if r.tally.lost else "",
            f"RSS grew {r.rss_growth:.1%}" if r.rss_growth >= RSS_GROWTH_LIMIT else "",
            f"{r.fd_growth} more file descriptors" if r.fd_growth > FD_SLACK else "",
        )
        if problem
    ]
    for problem in failed:
        print(f"FAIL {problem}")
    return 1 if failed else 0
