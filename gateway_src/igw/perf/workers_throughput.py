"""``igw perf workers``: throughput of ``igw serve --workers N`` against one worker, in one run.

One near-free backend process; one ``igw serve`` group per worker count in front of it (all started
once, so the rounds alternate between them under the same machine load); a closed-loop client at a
fixed concurrency on keep-alive connections (the kernel spreads the connections over the workers).
Per worker count: requests/s, the gateway group's CPU per request (parent and workers, user + system
from ``/proc``), the share of a core the gateway group and the load generator used, and the
throughput ratio to the first worker count. Everything shares this machine's cores: when the
load generator and the backend take a large share, the ratio measures the machine, not the gateway,
so the CPU columns are printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from igw.perf import raw_http
from igw.perf.gateway_load import (
    PROMPT,
    backend_process,
    closed_loop,
    cpu_seconds,
    gateway_process,
    wait_ready,
)

HELP = "Throughput of igw serve --workers N vs 1 worker: requests/s and CPU per request, one run."


def group_pids(parent: int) -> list[int]:
    """``parent`` and its child processes (``--workers``: the workers)."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{parent}/task").iterdir():
            children += [int(p) for p in (task / "children").read_text().split()]
    return [parent, *children]


def group_cpu(parent: int) -> float:
    total = 0.0
    for pid in group_pids(parent):
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True, slots=True)
class Phase:
    workers: int
    requests: int
    wall_s: float
    gateway_cpu_s: float
    client_cpu_s: float
    backend_cpu_s: float

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    @property
    def us_per_request(self) -> float:
        return self.gateway_cpu_s / self.requests * 1e6


async def _load(base: str, *, concurrency: int, requests: int, raw: bool) -> float:
    """Run one closed-loop phase against ``base``; its wall time in seconds."""
    if not raw:
        return (await closed_loop(base, concurrency=concurrency, requests=requests)).wall_s
    template = b'{"model":"fake-model","max_tokens":4,"prompt":"' + PROMPT.encode() + b'question %d"}'

    def request_for(i: int) -> bytes:
        return raw_http.completion_request(base, template % i)

    result = await raw_http.closed_loop(
        base, concurrency=concurrency, requests=requests, request_for=request_for
    )
    return result.wall_s


async def _phase(
    base: str, parent: int, backend_pid: int, *, workers: int, concurrency: int, requests: int, raw: bool
) -> Phase:
    g0, c0, b0 = group_cpu(parent), _own_cpu(), cpu_seconds(backend_pid)
    wall_s = await _load(base, concurrency=concurrency, requests=requests, raw=raw)
    return Phase(
        workers=workers,
        requests=requests,
        wall_s=wall_s,
        gateway_cpu_s=group_cpu(parent) - g0,
        client_cpu_s=_own_cpu() - c0,
        backend_cpu_s=cpu_seconds(backend_pid) - b0,
    )


async def _measure(
    bases: dict[int, tuple[str, int]],
    backend_pid: int,
    *,
    concurrency: int,
    requests: int,
    rounds: int,
    raw: bool,
) -> list[Phase]:
    for base, _pid in bases.values():
        await wait_ready(base, within_s=120)
        await _load(base, concurrency=concurrency, requests=max(50, requests // 10), raw=raw)  # warm-up
    phases = []
    for _ in range(rounds):
        for n, (base, pid) in bases.items():
            phases.append(
                await _phase(
                    base, pid, backend_pid, workers=n, concurrency=concurrency, requests=requests, raw=raw
                )
            )
    return phases


def run(args: argparse.Namespace) -> int:
    print(
        f"closed loop, concurrency {args.concurrency}, {args.requests} requests per phase, "
        f"{args.rounds} rounds alternating worker counts {','.join(map(str, args.workers))}, "
        f"{args.load} load generator and backend"
    )
    raw = args.load == "raw"
    with contextlib.ExitStack() as stack:
        backend, backend_proc = stack.enter_context(backend_process(chunks=4, interval=0.0, raw=raw))
        if backend_proc.stdout is not None:
            stack.callback(backend_proc.stdout.close)  # its PORT line is read; nothing else comes
        bases: dict[int, tuple[str, int]] = {}
        for n in args.workers:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"igw-perf-w{n}-")))
            base, proc = stack.enter_context(
                gateway_process(
                    workdir,
                    backend=backend,
                    args=("--workers", str(n), "--drain-seconds", "0", "--log-level", "warning"),
                )
            )
            bases[n] = (base, proc.pid)
        try:
            # deferred: optional speed-up: uvloop (gateway extra), plain asyncio without it
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            loop_factory = None
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            phases = runner.run(
                _measure(
                    bases,
                    backend_proc.pid,
                    concurrency=args.concurrency,
                    requests=args.requests,
                    rounds=args.rounds,
                    raw=raw,
                )
            )
    print(
        f"{'workers':>7} {'req/s':>8} {'CPU/req':>10} {'gateway cores':>13} {'client cores':>12} "
        f"{'backend cores':>13}"
    )
    for p in phases:
        print(
            f"{p.workers:>7} {p.rps:>8.0f} {p.us_per_request:>7.0f} µs {p.gateway_cpu_s / p.wall_s:>13.2f} "
            f"{p.client_cpu_s / p.wall_s:>12.2f} {p.backend_cpu_s / p.wall_s:>13.2f}"
        )
    median = {n: statistics.median(p.rps for p in phases if p.workers == n) for n in args.workers}
    first = args.workers[0]
    for n in args.workers[1:]:
        ratio = median[n] / median[first]
        verdict = "met" if ratio >= 1.7 else "missed"
        print(
            f"throughput {n} vs {first} worker(s) (median over rounds): "
            f"{median[n]:.0f} / {median[first]:.0f} req/s = {ratio:.2f}× (target 1.7× for 2 vs 1: {verdict})"
        )
    return 0
