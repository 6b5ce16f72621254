"""Namespace lifecycle of the fake API server, as kube-apiserver's ``NamespaceLifecycle`` admission
plugin and the namespace controller behave.

* A Namespace is created with ``spec.finalizers: [kubernetes]`` and ``status.phase: Active``
  (the API server's namespace strategy).
* Deleting it only marks it: ``metadata.deletionTimestamp`` and ``status.phase: Terminating`` (the
  ``kubernetes`` finalizer holds it). The namespace controller then deletes everything in it and,
  once nothing is left, removes the finalizer and with it the Namespace; the fake does that when
  :meth:`~tests.fakes.kube_store.KubeStore.finalize_namespace` is called, so a test can act in the
  Terminating window (on a cluster it lasts from seconds to forever, while some object's finalizer
  is not removed).
* While a namespace is Terminating, creating anything in it (dry runs included: admission runs for
  them too) is refused 403 ``Forbidden`` with the message and the ``NamespaceTerminating`` cause the
  plugin answers; updates, status writes and deletes are allowed.
* ``default``, ``kube-system`` and ``kube-public`` may not be deleted (403).

* Creating in a namespace :meth:`~tests.fakes.kube_store.KubeStore.finalize_namespace` removed is
  refused 404 ``namespaces "x" not found``. Not modelled: the same for a namespace that never
  existed (the fake stores the object there, as most tests never create Namespaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

IMMORTAL_NAMESPACES: Final = frozenset({"default", "kube-system", "kube-public"})
NAMESPACE_FINALIZER: Final = "kubernetes"
TERMINATING: Final = "Terminating"


def default_namespace(body: dict[str, Any]) -> None:
    """What the API server sets on a Namespace it creates (or that a replace leaves without them)."""
    spec = body.setdefault("spec", {})
    if isinstance(spec, dict) and "finalizers" not in spec:
        spec["finalizers"] = [NAMESPACE_FINALIZER]
    status = body.setdefault("status", {})
    if isinstance(status, dict) and not status.get("phase"):
        status["phase"] = "Active"


def terminating(namespace_obj: Mapping[str, Any] | None) -> bool:
    """Whether the Namespace object is being deleted."""
    if namespace_obj is None:
        return False
    meta = namespace_obj.get("metadata") or {}
    return (
        bool(meta.get("deletionTimestamp")) or (namespace_obj.get("status") or {}).get("phase") == TERMINATING
    )


def holds_finalizer(namespace_obj: Mapping[str, Any]) -> bool:
    return NAMESPACE_FINALIZER in ((namespace_obj.get("spec") or {}).get("finalizers") or [])


def qualified_resource(group: str, plural: str) -> str:
    """``deployments.apps``, ``secrets``: how the API server names a resource in a Status message."""
    return f"{plural}.{group}" if group else plural


def terminating_refusal(group: str, plural: str, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
    """The message and ``details`` of NamespaceLifecycle's 403 for a create in a Terminating namespace."""
    resource = qualified_resource(group, plural)
    subject = f'{resource} "{name}"' if name else resource
    message = (
        f"{subject} is forbidden: unable to create new content in namespace {namespace} "
        "because it is being terminated"
    )
    details: dict[str, Any] = {
        "name": name,
        "kind": plural,
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
        ],
    }
    if group:
        details["group"] = group
    return message, details


def immortal_refusal(name: str) -> str:
    return f'namespaces "{name}" is forbidden: this namespace may not be deleted'
