"""``igw perf workers``: throughput of ``igw serve --workers N`` against one worker, in one run.

One near-free backend process; one ``igw serve`` group per worker count in front of it (all started
once, so the rounds alternate between them under the same machine load); a closed-loop client at a
fixed concurrency on keep-alive connections (the kernel spreads the connections over the workers).
Per worker count: requests/s, the gateway group's CPU per request (parent and workers, user + system
from ``/proc``), the share of a core the gateway group and the load generator used, and the
throughput ratio to the first worker count. Everything shares this machine's cores: when the
load generator and the backend take a large share, the ratio measures the machine, not the gateway,
so the CPU columns are printed with it. When the load shares the workers' cores it runs under
``SCHED_BATCH`` by default (``--load-policy``, :mod:`igw.perf.load_policy`), so that it takes its
share of the cores without preempting a worker in the middle of a request; each worker's context
switches per request are printed, so a reader sees whether preemption is in a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from igw.perf import load_policy, raw_http
from igw.perf.gateway_load import (
    GATEWAY_LOG_NAME,
    PROMPT,
    backend_process,
    closed_loop,
    cpu_seconds,
    gateway_process,
    group_cpu,
    group_pids,
    wait_all_workers,
    wait_ready,
)
from igw.perf.wrk_load import WrkError, run_wrk, script, wrk_binary

CONNECTIONS_SAMPLE_S = 0.2
"""When into a phase the connections per worker are counted (all are open by then)."""

HELP = "Throughput of igw serve --workers N vs 1 worker: requests/s and CPU per request, one run."


def runqueue_wait_s(pid: int) -> float:
    """Seconds ``pid``'s threads have waited, runnable, for a CPU (``/proc/<pid>/task/*/schedstat``):
    a worker that answers few requests while using little CPU either waited for a core (this
    grows) or for something else (it does not)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def worker_cpu(parent: int) -> dict[int, float]:
    """CPU seconds of each process serving requests: the workers of a ``--workers N`` group (N > 1),
    else the single gateway process itself."""
    pids = group_pids(parent)
    serving = pids[1:] or pids
    out: dict[int, float] = {}
    for pid in serving:
        with contextlib.suppress(OSError):
            out[pid] = cpu_seconds(pid)
    return out


def connections_by_pid(pids: Sequence[int], port: int) -> dict[int, int]:
    """Established TCP connections on local ``port`` that each of ``pids`` holds (from ``/proc``):
    how the kernel's ``SO_REUSEPORT`` hash spread the load generator's connections."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{inode}]")
    out: dict[int, int] = {}
    for pid in pids:
        count = 0
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    count += os.readlink(fd) in inodes
        out[pid] = count
    return out


def requests_by_worker(page: str) -> dict[str, float]:
    """``igw_requests_total`` summed per ``worker`` label of a ``/metrics`` page (one process: ``"0"``)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "igw_requests_total":
                worker = sample.labels.get("worker", "0")
                out[worker] = out.get(worker, 0.0) + sample.value
    return out


def answered_per_worker(
    before: Mapping[str, float], after: Mapping[str, float], *, workers: int
) -> tuple[float, ...]:
    """Per worker index, the requests it answered between two :func:`requests_by_worker` readings:
    every worker, one without a series (it has answered nothing yet) as 0, so the per-worker columns
    stay aligned with the serving processes (a CI run's 2-worker phase, all four connections on one
    worker, printed one worker's switches per request for two)."""
    indices = sorted({*after, *map(str, range(workers))}, key=int)
    return tuple(after.get(w, 0.0) - before.get(w, 0.0) for w in indices)


