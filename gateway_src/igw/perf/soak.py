"""``igw perf soak``: run ``igw serve`` for a long time in front of a simulated fleet and check that
it neither loses requests nor leaks memory or file descriptors.

The load generator (this process), ``igw serve`` and the simulated fleet (``igw sim fleet``) run as
three processes, so a pause in one cannot stall the others' event loops. Phases, all against the
same gateway process:

1. *calibrate*: a closed loop of many concurrent clients measures what the fleet completes per
   second (its capacity; also warms every pool and cache);
2. *steady*: open-loop (Poisson) arrivals at 80 % of that capacity for ``--minutes``;
3. *overload*: arrivals at 150 % for ``--overload-minutes`` (default ``--minutes``): the gateway
   must answer the excess with fast 429s.

A request is *lost* when it gets neither a complete 2xx answer nor a 429 with ``Retry-After``: a 5xx,
a connection error, a broken stream or no answer at all. The gateway's open file descriptors are
counted before and after each phase once idle connections have closed.

Memory: every prompt is unique, so the scheduler's prefix index - one LRU of block hashes per pod,
sized to that pod's KV cache (``num_gpu_blocks``) - keeps growing until it is full, and its hash
tables take their final size only after about one more turnover of entries (a table that sees
deletions is rebuilt once at a larger size). That is bounded state filling up, not a leak, but it
would hide one. The soak therefore tracks, from the answers (the simulator names the pod in each
response id), how many prefix blocks each pod's index has been sent relative to its capacity (the
*fill*, ``2.0x`` = filled and turned over once), samples the gateway's resident memory every
:data:`SAMPLE_S`, and measures a phase's RSS growth from its *baseline* - the first sample at least
:data:`WARM_UP_SHARE` into the phase at which every pod's fill is at least :data:`STEADY_FILL` - to
its end, both under the phase's load. The report prints the fill at both points and RSS at each
tenth of the phase, so a reader sees where steady state begins.

The command exits 1 when a request was lost, RSS grew by 5 % or more from a baseline to the end of
a phase, a phase never reached steady state (its growth is then measured from the warm-up point and
flagged), or the descriptor count grew by more than :data:`FD_SLACK`.
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

from igw.errors import IgwToolingError
from igw.perf.fleet_process import fleet_process
from igw.perf.serve_process import serve_process
from igw.scheduling.plugins.prefix_cache_scorer import CHARS_PER_TOKEN
from igw.scheduling.plugins.prefix_index import DEFAULT_MAX_BLOCKS
from igw.sim.presets import get_preset
from igw.sim.spec import FleetSpec

HELP = "Endurance: igw serve at 80 % then 150 % of the simulated fleet's capacity; lost requests, RSS, fds."
MODEL: Final = "soak-model"
PRESET: Final = "llama-3.1-8b/h100"
FD_SLACK: Final = 32
RSS_GROWTH_LIMIT: Final = 0.05
REQUEST_TIMEOUT_S: Final = 120.0
WARM_UP_SHARE: Final = 0.2
"""A phase's RSS baseline is taken no earlier than this share into it (its load has built up)."""
STEADY_FILL: Final = 2.0
"""Prefix blocks sent to each pod, in multiples of its index capacity, after which the index and its
hash tables have their final size (filled once, then turned over once)."""
SAMPLE_S: Final = 10.0
"""Seconds between RSS samples during a load phase."""
SETTLE_S: Final = 65.0
"""Idle wait before counting descriptors: aiohttp closes pooled upstream connections idle for 30 s
on a timer with the same period, so up to 60 s after their last use."""


class SoakError(IgwToolingError, RuntimeError):
    """The soak cannot go on (``igw perf`` prints it, exit 1)."""


@dataclass(slots=True)
class Tally:
    sent: int = 0
    ok: int = 0
    rejected: int = 0
    lost: int = 0
    lost_reasons: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    in_flight: int = 0
    """Requests sent and not yet answered, right now."""

    def lose(self, reason: str) -> None:
        self.lost += 1
        self.lost_reasons[reason] = self.lost_reasons.get(reason, 0) + 1


