"""Extract the routing signals from a model server's Prometheus text page, fast.

A real vLLM page is 50-60 KB and ~560 lines, and every endpoint is scraped every 50 ms, so parsing
the whole exposition format would dominate the gateway's CPU. Instead we look up only the few
families routing needs with ``str.find`` on ``"\\n<family>"`` (C speed) and parse just those lines.

Which families to read for each engine (``spec.schedulers[].engineType``) comes from the engine
catalogue, :mod:`igw.engines`: queue, running, KV-cache usage (preferred name first, deprecated
fallbacks such as vLLM < 0.9.2's ``vllm:gpu_cache_usage_perc`` after), LoRA info and cache config.

A family may be a metric spec with label filters (``name{model_name="x"}``, see
:func:`igw.engines.parse_metric_spec`): only the series carrying those labels count. An engine that
publishes no KV-cache gauge or cache-config info (TGI, a generic engine without them) lists none, and
nothing is reported missing for it.

A page answered through the ``name[]`` filter (:mod:`igw.gateway.page_filter`) holds a few
families in under 2 KB; there a search per family costs more than one pass over the lines
that picks out the wanted families (:func:`index_families`), so pages up to :data:`SMALL_PAGE`
characters are read that way. Both readings give the same result (the first group of sample lines of
each family), which ``tests/gateway/test_metrics_parser_small.py`` checks on simulated pages.

Multi-series gauges: a pod may run several engines, one per data-parallel rank, each with its own
scheduler and KV cache, its series told apart by the catalogue's ``rank_label`` (vLLM's ``engine``,
SGLang's ``dp_rank``). Queue/running combine as the catalogue says within one rank (SGLang's TP ranks
repeat the same numbers: the maximum) and are summed across ranks (:func:`combine_scoped`); the KV
capacity is summed across ranks and the KV usage is the ranks' capacity-weighted mean
(:func:`kv_share`).
``missing`` names every expected family that is absent, so the caller can report it loudly.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from igw import engines
from igw.engines import MetricFamilies, parse_metric_spec
from igw.scheduling.types import EngineMetrics

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESC = re.compile(r"\\[\\\"n]")


VLLM: Final = engines.VLLM.families
SGLANG: Final = engines.SGLANG.families
TGI: Final = engines.TGI.families
ENGINES: Final[Mapping[str, MetricFamilies]] = {name: e.families for name, e in engines.ENGINES.items()}
"""Metric families by ``engineType``, from the engine catalogue."""
COMBINE: Final[Mapping[str, Callable[[Sequence[float]], float]]] = {"sum": sum, "max": max}
"""How several series of one queue/running gauge combine, by ``MetricFamilies.combine_load``."""


RankTokens = tuple[tuple[str, int], ...]
"""``(rank, KV-cache tokens)`` of each engine in a pod, by its ``rank_label`` value (``""``: none)."""


@dataclass(slots=True, init=False, unsafe_hash=True)
class ParsedPage:
    """What one scrape's page yielded. Read-only and hashable by value, as the frozen dataclass it
    was, with the ``__init__`` written out (:class:`~igw.scheduling.values.EngineMetrics` says why:
    one per scrape)."""

    metrics: Final[EngineMetrics]
    missing: Final[frozenset[str]]
    """Expected families absent from the page (the preferred KV name counts even when a deprecated
    fallback supplied the value: that endpoint runs a version we should warn about)."""
    kv_source: Final[str | None]
    """The family the KV value came from, or ``None``."""
    rank_tokens: Final[RankTokens]
    """Each rank's KV-cache capacity in tokens, when the page gives every rank's (the weights of
    :func:`kv_share`; a page template re-reads the usage with them); empty otherwise."""

    def __init__(
        self,
        metrics: EngineMetrics,
        missing: frozenset[str],
        kv_source: str | None,
        rank_tokens: RankTokens = (),
    ) -> None:
        self.metrics = metrics
        self.missing = missing
        self.kv_source = kv_source
        self.rank_tokens = rank_tokens


HINT_WINDOW: Final = 4096
"""Characters before a family's previous position where the search for it starts (values that grew
or shrank earlier on the page move it by a few characters; a family that moved further is found by
searching the rest of the page)."""

FamilyStarts = dict[str, int]
"""Family -> where its first sample line started on the endpoint's previous page (a search hint)."""


SMALL_PAGE: Final = 8192
"""Pages up to this many characters are read in one pass over their lines (:func:`index_families`)."""

Samples = list[tuple[str, str]]
"""``(label text, value text)`` of a family's sample lines."""


