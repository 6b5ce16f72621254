"""Ask a model server for only the metric families routing reads, not its whole ``/metrics`` page.

vLLM and SGLang serve ``/metrics`` through prometheus_client's exposition app, which honours
``?name[]=<sample name>`` (repeated): the answer holds only those samples, each under its family's
``# HELP`` / ``# TYPE`` lines. A 47 KB vLLM page becomes under 2 KB, so there is less to
send, receive, hash and parse on every scrape, on both sides. Which engines may be asked this way is
the engine catalogue's ``MetricFamilies.name_filter``; their ``activity`` samples (token counters)
are asked for too, so that a filtered page still moves with every request the server works on and a
frozen page is still detected.

The filter selects *sample* names, not family names: a counter family ``x`` is asked for as
``x_total``, a gauge as its own name. Servers that do not honour it are recognised by the answer:
a page with a sample that was not asked for ignored the filter (:func:`unrequested_sample`); the
scraper then reads the whole page, which it parses the same way.
"""

from __future__ import annotations

import functools
from typing import Final
from urllib.parse import urlencode

from igw.engines import MetricFamilies, metric_family

METRICS_PATH: Final = "/metrics"
FILTER_PARAM: Final = "name[]"


def filter_names(families: MetricFamilies) -> tuple[str, ...]:
    """The sample names to ask for: every routing family (label filters of metric specs dropped; the
    parser applies them) and the engine's activity samples, in a stable order without repeats."""
    names = [families.waiting, families.running, *families.kv_usage]
    if families.lora is not None:
        names.append(families.lora)
    if families.cache_config is not None:
        names.append(families.cache_config)
    names.extend(families.cache_gauges or ())
    return tuple(dict.fromkeys([*(metric_family(n) for n in names), *families.activity]))


@functools.lru_cache(maxsize=64)
def filter_path(families: MetricFamilies) -> str | None:
    """``/metrics?name[]=...`` for ``families``, or ``None`` when the engine does not support the filter."""
    if not families.name_filter:
        return None
    return f"{METRICS_PATH}?{urlencode([(FILTER_PARAM, name) for name in filter_names(families)])}"


def unrequested_sample(text: str, names: frozenset[str]) -> str | None:
    """The first sample on ``text`` whose name is not in ``names`` (the server ignored the filter),
    or ``None`` when every sample was asked for. Comment lines are skipped."""
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for stop in ("{", " "):
            found = line.find(stop)
            if found != -1:
                end = min(end, found)
        if line[:end] not in names:
            return line[:end]
    return None