@dataclass(slots=True)
class PrefixFill:
    """Prefix blocks each pod's index has been sent, counted from the answers (module docstring).

    The gateway auto-tunes each pod's index to the ``num_gpu_blocks`` and block size the simulator
    publishes for the preset, and records the prompt's blocks (at most ``maxPrefixBlocksToMatch``)
    for the pod it picked; every prompt here is unique, so each block is a new entry.
    """

    pods: tuple[str, ...]
    capacity: int
    block_chars: int
    sent: dict[str, int] = field(default_factory=dict)

    @classmethod
    def for_fleet(cls, pods: tuple[str, ...], preset_key: str) -> PrefixFill:
        preset = get_preset(preset_key)
        return cls(pods, capacity=preset.num_gpu_blocks, block_chars=preset.block_size * CHARS_PER_TOKEN)

    def record(self, payload: bytes, *, stream: bool, prompt: str) -> None:
        pod = served_by(payload, stream=stream)
        if pod is not None:
            blocks = min(len(prompt.encode()) // self.block_chars, DEFAULT_MAX_BLOCKS)
            self.sent[pod] = self.sent.get(pod, 0) + blocks

    def level(self) -> float:
        """The least-filled pod's blocks sent, in multiples of its capacity."""
        return min(self.sent.get(pod, 0) for pod in self.pods) / max(1, self.capacity)


def served_by(payload: bytes, *, stream: bool) -> str | None:
    """The simulated pod named in a completion's id (``cmpl-<pod>-<n>``), or ``None``."""
    try:
        if stream:
            first = next(line for line in payload.splitlines() if line.startswith(b"data: {"))
            document = orjson.loads(first.removeprefix(b"data: "))
        else:
            document = orjson.loads(payload)
        rid = str(document["id"])
    except (StopIteration, orjson.JSONDecodeError, KeyError, TypeError):
        return None
    _, _, rest = rid.partition("-")
    pod, _, _ = rest.rpartition("-")
    return pod or None


@dataclass(frozen=True, slots=True)
class RssSample:
    at_s: float
    """Seconds into the phase."""
    rss_kib: int
    fill: float
    """:meth:`PrefixFill.level` at that moment."""
    in_flight: int = 0
    """Requests in flight at that moment (the gateway holds memory for each)."""


@dataclass(slots=True)
class PhaseReport:
    name: str
    rate_rps: float
    seconds: float
    tally: Tally
    samples: list[RssSample]
    """Resident memory every :data:`SAMPLE_S` (or a tenth of the phase) under the phase's load."""
    fds_start: int
    fds_end: int
    """Open descriptors before the phase and after it, each once idle connections have closed."""
    load_average: tuple[float, float, float]
    """The machine's 1/5/15-minute load average at the end of the phase's arrivals."""

    @property
    def warm(self) -> RssSample:
        """The first sample at least :data:`WARM_UP_SHARE` into the phase."""
        return next((s for s in self.samples if s.at_s >= self.seconds * WARM_UP_SHARE), self.samples[-1])

    @property
    def baseline(self) -> RssSample | None:
        """The first sample from :attr:`warm` on at which every pod's fill reached :data:`STEADY_FILL`."""
        return next((s for s in self.samples if s.at_s >= self.warm.at_s and s.fill >= STEADY_FILL), None)

    @property
    def end(self) -> RssSample:
        return self.samples[-1]

    @property
    def rss_growth(self) -> float:
        """From :attr:`baseline` (else :attr:`warm`) to the end of the phase."""
        start = self.baseline or self.warm
        return (self.end.rss_kib - start.rss_kib) / max(1, start.rss_kib)

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


async def _one(
    http: aiohttp.ClientSession, url: str, body: dict[str, object], tally: Tally, fill: PrefixFill
) -> None:
    tally.sent += 1
    tally.in_flight += 1
    t0 = time.perf_counter()
    stream = bool(body["stream"])
    try:
        async with http.post(url, json=body) as resp:
            payload = await resp.read()
            if resp.status == 429 and "Retry-After" in resp.headers:
                tally.rejected += 1
            elif resp.status != 200:
                tally.lose(f"HTTP {resp.status}")
            elif stream and (not payload.rstrip().endswith(b"[DONE]") or b'"error"' in payload):
                tally.lose("broken stream")
            else:
                tally.ok += 1
                tally.latencies_ms.append((time.perf_counter() - t0) * 1000)
                fill.record(payload, stream=stream, prompt=str(body["prompt"]))
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.lose(type(exc).__name__)
    finally:
        tally.in_flight -= 1


async def closed_loop(
    url: str, *, seconds: float, concurrency: int, rng: random.Random, fill: PrefixFill
) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:

        async def client() -> None:
            while time.monotonic() < deadline:
                await _one(http, url, _body(rng, tally.sent), tally, fill)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return tally


async def open_loop(
    url: str, *, rate: float, seconds: float, rng: random.Random, fill: PrefixFill, tally: Tally
) -> Tally:
    """Poisson arrivals at ``rate`` per second; waits for every request to finish or time out."""
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        start = time.monotonic()
        due = start
        i = 0
        while due < start + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            task = asyncio.create_task(_one(http, url, _body(rng, i), tally, fill))
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
    name: str,
    url: str,
    pid: int,
    *,
    rate: float,
    seconds: float,
    settle_s: float,
    rng: random.Random,
    fill: PrefixFill,
) -> PhaseReport:
    fds_start = open_fds(pid)
    start = time.monotonic()
    tally = Tally()
    run = asyncio.create_task(open_loop(url, rate=rate, seconds=seconds, rng=rng, fill=fill, tally=tally))
    interval = min(SAMPLE_S, seconds / 10)
    last = seconds * 0.99  # the final sample, still under the phase's load
    samples: list[RssSample] = []
    while (elapsed := time.monotonic() - start) < last:
        await asyncio.sleep(min(interval, last - elapsed))
        samples.append(RssSample(time.monotonic() - start, rss_kib(pid), fill.level(), tally.in_flight))
    load = os.getloadavg()
    await run
    await asyncio.sleep(settle_s)
    return PhaseReport(name, rate, seconds, tally, samples, fds_start, open_fds(pid), load)


