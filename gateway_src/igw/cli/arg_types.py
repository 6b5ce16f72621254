"""Range-checked argument types: every numeric ``igw`` option names the values it accepts.

argparse's bare ``type=int`` / ``type=float`` accept values no command can use, and each such value
failed somewhere else: ``--port 70000`` made ``igw serve`` listen on port 4464 (the kernel keeps the
port modulo 65536), ``--pods 0`` ended ``igw perf scrape`` in an ``IndexError`` traceback, ``nan``
seconds switched features off silently. With these types a bad value is refused while the command
line is parsed — exit 2, the option's name, the accepted range and the value given — before any
work starts. ``tests/cli/test_numeric_options.py`` walks every parser and fails on an option that
still uses a bare ``int`` or ``float``.

Output paths get the same treatment: ``--out /read-only/dir`` used to end a finished benchmark run
in a ``FileNotFoundError`` traceback, losing its results; :func:`output_directory` and
:func:`output_file` try the path while parsing.

argparse offers no range-checked numbers (only ``choices``, which cannot express "any integer from
1") and no output-path check, hence these few lines.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import math
import re
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Generic, TypeVar
from urllib.parse import urlsplit

from igw.gateway.worker_count import MAX_WORKERS
from igw.gateway.worker_heartbeat import BEAT_INTERVAL_S

Number = TypeVar("Number", int, float)
Listed = TypeVar("Listed", int, float, str)


@dataclass(frozen=True)
class NumberRange(Generic[Number]):
    """An ``int`` or ``float`` within [minimum, maximum] (either side open-ended when ``None``).

    ``exclusive_minimum``: the minimum itself is refused (``> 0`` rather than ``>= 0``). Floats must
    be finite: ``nan`` and ``inf`` are never a useful count of seconds or a rate.
    """

    kind: type[Number]
    minimum: Number | None = None
    maximum: Number | None = None
    exclusive_minimum: bool = False
    reason: str | None = None
    """Why the bounds are where they are, added to the refusal in brackets: a bare "from 0.001 to
    1000000" reads as arbitrary where a bound stands for what the command can still compute."""
    zero_is_off: bool = False
    """0 is taken besides [minimum, maximum]: an interval or timeout where 0 switches the feature off
    and a tiny positive value would run it back to back (see :func:`zero_or_range`)."""

    @property
    def __name__(self) -> str:  # argparse names the type in some of its own messages
        return self.describe()

    def describe(self) -> str:
        noun = "a whole number" if self.kind is int else "a number"
        if self.zero_is_off:
            return "0 (off) or " + replace(self, zero_is_off=False).describe()
        if self.minimum is not None and self.maximum is not None:
            if self.exclusive_minimum:
                return f"{noun} > {self.minimum} and <= {self.maximum}"
            return f"{noun} from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"{noun} {'>' if self.exclusive_minimum else '>='} {self.minimum}"
        if self.maximum is not None:
            return f"{noun} <= {self.maximum}"
        return noun

    def contains(self, value: Number) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.zero_is_off and value == 0:
            return True
        if self.minimum is not None and (
            value < self.minimum or (self.exclusive_minimum and value == self.minimum)
        ):
            return False
        return self.maximum is None or value <= self.maximum

    def __call__(self, text: str) -> Number:
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}") from None
        if not self.contains(value):
            why = f" ({self.reason})" if self.reason else ""
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}{why}")
        return value

    def outside(self) -> str | None:
        """A value this range refuses, for tests (``None`` when only non-numbers are refused)."""
        if self.zero_is_off and self.minimum is not None and self.minimum > 0:
            # between off and the least value taken: what the bound is for
            return str(self.minimum / 2 if self.kind is float else self.minimum - 1 or -1)
        if self.minimum is not None:
            low = self.minimum if self.exclusive_minimum else self.minimum - 1
            return str(low)
        if self.maximum is not None:
            return str(self.maximum + 1)
        return "nan" if self.kind is float else None


def zero_or_range(kind: type[Number], minimum: Number, maximum: Number, reason: str) -> NumberRange[Number]:
    """0 (off), or ``minimum`` to ``maximum``: intervals and timeouts whose 0 switches a feature off.
    ``NON_NEGATIVE`` took ``igw serve --emf-interval 1e-300`` (EMF documents written back to back) and
    ``--worker-timeout 1e-300`` (a healthy worker group stopped, exit 3, as soon as it started), since
    no plain range can refuse those while taking 0."""
    return NumberRange(kind, minimum, maximum, reason=reason, zero_is_off=True)


@dataclass(frozen=True)
class NumberList(Generic[Number]):
    """A comma-separated, non-empty list of numbers, each within ``item`` (and each once when
    ``distinct``)."""

    item: NumberRange[Number]
    distinct: bool = False
    """Refuse a number given twice: a repeated seed reruns the same run, and its zero spread then
    reads as a result that no seed changes."""

    @property
    def __name__(self) -> str:
        return "comma-separated " + self.item.describe().replace("a whole number", "whole numbers").replace(
            "a number", "numbers"
        )

    def __call__(self, text: str) -> list[Number]:
        parts = [part for part in (p.strip() for p in text.split(",")) if part]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected {self.__name__}, got {text!r}")
        values: list[Number] = []
        for part in parts:
            try:
                values.append(self.item(part))
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    f"expected {self.__name__}, got {text!r} ({part!r} is not one)"
                ) from None
        if self.distinct:
            _refuse_repeated(values, expected=self.__name__, text=text)
        return values

    def outside(self) -> str | None:
        bad = self.item.outside()
        return None if bad is None else f"1,{bad}" if self.item.contains(self.item.kind(1)) else bad


