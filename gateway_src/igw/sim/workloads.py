"""Workload generators and trace replay producing :class:`SimRequest` streams (lazy, sorted by arrival).

Everything is deterministic for a given ``random.Random`` and lazy, so a 100,000-request run never holds
all prompt texts in memory. Prompt text has exactly ``prompt_tokens`` tokens under the simulator's
tokenisation (:mod:`igw.sim.tokens`), so the DES and a live run over HTTP see the same prefix blocks.

Arrival processes: Poisson; Gamma inter-arrivals with a stated coefficient of variation (vLLM's
``--burstiness b`` is ``cv = 1/sqrt(b)``); on/off (Markov-modulated Poisson: calm rate, bursts of
``burst_rate`` with exponential on/off durations).

Length profiles (documented with their fit in docs/simulator.md):

* ``sharegpt`` - lognormal stand-in for the ShareGPT benchmark set (vLLM PR #18566 reports means of
  230 input / 203 output tokens with the Llama-3 tokenizer): input median 120, sigma 1.141 (mean 230 before
  clipping to [4, 4096]); output median 150, sigma 0.778 (mean 203 before clipping to [1, 2048]).
* ``azure-conv`` / ``azure-code`` - Azure LLM inference traces 2023 (Splitwise, Vidur's processed copies;
  statistics of their request lengths): inverse-CDF sampling with log-linear interpolation through the
  published p50, p90 and p99 exactly, plus a p10 knot and tail end chosen so the mean matches the published
  mean (conversation output: -9 %, see the docs).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Final, Protocol

from igw.errors import IgwToolingError
from igw.sim.request import SimRequest
from igw.sim.tokens import count_tokens, synthetic_text


class WorkloadError(IgwToolingError, ValueError):
    """Bad workload parameters or a malformed trace (the message names the field or line)."""


# ---------------------------------------------------------------------- arrival processes
def poisson_arrivals(*, rate: float, rng: random.Random, start: float = 0.0) -> Iterator[float]:
    """Arrival times of a Poisson process of ``rate`` requests/s."""
    _positive(rate, "rate")
    t = start
    while True:
        t += rng.expovariate(rate)
        yield t


def gamma_arrivals(*, rate: float, cv: float, rng: random.Random, start: float = 0.0) -> Iterator[float]:
    """Gamma inter-arrivals with mean ``1/rate`` and coefficient of variation ``cv`` (cv=1 is Poisson)."""
    _positive(rate, "rate")
    _positive(cv, "cv")
    # cv * cv underflows to 0 below about 1e-162 and 1 / cv² to 0 above about 1e154: each ended
    # `igw sim run --cv` in a ZeroDivisionError traceback (before session s43)
    square = cv * cv
    shape = 1.0 / square if square > 0 else math.inf
    scale = 1.0 / (rate * shape) if rate * shape > 0 else math.inf
    if not (math.isfinite(shape) and math.isfinite(scale) and shape > 0 and scale > 0):
        raise WorkloadError(
            f"cv {cv!r} at rate {rate!r} gives no usable gamma inter-arrivals "
            f"(shape 1/cv² = {shape!r}, scale {scale!r}); 1 is Poisson, above 1 burstier, below 1 more even"
        )
    t = start
    while True:
        t += rng.gammavariate(shape, scale)
        yield t


def on_off_arrivals(
    *,
    rate: float,
    burst_rate: float,
    mean_on_s: float,
    mean_off_s: float,
    rng: random.Random,
    start: float = 0.0,
) -> Iterator[float]:
    """Markov-modulated Poisson: ``rate`` while calm, ``burst_rate`` during bursts (exponential durations)."""
    _positive(rate, "rate")
    _positive(burst_rate, "burst_rate")
    _positive(mean_on_s, "mean_on_s")
    _positive(mean_off_s, "mean_off_s")
    t = start
    bursting = False
    phase_end = t + rng.expovariate(1.0 / mean_off_s)
    while True:
        current = burst_rate if bursting else rate
        gap = rng.expovariate(current)
        if t + gap <= phase_end:
            t += gap
            yield t
        else:
            t = phase_end
            bursting = not bursting
            phase_end = t + rng.expovariate(1.0 / (mean_on_s if bursting else mean_off_s))


# ---------------------------------------------------------------------- length distributions
class LengthSampler(Protocol):
    def sample(self, rng: random.Random) -> int: ...


@dataclass(frozen=True, slots=True)
class FixedLength:
    tokens: int

    def sample(self, rng: random.Random) -> int:
        return self.tokens


@dataclass(frozen=True, slots=True)
class LogNormalLength:
    """Lognormal token count (``median`` = exp(mu)), clipped to ``[lo, hi]``."""

    median: float
    sigma: float
    lo: int
    hi: int

    def sample(self, rng: random.Random) -> int:
        v = rng.lognormvariate(math.log(self.median), self.sigma)
        return min(self.hi, max(self.lo, round(v)))


@dataclass(frozen=True, slots=True)
class QuantileLength:
    """Inverse-CDF sampling through ``(quantile, tokens)`` knots, log-linear in between."""

    knots: tuple[tuple[float, float], ...]

    def sample(self, rng: random.Random) -> int:
        u = rng.random()
        knots = self.knots
        for (q0, v0), (q1, v1) in itertools.pairwise(knots):
            if u <= q1:
                f = 0.0 if q1 == q0 else (u - q0) / (q1 - q0)
                return max(1, round(math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))))
        return max(1, round(knots[-1][1]))


SHAREGPT_INPUT: Final = LogNormalLength(median=120, sigma=1.141, lo=4, hi=4096)
SHAREGPT_OUTPUT: Final = LogNormalLength(median=150, sigma=0.778, lo=1, hi=2048)
AZURE_CONV_INPUT: Final = QuantileLength(
    ((0, 8), (0.1, 27), (0.5, 1020), (0.9, 2735), (0.99, 4142), (1, 4556))
)
AZURE_CONV_OUTPUT: Final = QuantileLength(((0, 1), (0.1, 60), (0.5, 129), (0.9, 424), (0.99, 601), (1, 1202)))
AZURE_CODE_INPUT: Final = QuantileLength(
    ((0, 8), (0.1, 128), (0.5, 1469), (0.9, 5188), (0.99, 7436), (1, 9295))
)
AZURE_CODE_OUTPUT: Final = QuantileLength(((0, 1), (0.1, 1), (0.5, 13), (0.9, 55), (0.99, 251), (1, 276)))

LENGTH_PROFILES: Final[dict[str, tuple[LengthSampler, LengthSampler]]] = {
    "sharegpt": (SHAREGPT_INPUT, SHAREGPT_OUTPUT),
    "azure-conv": (AZURE_CONV_INPUT, AZURE_CONV_OUTPUT),
    "azure-code": (AZURE_CODE_INPUT, AZURE_CODE_OUTPUT),
}
"""Named (prompt, output) length profiles."""


def length_profile(name: str) -> tuple[LengthSampler, LengthSampler]:
    try:
        return LENGTH_PROFILES[name]
    except KeyError:
        raise WorkloadError(
            f"unknown length profile {name!r}; known: {', '.join(sorted(LENGTH_PROFILES))}"
        ) from None


# ---------------------------------------------------------------------- generators
def synthetic(
    *,
    count: int,
    arrivals: Iterator[float],
    prompt_lengths: LengthSampler,
    output_lengths: LengthSampler,
    model: str,
    rng: random.Random,
    id_prefix: str = "req",
) -> Iterator[SimRequest]:
    """``count`` independent requests with unique prompts (no shared prefixes)."""
    _positive(count, "count")
    for i in range(count):
        t = next(arrivals)
        n_in = prompt_lengths.sample(rng)
        n_out = output_lengths.sample(rng)
        yield SimRequest(
            request_id=f"{id_prefix}-{i}",
            arrival=t,
            prompt_text=synthetic_text(tokens=n_in, rng=rng),
            prompt_tokens=n_in,
            output_tokens=n_out,
            model=model,
        )


def shared_prefix(
    *,
    groups: int,
    prompts_per_group: int,
    system_prompt_len: int,
    question_len: int,
    output_len: int,
    arrivals: Iterator[float],
    model: str,
    rng: random.Random,
    zipf_alpha: float | None = None,
    id_prefix: str = "sp",
) -> Iterator[SimRequest]:
    """inference-perf / SGLang ``generated-shared-prefix`` shape: each group shares one system prompt.

    Requests of all groups are interleaved in random order (uniform over the ``groups x prompts`` set,
    or with group popularity Zipf(``zipf_alpha``) when given, drawing ``groups x prompts`` requests).
    """
    for name, v in (
        ("groups", groups),
        ("prompts_per_group", prompts_per_group),
        ("system_prompt_len", system_prompt_len),
        ("question_len", question_len),
        ("output_len", output_len),
    ):
        _positive(v, name)
    systems = [synthetic_text(tokens=system_prompt_len, rng=rng) for _ in range(groups)]
    total = groups * prompts_per_group
    if zipf_alpha is None:
        order = [g for g in range(groups) for _ in range(prompts_per_group)]
        rng.shuffle(order)
    else:
        weights = [1.0 / (k + 1) ** zipf_alpha for k in range(groups)]
        order = rng.choices(range(groups), weights=weights, k=total)
    for i, g in enumerate(order):
        text = systems[g] + synthetic_text(tokens=question_len, rng=rng)
        yield SimRequest(
            request_id=f"{id_prefix}-{i}",
            arrival=next(arrivals),
            prompt_text=text,
            prompt_tokens=system_prompt_len + question_len,
            output_tokens=output_len,
            model=model,
            group=f"group-{g}",
        )


def with_lora_mix(
    requests: Iterable[SimRequest],
    *,
    adapters: Mapping[str, float],
    base_weight: float,
    rng: random.Random,
) -> Iterator[SimRequest]:
    """Re-address each request to a LoRA adapter (or the base model) with the given relative weights."""
    if base_weight < 0 or any(w < 0 for w in adapters.values()):
        raise WorkloadError("adapter weights must be >= 0")
    names: list[str | None] = [None, *adapters]
    weights = [base_weight, *adapters.values()]
    if sum(weights) <= 0:
        raise WorkloadError("at least one weight must be > 0")
    for req in requests:
        pick = rng.choices(names, weights=weights)[0]
        yield req if pick is None else replace(req, model=pick, adapter=pick)


def take(requests: Iterable[SimRequest], n: int) -> list[SimRequest]:
    """The first ``n`` requests as a list (convenience for tests and small live runs)."""
    return list(itertools.islice(requests, n))


# ---------------------------------------------------------------------- trace replay
_TIME_FIELDS: Final = ("arrival", "timestamp", "TIMESTAMP", "time")
_IN_FIELDS: Final = ("prompt_tokens", "input_tokens", "ContextTokens", "input_length")
_OUT_FIELDS: Final = ("output_tokens", "GeneratedTokens", "output_length")


MAX_TRACE_OFFSET_S = 1e9
"""The latest arrival a trace row may have, in seconds after the first row (after ``speedup``).