async def soak(args: argparse.Namespace) -> list[PhaseReport]:
    rng = random.Random(args.seed)
    names = tuple(f"h100-{i}" for i in range(args.pods))
    pods = [{"name": name, "preset": PRESET, "served_model_name": MODEL} for name in names]
    spec = {"time_scale": args.time_scale, "seed": args.seed, "pods": pods}
    FleetSpec.from_mapping(spec)  # a bad spec fails here, before any process starts
    fill = PrefixFill.for_fleet(names, PRESET)
    reports: list[PhaseReport] = []
    with tempfile.TemporaryDirectory(prefix="igw-soak-") as tmp:
        async with (
            fleet_process(spec, Path(tmp)) as endpoints,
            gateway_process(Path(tmp), endpoints, args.log or Path(tmp) / "gw.log") as (
                base,
                pid,
            ),
        ):
            url = base + "/v1/completions"
            fds = open_fds(pid)
            calib = await closed_loop(
                url, seconds=args.calibrate_seconds, concurrency=args.concurrency, rng=rng, fill=fill
            )
            if not calib.ok:
                raise SoakError(no_capacity(calib, args.calibrate_seconds))
            capacity = calib.ok / args.calibrate_seconds
            load = os.getloadavg()
            await asyncio.sleep(args.settle_seconds)
            sample = RssSample(args.calibrate_seconds, rss_kib(pid), fill.level())
            reports.append(
                PhaseReport(
                    "calibrate", capacity, args.calibrate_seconds, calib, [sample], fds, open_fds(pid), load
                )
            )
            overload_minutes = args.overload_minutes if args.overload_minutes is not None else args.minutes
            for name, share, minutes in (
                ("steady 80%", 0.8, args.minutes),
                ("overload 150%", 1.5, overload_minutes),
            ):
                phase = await _phase(
                    name,
                    url,
                    pid,
                    rate=capacity * share,
                    seconds=minutes * 60,
                    settle_s=args.settle_seconds,
                    rng=rng,
                    fill=fill,
                )
                reports.append(phase)
    return reports


def no_capacity(calib: Tally, seconds: float) -> str:
    """Why the load phases cannot run after a calibration that answered nothing: their arrival rate
    is a share of the calibrated capacity, so a capacity of 0 ended the steady phase in a
    ZeroDivisionError traceback (``expovariate(0)``) after the whole calibration (before session s50)."""
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(calib.lost_reasons.items()))
    return (
        f"no request answered in the {seconds:g} s calibration: {calib.sent} sent, "
        f"{calib.rejected} refused with 429, {calib.lost} lost{f' ({reasons})' if reasons else ''}; "
        "the load phases run at a share of the answered rate (see the gateway's log, --log)"
    )


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def render(reports: list[PhaseReport]) -> str:
    lines = [
        "| phase | minutes | rate (req/s) | sent | ok | 429 | lost | p50 ms | p99 ms "
        "| prefix fill baseline→end | RSS baseline→end MiB (growth) | fds before→after (idle) "
        "| load avg 1/5/15 min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        lat = sorted(r.tally.latencies_ms)
        p50 = statistics.median(lat) if lat else 0.0
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
        start = r.baseline or r.warm
        marker = "" if r.baseline is not None or r.name == "calibrate" else " (not steady)"
        lines.append(
            f"| {r.name} | {r.seconds / 60:.1f} | {r.rate_rps:.1f} | {r.tally.sent} | {r.tally.ok} "
            f"| {r.tally.rejected} | {r.tally.lost} | {p50:.0f} | {p99:.0f} "
            f"| {start.fill:.2f}x→{r.end.fill:.2f}x "
            f"| {_mib(start.rss_kib)}→{_mib(r.end.rss_kib)} ({r.rss_growth:+.1%}){marker} "
            f"| {r.fds_start}→{r.fds_end} | {'/'.join(f'{x:.1f}' for x in r.load_average)} |"
        )
    for r in reports[1:]:
        tenths = [r.samples[min(len(r.samples) - 1, len(r.samples) * k // 10)] for k in range(10)]
        tenths.append(r.end)
        trace = " ".join(f"{_mib(s.rss_kib)}@{s.fill:.2f}x/{s.in_flight}" for s in tenths)
        lines.append(
            f"{r.name}: RSS MiB @ prefix fill / requests in flight, each tenth of the phase: {trace}"
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
            f"prefix index never reached steady state (fill {r.end.fill:.1f}x < {STEADY_FILL:g}x)"
            if r.baseline is None
            else "",
            f"{r.fd_growth} more file descriptors" if r.fd_growth > FD_SLACK else "",
        )
        if problem
    ]
    for problem in failed:
        print(f"FAIL {problem}")
    return 1 if failed else 0