@dataclass(frozen=True)
class NumberOrWord(Generic[Number]):
    """A number within ``number``, or the one ``word`` that asks the command to choose (``auto``)."""

    number: NumberRange[Number]
    word: str

    @property
    def __name__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        return f"{self.number.describe()} or {self.word!r}"

    def __call__(self, text: str) -> Number | str:
        if text.strip().lower() == self.word:
            return self.word
        try:
            return self.number(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}") from None

    def outside(self) -> str | None:
        return self.number.outside()


PORT: Final = NumberRange(int, 0, 65535)
"""A TCP port; 0 asks the kernel for a free one."""
LISTEN_PORT: Final = NumberRange(int, 1, 65535)
"""A TCP port that must be named (a probe port others connect to)."""
COUNT: Final = NumberRange(int, 1)
"""How many of something (requests, pods, rounds, runs): at least one."""
SIM_REQUESTS: Final = NumberRange(int, 1, 1_000_000)
"""Requests one discrete-event run generates (``igw sim run``, ``igw perf des``). Unbounded, a mistyped
``--requests 99999999999999999`` ran until killed (requests are generated lazily, each kept as a record);
a million takes minutes and a few GB of memory, the most a one-process run is useful for."""
NON_NEGATIVE_INT: Final = NumberRange(int, 0)
"""A count where 0 means "none" or "off" (retries, kept decisions)."""
ANY_INT: Final = NumberRange(int)
"""An integer whose range the command itself checks against its one source of truth."""
SEED: Final = NumberRange(int, 0)
"""A random seed."""
POSITIVE: Final = NumberRange(float, 0.0, exclusive_minimum=True)
"""Seconds, rates and scales that must be above zero."""
NON_NEGATIVE: Final = NumberRange(float, 0.0)
"""Seconds where 0 means "off" or "none"."""
FINITE: Final = NumberRange(float)
"""A finite number whose range the command itself checks against its one source of truth."""
MAX_LIVE_RATE: Final = 1000.0
"""The most requests per wall second a live benchmark offers: 50 times the defaults' 20, for a load
generator, routers and simulated pods that share one machine's cores over loopback."""
LIVE_RATE: Final = NumberRange(float, 0.0, MAX_LIVE_RATE, exclusive_minimum=True)
"""Offered requests per wall second of a live run (``igw bench --live-rate``, ``igw demo --rate``).
Unbounded, ``--live-rate 1e308`` made ``igw bench global``'s load loop start requests as fast as it
could, each held until answered or 60 s: its memory grew for the whole run (before session s43)."""
MAX_DURATION_SCALE: Final = 1000.0
"""The largest ``igw bench --duration-scale``. Far above any scale a scenario can run at (one seed
holds at most a million requests: homogeneous-steady reaches that near 45, mixed-fleet-8b near 84),
so only typos and exponent slips are refused here, before any work; a scale below it that still asks
too much of some scenario is refused once the capacities are measured, before any scenario runs.
Unbounded, ``--duration-scale 1e9`` was refused only after the capacity probe had run."""
DURATION_SCALE: Final = NumberRange(float, 0.0, MAX_DURATION_SCALE, exclusive_minimum=True)
"""``igw bench`` and ``igw perf scrape-des/workers-des --duration-scale``: a multiplier of scenario
durations, above 0, at most :data:`MAX_DURATION_SCALE`."""
MIN_SIM_RATE: Final = 0.001
"""The lowest ``igw sim run --rate``: one request per 1000 simulated s already meets an idle fleet
every time, so a lower rate changes no latency, only the clock, which a million requests then run to
about 1e9 s, where float seconds still resolve microseconds. ``--rate 1e-300`` ran the clock to
2e302 s, where a step of milliseconds no longer registers: exit 0 with every TTFT 0.0."""
MAX_SIM_RATE: Final = 1_000_000.0
"""The highest ``igw sim run --rate``: arrivals then come a microsecond apart, far below an engine
step of milliseconds, so every higher rate is the same single burst (``--rate 1e9`` gave the results
of ``1e6``)."""
SIM_RATE: Final = NumberRange(
    float,
    MIN_SIM_RATE,
    MAX_SIM_RATE,
    reason=f"below {MIN_SIM_RATE:g}/s the simulated clock outruns the precision of step times and an "
    f"idle fleet answers alike; above {MAX_SIM_RATE:g}/s arrivals are one burst",
)
"""``igw sim run --rate``: mean arrivals per simulated second, :data:`MIN_SIM_RATE` to
:data:`MAX_SIM_RATE`."""
MIN_SCRAPE_INTERVAL: Final = 0.001
"""The shortest simulated scrape interval: the gateway's own ``scrapeInterval`` counts whole
milliseconds. ``igw perf scrape-des --scrape-interval 1e-300`` never ended (its paced run walks the
ticks one by one), and ``igw sim run`` and ``igw bench`` took it, every policy then reading metrics
fresher than any scraper delivers."""
MAX_SCRAPE_INTERVAL: Final = 600.0
"""The longest simulated scrape interval: ten minutes, beyond any a metrics scraper uses; at
``--scrape-interval 1e300`` every policy routed on each pod's first scrape for the whole run, and
exited 0 with those results."""
SCRAPE_INTERVAL: Final = NumberRange(
    float,
    MIN_SCRAPE_INTERVAL,
    MAX_SCRAPE_INTERVAL,
    reason="seconds between metric scrapes: the gateway's scrapeInterval counts whole ms, and beyond "
    "10 minutes every policy routes on its first scrape for the whole run",
)
"""``--scrape-interval`` of the DES commands (``igw bench``, ``igw sim run``, ``igw perf
scrape-des/workers-des``): :data:`MIN_SCRAPE_INTERVAL` to :data:`MAX_SCRAPE_INTERVAL` seconds."""
MIN_SIM_CV: Final = 0.001
"""The lowest ``igw sim run --cv``: arrivals are then evenly spaced to within 0.1 %, as at any lower
value; below about 1e-162 the gamma shape overflows and the run was refused only after parsing."""
MAX_SIM_CV: Final = 10.0
"""The highest ``igw sim run --cv``: at 10 most gaps (87 % of 1000) are already under a microsecond
and 1000 requests at 10/s span 45 s, not 100. Above it the run is a few simultaneous bursts: every
``--cv`` from 100 to 1e100 gave the same results, exit 0."""
SIM_CV: Final = NumberRange(
    float,
    MIN_SIM_CV,
    MAX_SIM_CV,
    reason=f"below {MIN_SIM_CV:g} arrivals are evenly spaced already; above {MAX_SIM_CV:g} almost every "
    "gap is under a microsecond and the arrivals are a few bursts that no longer keep the mean rate",
)
"""``igw sim run --cv``: the inter-arrival coefficient of variation, :data:`MIN_SIM_CV` to
:data:`MAX_SIM_CV`."""
MIN_TRACE_SPEEDUP: Final = 0.001
"""The lowest ``igw bench --trace-speedup``: a trace slowed a thousandfold meets an idle fleet at every
request, as :data:`MIN_SIM_RATE` does; ``1e-9`` was refused only after parsing, at the first row past
the simulator's 1e9 s range."""
MAX_TRACE_SPEEDUP: Final = 1_000_000.0
"""The highest ``igw bench --trace-speedup``: rows a second apart then arrive a microsecond apart, one
burst for any higher speedup. ``--trace-speedup 1e300`` exited with a report whose load was a
300-digit percentage of the capacity."""
TRACE_SPEEDUP: Final = NumberRange(
    float,
    MIN_TRACE_SPEEDUP,
    MAX_TRACE_SPEEDUP,
    reason=f"below {MIN_TRACE_SPEEDUP:g} every request meets an idle fleet; above {MAX_TRACE_SPEEDUP:g} "
    "rows a second apart arrive in the same microsecond",
)
"""``igw bench --trace-speedup``: :data:`MIN_TRACE_SPEEDUP` to :data:`MAX_TRACE_SPEEDUP`."""
MAX_STALE_THRESHOLD: Final = 3600.0
"""The longest ``--stale-threshold`` of ``igw perf scrape`` and ``scrape-des``: an hour, longer than
any run of theirs, so no pod ever goes stale; ``1e300`` ended ``igw perf scrape`` in a
``SchedulerConfigError`` traceback (a duration of 300 digits) and ``scrape-des`` paced idle pods
without limit, exit 0."""
STALE_THRESHOLD: Final = NumberRange(
    float,
    MIN_SCRAPE_INTERVAL,
    MAX_STALE_THRESHOLD,
    reason="seconds after which a pod's metrics are stale: the gateway's staleThreshold counts whole ms, "
    "and beyond an hour no pod goes stale within a run",
)
"""``--stale-threshold`` of ``igw perf scrape/scrape-des``: :data:`MIN_SCRAPE_INTERVAL` to
:data:`MAX_STALE_THRESHOLD` seconds (longer than the scrape interval: the command checks that)."""
MAX_AGREEMENT_DES_SEEDS: Final = 100
"""The most DES seeds ``igw bench --check-agreement`` runs per scenario: ten times the default, past
which the spread of the DES side no longer narrows usefully. Unbounded, ``--agreement-des-seeds
1000000000`` was taken, to build a list of a billion seeds and run each only once the live runs (hours,
possibly) had finished; unlike ``--live-requests`` no ``--allow-long-run`` check looked at it."""
AGREEMENT_DES_SEEDS: Final = NumberRange(
    int,
    2,
    MAX_AGREEMENT_DES_SEEDS,
    reason="the tie rule needs seed-to-seed variation, and each seed is a DES run of every router",
)
"""``igw bench --agreement-des-seeds``: 2 to :data:`MAX_AGREEMENT_DES_SEEDS`."""
MIN_FLEET_TIME_SCALE: Final = 0.001
"""The smallest fleet ``time_scale`` (wall seconds per simulated GPU second), as a fleet spec's
``time_scale`` takes it (:meth:`igw.sim.spec.FleetSpec.from_mapping`)."""
MAX_FLEET_TIME_SCALE: Final = 1000.0
"""The largest fleet ``time_scale``, the spec's own maximum."""
FLEET_TIME_SCALE: Final = NumberRange(
    float,
    MIN_FLEET_TIME_SCALE,
    MAX_FLEET_TIME_SCALE,
    reason="wall seconds per simulated GPU second, the range of a fleet spec's time_scale",
)
"""``--time-scale`` of ``igw sim fleet`` and ``igw perf soak``. Unbounded, ``1e300`` was refused only
after parsing, by the command (``sim fleet``) or as ``spec.time_scale`` (``perf soak``), naming no
option."""
MIN_SOAK_MINUTES: Final = 0.1
"""The shortest ``igw perf soak`` phase: six seconds, still sampled ten times. ``--minutes 1e-300``
ran the calibration, then ended in an ``IndexError`` traceback: a phase shorter than its first
sample had no RSS sample to report."""
MAX_SOAK_MINUTES: Final = 1440.0
"""The longest ``igw perf soak`` phase: a day. The soak keeps every request's latency in memory (at
a few hundred requests per second, tens of millions a day), and ``--minutes 1e300`` was taken."""
SOAK_MINUTES: Final = NumberRange(
    float,
    MIN_SOAK_MINUTES,
    MAX_SOAK_MINUTES,
    reason="a phase samples RSS ten times and keeps every latency in memory: 6 s to a day",
)
"""``igw perf soak --minutes/--overload-minutes``: :data:`MIN_SOAK_MINUTES` to
:data:`MAX_SOAK_MINUTES`."""
MIN_DES_LOAD: Final = 0.001
"""The lowest ``igw perf des --load`` (a share of a pod's ~12.5 req/s): one pod then offers 0.0125
req/s, above :data:`MIN_SIM_RATE`. ``--load 1e-300`` ran the simulated clock past the precision of
step times: a "simulated s per wall s" of 300 digits, every TTFT 0.0, exit 0."""
MAX_DES_LOAD: Final = 1000.0
"""The highest ``igw perf des --load``: a thousand times a pod's capacity is one queue that only
grows; ``1e300`` offered every request in one burst, exit 0."""
DES_LOAD: Final = NumberRange(
    float,
    MIN_DES_LOAD,
    MAX_DES_LOAD,
    reason=f"a share of a pod's capacity: below {MIN_DES_LOAD:g} the simulated clock outruns the precision "
    f"of step times, above {MAX_DES_LOAD:g} arrivals are one burst",
)
"""``igw perf des --load``: :data:`MIN_DES_LOAD` to :data:`MAX_DES_LOAD`."""
DES_TARGET_S: Final = NumberRange(
    float,
    0.1,
    86400.0,
    reason="wall seconds a run should stay under: a run of at most a million requests takes minutes",
)
"""``igw perf des --target-s``, the divisor of the printed ratio: ``1e-300`` printed a ratio of 300
digits to "the 0 s target", ``1e300`` one to a target of 300 digits."""
FRACTION: Final = NumberRange(float, 0.0, 1.0)
TOP_INTERVAL: Final = NumberRange(
    float, 0.1, 3600.0, reason="seconds between igw top's refreshes: 0.1 s to an hour"
)
"""``igw top --interval``. ``1e300`` never refreshed (with ``--screenshot``: never saved, and Ctrl-C did
not stop it); below 0.1 s was refused only after parsing, naming no range."""
TOP_SCREENSHOT_WAIT: Final = NumberRange(
    float, 0.0, 3600.0, reason="seconds to keep trying a gateway that does not answer: up to an hour"
)
"""``igw top --screenshot-wait``: ``1e300`` tried a gateway that never answered until killed (Ctrl-C
did not stop it)."""
PROBE_TIMEOUT: Final = NumberRange(
    float, 0.1, 600.0, reason="seconds one probe fetch may take: below 0.1 s no fetch completes"
)
"""``igw preflight --probe-timeout``: ``1e-300`` failed every probe as if the cluster did not answer."""
OPERATOR_RESYNC: Final = NumberRange(
    float, 0.1, 3600.0, reason="seconds between re-checks of every object: each is a pass of API reads"
)
"""``igw operator --resync-seconds``: ``1e-300`` re-checked every object back to back, reading the API
server without pause; beyond an hour a changed data plane went unnoticed for that long."""
TLS_SWEEP_INTERVAL: Final = NumberRange(
    float, 1.0, 86400.0, reason="seconds between sweeps, each one ACM listing: 1 s to a day"
)
"""``igw operator --tls-sweep-seconds``: ``1e-300`` listed ACM back to back."""
ADDON_WAIT: Final = NumberRange(float, 1.0, 86400.0, reason="seconds to wait for EKS: 1 s to a day")
"""``igw addon create/update/delete --timeout``: ``1e-300`` gave up before the first status read ("timed
out after 0 s"), ``1e300`` would report a 301-digit wait."""
TOP_DECISIONS: Final = NumberRange(int, 0, 50, reason="decisions shown below the pools: 0 (off) to 50")
"""``igw top --decisions``: rows of the decisions table, which the screen shows only so many of; above
50 was refused only after parsing, naming no range."""
"""A share from 0 to 1."""
SOAK_CALIBRATE_SECONDS: Final = NumberRange(
    float, 1.0, 3600.0, reason="wall seconds of closed-loop load that measure the capacity: 1 s to an hour"
)
"""``igw perf soak --calibrate-seconds``: ``1e-300`` answered no request in time, a capacity of 0, and
the steady phase ended in a ZeroDivisionError traceback (exit 1)."""
SOAK_SETTLE_SECONDS: Final = NumberRange(
    float, 0.0, 3600.0, reason="idle wall seconds before descriptors are counted: up to an hour"
)
"""``igw perf soak --settle-seconds``: ``1e300`` slept after the calibration until killed."""
DES_PODS: Final = NumberRange(
    int, 1, 10_000, reason="simulated pods of one discrete-event run, each an engine model: up to 10000"
)
"""``igw perf des --pods``: ``10**30`` built simulated pods until killed (ten thousand run in
seconds)."""
CHECKS_PODS: Final = NumberRange(
    int, 1, 100_000, reason="model-server pods of the simulated inventory: up to 100 times the default"
)
"""``igw perf checks --pods``: ``10**30`` built the inventory's pods until killed."""
PERF_SCRAPE_SECONDS: Final = NumberRange(
    float, 0.1, 3600.0, reason="measured wall seconds per fleet size: a tenth of a second to an hour"
)
"""``igw perf scrape --seconds``: ``1e-300`` warmed up every fleet, then ended "no scrape of the 2-pod
fleet succeeded" (exit 1): no scrape fits in no time; ``1e300`` measured until killed."""
NOTE_INTERVAL: Final = NumberRange(
    float,
    MIN_SCRAPE_INTERVAL,
    MAX_SCRAPE_INTERVAL,
    reason="seconds between pick-note exchanges, as for scrapes: whole ms at least, and beyond 10 "
    "minutes no note arrives within a run",
)
"""``igw perf workers-des --note-interval``: ``1e300`` exchanged no note, so its ``picks`` rows were the
unshared ones (1.27x the one-worker p99, exit 0); ``1e-300`` exchanged notes at no delay at all, which
no gateway does (its interval is 5 ms)."""
MAX_GATEWAY_SECONDS: Final = 3600.0
"""The longest EMF interval and worker timeout a gateway takes: the chart's ``gateway.cloudWatch.
emfIntervalSeconds`` and ``gateway.workerTimeoutSeconds`` end there, and a value beyond it is the
feature off in all but name."""
MIN_WORKER_TIMEOUT: Final = 2 * BEAT_INTERVAL_S
"""The shortest ``--worker-timeout`` besides 0: two of the workers' one-second beats, so one beat
late does not end the group. ``igw serve --workers 2 --worker-timeout 1e-300`` stopped a healthy
group 2.1 s after it started (exit 3), the first time the parent looked."""
WORKER_TIMEOUT: Final = zero_or_range(
    float,
    MIN_WORKER_TIMEOUT,
    MAX_GATEWAY_SECONDS,
    reason="seconds a worker may miss its one-second heartbeats: at least two of them, at most the "
    "chart's hour; 0 is off",
)
"""``igw serve --worker-timeout`` and ``igw operator --gateway-worker-timeout`` (passed to it)."""
MIN_EMF_INTERVAL: Final = 0.01
"""The shortest EMF interval besides 0: ``--emf-interval 1e-300`` wrote EMF documents back to back,
each interval's build taking the event loop from requests."""
EMF_INTERVAL: Final = zero_or_range(
    float,
    MIN_EMF_INTERVAL,
    MAX_GATEWAY_SECONDS,
    reason="seconds between EMF documents: below 0.01 s they are written back to back, and the chart's "
    "emfIntervalSeconds ends at an hour; 0 is off",
)
"""``--emf-interval`` of ``igw serve`` and ``igw global serve``."""
GLOBAL_DRAIN_SECONDS: Final = NumberRange(
    float,
    0.0,
    MAX_GATEWAY_SECONDS,
    reason="seconds a stopping replica reports not-ready, further signals ignored: up to an hour",
)
"""``igw global serve --drain-seconds``: ``1e300`` drained for ever after SIGTERM, every further
SIGTERM and SIGINT ignored (shutdown had begun), so only SIGKILL ended the replica."""
MAX_LIVE_DRAIN: Final = 3600.0
"""The longest wait after a live run's last send: an hour, far past the 120 s a request may take."""
LIVE_DRAIN: Final = NumberRange(
    float,
    0.0,
    MAX_LIVE_DRAIN,
    reason="wall seconds to wait for answers after the last send of each run: up to an hour",
)
"""``igw bench --drain``: ``1e300`` was refused only by the 24 h plan check, with a plan of 300-digit
hours and the advice to raise ``--live-rate`` or lower ``--live-requests``, naming not ``--drain``."""
DEMO_DRAIN: Final = NumberRange(
    float,
    0.0,
    MAX_LIVE_DRAIN,
    exclusive_minimum=True,
    reason="wall seconds to wait for answers after the last send of each run: up to an hour",
)
"""``igw demo --drain``: above 0 (``--drain 0`` is refused by the run), at most :data:`MAX_LIVE_DRAIN`;
``1e300`` was refused as ``igw bench --drain`` was."""
SOAK_PODS: Final = NumberRange(
    int, 1, 1000, reason="simulated pods of the one fleet process the soak starts: up to 1000"
)
"""``igw perf soak --pods``: ``10**30`` built pod names until killed, Ctrl-C (SIGINT) ignored."""
SOAK_CONCURRENCY: Final = NumberRange(
    int, 1, 10_000, reason="closed-loop clients of the calibration, each a coroutine: up to 10000"
)
"""``igw perf soak --concurrency``: ``10**30`` started clients until killed, SIGINT ignored (exit 137
under ``timeout -s INT -k 5 25``)."""
GATEWAY_EMF_INTERVAL: Final = zero_or_range(
    int, 1, int(MAX_GATEWAY_SECONDS), reason="the range of the chart's gateway.cloudWatch.emfIntervalSeconds"
)
"""``igw operator --gateway-emf-interval``: whole seconds, as the chart renders it."""
WORKER_COUNT: Final = NumberOrWord(NumberRange(int, 1, MAX_WORKERS), "auto")
"""``--workers``: how many, at most :data:`~igw.gateway.worker_count.MAX_WORKERS`, or ``auto`` (see
:mod:`igw.gateway.worker_count`). The same bound as ``auto`` and the chart's ``gateway.workers``:
until session s41 any count was taken, so ``--workers 65`` (which the add-on schema refuses) or a
typo such as ``--workers 1000`` started that many processes."""
GATEWAY_WORKERS: Final = NumberRange(int, 1, MAX_WORKERS, reason="the range of igw serve --workers")
"""``--workers`` of ``igw perf gateway/workers``, passed to the ``igw serve`` they start: ``--workers 65``
ended ``igw perf gateway`` in a RuntimeError traceback once that serve refused it."""
COUNTS: Final = NumberList(COUNT)
"""Comma-separated counts (fleet sizes, worker counts), each at least one."""
SEEDS: Final = NumberList(SEED, distinct=True)
"""Comma-separated seeds, each once."""


