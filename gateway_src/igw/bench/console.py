"""Side-by-side tables on the terminal (rich), shared by ``igw bench`` and ``igw demo``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from rich.markup import escape
from rich.table import Table

from igw.bench.report import format_pct, format_value, requests_per_seed
from igw.bench.results import ScenarioRun, failed_requests

PLAIN_PROGRESS_EVERY_S = 10.0
"""At most one progress line per this many seconds where the output is not a terminal."""


class PlainProgress:
    """Progress as plain lines for output that is not a terminal (a CI log, a pipe, ``nohup``).

    Why: rich's status line draws nothing there, so a full-scale run, whose first table comes after
    minutes, was silent until then. The first message is written at once, later ones at most once
    per ``every_s`` (the latest one waiting then), so a log gets a heartbeat, not every step."""

    def __init__(
        self,
        stream: TextIO,
        *,
        every_s: float = PLAIN_PROGRESS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._every_s = every_s
        self._clock = clock
        self._last: float | None = None

    def __call__(self, message: str) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            return
        self._last = now
        self._stream.write(message + "\n")
        self._stream.flush()


Progress = Callable[[str], None]
"""Where a live run says which phase it is in (``igw demo --global``, ``igw bench canary-rollout``:
a stamped line on stderr, :func:`stderr_progress`)."""


def quiet(message: str) -> None:
    """The default :data:`Progress`: say nothing."""


def stderr_progress(*, clock: Callable[[], float] = time.monotonic) -> Progress:
    """A :data:`Progress` writing ``[  12.3s] message`` lines to stderr, as ``igw bench`` does.

    Why: ``igw demo --global`` and ``igw bench canary-rollout`` take minutes (``--global --quick``
    about a minute and a half, ``canary-rollout`` four, on two shared cores) and printed nothing
    until their summary, so a newcomer could not tell a slow phase from a hang. Each phase is one
    line, written at once (a few dozen lines in all, so none is held back, unlike
    :class:`PlainProgress`'s heartbeat)."""
    started = clock()

    def say(message: str) -> None:
        sys.stderr.write(f"[{clock() - started:6.1f}s] {message}\n")
        sys.stderr.flush()

    return say


_COLUMNS = (
    ("ttft_p50_s", "TTFT p50"),
    ("ttft_p95_s", "TTFT p95"),
    ("ttft_p99_s", "TTFT p99"),
    ("itl_p50_s", "ITL p50"),
    ("itl_p99_s", "ITL p99"),
    ("e2e_p99_s", "E2E p99"),
    ("output_tok_per_s", "tok/s"),
    ("goodput", "goodput"),
)


P99_MIN_REQUESTS = 100
"""Fewer requests per seed than this and a p99 is the sample's largest value, not a tail estimate."""
P95_MIN_REQUESTS = 20
"""Fewer requests per seed than this and a p95 is the sample's largest value."""


def thin_sample_warnings(runs: Sequence[ScenarioRun], *, remedy: str) -> list[str]:
    """One warning per scenario whose p99 (fewer than :data:`P99_MIN_REQUESTS` requests in a seed)
    or p95 (fewer than :data:`P95_MIN_REQUESTS`) rests on too few requests to be a tail; ``remedy``
    says how to run more (the option of the mode run)."""
    warnings = []
    for run in runs:
        counts = [s.requests for pol in run.policies.values() for s in pol.summaries]
        if not counts:
            continue
        fewest = min(counts)
        if fewest < P95_MIN_REQUESTS:
            what = f"p95 and p99 rest on {fewest} request{'s' if fewest != 1 else ''} per seed"
            floor = f"fewer than {P95_MIN_REQUESTS} for a p95, {P99_MIN_REQUESTS} for a p99"
        elif fewest < P99_MIN_REQUESTS:
            what = f"p99 rests on {fewest} requests per seed"
            floor = f"fewer than {P99_MIN_REQUESTS}"
        else:
            continue
        warnings.append(
            f"warning: {run.scenario}: {what} ({floor}: the percentile is the sample's largest value, "
            f"not a tail); {remedy}"
        )
    return warnings


def _pct(v: float | None) -> str:
    return format_pct(v, unit="%")


_CAPTION_KEYS = ("fleet", "workload", "load", "offered_rate_rps", "seeds", "capacity", "capacity_sweep")


def scenario_caption(run: ScenarioRun) -> str:
    """What every scenario's output must state: fleet, workload, load level, seeds, measured capacity."""
    p = run.parameters
    return "\n".join(f"{k}: {p[k]}" for k in _CAPTION_KEYS if k in p)


def scenario_table(run: ScenarioRun) -> Any:
    """One row per policy: latency/rate columns (means; ± over seeds), the requests per seed they rest
    on, errors, p99 vs baseline and oracle."""

    table = Table(
        title=escape(f"{run.scenario} ({run.mode})"),
        title_justify="left",
        caption=scenario_caption(run),
        caption_justify="left",
        pad_edge=False,
    )
    table.add_column("policy", no_wrap=True)
    for _, header in _COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("req/seed", justify="right")
    table.add_column("err", justify="right")
    # The signed change, as the summary tables print it: negative = lower than round-robin = better.
    table.add_column("p99 vs RR", justify="right")
    if run.oracle is not None:
        table.add_column("p99 above oracle", justify="right")
    for name, pol in run.policies.items():
        if pol.unavailable is not None:
            table.add_row(name, f"[yellow]not run: {pol.unavailable}[/yellow]")
            continue
        row = [name, *(format_value(f, pol.estimate(f)) for f, _ in _COLUMNS)]
        row.append(requests_per_seed(pol))
        row.append(str(sum(s.errors for s in pol.summaries)))
        cut = run.reduction_vs_baseline(name, "ttft_p99_s")
        row.append(_pct(None if cut is None else 0.0 - cut))  # 0.0 - x: no "-0.0%" for round-robin
        if run.oracle is not None:
            row.append(_pct(run.gap_to_oracle(name, "ttft_p99_s")))
        table.add_row(*row)
    return table


def share_table(run: ScenarioRun) -> Any:
    """Per-pod share of requests, pods as rows and policies as columns."""

    measured = [(n, p.mean_load_share()) for n, p in run.policies.items() if p.summaries]
    table = Table(title="per-pod share of requests", title_justify="left", pad_edge=False)
    table.add_column("pod")
    for name, _ in measured:
        table.add_column(name, justify="right")
    for pod in sorted({k for _, share in measured for k in share}):
        table.add_row(pod, *(f"{share.get(pod, 0.0) * 100:.1f}%" for _, share in measured))
    return table


def failure_exit_status(console: Any, runs: Sequence[ScenarioRun], *, allowed: bool) -> int:
    """Exit status of a benchmark command: 1 when any request failed (unless ``allowed``), else 0.

    Failures are in the tables already (as infinite latency); this makes them impossible to miss in
    scripts and CI, where a run that silently lost requests would otherwise pass."""
    failed = failed_requests(runs)
    if not failed:
        return 0
    # escaped: a trace run is named after its file ("trace-[prod]" lost "[prod]" as markup)
    listed = escape(", ".join(f"{k}: {n}" for k, n in failed.items()))
    if allowed:
        console.print(f"[yellow]failed requests (allowed by --allow-failures): {listed}[/yellow]")
        return 0
    console.print(f"[red]failed requests: {listed}; exit status 1 (pass --allow-failures to accept)[/red]")
    return 1
