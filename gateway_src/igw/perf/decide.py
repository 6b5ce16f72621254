"""``igw perf decide``: the scheduler's decision cost, against its targets and split by component.

For each pool size it prints the CPU time per pick of the default scheduler driven as the gateway
drives it (:func:`igw.perf.gateway_micro.decision_time`: scrapes landing, completions arriving), its
ratio to the target (100 µs at 16 endpoints, 1 ms at 1,000) and to a random pick over the same
views (the baseline measured in the same run), then where that time goes: every plugin's hook and
the dispatch ledger, each timed on the thread's CPU clock around the real call, the remainder being
the scheduler's own steps (freshness, context-length fit, weighted sums, the decision record).
It also prints the scheduler's outcome path (``on_complete``, once per request when it completes)
and the sum per request: work moved from the pick to the outcome path shortens the request's wait
but not the CPU a request costs, and the sum shows which of the two a change bought.

With ``--runs N`` each size is timed N times: every run's p50 is printed with the spread, and the
verdict is on their median (CPU time per pick still moves with other jobs' cache and core
contention on a shared machine, so one run can mislead). The load average is printed before and
after, and a last line sums up both targets. With ``--profile N`` one more run per size is profiled
(``cProfile`` on the thread CPU clock, only inside ``pick``) and the N functions with the most own
time are listed per pick, with the Python-level calls per pick: the profiler's own cost per call
inflates every row, so the rows compare with each other, not with the p50.

``--prompts`` names the prompt-length workloads to time (:data:`igw.perf.gateway_micro.PROMPT_LENGTHS`,
default ``fixed-300``, every earlier round's): ``fixed-300,azure-conv`` times each size on both, so the
figures show whether 300-token prompts flatter the pick (the prefix scorer hashes and matches every
block of the prompt, up to its cap).

It prints which code it measures (pure Python or mypyc-compiled, :mod:`igw.compiled`); on compiled
code the split is left out, since it replaces methods on instances, which native classes refuse.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from igw.compiled import inspect_tree

if TYPE_CHECKING:
    from igw.scheduling.scheduler import Scheduler

HELP = "Scheduler decision cost: CPU time per pick at 16 and 1,000 endpoints, split by plugin."
DEFAULT_PROMPTS = "fixed-300"
"""Every prompt 300 tokens: the workload of every earlier round (``--prompts`` adds others)."""
TARGETS_US = {16: 100.0, 1000: 1000.0}
"""Issue targets: decision CPU time per pick (p50) by pool size; other sizes are reported only."""


class Breakdown:
    """Accumulated thread CPU seconds per component while it is installed on a scheduler."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def install(self, scheduler: Scheduler) -> None:
        """Wrap every plugin hook a pick calls, and the dispatch ledger's annotation."""
        profile = scheduler.profile
        for ws in profile.scorers:
            self._wrap(ws.scorer, "score", f"score {ws.scorer.name}")
        for f in profile.filters:
            self._wrap(f, "filter", f"filter {f.name}")
        self._wrap(profile.picker, "rank", f"rank {profile.picker.name}")
        for plugin in {id(p): p for p in (*profile.filters, *(ws.scorer for ws in profile.scorers))}.values():
            self._wrap(plugin, "on_picked", "on_picked (all plugins)")
        if scheduler.ledger is not None:
            self._wrap(scheduler.ledger, "annotate", "dispatch ledger annotate")
        self._wrap(scheduler, "pick", "TOTAL")

    def _wrap(self, obj: object, method: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(obj, method)
        seconds = self.seconds

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[label] += time.thread_time() - t0

        setattr(obj, method, timed)


def run(args: argparse.Namespace) -> int:
    runs = max(1, args.runs)
    code = inspect_tree()
    print(f"load average at start: {_load()}")
    print(f"code measured: {code.describe()}")
    summary: list[str] = []
    for endpoints in args.endpoints:
        picks = args.picks or max(300, 48_000 // endpoints)
        for prompts in args.prompts:
            compiled = bool(code.compiled)
            _measure(
                endpoints, picks, prompts, runs=runs, compiled=compiled, profile=args.profile, summary=summary
            )
        views_us, rebuild_us = pool_views_time(endpoints=endpoints, calls=picks)
        print(
            f"  pool views per request (one endpoint changed since the last): {views_us:.1f} µs; "
            f"baseline: a new view per endpoint {rebuild_us:.1f} µs (ratio {views_us / rebuild_us:.2f})"
        )
    print(f"load average at end: {_load()}")
    if summary:
        print("targets (median p50): " + "; ".join(summary))
    return 0


def _measure(
    endpoints: int, picks: int, prompts: str, *, runs: int, compiled: bool, profile: int, summary: list[str]
) -> None:
    """Time one pool size on one prompt-length workload (:data:`PROMPT_LENGTHS`) ``runs`` times and
    print the figures, the verdict and (pure code) the split and profile; the verdict joins ``summary``
    (labelled with the workload unless it is the default)."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.perf.gateway_micro import decision_time

    label = "" if prompts == DEFAULT_PROMPTS else f", {prompts} prompts"
    timings = [decision_time(endpoints=endpoints, picks=picks, prompt_lengths=prompts) for _ in range(runs)]
    p50 = statistics.median(t.p50_us for t in timings)
    t = timings[0]
    target = TARGETS_US.get(endpoints)
    verdict = "(report)" if target is None else ("met" if p50 <= target else "MISSED")
    print(f"scheduler decision, {endpoints} endpoints, {picks} picks{label} (CPU time per pick)")
    for i, run in enumerate(timings, start=1):
        numbered = f"run {i}: " if runs > 1 else ""
        print(f"  {numbered}p50 {run.p50_us:.0f} µs, p99 {run.p99_us:.0f} µs, mean {run.mean_us:.0f} µs")
    if runs > 1:
        low, high = min(x.p50_us for x in timings), max(x.p50_us for x in timings)
        print(f"  p50 over {runs} runs: median {p50:.0f} µs, spread {low:.0f}-{high:.0f} µs")
    print(f"  baseline: {t.baseline} {t.baseline_mean_us:.2f} µs (ratio {t.ratio:.0f}x)")
    outcome = statistics.median(x.outcome_mean_us for x in timings)
    mean = statistics.median(x.mean_us for x in timings)
    print(
        f"  outcome path (on_complete, one per request, off the request's path): mean {outcome:.0f} µs; "
        f"scheduler CPU per request (pick mean + outcome mean) {mean + outcome:.0f} µs"
    )
    if target is not None:
        print(f"  target p50 <= {target:.0f} µs: ratio {p50 / target:.2f}, {verdict}")
        summary.append(f"{endpoints} endpoints{label} {p50:.0f} µs (ratio {p50 / target:.2f}, {verdict})")
    if compiled:
        # Breakdown replaces methods on instances, which compiled (native) classes refuse.
        print("  where a pick's CPU time goes: not measured (compiled classes cannot be wrapped)")
    else:
        _print_breakdown(endpoints=endpoints, picks=picks, prompts=prompts)
    if profile > 0:
        print(f"  profile of the picks (cProfile on the thread CPU clock, top {profile} by own time):")
        for line in pick_profile(endpoints=endpoints, picks=picks, top=profile, prompts=prompts):
            print(f"    {line}")


def _print_breakdown(*, endpoints: int, picks: int, prompts: str = "fixed-300") -> None:
    """One instrumented :func:`decision_time` run, printed as the CPU time per pick of each component."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.perf.gateway_micro import decision_time

    breakdown = Breakdown()
    decision_time(endpoints=endpoints, picks=picks, instrument=breakdown.install, prompt_lengths=prompts)
    total = breakdown.seconds.pop("TOTAL")
    parts = sorted(breakdown.seconds.items(), key=lambda kv: -kv[1])
    rest = total - sum(breakdown.seconds.values())
    print("  where a pick's CPU time goes (mean per pick, instrumented run):")
    for label, seconds in [*parts, ("scheduler's own steps (the rest)", rest)]:
        print(f"    {label:<40} {seconds / picks * 1e6:8.1f} µs  {seconds / total:6.1%}")


def pick_profile(*, endpoints: int, picks: int, top: int, prompts: str = "fixed-300") -> list[str]:
    """One more :func:`decision_time` run with every ``pick`` under ``cProfile`` (thread CPU clock):
    the Python-level function calls per pick, then the ``top`` functions by own time, each with its
    profiled µs and calls per pick (C functions included, named as ``cProfile`` names them)."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.perf.gateway_micro import decision_time

    profiler = cProfile.Profile(time.thread_time)

    def install(scheduler: Scheduler) -> None:
        inner = scheduler.pick

        def profiled(*args: Any, **kwargs: Any) -> Any:
            profiler.enable()
            try:
                return inner(*args, **kwargs)
            finally:
                profiler.disable()

        scheduler.pick = profiled  # type: ignore[method-assign]  # this instance only

    decision_time(endpoints=endpoints, picks=picks, instrument=install, prompt_lengths=prompts)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]  # (file, line, name) -> counts
    rows: list[tuple[float, float, str]] = []
    python_calls = 0
    for (filename, line, name), (_, calls, own_s, _, _) in stats.items():
        if filename != "~":  # "~" marks C functions (built-ins and methods)
            python_calls += calls
            where = f"{filename.rsplit('igw/', 1)[-1]}:{line} {name}"
        else:
            where = name
        rows.append((own_s, calls, where))
    rows.sort(reverse=True)
    lines = [f"Python-level calls per pick: {python_calls / picks:.0f}"]
    for own_s, calls, where in rows[:top]:
        lines.append(f"{own_s / picks * 1e6:7.1f} µs {calls / picks:7.1f} calls  {where}")
    return lines


def pool_views_time(*, endpoints: int, calls: int) -> tuple[float, float]:
    """Mean thread CPU µs of ``EndpointPool.views()`` as the gateway calls it (once per request, one
    endpoint dispatched to since the previous call), and of building every endpoint's view anew from
    the same states (what ``views()`` did before it kept its list): the baseline, same run."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.gateway.endpoints import DiscoveredEndpoint, EndpointPool
    from igw.scheduling.types import EndpointView, EngineMetrics

    pool = EndpointPool()
    pool.replace([DiscoveredEndpoint(f"10.0.{i // 250}.{i % 250}:8000") for i in range(endpoints)])
    for i, state in enumerate(pool.states.values()):
        state.metrics = EngineMetrics(waiting=i % 3, kv_usage=0.3, block_size=16, num_gpu_blocks=27_485)
        state.scraped_at = 1000.0
    states = list(pool.states.values())

    def rebuild() -> list[EndpointView]:
        return [s.new_view() for s in states]

    kept = rebuilt = 0.0
    pool.views()
    for i in range(calls):
        states[i % endpoints].dispatched(400)
        t0 = time.thread_time()
        pool.views()
        t1 = time.thread_time()
        rebuild()
        kept, rebuilt = kept + t1 - t0, rebuilt + time.thread_time() - t1
    return kept / calls * 1e6, rebuilt / calls * 1e6


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (other jobs' share of the machine during the run)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not every platform has one
        return "unknown"
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"