async def _worker_requests(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(f"http://{base}/metrics") as response:
        return requests_by_worker(await response.text())


def pin(pid: int, cpus: set[int]) -> None:
    """Restrict ``pid`` (0: this process) to ``cpus``."""
    os.sched_setaffinity(pid, cpus)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How a phase's load is made: which generator, how much, and at what concurrency."""

    kind: str
    """``raw``, ``aiohttp`` (in this process) or ``wrk`` (a process per phase)."""
    concurrency: int
    requests: int
    """Requests per phase (``raw``, ``aiohttp``)."""
    seconds: int
    """Length of a phase (``wrk``, which runs for a time, not a count)."""
    wrk_script: Path | None = None
    preexec: Callable[[], None] | None = None
    """Run in the wrk process before it starts (its scheduling policy)."""


@dataclass(frozen=True, slots=True)
class LoadRun:
    requests: int
    wall_s: float
    process_cpu_s: float
    """CPU of a load-generator process (wrk); 0 for the generators running in this process."""


@dataclass(frozen=True, slots=True)
class Phase:
    workers: int
    requests: int
    wall_s: float
    gateway_cpu_s: float
    client_cpu_s: float
    backend_cpu_s: float
    worker_cpu_s: tuple[float, ...]
    """Per serving process (sorted by pid: worker 0 first), the CPU seconds it used in the phase."""
    worker_requests: tuple[float, ...]
    """Per worker index, the requests it answered in the phase (its ``igw_requests_total``)."""
    worker_wait_s: tuple[float, ...]
    """Per serving process (as ``worker_cpu_s``), the seconds it waited for a CPU in the phase."""
    worker_connections: tuple[int, ...]
    """Per serving process, the load generator's connections it held early in the phase (empty
    when the phase ended before the sample)."""
    worker_switches: tuple[tuple[int, int], ...] = ()
    """Per serving process (as ``worker_cpu_s``), its ``(voluntary, involuntary)`` context switches
    in the phase, all threads."""
    load_policies: frozenset[str] = frozenset()
    """The scheduling policies of the load's threads (this process, its other children than the
    gateway: the backend and a wrk) early in the phase, read back from the kernel."""
    gateway_policies: frozenset[str] = frozenset()
    """The same for the gateway's serving processes."""

    def switches_per_request(self) -> tuple[tuple[float, float], ...]:
        """Per serving process, ``(voluntary, involuntary)`` switches per request it answered (0 for
        a worker that answered none)."""
        return tuple(
            (v / answered, i / answered) if answered else (0.0, 0.0)
            for (v, i), answered in zip(self.worker_switches, self.worker_requests, strict=False)
        )

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    @property
    def us_per_request(self) -> float:
        return self.gateway_cpu_s / self.requests * 1e6


async def _load(base: str, load: LoadSettings, *, warm_up: bool = False) -> LoadRun:
    """Run one closed-loop phase against ``base`` (a short one with ``warm_up``)."""
    concurrency, requests = load.concurrency, max(50, load.requests // 10) if warm_up else load.requests
    if load.kind == "wrk":
        assert load.wrk_script is not None
        seconds = 1 if warm_up else load.seconds
        ran = await run_wrk(
            base, concurrency=concurrency, seconds=seconds, script_path=load.wrk_script, preexec=load.preexec
        )
        return LoadRun(requests=ran.requests, wall_s=ran.wall_s, process_cpu_s=ran.cpu_s)
    if load.kind == "aiohttp":
        wall_s = (await closed_loop(base, concurrency=concurrency, requests=requests)).wall_s
        return LoadRun(requests=requests, wall_s=wall_s, process_cpu_s=0.0)
    template = b'{"model":"fake-model","max_tokens":4,"prompt":"' + PROMPT.encode() + b'question %d"}'

    def request_for(i: int) -> bytes:
        return raw_http.completion_request(base, template % i)

    result = await raw_http.closed_loop(
        base, concurrency=concurrency, requests=requests, request_for=request_for
    )
    return LoadRun(requests=requests, wall_s=result.wall_s, process_cpu_s=0.0)


def _policies(not_load: Collection[int], serving: Sequence[int]) -> tuple[frozenset[str], frozenset[str]]:
    """The scheduling policies of the load's threads (this process and its children other than
    ``not_load``: the gateway groups and any child this process had before the benchmark, e.g. a
    server another test of the same session started - leaving the backend and a running wrk) and of
    the gateway's ``serving`` processes."""
    own = group_pids(os.getpid())
    load = set(load_policy.thread_policies(own[0]))
    for pid in own[1:]:
        if pid not in not_load:
            load |= load_policy.thread_policies(pid)
    gateway: set[str] = set()
    for pid in serving:
        gateway |= load_policy.thread_policies(pid)
    return frozenset(load), frozenset(gateway)


async def _phase(
    base: str,
    parent: int,
    backend_pid: int,
    *,
    workers: int,
    load: LoadSettings,
    not_load: Collection[int] = (),
) -> Phase:
    r0 = await _worker_requests(base)
    w0 = worker_cpu(parent)
    q0 = {pid: runqueue_wait_s(pid) for pid in w0}
    s0 = {pid: load_policy.context_switches(pid) for pid in w0}
    g0, c0, b0 = group_cpu(parent), _own_cpu(), cpu_seconds(backend_pid)
    running = asyncio.create_task(_load(base, load))
    await asyncio.sleep(CONNECTIONS_SAMPLE_S)
    held = {} if running.done() else connections_by_pid(sorted(w0), int(base.rsplit(":", 1)[1]))
    load_policies, gateway_policies = _policies(not_load, sorted(w0))
    ran = await running
    g1, c1, b1 = group_cpu(parent), _own_cpu(), cpu_seconds(backend_pid)
    w1 = worker_cpu(parent)
    q1 = {pid: runqueue_wait_s(pid) for pid in w1}
    s1 = {pid: load_policy.context_switches(pid) for pid in w1}
    r1 = await _worker_requests(base)
    return Phase(
        workers=workers,
        requests=ran.requests,
        wall_s=ran.wall_s,
        gateway_cpu_s=g1 - g0,
        client_cpu_s=c1 - c0 + ran.process_cpu_s,
        backend_cpu_s=b1 - b0,
        worker_cpu_s=tuple(w1[pid] - w0.get(pid, 0.0) for pid in sorted(w1)),
        worker_requests=answered_per_worker(r0, r1, workers=workers),
        worker_wait_s=tuple(q1[pid] - q0.get(pid, 0.0) for pid in sorted(q1)),
        worker_connections=tuple(held[pid] for pid in sorted(held)),
        worker_switches=tuple(
            (s1[pid][0] - s0.get(pid, (0, 0))[0], s1[pid][1] - s0.get(pid, (0, 0))[1]) for pid in sorted(s1)
        ),
        load_policies=load_policies,
        gateway_policies=gateway_policies,
    )


async def _measure(
    bases: dict[int, tuple[str, int]],
    backend_pid: int,
    *,
    load: LoadSettings,
    rounds: int,
    gateway_cpus: Sequence[int] = (),
    started: Mapping[int, tuple[subprocess.Popen[bytes], Path]] | None = None,
) -> list[Phase]:
    for n, (base, pid) in bases.items():
        proc, log_path = started[n] if started is not None else (None, None)
        await wait_ready(base, within_s=120, proc=proc, log_path=log_path)
        if n > 1:
            await wait_all_workers(base, n, within_s=120)
        if gateway_cpus:
            # One core per worker, in order (a single worker: the first core).
            for i, serving in enumerate(sorted(worker_cpu(pid))):
                pin(serving, {gateway_cpus[i % len(gateway_cpus)]})
        await _load(base, load, warm_up=True)
    phases = []
    # Not the load: the gateway groups, and whatever else this process runs besides the backend (no
    # wrk runs between phases), such as a test session's own servers.
    not_load = set(group_pids(os.getpid())[1:]) - {backend_pid}
    not_load.update(pid for _base, pid in bases.values())
    for _ in range(rounds):
        for n, (base, pid) in bases.items():
            phases.append(await _phase(base, pid, backend_pid, workers=n, load=load, not_load=not_load))
    return phases


def run(args: argparse.Namespace) -> int:
    if args.load == "wrk":
        try:
            wrk_binary()
        except WrkError as exc:
            print(f"igw perf workers: {exc}")
            return 2
    per_phase = f"{args.seconds} s" if args.load == "wrk" else f"{args.requests} requests"
    generator = {
        "raw": "raw load generator and backend",
        "aiohttp": "aiohttp load generator and backend",
        "wrk": "wrk load generator (one thread), raw backend",
    }[args.load]
    print(
        f"closed loop, concurrency {args.concurrency}, {per_phase} per phase, "
        f"{args.rounds} rounds alternating worker counts {','.join(map(str, args.workers))}, {generator}"
    )
    if args.gateway_cpus or args.load_cpus:
        print(
            f"pinned: gateway workers one each on CPUs {_cpus(args.gateway_cpus)}, load generator and "
            f"backend on CPUs {_cpus(args.load_cpus)}"
        )
    policy = args.load_policy or load_policy.default_policy(args.gateway_cpus, args.load_cpus)
    chosen = "--load-policy" if args.load_policy else "default: the load shares the workers' cores"
    if not args.load_policy and policy == "normal":
        chosen = "default: the load has CPUs of its own"
    print(
        f"load policy: {policy} ({chosen}): load generator and backend under "
        f"{load_policy.NAMES[load_policy.POLICIES[policy]]}, the gateway under its own (inherited) policy"
    )
    preexec = load_policy.at_spawn(policy)
    if args.gateway_tree is not None:
        print(f"gateway: igw from {args.gateway_tree} (the harness: igw from {Path(__file__).parents[2]})")
    raw = args.load != "aiohttp"
    with contextlib.ExitStack() as stack:
        backend, backend_proc = stack.enter_context(
            backend_process(chunks=4, interval=0.0, raw=raw, preexec=preexec)
        )
        if backend_proc.stdout is not None:
            stack.callback(backend_proc.stdout.close)  # its PORT line is read; nothing else comes
        if args.load_cpus:
            pin(0, set(args.load_cpus))
            pin(backend_proc.pid, set(args.load_cpus))
        bases: dict[int, tuple[str, int]] = {}
        started: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
        for n in args.workers:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"igw-perf-w{n}-")))
            base, proc = stack.enter_context(
                gateway_process(
                    workdir,
                    backend=backend,
                    args=("--workers", str(n), "--drain-seconds", "0", "--log-level", "warning"),
                    source=args.gateway_tree,
                )
            )
            bases[n] = (base, proc.pid)
            started[n] = (proc, workdir / GATEWAY_LOG_NAME)
        # This process drives the raw and aiohttp loads itself: the policy too, now that the gateways
        # (which would inherit it) are started.
        stack.enter_context(load_policy.process_policy(policy))
        wrk_script = None
        if args.load == "wrk":
            scripts = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="igw-perf-wrk-")))
            wrk_script = scripts / "completions.lua"
            wrk_script.write_text(script(PROMPT))
        load = LoadSettings(
            kind=args.load,
            concurrency=args.concurrency,
            requests=args.requests,
            seconds=args.seconds,
            wrk_script=wrk_script,
            preexec=preexec,
        )
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
                    load=load,
                    rounds=args.rounds,
                    gateway_cpus=args.gateway_cpus,
                    started=started,
                )
            )
    print(
        f"{'workers':>7} {'req/s':>8} {'CPU/req':>10} {'gateway cores':>13} {'client cores':>12} "
        f"{'backend cores':>13}"
    )
    for p in phases:
        cores = "/".join(f"{c / p.wall_s:.2f}" for c in p.worker_cpu_s)
        answered = "/".join(f"{r:.0f}" for r in p.worker_requests)
        held = "/".join(map(str, p.worker_connections)) or "-"
        waited = "/".join(f"{q / p.wall_s:.2f}" for q in p.worker_wait_s)
        per_request = p.switches_per_request()
        involuntary = "/".join(f"{i:.2f}" for _v, i in per_request)
        voluntary = "/".join(f"{v:.2f}" for v, _i in per_request)
        print(
            f"{p.workers:>7} {p.rps:>8.0f} {p.us_per_request:>7.0f} µs {p.gateway_cpu_s / p.wall_s:>13.2f} "
            f"{p.client_cpu_s / p.wall_s:>12.2f} {p.backend_cpu_s / p.wall_s:>13.2f}   "
            f"per worker: cores {cores}, waiting for a core {waited}, requests {answered}, "
            f"connections {held}, switches per request involuntary {involuntary} voluntary {voluntary}"
        )
    load_seen = sorted(set().union(*(p.load_policies for p in phases)))
    gateway_seen = sorted(set().union(*(p.gateway_policies for p in phases)))
    print(
        f"scheduling policies read back during the phases: load {', '.join(load_seen)}; "
        f"gateway {', '.join(gateway_seen)}"
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
    if any(p.gateway_cpu_s <= 0 for p in phases):
        # /proc counts CPU in clock ticks (10 ms): a phase shorter than a tick of gateway CPU reads 0
        print("requests per gateway CPU-second: not measurable (a phase used less than one clock tick)")
        return 0
    per_core = {
        n: statistics.median(p.requests / p.gateway_cpu_s for p in phases if p.workers == n)
        for n in args.workers
    }
    for n in args.workers[1:]:
        print(
            f"requests per gateway CPU-second {n} vs {first} worker(s) (median): {per_core[n]:.0f} / "
            f"{per_core[first]:.0f} = {per_core[n] / per_core[first]:.2f}× (the gateway's own scaling "
            "efficiency; not the target, which is throughput)"
        )
    return 0


def _cpus(cpus: Sequence[int]) -> str:
    return ",".join(map(str, cpus)) if cpus else "any"
