"""RBAC for the fake API server: answer 403 for what a set of Roles and ClusterRoles does not grant.

:meth:`tests.fakes.kube_api.FakeKubeApiServer.enforce_rbac` takes the rules a chart renders for a
service account (every ClusterRole cluster-wide, every Role in its own namespace, as if all were bound
to the caller), so a test checks that a component makes only calls its real RBAC allows. Modelled as
the RBAC authorizer does: ``apiGroups``, ``resources`` (``plural`` or ``plural/subresource``, ``*``),
``verbs`` (``*``), ``resourceNames`` (which match only requests naming an object: never a list,
watch or create). Not modelled: aggregation, ``nonResourceURLs`` (discovery is always allowed), the
bindings themselves, and the escalation checks on writes of Roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class _Rule:
    namespace: str | None
    """``None``: from a ClusterRole, everywhere."""
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]


class Rbac:
    """The rules of some Roles and ClusterRoles, and whether they allow one request."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self._rules: list[_Rule] = []
        for obj in objects:
            if obj.get("kind") not in ("ClusterRole", "Role"):
                continue
            namespace = (obj.get("metadata") or {}).get("namespace") if obj["kind"] == "Role" else None
            for rule in obj.get("rules") or []:
                self._rules.append(
                    _Rule(
                        namespace,
                        frozenset(rule.get("apiGroups") or ()),
                        frozenset(rule.get("resources") or ()),
                        frozenset(rule.get("verbs") or ()),
                        frozenset(rule.get("resourceNames") or ()),
                    )
                )

    def allows(
        self, *, verb: str, group: str, resource: str, namespace: str | None, name: str | None
    ) -> bool:
        """``resource`` is ``plural`` or ``plural/subresource``; ``namespace`` ``None`` or ``""`` for a
        request at the cluster scope (a cluster-scoped object, or every namespace)."""
        for rule in self._rules:
            if rule.namespace is not None and rule.namespace != namespace:
                continue
            if not ({group, "*"} & rule.groups) or not ({resource, "*"} & rule.resources):
                continue
            if not ({verb, "*"} & rule.verbs):
                continue
            if rule.names and (name is None or name not in rule.names):
                continue
            return True
        return False
