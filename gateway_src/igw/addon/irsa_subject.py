"""Which service account an IAM role can be assumed from, and which one the chart's gateway runs as.

An IRSA trust policy narrows the cluster's OIDC provider to one service account with a condition on
``<provider>:sub`` (``system:serviceaccount:<namespace>:<name>``). A role whose condition names another
account (a copied policy, a renamed ``serviceAccount.name``) passed ``igw addon create``'s trust check,
the add-on went ACTIVE and every AWS call of the gateway failed with AccessDenied
(``Not authorized to perform sts:AssumeRoleWithWebIdentity``). Likewise a Pod Identity association is
made for one service account name; it must be the one the chart renders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from igw.addon import pins

SUBJECT_PREFIX: Final = "system:serviceaccount:"

_MATCHING_OPERATORS: Final = {
    "stringequals": (False, False),
    "stringequalsignorecase": (False, True),
    "stringlike": (True, False),
}
"""Condition operators (lower case, without a ``ForAnyValue:``/``ForAllValues:`` prefix or an
``IfExists`` suffix) that allow only the subjects they list: (wildcards, case-insensitive)."""


def gateway_service_account(values: Mapping[str, Any]) -> str | None:
    """The service account the chart's gateway pods run as for ``values`` (``igw.serviceAccountName``):
    ``serviceAccount.name`` (default :data:`~igw.addon.pins.GATEWAY_SERVICE_ACCOUNT`), ``default`` when
    the chart creates none and no name is given, ``None`` when the chart names it after the Helm release
    (``name: ""``), which EKS chooses."""
    account = values.get("serviceAccount")
    account = account if isinstance(account, Mapping) else {}
    name = account.get("name", pins.GATEWAY_SERVICE_ACCOUNT)
    if name:
        return str(name)
    return None if account.get("create", True) else "default"


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(item) for item in value or []]


def _matches(pattern: str, subject: str, *, wildcards: bool, ignore_case: bool) -> bool:
    if ignore_case:
        pattern, subject = pattern.lower(), subject.lower()
    if not wildcards:
        return pattern == subject
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, subject, flags=re.DOTALL) is not None


def _namespace_of(pattern: str) -> str:
    """The namespace a ``sub`` value names (``system:serviceaccount:<ns>:<name>``), or ``""``."""
    parts = pattern.split(":")
    return parts[2] if len(parts) == 4 and pattern.startswith(SUBJECT_PREFIX) else ""


def subjects_refused(statement: Mapping[str, Any], provider: str, service_account: str) -> list[str]:
    """The ``<provider>:sub`` values of ``statement``'s conditions when none of them admits
    ``service_account`` (empty when the statement admits it, or has no such condition).

    The namespace is taken from the condition itself: where EKS installs the add-on (the listing's
    default namespace) is not known before the call, and a wrong refusal would block a working role.
    Operators that do not list allowed subjects (``StringNotEquals`` ...) are not judged."""
    conditions = statement.get("Condition")
    if not isinstance(conditions, Mapping):
        return []
    key = f"{provider}:sub".lower()
    for operator, entries in conditions.items():
        if not isinstance(entries, Mapping):
            continue
        name = str(operator).lower().split(":")[-1].removesuffix("ifexists")
        if name not in _MATCHING_OPERATORS:
            continue
        wildcards, ignore_case = _MATCHING_OPERATORS[name]
        values = [v for k, v in entries.items() if str(k).lower() == key]
        if not values:
            continue
        patterns = [p for value in values for p in _listed(value)]
        if not any(
            _matches(
                p,
                f"{SUBJECT_PREFIX}{_namespace_of(p) or pins.ADDON_NAMESPACE}:{service_account}",
                wildcards=wildcards,
                ignore_case=ignore_case,
            )
            for p in patterns
        ):
            return patterns
    return []
