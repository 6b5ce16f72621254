"""The API groups igw owns or reads, the kinds each of them holds, and a misspelled kind named.

``igw validate`` checks the documents of the kinds it knows and skips, with a note, the documents of
other API groups (the Deployments and Services of the same file). Until session s39 it skipped every
document it did not check: ``kind: InferenceGatewayconfig`` in ``inference.sagemaker.aws.amazon.com``
was skipped with a note and the file exited 0, where ``kubectl apply`` fails ("no matches for kind").
A document of one of these groups whose kind the group does not hold is now a problem naming the
kind, the nearest known kind and the kinds the group holds.

A group's kinds include those igw only reads or only passes through (the HyperPod inference
operator's ``InferenceEndpointConfig``, GIE's ``InferencePool``): they are real kinds a file may hold
beside an InferenceGatewayConfig, skipped with a note as before. The two GIE groups share one list:
GIE moves kinds from ``inference.networking.x-k8s.io`` to ``inference.networking.k8s.io`` as they
graduate, and a kind of either group must not be refused for the version a user's CRDs are at.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Final

from igw.config.errors import Problem
from igw.config.model import API_GROUP

_GIE_KINDS: Final = frozenset(
    {
        "InferencePool",
        "InferencePoolImport",
        "InferenceObjective",
        "InferenceModel",  # removed in GIE v1.0; still in clusters and files written for v0.5
        "InferenceModelRewrite",
        "EndpointPickerConfig",  # not an API object: the picker's plugins file (igw validate reads it)
    }
)

KNOWN_KINDS: Final[Mapping[str, frozenset[str]]] = {
    API_GROUP: frozenset(
        {
            "InferenceGatewayConfig",
            "GlobalRouterConfig",
            # the HyperPod inference operator's kinds, in the same group (aws/sagemaker-hyperpod-cli)
            "InferenceEndpointConfig",
            "JumpStartModel",
            "SageMakerEndpointRegistration",
        }
    ),
    "inference.networking.k8s.io": _GIE_KINDS,
    "inference.networking.x-k8s.io": _GIE_KINDS,
}
"""Kinds of each API group igw owns or reads; a ``<Kind>List`` of each is known too."""

RULE: Final = "unknown-kind"


def api_group(content: Any) -> str | None:
    """The API group of a document's ``apiVersion`` (``group/version``), or ``None`` (no
    ``apiVersion``, or a core one such as ``v1``)."""
    if not isinstance(content, Mapping):
        return None
    api_version = content.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return None
    return api_version.rsplit("/", 1)[0]


def _is_known(kind: str, known: frozenset[str]) -> bool:
    return kind in known or (kind.endswith("List") and kind.removesuffix("List") in known)


def unknown_kind_problem(content: Any) -> Problem | None:
    """A problem when ``content`` is in an API group igw owns or reads (:data:`KNOWN_KINDS`) and its
    ``kind`` is missing or not one of that group's kinds; ``None`` otherwise (other groups included).
    """
    group = api_group(content)
    known = KNOWN_KINDS.get(group) if group is not None else None
    if known is None:
        return None
    kind = content.get("kind")
    listed = ", ".join(sorted(known))
    if not isinstance(kind, str) or not kind:
        return Problem(
            path="kind",
            message=f'missing required field "kind" (the kinds of API group {group}: {listed})',
            rule=RULE,
        )
    if _is_known(kind, known):
        return None
    by_folded = {name.lower(): name for name in known}
    close = difflib.get_close_matches(kind.lower(), list(by_folded), n=1, cutoff=0.6)
    suggestion = f" (did you mean {by_folded[close[0]]!r}?)" if close else ""
    return Problem(
        path="kind",
        message=f"unknown kind {kind!r} in API group {group}{suggestion}; its kinds: {listed}",
        rule=RULE,
    )