def output_directory(text: str) -> Path:
    """A directory the command may write its report into: it exists, or it can be created, and a file
    can be created in it.

    Checked by creating the missing part of the path and a nameless temporary file in it, then
    removing both, so a parse has no lasting effect; the command creates the directory when it writes
    (:func:`create_parent` for an :func:`output_file`). An existing directory no file can be created
    in (read-only, ``/proc``) passed before, and the command failed when it wrote its results. ``''``
    (``--out "$OUT"`` of an unset variable) is refused: it was ``Path('.')``, and the report went
    into whatever folder the command ran in.
    """
    if not text:
        raise argparse.ArgumentTypeError("'' names no folder")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise argparse.ArgumentTypeError(
                f"cannot create directory {text!r}: {_why_not_created(path, missing, exc)}"
            ) from None
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            raise argparse.ArgumentTypeError(
                f"cannot write in directory {text!r}: {_why_not_writable(path, exc)}"
            ) from None
    finally:
        for created in missing:  # deepest first
            with contextlib.suppress(OSError):
                created.rmdir()
    return path


def _why_not_created(path: Path, missing: list[Path], exc: OSError) -> str:
    """Why ``path`` could not be created, naming the directory at fault: the nearest one that exists
    (``missing`` is the part of the path that does not, deepest first). The bare ``strerror`` named
    neither: ``--out /proc/x/y`` said "No such file or directory", which reads as a missing ``/proc``."""
    first_missing = missing[-1] if missing else path
    base = first_missing.parent
    if base.exists() and not base.is_dir():
        return f"{str(base)!r} is a file, not a directory"
    why = _why_not_writable(base, exc)
    return (
        why
        if first_missing == path
        else f"{str(first_missing)!r} does not exist and cannot be created: {why}"
    )