def _sample(rest: str, out: Samples) -> None:
    """Append the sample whose line continues with ``rest`` after the family name."""
    if rest[0] == "{":
        close = rest.rfind("}")
        values = rest[close + 1 :].split()
        if close > 0 and values:
            out.append((rest[1:close], values[0]))
    else:
        values = rest.split()
        if values:
            out.append(("", values[0]))


def index_families(text: str, names: frozenset[str]) -> dict[str, Samples]:
    """The samples of each family in ``names`` on ``text``, in one pass over its lines: like
    :func:`series` for each name (the first group of consecutive sample lines), without a search."""
    out: dict[str, Samples] = {}
    previous: str | None = None
    group: Samples | None = None
    for line in text.split("\n"):
        if not line or line[0] == "#":
            previous = None
            continue
        brace, space = line.find("{"), line.find(" ")
        end = brace if space == -1 or (brace != -1 and brace < space) else space
        if end <= 0:
            previous = None  # not a sample line: it ends any group, as in series()
            continue
        name = line[:end]
        if name != previous:
            previous = name
            group = None
            if name in names and name not in out:
                group = out[name] = []
        if group is not None:
            _sample(line[end:], group)
    return out


def _is_sample(text: str, i: int, name: str) -> bool:
    """True when the line at ``i`` is a sample of exactly ``name`` (not of a longer name it prefixes)."""
    j = i + len(name)
    return text.startswith(name, i) and text[j : j + 1] in ("{", " ")


def _first_sample(text: str, name: str, lo: int = 0, hi: int | None = None) -> int:
    """Index of the first line in ``text[lo:hi]`` that is a sample of ``name``, or -1."""
    if lo == 0 and _is_sample(text, 0, name):
        return 0
    needle = "\n" + name
    end = len(text) if hi is None else min(len(text), hi + len(needle))
    k = text.find(needle, max(0, lo - 1), end)
    while k != -1:
        if _is_sample(text, k + 1, name):
            return k + 1
        k = text.find(needle, k + 1, end)
    return -1


def _group_start(text: str, name: str, hint: int | None) -> int:
    """Where the samples of ``name`` start: near ``hint`` when it still holds, else by a full search.

    Only the part of the page the hint skipped is searched again when the family is not found after
    it, so an absent family costs one scan of the page, as without a hint.
    """
    if hint is None:
        return _first_sample(text, name)
    lo = max(0, hint - HINT_WINDOW)
    i = _first_sample(text, name, lo)
    if i == -1:
        return _first_sample(text, name, 0, lo) if lo else -1
    if i > 0 and lo > 0:
        previous = text.rfind("\n", 0, i - 1) + 1
        if _is_sample(text, previous, name):  # started inside the group: its start lies before lo
            return _first_sample(text, name)
    return i


def series(text: str, name: str, starts: FamilyStarts | None = None) -> Samples:
    """``(label text, value text)`` of every sample line of family ``name`` (exact name match).

    The exposition format keeps all lines of a family in one group, so reading stops at the first
    line after the group instead of searching the rest of the page. ``starts`` (one per endpoint)
    remembers where each family began, so the next page of the same endpoint is searched from there.
    """
    i = _group_start(text, name, None if starts is None else starts.get(name))
    if starts is not None:
        if i == -1:
            starts.pop(name, None)
        else:
            starts[name] = i
    out: Samples = []
    size = len(name)
    while i != -1 and _is_sample(text, i, name):
        j = i + size
        end = text.find("\n", j)
        _sample(text[j:] if end == -1 else text[j:end], out)
        i = -1 if end == -1 else end + 1
    return out


def parse_labels(text: str) -> dict[str, str]:
    return {
        k: _ESC.sub(lambda m: _UNESCAPE[m.group(0)], v) if "\\" in v else v for k, v in _LABEL.findall(text)
    }


