"""The metric names a PromQL expression reads, so alerts and dashboards can be checked against a scrape."""

from __future__ import annotations

import re
from typing import Final

_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACED: Final = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_GROUPING: Final = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT: Final = re.compile(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()")
_KEYWORDS: Final = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` reads: identifiers that are not functions, labels, keywords or
    durations.

    Written by hand because no maintained PromQL parser installs from PyPI; it covers the grammar the
    chart's alerts and dashboards use: selectors with matchers, range vectors, function calls,
    aggregations with grouping, vector matching and binary operators, Grafana ``$variables``.
    """
    bare = _GROUPING.sub(" ", _BRACED.sub(" ", _STRING.sub(" ", expr)))
    return {name for name in _IDENT.findall(bare) if name not in _KEYWORDS}