Why a bound: a finite but huge time (``1e308``) passed every check and ended the simulation in an
``OverflowError`` traceback (scrape ticks of ``now / interval``), naming no line; no trace spans 31
years, and up to there a float still resolves well under a microsecond."""
MAX_TRACE_LINE_CHARS: Final = 16 * 1024 * 1024
"""The longest JSONL trace line read: 16 Mi characters, some thirty times the text of the longest
context a preset serves; a longer line is refused with its file and line."""


def replay(
    path: str | Path,
    *,
    model: str,
    rng: random.Random,
    speedup: float = 1.0,
    limit: int | None = None,
) -> Iterator[SimRequest]:
    """Replay a JSONL or CSV trace (by extension), arrivals relative to the first one, divided by ``speedup``.

    Accepted columns/keys: arrival time (``arrival`` | ``timestamp`` | ``TIMESTAMP`` | ``time``: seconds
    or an ISO-8601 timestamp), prompt length (``prompt_tokens`` | ``input_tokens`` | ``ContextTokens`` |
    ``input_length``), output length (``output_tokens`` | ``GeneratedTokens`` | ``output_length``), and
    optionally ``prompt`` (text; otherwise filler text is generated), ``model``, ``adapter``,
    ``request_id``, ``priority`` (an integer) and a shared prefix: ``prefix_group`` (or
    ``shared_prompt_id``, the id of the system prompt the request starts with) plus ``prefix_tokens``,
    the shared length (needed on the group's first row; later rows may omit it but not change it).
    Requests of one group start with the same ``prefix_tokens`` tokens of text, the rest of the prompt is
    unique. Azure 2023 trace CSVs load unchanged. Rows must be in time order.
    """
    _positive(speedup, "speedup")
    p = Path(path)
    rows: Iterator[tuple[int, Mapping[str, object]]]
    if p.suffix == ".jsonl":
        rows = _jsonl_rows(p)
    elif p.suffix == ".csv":
        rows = _csv_rows(p)
    else:
        raise WorkloadError(f"{p}: trace must be .jsonl or .csv")
    t0: float | None = None
    last = -math.inf
    prefixes = _PrefixTexts(rng)
    if limit == 0:
        return
    for count, (line, row) in enumerate(_utf8(rows, p)):
        if limit is not None and count >= limit:
            return
        where = f"{p}:{line}"
        t_raw = _first(row, _TIME_FIELDS, where, "arrival time")
        t = _time_value(t_raw, where)
        if t < last:
            raise WorkloadError(f"{where}: arrival time goes backwards ({t} < {last})")
        last = t
        if t0 is None:
            t0 = t
        n_out = _int_field(_first(row, _OUT_FIELDS, where, "output length"), where, "output length")
        group = _group_field(row, where)
        text = row.get("prompt")
        if text is None:
            n_in = _int_field(_first(row, _IN_FIELDS, where, "prompt length"), where, "prompt length")
            shared = "" if group is None else prefixes.text(group, row.get("prefix_tokens"), n_in, where)
            text = shared + synthetic_text(tokens=n_in - count_tokens(shared), rng=rng)
        elif not isinstance(text, str) or not text:
            raise WorkloadError(f"{where}: prompt must be a non-empty string")
        else:
            n_in = count_tokens(text)
        adapter = row.get("adapter")
        if adapter is not None and not isinstance(adapter, str):
            raise WorkloadError(f"{where}: adapter must be a string")
        row_model = row.get("model") or adapter or model
        arrival = (t - t0) / speedup
        if not arrival <= MAX_TRACE_OFFSET_S:
            raise WorkloadError(
                f"{where}: arrival {arrival:g} s after the first row (after the speedup) is beyond the "
                f"simulator's range of {MAX_TRACE_OFFSET_S:g} s (about 31 years)"
            )
        yield SimRequest(
            request_id=str(row.get("request_id") or f"trace-{count}"),
            arrival=arrival,
            prompt_text=text,
            prompt_tokens=n_in,
            output_tokens=n_out,
            model=str(row_model),
            adapter=adapter or None,
            priority=_priority(row.get("priority"), where),
            group=group,
        )
    if t0 is None:  # `igw sim run --trace empty.jsonl` printed the summary of no run, exit 0
        raise WorkloadError(f"{p}: the trace holds no requests")


def _utf8(
    rows: Iterator[tuple[int, Mapping[str, object]]], p: Path
) -> Iterator[tuple[int, Mapping[str, object]]]:
    """``rows``, a file that is not UTF-8 text a :class:`WorkloadError` naming it (the message was the
    codec's alone: "'utf-8' codec can't decode byte 0xff in position 0")."""
    try:
        yield from rows
    except UnicodeDecodeError:
        raise WorkloadError(f"{p}: not UTF-8 text") from None


class _PrefixTexts:
    """The shared text of each trace prefix group, generated on the group's first row."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._texts: dict[str, str] = {}
        self._lengths: dict[str, int] = {}

    def text(self, group: str, raw_length: object, prompt_tokens: int, where: str) -> str:
        known = self._lengths.get(group)
        if raw_length is None:
            if known is None:
                raise WorkloadError(f"{where}: prefix_tokens is required on the first row of group {group!r}")
            length = known
        else:
            length = _int_field(raw_length, where, "prefix_tokens")
            if known is not None and length != known:
                raise WorkloadError(
                    f"{where}: prefix_tokens {length} differs from {known} given earlier for group {group!r}"
                )
        if length > prompt_tokens:
            raise WorkloadError(f"{where}: prefix_tokens {length} exceeds the prompt length {prompt_tokens}")
        if group not in self._texts:
            self._lengths[group] = length
            self._texts[group] = synthetic_text(tokens=length, rng=self._rng)
        return self._texts[group]


def _group_field(row: Mapping[str, object], where: str) -> str | None:
    names = [n for n in ("prefix_group", "shared_prompt_id") if row.get(n) is not None]
    if len(names) > 1:
        raise WorkloadError(f"{where}: give prefix_group or shared_prompt_id, not both")
    if not names:
        if row.get("prefix_tokens") is not None:
            raise WorkloadError(f"{where}: prefix_tokens needs a prefix_group (or shared_prompt_id)")
        return None
    value = row[names[0]]
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise WorkloadError(f"{where}: {names[0]} must be a non-empty string or integer")
    return str(value)


def _priority(v: object, where: str) -> int:
    if v is None:
        return 0
    try:
        n = int(str(v)) if not isinstance(v, int) or isinstance(v, bool) else v
    except ValueError:
        raise WorkloadError(f"{where}: priority must be an integer, got {v!r}") from None
    return n


def _jsonl_rows(p: Path) -> Iterator[tuple[int, Mapping[str, object]]]:
    # utf-8-sig: a leading byte-order mark (Windows editors, Excel's "CSV UTF-8") is dropped; it made
    # the first JSON line invalid and, in a CSV, renamed the first column ("\ufefftimestamp": "missing
    # arrival time" for a file that has one)
    try:
        fh = p.open(encoding="utf-8-sig")
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror}") from None
    with fh:
        n = 0
        while line := fh.readline(MAX_TRACE_LINE_CHARS + 1):
            n += 1
            if len(line) > MAX_TRACE_LINE_CHARS:
                # a whole line was read into memory, and its JSON parsed, whatever its length: a 1 GiB
                # line took several GiB before the request it held was refused as too long anyway
                raise WorkloadError(
                    f"{p}:{n}: line longer than {MAX_TRACE_LINE_CHARS:,} characters (no model's context "
                    "holds such a prompt)"
                )
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{p}:{n}: invalid JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise WorkloadError(f"{p}:{n}: each line must be a JSON object")
            yield n, row


def _csv_rows(p: Path) -> Iterator[tuple[int, Mapping[str, object]]]:
    try:
        fh = p.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror}") from None
    with fh:
        rows = iter(csv.DictReader(fh))
        n = 1
        while True:
            # a cell over the csv module's 128 KiB field limit (a long ``prompt``) or a stray quote
            # ended `igw sim run --trace` / `igw bench --trace` in a ``_csv.Error`` traceback
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as exc:
                raise WorkloadError(f"{p}:{n + 1}: not a readable CSV row: {exc}") from None
            n += 1
            yield n, {k: v for k, v in row.items() if k is not None and v not in (None, "")}


def _first(row: Mapping[str, object], names: Sequence[str], where: str, what: str) -> object:
    for name in names:
        if name in row:
            return row[name]
    raise WorkloadError(f"{where}: missing {what} (one of {', '.join(names)})")


def _time_value(v: object, where: str) -> float:
    seconds = _finite_seconds(v, where)
    if seconds is not None:
        return seconds
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.strip()).timestamp()
        except ValueError:
            raise WorkloadError(f"{where}: arrival time {v!r} is neither seconds nor ISO-8601") from None
    raise WorkloadError(f"{where}: arrival time must be a number or a timestamp string")


def _finite_seconds(v: object, where: str) -> float | None:
    """``v`` as seconds when it is a number (or a numeric string); ``None`` when it is not a number.

    NaN and infinity are refused here: they pass every ordering check and surfaced much later as
    "cannot convert float NaN to integer", naming no line.
    """
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        seconds = float(v)
    except ValueError:
        return None
    if not math.isfinite(seconds):
        raise WorkloadError(f"{where}: arrival time must be a finite number of seconds, got {v!r}")
    return seconds


MAX_TRACE_TOKENS = 10_000_000
"""Largest prompt or output length a trace row may give: filler text is generated for the prompt, so
an unbounded length (``1e12``) would exhaust memory before any router sees the request."""


def _int_field(v: object, where: str, what: str) -> int:
    if isinstance(v, float) and v.is_integer():  # 128.0 from a spreadsheet or pandas export
        v = int(v)
    try:
        n = int(str(v)) if not isinstance(v, int) or isinstance(v, bool) else v
    except ValueError:
        raise WorkloadError(f"{where}: {what} must be an integer, got {v!r}") from None
    if not 1 <= n <= MAX_TRACE_TOKENS:
        raise WorkloadError(f"{where}: {what} must be from 1 to {MAX_TRACE_TOKENS:,}, got {n}")
    return n


def _positive(v: float, name: str) -> None:
    if not v > 0:
        raise WorkloadError(f"{name} must be > 0, got {v!r}")