def _why_not_writable(directory: Path, exc: OSError) -> str:
    """Why nothing could be created in the existing ``directory``, in words that name it; the system's
    own wording follows in brackets. A directory that exists but refuses new entries with ENOENT
    (``/proc``) made the message "cannot write in directory '/proc': No such file or directory"."""
    name, said = str(directory), exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{name!r} is not writable ({said})"
    if exc.errno == errno.EROFS:
        return f"{name!r} is on a read-only file system"
    if exc.errno == errno.ENOSPC:
        return f"the file system of {name!r} is full"
    if exc.errno == errno.ENOENT and directory.is_dir():
        return f"{name!r} exists but takes no new files or directories ({said})"
    return f"{said} (in {name!r})"


def output_file(text: str) -> Path:
    """A file the command may write: not a directory, in a directory that exists or can be created."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, expected a file name")
    output_directory(str(path.parent))
    return path


def create_parent(path: Path) -> Path:
    """Create the directory an :func:`output_file` goes into (checked, then removed, while parsing);
    returns ``path``. Without it ``igw sim run --records new/records.jsonl`` ran the whole simulation,
    then ended in a FileNotFoundError traceback."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def policy_name(text: str) -> str:
    """A routing policy of the benchmark registry (``igw perf scrape-des --policy``, which runs
    scenarios): ``igw perf des --policy nope`` ended in a ValueError traceback."""
    # deferred: start-up cost: the registry loads only when a command taking a policy is parsed
    from igw.bench.policies.registry import POLICIES

    if text not in POLICIES:
        raise argparse.ArgumentTypeError(f"unknown policy {text!r} (known: {', '.join(POLICIES)})")
    return text


