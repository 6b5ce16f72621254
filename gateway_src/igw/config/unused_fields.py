"""AWS's InferenceGatewayConfig fields that igw accepts but does not act on, named path by path.

The contract is AWS's shape, so a file written for AWS's gateway validates here unchanged; a few of
its fields configure parts AWS runs and igw does not (separate BBR pods, an OpenTelemetry sidecar,
one endpoint-picker container per scheduler, HTTP/2 to model servers). The CRD descriptions said so,
but ``igw validate`` passed such a file without a word, and a user migrating from AWS expected e.g.
``logLevel: 4`` to raise a log level. :func:`unused_field_notes` lists every such field a document
sets, each with its path and what igw does instead; ``igw validate`` prints them as notes and its
exit code does not change (the document is valid). ``bbr.enabled: false`` is not among them: the
field is required, false is the usual value with one scheduler, and it does act (``BBRReady``).

A user who applies the YAML with kubectl, or serves a file, never runs ``igw validate``: ``igw serve``
logs the same notes (:func:`note_text`) at start and on every applied reload, and the operator posts
them as one Event per generation of the object. Those two pass ``skip_defaults``: the API server fills
in the CRD's defaults (``bbr.replicas: 2`` on every object with ``bbr``, ``metrics.enabled: true``)
before the operator reads the object or serves it to the gateway pods as their file, so a value equal
to the default may be one nobody wrote, and naming it put a note on every object and every gateway.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Final

from igw.config.build import apply_defaults
from igw.config.errors import Problem
from igw.config.jsonpath import parse_path
from igw.config.schema import shared_schema

RULE: Final = "accepted-unused"

_SCHEDULER_FIELDS: Final[Mapping[str, str]] = {
    "env": "one gateway container serves every scheduler; it takes spec.podDefaults.env",
    "envFrom": "one gateway container serves every scheduler; it takes spec.podDefaults.envFrom",
    "logLevel": "one gateway process serves every scheduler with one log level (igw serve --log-level)",
}


def note_text(note: Problem) -> str:
    """The one wording of a note, shared by ``igw validate``, ``igw serve``'s log and the operator's
    Event, so a user finds the same sentence wherever they look."""
    return f"{note.path}: accepted (AWS's field) but has no effect in igw: {note.message} [{note.rule}]"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def unused_field_notes(doc: Any, *, skip_defaults: bool = False) -> list[Problem]:
    """One note (as a :class:`Problem` with rule :data:`RULE`) per field ``doc`` sets that igw
    accepts without using; empty for a document that sets none or is not a mapping.
    ``skip_defaults``: leave out a field whose value is the one the API server's defaulting writes
    (a document read from the cluster cannot tell it from one its author wrote)."""
    notes = list(_notes(_mapping(_mapping(doc).get("spec"))))
    if skip_defaults:
        notes = [note for note in notes if not _is_default(doc, note.path)]
    return notes


def _is_default(doc: Any, path: str) -> bool:
    """Whether the field at ``path`` holds what the contract's defaults fill in where it is absent."""
    keys = parse_path(path)
    stripped = copy.deepcopy(doc)
    parent: Any = stripped
    for key in keys[:-1]:
        parent = parent[key]
    value = parent.pop(keys[-1])
    filled: Any = apply_defaults(stripped, shared_schema())
    try:
        for key in keys:
            filled = filled[key]
    except (KeyError, IndexError, TypeError):  # no default there
        return False
    return bool(filled == value)


def _notes(spec: Mapping[str, Any]) -> Iterator[Problem]:
    bbr = _mapping(spec.get("bbr"))
    if "replicas" in bbr:
        yield Problem(
            "spec.bbr.replicas",
            "body-based routing runs inside the gateway pods, whose count the largest "
            "spec.schedulers[].replicas sets",
            RULE,
        )
    metrics = _mapping(_mapping(spec.get("observability")).get("metrics"))
    if "enabled" in metrics:
        yield Problem(
            "spec.observability.metrics.enabled",
            "no OpenTelemetry collector sidecar is injected; the gateway always serves Prometheus "
            "metrics on its management port",
            RULE,
        )
    schedulers = spec.get("schedulers")
    for i, scheduler in enumerate(schedulers if isinstance(schedulers, list) else []):
        entry = _mapping(scheduler)
        if entry.get("appProtocol") == "kubernetes.io/h2c":
            yield Problem(
                f"spec.schedulers[{i}].appProtocol",
                "the gateway speaks HTTP/1.1 to model servers whatever this says",
                RULE,
            )
        for key, why in _SCHEDULER_FIELDS.items():
            if key in entry:
                yield Problem(f"spec.schedulers[{i}].{key}", why, RULE)
