"""Re-read an endpoint's small ``/metrics`` page by its shape, when only the values moved.

A filtered page (:mod:`igw.gateway.page_filter`) is about 19 lines, and from one scrape of a pod to
the next only the sample values change: the comment lines, the family names and the label text stay
byte-identical. :func:`igw.gateway.metrics_parser.parse_page` still finds every family, splits labels
and builds its result each time. A :class:`PageTemplate`, built from one full reading, holds every
line of that page up to its value; the next page is checked line by line against it (the same number
of lines, every non-sample line identical, every sample line starting with the same name and labels)
and, when it matches, only the values of the queue, running and KV-cache lines are read - everything
that comes from labels (LoRA adapters, cache config) and what the page lacks cannot have changed.
Any difference in shape, a value that is not a number or a timestamp after it, goes back to the full
parser, which builds the next template; ``tests/gateway/test_page_template.py`` checks both readings
give the same result.

Written here rather than taken from a library: the Prometheus text parsers available parse a whole
page into objects, which is the cost this avoids.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Final

from igw.engines import MetricFamilies, parse_metric_spec
from igw.gateway.metrics_parser import (
    COMBINE,
    SMALL_PAGE,
    FamilyStarts,
    ParsedPage,
    combine_scoped,
    kv_share,
    kv_shares,
    parse_labels,
    parse_page,
)
from igw.scheduling.types import EngineMetrics

_WAITING: Final = 0
_RUNNING: Final = 1
_KV: Final = 2
"""Roles of the value lines: queue, running, then one per KV-cache spec in preference order."""


def _pick(indices: Sequence[int]) -> Callable[[list[str]], tuple[str, ...]]:
    """A C-speed ``lines -> tuple of lines[i] for i in indices`` (always a tuple)."""
    if not indices:
        return lambda lines: ()
    get = operator.itemgetter(*indices)
    if len(indices) == 1:
        return lambda lines: (get(lines),)
    return get


class PageTemplate:
    """The shape of one small page: what stays the same from scrape to scrape (see the module docstring)."""

    __slots__ = (
        "_combine",
        "_fixed",
        "_fixed_text",
        "_kv_roles",
        "_last",
        "_last_values",
        "_lines",
        "_prefixes",
        "_ranks",
        "_samples",
        "_scopes",
        "_values",
        "families",
    )

    def __init__(
        self,
        *,
        families: MetricFamilies,
        base: ParsedPage,
        lines: int,
        fixed: dict[int, str],
        samples: dict[int, str],
        values: list[tuple[int, int, int]],
        scopes: list[str] | None = None,
    ) -> None:
        self.families = families
        self._last = base
        """The latest reading through this template (its labels' part never changes)."""
        self._combine = COMBINE[families.combine_load]
        self._kv_roles = len(families.kv_usage)
        self._lines = lines
        self._fixed = _pick(list(fixed))
        self._fixed_text = tuple(fixed.values())
        self._samples = _pick(list(samples))
        self._prefixes = tuple(samples.values())
        self._values = tuple(values)
        """(line index, prefix length, role) of each line whose value routing reads."""
        self._last_values: list[float] | None = None
        self._scopes = None if scopes is None else tuple(scopes)
        """Each value line's ``rank_label`` value (``None``: the engine has no such label)."""
        self._ranks: list[list[str]] = [
            [rank for (_, _, r), rank in zip(values, scopes or (), strict=False) if r == role]
            for role in range(_KV + self._kv_roles)
        ]
        """The ranks of each role's value lines, in order (empty without ``_scopes``)."""

    def read(self, text: str) -> ParsedPage | None:
        """``text`` read through the template, or ``None`` when its shape differs."""
        lines = text.split("\n")
        if len(lines) != self._lines or self._fixed(lines) != self._fixed_text:
            return None
        if not all(map(str.startswith, self._samples(lines), self._prefixes)):
            return None
        try:
            values = [float(lines[index][start:]) for index, start, _ in self._values]
        except ValueError:
            return None  # not a plain number (or a timestamp follows): the full parser decides
        if not math.isfinite(sum(values)) or (values and min(values) < 0.0):
            # a NaN, an infinity, a sum past the largest float or a negative value: the full parser
            # decides (it counts such a value as absent)
            return None
        if values == self._last_values:
            return self._last  # the gauges did not move (only counters did): the same reading
        found: list[list[float]] = [[] for _ in range(_KV + self._kv_roles)]
        for (_, _, role), value in zip(self._values, values, strict=True):
            found[role].append(value)
        loads: list[float | None] = []
        for role in (_WAITING, _RUNNING):
            if not found[role]:
                loads.append(None)
            elif self._scopes is None or len(found[role]) < 2:
                loads.append(self._combine(found[role]))
            else:  # combined within each rank (SGLang's dp_rank, vLLM's engine), summed across ranks
                loads.append(combine_scoped(found[role], self._ranks[role], self._combine))
        kv_usage = None
        for role in range(_KV, _KV + self._kv_roles):
            if kv := found[role]:
                if max(kv) > 1.0:
                    return None  # not a fraction: the full parser decides (it counts it as absent)
                if len(kv) == 1 or self._scopes is None:
                    kv_usage = max(kv)
                else:  # each rank's share, weighted by its capacity (as the full parser reads it)
                    kv_usage = kv_share(kv_shares(kv, self._ranks[role]), self._last.rank_tokens)
                break
        base = self._last
        old = base.metrics
        metrics = EngineMetrics(
            waiting=None if loads[0] is None else int(loads[0]),
            running=None if loads[1] is None else int(loads[1]),
            kv_usage=kv_usage,
            active_adapters=old.active_adapters,
            waiting_adapters=old.waiting_adapters,
            max_lora=old.max_lora,
            block_size=old.block_size,
            num_gpu_blocks=old.num_gpu_blocks,
        )
        self._last_values = values
        self._last = ParsedPage(
            metrics=metrics, missing=base.missing, kv_source=base.kv_source, rank_tokens=base.rank_tokens
        )
        return self._last


def _readable(lines: list[str], values: list[tuple[int, int, int]]) -> bool:
    """Whether every value line routing reads holds a value the full parser takes (a finite number,
    not negative, at most 1 for a KV gauge; the lines' sum finite). The full reading of a page with
    another value lists that signal as missing, or takes the KV gauge from the older family name, and
    a template keeps its base's missing signals and KV source for every page it reads: built from such
    a page, it went on reporting the signal missing once the values were fine again."""
    try:
        numbers = [(float(lines[index][start:]), role) for index, start, role in values]
    except ValueError:
        return False
    if not math.isfinite(sum(v for v, _ in numbers)):
        return False
    return all(v >= 0.0 and (role < _KV or v <= 1.0) for v, role in numbers)


def build_template(text: str, families: MetricFamilies, base: ParsedPage) -> PageTemplate | None:
    """The template of ``text`` (whose full reading is ``base``), or ``None`` where values cannot be
    re-read by position: a page over :data:`SMALL_PAGE`, a sample with a timestamp, more than one
    LoRA series (the newest one, by value, is chosen), or a routing value the full parser does not
    take (:func:`_readable`)."""
    if len(text) > SMALL_PAGE:
        return None
    specs = [parse_metric_spec(s) for s in (families.waiting, families.running, *families.kv_usage)]
    lines = text.split("\n")
    fixed: dict[int, str] = {}
    samples: dict[int, str] = {}
    values: list[tuple[int, int, int]] = []
    scope = families.rank_label
    capacity_gauges = frozenset(families.cache_gauges or ())
    scopes: list[str] = []
    started: set[str] = set()
    previous: str | None = None
    first_group = False
    lora_lines = 0
    for i, line in enumerate(lines):
        brace, space = line.find("{"), line.find(" ")
        end = brace if space == -1 or (brace != -1 and brace < space) else space
        if not line or line[0] == "#" or end <= 0:
            fixed[i] = line  # as in index_families: not a sample line, ends any group
            previous = None
            continue
        name = line[:end]
        if name in capacity_gauges:
            # a KV capacity read from its value (SGLang's page_size / num_pages): the template keeps
            # the base page's capacity, so that value must stay what it was, as a label would
            fixed[i] = line
            previous = name
            started.add(name)
            continue
        if name != previous:  # a new group: only a family's first group counts, as in index_families
            previous = name
            first_group = name not in started
            started.add(name)
        close = line.rfind("}") if brace == end else end
        if close < end:
            return None
        after = line[close + 1 :] if brace == end else line[end:]
        value = after.strip()
        if not value or " " in value:
            return None  # no value, or a timestamp after it
        start = len(line) - len(after.lstrip())
        samples[i] = line[:start]
        if not first_group:
            continue
        if name == families.lora:
            lora_lines += 1
        label_text = line[end + 1 : close] if brace == end else ""
        for role, (family, want) in enumerate(specs):
            if family == name and (not want or all(parse_labels(label_text).get(k) == v for k, v in want)):
                values.append((i, start, role))
                if scope is not None:
                    scopes.append(parse_labels(label_text).get(scope, ""))
    if lora_lines > 1 or not _readable(lines, values):
        return None
    return PageTemplate(
        families=families,
        base=base,
        lines=len(lines),
        fixed=fixed,
        samples=samples,
        values=values,
        scopes=None if scope is None else scopes,
    )


class PageReader:
    """One endpoint's page reading: through the template of its previous small page where the shape
    still matches, else by the full parser (which makes the next template)."""

    __slots__ = ("_template",)

    def __init__(self) -> None:
        self._template: PageTemplate | None = None

    def read(self, text: str, families: MetricFamilies, starts: FamilyStarts | None = None) -> ParsedPage:
        template = self._template
        if template is not None and template.families is families:
            parsed = template.read(text)
            if parsed is not None:
                return parsed
        parsed = parse_page(text, families, starts)
        self._template = build_template(text, families, parsed)
        return parsed