def workload_policy_name(text: str) -> str:
    """A policy of the registry that runs on a generated workload or a trace (``igw sim run
    --policy``, ``igw perf des --policy``): not one needing a scenario's SLOs. ``oracle-slo`` was
    accepted, then ended ``igw perf des`` in a ValueError traceback and ``igw sim run`` with a message
    naming an internal field (before session s40)."""
    # deferred: start-up cost: the registry loads only when a command taking a policy is parsed
    from igw.bench.policies.registry import POLICIES

    name = policy_name(text)
    if POLICIES[name].needs_slo:
        usable = ", ".join(n for n, e in POLICIES.items() if not e.needs_slo)
        raise argparse.ArgumentTypeError(
            f"{name} needs a scenario's TTFT and TPOT SLOs: run it with igw bench SCENARIO "
            f"--policies {name} (this command takes: {usable})"
        )
    return name


def worker_policy_name(text: str) -> str:
    """A policy each of several simulated gateway workers can run (``igw perf workers-des
    --policy``): not an oracle, which reads the simulator's exact pod state rather than a worker's
    own view. ``oracle`` and ``oracle-slo`` were accepted, then ended the run in a RuntimeError
    traceback (before session s40)."""
    # deferred: start-up cost: the registry loads only when a command taking a policy is parsed
    from igw.bench.policies.registry import POLICIES

    name = policy_name(text)
    if POLICIES[name].needs_oracle:
        usable = ", ".join(n for n, e in POLICIES.items() if not e.needs_oracle)
        raise argparse.ArgumentTypeError(
            f"{name} reads the simulator's exact pod state, not a worker's own view, so it cannot "
            f"run as a worker (this command takes: {usable})"
        )
    return name


