"""The metadata rules the real API server enforces on every create and update.

Without them the fake accepted what a cluster refuses: an operator deriving a Service name longer
than 63 characters, or a label value with a slash, passed every test here and would fail on the
first real cluster. Rules (apimachinery's validation, as documented in "Object Names and IDs" and
"Labels and Selectors"): Services are RFC 1035 labels, Namespaces RFC 1123 labels, RBAC objects
path segments, every other kind an RFC 1123 subdomain; label keys are an optional DNS-subdomain
prefix and a 63-character name, label values at most 63 characters; a Deployment's selector and
pod-template labels follow the label rules too. Violations are 422 ``Invalid`` with the field path,
as the real server answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

RBAC_KINDS = frozenset({"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"})


def _format(value: str, pattern: re.Pattern[str], limit: int, what: str) -> list[str]:
    problems = []
    if len(value) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not pattern.fullmatch(value):
        problems.append(f"a {what} must consist of {_EXPLAINED[what]}")
    return problems


_EXPLAINED = {
    "lowercase RFC 1123 label": "lower case alphanumeric characters or '-', and must start and end with an "
    "alphanumeric character",
    "lowercase RFC 1123 subdomain": "lower case alphanumeric characters, '-' or '.', and must start and end "
    "with an alphanumeric character",
    "DNS-1035 label": "lower case alphanumeric characters or '-', start with an alphabetic character, "
    "and end with an alphanumeric character",
    "qualified name": "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character",
    "valid label": "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character",
}


def name_problems(kind: str, name: str) -> list[str]:
    if kind == "Service":
        return _format(name, _DNS1035_LABEL, 63, "DNS-1035 label")
    if kind == "Namespace":
        return _format(name, _DNS1123_LABEL, 63, "lowercase RFC 1123 label")
    if kind in RBAC_KINDS:
        bad = name in (".", "..") or "/" in name or "%" in name
        return ["may not contain '/' or '%' and may not be '.' or '..'"] if bad else []
    return _format(name, _DNS1123_SUBDOMAIN, 253, "lowercase RFC 1123 subdomain")


def _key_problems(key: str) -> list[str]:
    """A label's or an annotation's key: a qualified name after an optional DNS-subdomain prefix."""
    prefix, _, name = key.rpartition("/")
    problems = _format(name, _QUALIFIED_NAME, 63, "qualified name")
    if prefix:
        problems += _format(prefix, _DNS1123_SUBDOMAIN, 253, "lowercase RFC 1123 subdomain")
    return problems


def label_problems(labels: Any, field: str) -> Iterator[str]:
    if labels is None:
        return
    if not isinstance(labels, Mapping):
        yield f"{field}: Invalid value: must be a map of strings"
        return
    for key, value in labels.items():
        for problem in _key_problems(str(key)):
            yield f'{field}: Invalid value: "{key}": {problem}'
        if not isinstance(value, str):
            yield f"{field}: Invalid value: {value!r}: label values must be strings"
            continue
        for problem in _format(value, _LABEL_VALUE, 63, "valid label"):
            yield f'{field}[{key}]: Invalid value: "{value}": {problem}'


TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * 1024
"""apimachinery's ``TotalAnnotationSizeLimitB``: an object's annotations, keys and values together."""


def annotation_problems(annotations: Any, field: str) -> Iterator[str]:
    """``ValidateAnnotations``: keys are qualified names (an optional prefix of lower case), and all of
    them with their values at most 256 KiB. Without the bound the fake stored what a cluster refuses:
    ``kubectl apply``'s last-applied copy and kopf's own copy of a large spec, together over it."""
    if annotations is None:
        return
    if not isinstance(annotations, Mapping):
        yield f"{field}: Invalid value: must be a map of strings"
        return
    total = 0
    for key, value in annotations.items():
        for problem in _key_problems(str(key)):
            yield f'{field}: Invalid value: "{key}": {problem}'
        total += len(str(key).encode()) + len(str(value).encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        yield f"{field}: Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes"


def object_problems(kind: str, obj: Mapping[str, Any]) -> list[str]:
    """Every rule ``obj`` (about to be stored as ``kind``) breaks, as the API server words them."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    problems = [f'metadata.name: Invalid value: "{name}": {p}' for p in name_problems(kind, name)]
    problems += label_problems(meta.get("labels"), "metadata.labels")
    problems += annotation_problems(meta.get("annotations"), "metadata.annotations")
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        spec = obj.get("spec") or {}
        problems += label_problems(
            (spec.get("selector") or {}).get("matchLabels"), "spec.selector.matchLabels"
        )
        template_meta = (spec.get("template") or {}).get("metadata") or {}
        problems += label_problems(template_meta.get("labels"), "spec.template.metadata.labels")
    return problems
