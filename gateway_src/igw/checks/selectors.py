"""Scheduler ``modelSelector`` matching and *near-miss* diagnosis.

"No pod matches" is the symptom; operators need the cause. For each pod that misses the selector
by exactly one requirement we say which one and how: a label key that is a typo of the wanted key,
a value that differs only in case or by a suffix/prefix, or a full match in another namespace
(schedulers only see pods in their own namespace).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from igw.checks.inventory import Manifest
from igw.checks.k8s import labels_of, namespace_of, ref
from igw.config.model import LabelSelector, LabelSelectorRequirement

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_from_mapping(raw: Mapping[str, Any] | None) -> LabelSelector:
    """Kubernetes ``LabelSelector`` JSON → :class:`LabelSelector`; ``ValueError`` naming the bad field."""
    if raw is None:
        return LabelSelector()
    if not isinstance(raw, Mapping):
        raise ValueError("modelSelector: expected an object with matchLabels/matchExpressions")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError("modelSelector.matchLabels: expected a mapping of label → value")
    expressions = []
    for index, expr in enumerate(raw.get("matchExpressions") or []):
        where = f"modelSelector.matchExpressions[{index}]"
        if not isinstance(expr, Mapping) or "key" not in expr or expr.get("operator") not in _OPERATORS:
            raise ValueError(f"{where}: needs key and operator in {', '.join(_OPERATORS)}")
        values = tuple(str(v) for v in expr.get("values") or ())
        expressions.append(
            LabelSelectorRequirement(key=str(expr["key"]), operator=expr["operator"], values=values)
        )
    return LabelSelector(
        match_labels={str(k): str(v) for k, v in labels.items()}, match_expressions=tuple(expressions)
    )


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _similar_key(wanted: str, have: str) -> bool:
    if wanted == have:
        return False
    norm = [k.lower().replace("_", "-").replace(".", "-") for k in (wanted, have)]
    return norm[0] == norm[1] or _edit_distance(wanted, have) <= max(1, min(2, len(wanted) // 4))


def _value_hint(wanted: str, have: str) -> str | None:
    if wanted == have:
        return None
    if wanted.lower() == have.lower():
        return "differs only in case"
    if have.startswith(wanted) or wanted.startswith(have):
        return "differs by a suffix"
    if have.endswith(wanted) or wanted.endswith(have):
        return "differs by a prefix"
    if _edit_distance(wanted, have) <= max(1, min(2, len(wanted) // 4)):
        return "differs by a typo"
    return None


def nearest_values(
    selector: LabelSelector, *, namespace: str, pods: Iterable[Manifest], limit: int = 3
) -> list[str]:
    """For each equality of ``selector``, the existing values of its key in ``namespace``, nearest first."""
    pods = list(pods)
    out: list[str] = []
    for key, wanted in selector.match_labels.items():
        values = {labels_of(p)[key] for p in pods if namespace_of(p) == namespace and key in labels_of(p)}
        values.discard(wanted)
        if values:
            ranked = sorted(values, key=lambda v: (_edit_distance(wanted, v), v))[:limit]
            out.append(f"existing values of {key} in {namespace!r}, nearest first: {', '.join(ranked)}")
    return out


@dataclass(frozen=True, slots=True)
class _Term:
    """One requirement of a selector, as an equality when it is one (for diagnosis)."""

    key: str
    values: tuple[str, ...]
    operator: str

    def ok(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


def _terms(selector: LabelSelector) -> list[_Term]:
    terms = [_Term(k, (v,), "In") for k, v in selector.match_labels.items()]
    terms.extend(_Term(e.key, e.values, e.operator) for e in selector.match_expressions)
    return terms


def _explain(term: _Term, labels: Mapping[str, str]) -> str | None:
    """Why ``labels`` fail ``term``, if it is a near miss worth telling; ``None`` otherwise."""
    if term.operator in ("In", "Exists"):
        if term.key in labels and term.operator == "In":
            for wanted in term.values:
                hint = _value_hint(wanted, labels[term.key])
                if hint:
                    return f"label {term.key}={labels[term.key]!r} {hint} from the selector's {wanted!r}"
            return None
        for key in labels:
            if _similar_key(term.key, key) and (term.operator == "Exists" or labels[key] in term.values):
                return f"label key {key!r} looks like a typo of the selector's {term.key!r}"
    return None


def diagnose(
    selector: LabelSelector, *, namespace: str, pods: Iterable[Manifest], limit: int = 3
) -> list[str]:
    """Up to ``limit`` human explanations of pods that almost match (empty when none are close)."""
    terms = _terms(selector)
    hints: list[str] = []
    elsewhere: dict[str, int] = {}
    for pod in pods:
        labels = labels_of(pod)
        failing = [t for t in terms if not t.ok(labels)]
        pod_ns = namespace_of(pod)
        if not failing:
            if pod_ns != namespace:
                elsewhere[pod_ns] = elsewhere.get(pod_ns, 0) + 1
            continue
        if len(failing) != 1 or len(hints) >= limit:
            continue
        why = _explain(failing[0], labels)
        if why:
            where = "" if pod_ns == namespace else f" (and it is in namespace {pod_ns!r})"
            hints.append(f"{ref(pod)}: {why}{where}")
    for ns, count in sorted(elsewhere.items()):
        hints.insert(
            0, f"{count} matching pod(s) in namespace {ns!r}; a scheduler only selects pods in {namespace!r}"
        )
    return hints[: limit + len(elsewhere)]


def matching(selector: LabelSelector, pods: Sequence[Manifest], *, namespace: str) -> list[Manifest]:
    return [p for p in pods if namespace_of(p) == namespace and selector.matches(labels_of(p))]


def by_namespace(objects: Iterable[Manifest]) -> dict[str, list[Manifest]]:
    """Index once per check so matching many selectors stays linear in the number of objects."""
    index: dict[str, list[Manifest]] = {}
    for obj in objects:
        index.setdefault(namespace_of(obj), []).append(obj)
    return index