def _refuse_repeated(values: list[Listed], *, expected: str, text: str) -> None:
    """Refuse a list option's ``text`` when its parsed ``values`` name one more than once (a typo, or
    one run asked for twice), naming each repeated value; one wording for every list option."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(
            f"expected {expected}, each once, got {text!r} "
            f"({', '.join(str(v) for v in repeated)} given more than once)"
        )


def name_list(text: str) -> list[str]:
    """Comma-separated names (``igw bench --policies``), none blank, each once; which names are known
    is for the command to say (the set differs by mode). ``--policies ,`` or ``--policies=`` (an unset
    variable) was an empty list, which reads as "not given": every default policy ran, for minutes,
    and ``a,,b`` dropped the blank silently (before session s43)."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r} (a blank entry)")
    _refuse_repeated(parts, expected="comma-separated names", text=text)
    return parts


def split_names(text: str, known: Collection[str]) -> tuple[list[str], list[str]]:
    """The comma-separated names of ``text`` (blanks dropped) and those of them not in ``known``: the
    shared part of every option taking a list of names; each caller words its own refusal."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    return names, [name for name in names if name not in known]


def scenario_names(text: str) -> list[str]:
    """Comma-separated benchmark scenarios (``igw perf workers-des --scenarios``): an unknown one ended
    in a KeyError traceback, after the scenarios before it had run."""
    # deferred: start-up cost: the scenarios load only when a command taking them is parsed
    from igw.bench.scenarios import SCENARIOS

    names, unknown = split_names(text, SCENARIOS)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(map(repr, unknown)) or repr(text)} (known: {', '.join(SCENARIOS)})"
        )
    return names


def preset_name(text: str) -> str:
    """A GPU/model preset of ``igw sim presets`` (``igw perf des --preset``)."""
    # deferred: start-up cost: the presets load only when a command taking one is parsed
    from igw.sim.presets import PRESETS

    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r} (known: {', '.join(sorted(PRESETS))})")
    return text


def source_path(text: str) -> Path:
    """A file or folder to read (``igw preflight/audit --manifests``, ``--cdk-out``), not empty: ``''``
    is ``Path('.')``, so ``--cdk-out "$CDK_OUT"`` with the variable unset scanned the current folder
    (a checkout's test fixtures, say) and reported on it as the deployment asked about."""
    if not text:
        raise argparse.ArgumentTypeError("'' names no file or folder")
    return Path(text)


def source_name(text: str) -> str:
    """A file or folder name to read, kept as typed (``'-'`` too, where it means stdin), not empty:
    ``''`` is ``Path('.')``, so ``igw validate ""`` and ``igw serve --config ""`` (a variable unset)
    said ``Is a directory: '.'``, ``--config-maps=`` read the current folder, and ``bench --trace=``
    (an empty value being false) was taken for no ``--trace`` at all, then said the option "does not
    apply to a DES run" (before session s42)."""
    if not text:
        raise argparse.ArgumentTypeError("'' names no file or folder")
    return text


def existing_path(text: str) -> Path:
    """A file or folder to read that exists (``igw preflight/audit --manifests``): a missing one was
    reported only once the command ran, without the option's name (``error: deploy: no such file or
    directory``, before session s44); refused here, argparse names the option and exits 2."""
    path = source_path(text)
    if not path.exists():
        if path.is_symlink():  # "no such file" sent the user looking for a file that is there
            raise argparse.ArgumentTypeError(
                f"{text}: a symlink that leads nowhere (a loop, or a target that does not exist)"
            )
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    return path


def existing_directory(text: str) -> str:
    """A folder to read that exists, kept as typed (``igw serve --config-maps``), refused while parsing
    as :func:`existing_path` is."""
    if not existing_path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a folder")
    return text


def existing_file(text: str) -> str:
    """A file to read that exists, kept as typed (``--kubeconfig`` of ``igw preflight``, ``audit``,
    ``serve`` and ``operator``), refused while parsing as :func:`existing_path` is: a missing
    ``--kubeconfig`` ended ``igw preflight`` in exit 3 ("not evaluated") and ``igw serve --in-cluster``
    after its start-up lines, neither naming the option (before session s44)."""
    path = existing_path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a folder, not a file")
    return text


def existing_file_or_stdin(text: str) -> str:
    """:func:`existing_file`, or ``-`` for standard input, kept as typed, for options read once through
    :func:`igw.config.documents.read_documents` (``igw sim fleet/run --spec``, ``igw bench --fleet``,
    ``igw global serve --config``), which take ``-`` as ``igw validate`` does; a missing file was
    refused only once the command ran, naming the file but not the option (before session s44)."""
    return text if text == "-" else existing_file(text)


def ca_bundle(text: str) -> str:
    """A PEM file of CA certificates that loads (``igw preflight --ca-bundle``): a missing or non-PEM
    file was found only by the probes, each check reporting "FileNotFoundError: [Errno 2] No such
    file or directory" without naming the file or the option."""
    # deferred: start-up cost: ssl loads only when a CA bundle is parsed
    import ssl

    if not text:  # the ssl module takes '' for "no file": the system trust store, silently
        raise argparse.ArgumentTypeError("'' names no file")
    try:
        ssl.create_default_context(cafile=text)
    except ssl.SSLError:
        raise argparse.ArgumentTypeError(f"{text!r} holds no PEM CA certificate") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return text


_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def namespace_name(text: str) -> str:
    """A Kubernetes namespace name (an RFC 1123 label): ``--namespace Bad_NS`` was watched silently,
    and matched nothing."""
    if not _DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name (at most 63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return text


def object_name(text: str) -> str:
    """A Kubernetes object name (an RFC 1123 subdomain), e.g. a Lease's."""
    if not _DNS_SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an object name (at most 253 lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return text


def container_image(text: str) -> str:
    """A container image reference written into pod specs: not empty, no whitespace or control
    characters (an empty ``--gateway-image`` made every Deployment the operator applied invalid)."""
    if not text or any(ch.isspace() or not ch.isprintable() for ch in text) or len(text) > 4096:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an image reference "
            "(e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com/igw:0.1.0)"
        )
    return text


_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE``: an environment variable's name (``[A-Za-z_][A-Za-z0-9_]*``) and its value
    (anything after the first ``=``, possibly empty). The value is never repeated in the message: it
    may be a credential (``OTEL_EXPORTER_OTLP_HEADERS``)."""
    name, equals, value = text.partition("=")
    if not equals or not _ENV_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            "expected NAME=VALUE with NAME an environment variable name ([A-Za-z_][A-Za-z0-9_]*) "
            "(what was given is not shown: it may hold a credential)"
        )
    return name, value


def listen_host(text: str) -> str:
    """A listen address, not empty: ``igw serve --host ''`` (an unset variable in a script) listened on
    every interface, silently (an empty host is the socket layer's "any address"). Every interface
    stays one word away: ``0.0.0.0`` (IPv4) or ``::`` (IPv6)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty address would listen on every interface; name one (0.0.0.0 or :: for every interface)"
        )
    return text


def cidr_block(text: str) -> str:
    """An IPv4 or IPv6 CIDR block (``10.0.0.0/16``, ``::/0``), as a NetworkPolicy ``ipBlock`` takes it:
    a bare address or a bad prefix would make every NetworkPolicy the operator applies invalid."""
    try:
        if "/" not in text:
            raise ValueError(text)
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IPv4 or IPv6 CIDR block (e.g. 10.0.0.0/16 or ::/0)"
        ) from None
    return text


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host and, if given, a port in 1-65535: ``notaurl``
    was passed to every gateway pod as its OTLP endpoint, and ``http://host:99999`` made every
    operator pass fail ("Port out of range") when it built the NetworkPolicy."""
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or port == -1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http:// or https:// URL with a host (and a valid port)"
        )
    return text


_REGION: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def region_name(text: str) -> str:
    """A region name (``us-east-1``): lower-case letters, digits and ``-``, at most 63, the pattern of
    a GlobalRouterConfig's ``spec.region`` (every AWS region name fits it). ``--region ''`` (an unset
    ``$AWS_REGION`` in a script) ended ``igw addon`` in a traceback ("Invalid endpoint:
    https://eks..amazonaws.com"), and ``igw global serve --region 'us east'`` served with a region no
    configuration may name, every cluster then taken for a remote one."""
    if not _REGION.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a region name (lower-case letters, digits and '-', e.g. us-east-1)"
        )
    return text


_IAM_ROLE_ARN: Final = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}")


def iam_role_arn(text: str) -> str:
    """An IAM role ARN (``arn:aws:iam::123456789012:role/name``): ``igw addon create --role-arn
    notanarn`` checked the account for a role named after the text's last ``/`` part and sent the
    text to EKS as the service account's role (the chart's ``serviceAccount.roleArn`` pattern)."""
    if not _IAM_ROLE_ARN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IAM role ARN (e.g. arn:aws:iam::123456789012:role/igw-gateway)"
        )
    return text


def addon_version(text: str) -> str:
    """An EKS add-on version (``v2.0.0-eksbuild.2``): ``igw addon create --version latest`` was
    refused only after parsing, with exit 1 (a failed AWS operation's code) instead of a usage error."""
    # deferred: start-up cost: the add-on tooling loads only when an add-on version is parsed
    from igw.addon.addon_version import AddonVersion, AddonVersionError

    try:
        AddonVersion.parse(text)
    except AddonVersionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


_EKS_CLUSTER_NAME: Final = re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]{0,99}")