@functools.lru_cache(maxsize=256)
def _spec(spec: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return parse_metric_spec(spec)


def spec_series(text: str, spec: str, starts: FamilyStarts | None = None) -> Samples:
    """:func:`series` of the spec's family, keeping only series whose labels include the spec's."""
    name, want = _spec(spec)
    return _matching(series(text, name, starts), want)


def _matching(found: Samples, want: tuple[tuple[str, str], ...]) -> Samples:
    if not want:
        return found
    return [(lt, v) for lt, v in found if all(parse_labels(lt).get(k) == val for k, val in want)]


@functools.lru_cache(maxsize=64)
def _family_names(families: MetricFamilies) -> frozenset[str]:
    """Every family name ``families`` reads (metric specs' labels dropped)."""
    specs = [families.waiting, families.running, *families.kv_usage]
    names = {_spec(s)[0] for s in specs}
    names.update(n for n in (families.lora, families.cache_config) if n is not None)
    names.update(families.cache_gauges or ())
    return frozenset(names)


INFO_CACHE_CHARS: Final = 4096
"""Longest info-gauge label text whose parse is remembered (a real ``vllm:cache_config_info`` series
has ~20 labels in ~550 characters)."""


@functools.lru_cache(maxsize=1024)
def _remembered_info_labels(text: str) -> Mapping[str, str]:
    return parse_labels(text)


def _info_labels(text: str) -> Mapping[str, str]:
    """:func:`parse_labels` of an info gauge's label text, remembered when it is no longer than
    :data:`INFO_CACHE_CHARS`: a cache-config series is the same on every page of a pod (read only;
    never mutated). A longer one is parsed each time: remembered, a pod whose cache-config series
    carried a long label value that changed on every page kept each page's text and its parse in the
    cache, 1,024 of them - 4 MB per scrape for a 2 MB value, 1.2 GB after 300 scrapes (15 s at the
    50 ms interval), up to 32 GB with 16 MiB pages."""
    if len(text) > INFO_CACHE_CHARS:
        return parse_labels(text)
    return _remembered_info_labels(text)


def _values(samples: Samples) -> list[float]:
    """The sample values that can be a queue length, a batch size or a cache's used share: finite and
    not negative. ``NaN``, ``+Inf`` and ``-Inf`` (valid in the exposition format, and what ``1e400``
    reads as) and negative numbers (what only a broken exporter prints for these gauges) count as
    absent, like a value that is not a number. Before, ``int(NaN)`` and ``int(inf)`` raised out of
    the parse on every scrape of such a pod, a NaN KV gauge reached the scorers, and a negative queue
    made its pod look the least loaded of all."""
    out: list[float] = []
    for _, raw in samples:
        try:
            value = float(raw)
        except ValueError:
            continue
        if 0.0 <= value < math.inf:  # finite and not negative (a NaN fails every comparison)
            out.append(value)
    return out


def kv_shares(values: list[float], ranks: list[str]) -> dict[str, float]:
    """Each rank's KV-cache used share from its readable values (:func:`_values`) that can be one: at
    most 1 (every engine's gauge is a fraction, 0..1, :mod:`igw.engines`). A larger value is an
    exporter printing a percentage or a broken one, and counts as absent: taken as it was, it made its
    pod read as full and the gateway skip it, or answer 429 when every pod printed percentages, with
    nothing saying why. Several values of one rank (its TP ranks): the largest."""
    kept = [(value, rank) for value, rank in zip(values, ranks, strict=True) if value <= 1.0]
    return rank_maxima([value for value, _ in kept], [rank for _, rank in kept])


MAX_LISTED_ADAPTERS: Final = 1024
"""Most adapter names one ``running_lora_adapters`` / ``waiting_lora_adapters`` label may list. An
engine lists the adapters in its batch or queue, bounded by its LoRA slots (``max_loras``, tens at
most); a longer list is a broken or hostile page, and taken as it was it cost a set of every name
per scrape and one ``igw_endpoint_lora_adapter`` series per name (a 16 MiB page can name a million)."""
MAX_ADAPTER_NAME: Final = 256
"""Longest adapter name taken from a page (a LoRA module's served name; longer ones are refused as
above)."""


def _split_adapters(value: str | None) -> frozenset[str] | None:
    """The adapter names of a comma-separated label value; ``None`` when it lists more than
    :data:`MAX_LISTED_ADAPTERS` or a name longer than :data:`MAX_ADAPTER_NAME` (the caller reports
    the label as a missing signal)."""
    if not value:
        return frozenset()
    if value.count(",") >= MAX_LISTED_ADAPTERS:  # counted in C before any split of a long value
        return None
    names = frozenset(a for a in value.split(",") if a)
    if any(len(a) > MAX_ADAPTER_NAME for a in names):
        return None
    return names


def combine_scoped(
    values: Sequence[float], scopes: Sequence[str], combine: Callable[[Sequence[float]], float]
) -> float:
    """``values`` combined by ``combine`` within each scope (``scopes[i]`` is ``values[i]``'s) and
    summed across scopes: SGLang with data parallelism publishes one queue per ``dp_rank``, and the
    largest of them under-counted a pod with several ranks busy."""
    groups: dict[str, list[float]] = {}
    for value, scope in zip(values, scopes, strict=True):
        groups.setdefault(scope, []).append(value)
    return sum(combine(group) for group in groups.values())


def rank_maxima(values: Sequence[float], ranks: Sequence[str]) -> dict[str, float]:
    """The largest of ``values`` within each rank (``ranks[i]`` is ``values[i]``'s): the TP ranks of
    one SGLang scheduler repeat its numbers."""
    out: dict[str, float] = {}
    for value, rank in zip(values, ranks, strict=True):
        if rank not in out or value > out[rank]:
            out[rank] = value
    return out


def kv_share(usage: Mapping[str, float], tokens: RankTokens) -> float:
    """The KV-cache used share of a pod from each rank's (``usage``, rank -> share) and each rank's
    capacity (``tokens``): the capacity-weighted mean, i.e. the pod's used tokens over its tokens.

    Why not the largest rank's share, which is what was read before: each data-parallel rank is a
    scheduler with its own KV pool (SGLang's ``dp_rank``, vLLM's ``engine``), and the pod spreads
    requests over all of them - SGLang's default ``--load-balance-method`` (``auto``: round robin
    outside prefill/decode disaggregation) deals requests to the ranks in turn whatever their fill,
    vLLM's internal balancer sends each to its least-loaded engine - so the requests the gateway sends
    a pod until the next scrape land on every rank, and what they meet is the pod's fill, not its
    fullest rank's. The largest share made a pod with one busy rank look full: the KV scorer ranked
    it last, and the saturation check refused requests (429) while the other ranks held free
    blocks. The weights make the share agree with the capacity the page reports (its tokens summed
    over ranks): share x capacity = the tokens in use. Without every rank's capacity the ranks count
    equally (they run the same model with the same flags). One rank: its share, unchanged."""
    if len(usage) == 1:
        return next(iter(usage.values()))
    weights = dict(tokens)
    if not weights or not usage.keys() <= weights.keys():
        return sum(usage.values()) / len(usage)
    total = sum(weights[rank] for rank in usage)
    return min(1.0, sum(share * weights[rank] for rank, share in usage.items()) / total)


def label_signal(family: str, label: str) -> str:
    """The name a missing or unparseable integer label is reported under: ``family{label}``."""
    return f"{family}{{{label}}}"


def _whole(value: float) -> int | None:
    """``value`` as a whole number above 0 (a block size or a block count), else ``None``."""
    return int(value) if value >= 1 and value == int(value) else None


class _PageReader:
    """The reads :func:`parse_page` makes of one page, and the signals it found missing.

    A class rather than nested functions: compiled by mypyc, nested functions that call one another
    share an environment object that holds them, a reference cycle that kept each page's text (up to
    16 MiB) until the cyclic collector ran - one page per parse piling up between collections (30 MB
    after 30 pages of 1 MB, session s40's compiled-build test); interpreted they freed it at once."""

    def __init__(self, text: str, families: MetricFamilies, starts: FamilyStarts | None) -> None:
        self.text = text
        self.starts = starts
        self.index = index_families(text, _family_names(families)) if len(text) <= SMALL_PAGE else None
        self.missing: set[str] = set()
        self.combine = COMBINE[families.combine_load]
        self.scope = families.rank_label

    def found(self, name: str) -> Samples:
        index = self.index
        return series(self.text, name, self.starts) if index is None else index.get(name, [])

    def matching(self, spec: str) -> Samples:
        name, want = _spec(spec)
        return _matching(self.found(name), want)

    def int_label(self, labels: Mapping[str, str], family: str, key: str) -> int | None:
        raw = labels.get(key, "").strip()
        if raw.isdigit():
            return int(raw)
        self.missing.add(label_signal(family, key))  # absent or not an integer: a missing signal
        return None

    def ranked(self, samples: Samples) -> tuple[list[float], list[str]]:
        """The readable values of ``samples`` (:func:`_values`) and each one's rank."""
        scope = self.scope
        if scope is None or len(samples) < 2:  # one engine: no labels to split (the usual page)
            readable = _values(samples)
            return readable, [""] * len(readable)
        values: list[float] = []
        ranks: list[str] = []
        for label_text, raw in samples:
            for value in _values([(label_text, raw)]):
                values.append(value)
                ranks.append(parse_labels(label_text).get(scope, ""))
        return values, ranks

    def load(self, name: str) -> int | None:
        samples = self.matching(name)
        if self.scope is None or len(samples) < 2:
            values = _values(samples)
            total = self.combine(values) if values else math.nan
        else:
            values, scopes = self.ranked(samples)
            total = combine_scoped(values, scopes, self.combine) if values else math.nan
        if not math.isfinite(total):  # no finite value, or series summing past the largest float
            self.missing.add(name)
            return None
        return int(total)


def parse_page(text: str, families: MetricFamilies, starts: FamilyStarts | None = None) -> ParsedPage:
    """The routing signals on ``text``; ``starts`` is the endpoint's search hints (see :func:`series`)."""
    page = _PageReader(text, families, starts)
    missing = page.missing
    scope = page.scope

    waiting = page.load(families.waiting)
    running = page.load(families.running)

    active: frozenset[str] | None = None
    waiting_adapters: frozenset[str] | None = None
    max_lora: int | None = None
    if families.lora is not None:
        lora_series = page.found(families.lora)
        if not lora_series:
            missing.add(families.lora)
        else:
            best: tuple[float, dict[str, str]] | None = None
            fallback: dict[str, str] = {}
            for label_text, raw in lora_series:
                labels = parse_labels(label_text)
                fallback = labels
                if not labels.get("running_lora_adapters") and not labels.get("waiting_lora_adapters"):
                    continue
                try:
                    value = float(raw)
                except ValueError:
                    continue
                if best is None or value > best[0]:
                    best = (value, labels)
            chosen = best[1] if best is not None else fallback
            active = _split_adapters(chosen.get("running_lora_adapters"))
            waiting_adapters = _split_adapters(chosen.get("waiting_lora_adapters"))
            for label, names in (
                ("running_lora_adapters", active),
                ("waiting_lora_adapters", waiting_adapters),
            ):
                if names is None:  # over the bounds: the pod's adapters are unknown, and it says so
                    missing.add(label_signal(families.lora, label))
            max_lora = page.int_label(chosen, families.lora, "max_lora")
            if active is None or waiting_adapters is None:
                # Unknown as a whole: the LoRA filter and scorer treat a pod without max_lora as
                # saying nothing about adapters (with only the lists dropped, its slots looked free).
                active = waiting_adapters = max_lora = None

    # KV capacity of each rank: (block size, blocks), by rank, in page order
    capacity: dict[str, tuple[int | None, int | None]] = {}
    if families.cache_config is not None:
        cache = page.found(families.cache_config)
        gauges = families.cache_gauges
        if cache:
            for label_text, _ in cache:
                info = _info_labels(label_text)
                rank = info.get(scope, "") if scope is not None else ""
                if rank not in capacity:  # a rank's first series (its TP ranks repeat it)
                    capacity[rank] = (
                        page.int_label(info, families.cache_config, families.block_size_label),
                        page.int_label(info, families.cache_config, families.num_blocks_label),
                    )
        elif (
            gauges is not None
            and (sizes := rank_maxima(*page.ranked(page.found(gauges[0]))))
            and (counts := rank_maxima(*page.ranked(page.found(gauges[1]))))
        ):
            # the engine's plain gauges instead (current SGLang): whole, positive numbers only, for
            # the same ranks
            for rank in [*sizes, *(r for r in counts if r not in sizes)]:
                size, count = sizes.get(rank), counts.get(rank)
                capacity[rank] = (
                    None if size is None else _whole(size),
                    None if count is None else _whole(count),
                )
            if any(None in pair for pair in capacity.values()):
                missing.add(families.cache_config)
        else:
            missing.add(families.cache_config)
    # The pod's cache: every rank's tokens summed (each rank is an engine with its own KV pool; the
    # first series alone was one rank's), in blocks of the first rank's size (the ranks run the
    # same flags, so their sizes agree). A rank without its figures leaves the total unknown.
    block_size = next(iter(capacity.values()))[0] if capacity else None
    num_blocks: int | None = None
    rank_tokens: RankTokens = ()
    if block_size is not None:
        known = [(rank, size * count) for rank, (size, count) in capacity.items() if size and count]
        if len(known) == len(capacity):
            rank_tokens = tuple(known)
            num_blocks = sum(tokens for _, tokens in known) // block_size

    kv_usage: float | None = None
    kv_source: str | None = None
    for name in families.kv_usage:
        if usage := kv_shares(*page.ranked(page.matching(name))):
            kv_usage, kv_source = kv_share(usage, rank_tokens), name
            break
    if families.kv_usage and kv_source != families.kv_usage[0]:
        missing.add(families.kv_usage[0])

    metrics = EngineMetrics(
        waiting=waiting,
        running=running,
        kv_usage=kv_usage,
        active_adapters=active,
        waiting_adapters=waiting_adapters,
        max_lora=max_lora,
        block_size=block_size,
        num_gpu_blocks=num_blocks,
    )
    return ParsedPage(
        metrics=metrics, missing=frozenset(missing), kv_source=kv_source, rank_tokens=rank_tokens
    )
