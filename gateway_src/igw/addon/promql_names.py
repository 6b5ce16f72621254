"""The metric names and label names a PromQL expression reads, so alerts and dashboards can be checked
against a scrape."""

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

    Written by hand: it covers the grammar the chart's alerts and dashboards use (selectors with
    matchers, range vectors, function calls, aggregations with grouping, vector matching and binary
    operators, Grafana ``$variables``) without a dependency. The maintained parser on PyPI
    (``promql-parser``, a binding of GreptimeDB's Rust parser) is not one of the project's; on the 74
    shipped expressions this module's names, matcher labels and grouping labels were compared with
    its parse tree in session s40 and agreed.
    """
    bare = _GROUPING.sub(" ", _BRACED.sub(" ", _STRING.sub(" ", expr)))
    return {name for name in _IDENT.findall(bare) if name not in _KEYWORDS}


_SELECTOR: Final = re.compile(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER: Final = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"')
_GROUP_LABELS: Final = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_TEMPLATE_LABEL: Final = re.compile(r"\{\{\s*(?:\$labels\.)?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def matcher_labels(expr: str) -> dict[str, set[str]]:
    """Per metric ``expr`` selects with label matchers (``name{label="..."}``): the label names its
    matchers test. A matcher on a label the series does not carry compares with ``""``, so a
    misspelt one silently selects nothing (``=``) or everything (``!=``)."""
    found: dict[str, set[str]] = {}
    for name, matchers in _SELECTOR.findall(expr):
        found.setdefault(name, set()).update(_MATCHER.findall(matchers))
    return found


def grouping_labels(expr: str) -> set[str]:
    """The label names of ``expr``'s ``by``/``without`` groupings and ``on``/``ignoring``/
    ``group_left``/``group_right`` vector matchings (a label no operand carries groups every series
    into one, or matches nothing)."""
    bare = _STRING.sub(" ", expr)
    return {
        label.strip() for group in _GROUP_LABELS.findall(bare) for label in group.split(",") if label.strip()
    }


def template_labels(text: str) -> set[str]:
    """The labels a Grafana legend (``{{endpoint}}``) or an alert annotation (``{{ $labels.model }}``)
    prints."""
    return set(_TEMPLATE_LABEL.findall(text))