def eks_cluster_name(text: str) -> str:
    """An EKS cluster name (1-100 letters, digits, ``-`` and ``_``, starting with a letter or digit,
    EKS's own pattern): ``--cluster ''`` reached botocore's parameter validation as an AWS error."""
    if not _EKS_CLUSTER_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an EKS cluster name (1-100 letters, digits, '-' and '_', "
            "starting with a letter or digit)"
        )
    return text


_KUBERNETES_MINOR: Final = re.compile(r"1\.[0-9]{1,3}")


def kubernetes_version(text: str) -> str:
    """A Kubernetes minor version as EKS names it (``1.34``)."""
    if not _KUBERNETES_MINOR.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes version as EKS names it (e.g. 1.34)")
    return text


_ECR_NAMESPACE: Final = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")


def ecr_namespace(text: str) -> str:
    """An ECR repository namespace (lower-case path parts of letters and digits joined by ``.``,
    ``_`` or ``-``, ECR's repository-name grammar): ``igw addon package --push --namespace 'My
    Charts'`` packaged the chart, then failed at ECR after the upload's set-up."""
    if len(text) > 200 or not _ECR_NAMESPACE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ECR repository namespace (lower-case letters and digits, parts joined "
            "by '.', '_' or '-', path parts by '/')"
        )
    return text
