"""The API server's ``OwnerReferencesPermissionEnforcement`` admission plugin, for the fake API server.

Enabled on hardened and OpenShift clusters (it is the garbage collector's guard: without it anyone who
may create an object can block the deletion of any other). On a create or replace carrying
``metadata.ownerReferences``:

* a replace that changes the owner references needs ``delete`` on the object itself ("cannot set an
  ownerRef on a resource you can't delete");
* each reference newly setting ``blockOwnerDeletion: true`` needs ``update`` on the owner's
  ``finalizers`` subresource ("cannot set blockOwnerDeletion if an ownerReference refers to a resource
  you can't set finalizers on").

Modelled as ``plugin/pkg/admission/gc/gc_admission.go`` does it, through the same :class:`Rbac` as the
authorizer (so only while :meth:`~tests.fakes.kube_api.FakeKubeApiServer.enforce_rbac` is on). Not
modelled: patches (the operator creates and replaces), and owner kinds the server does not serve (the
real plugin fails the request; here they are skipped).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.fakes.kube_rbac import Rbac
from tests.fakes.kube_store import KubeStore, ResourceKind, StoreError

USER = "system:serviceaccount:igw:test"


def _refs(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return [ref for ref in refs if isinstance(ref, Mapping)]


def _blocking(refs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [ref for ref in refs if ref.get("blockOwnerDeletion") is True]


def owner_reference_refusal(
    rbac: Rbac,
    store: KubeStore,
    kind: ResourceKind,
    namespace: str,
    name: str | None,
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
) -> str | None:
    """The 403 message the plugin answers a create (``old`` ``None``) or replace of ``new`` with, or
    ``None`` when it admits it."""
    new_refs, old_refs = _refs(new), _refs(old)
    if not new_refs and not old_refs:
        return None
    if old_refs == new_refs:
        return None
    target = name or str((new.get("metadata") or {}).get("name") or "")
    where = f' in the namespace "{namespace}"' if namespace else ""
    if old is not None and not rbac.allows(
        verb="delete", group=kind.group, resource=kind.plural, namespace=namespace or None, name=target
    ):
        return (
            f'{kind.plural} "{target}" is forbidden: cannot set an ownerRef on a resource you can\'t '
            f'delete: User "{USER}" cannot delete resource "{kind.plural}" in API group "{kind.group}"{where}'
        )
    already = {str(ref.get("uid")) for ref in _blocking(old_refs)}
    for ref in _blocking(new_refs):
        if str(ref.get("uid")) in already:
            continue
        try:
            owner = store.kind_for(api_version=str(ref.get("apiVersion")), kind=str(ref.get("kind")))
        except StoreError:
            continue
        owner_ns = namespace if owner.namespaced else ""
        resource = f"{owner.plural}/finalizers"
        if not rbac.allows(
            verb="update",
            group=owner.group,
            resource=resource,
            namespace=owner_ns or None,
            name=ref.get("name"),
        ):
            owner_where = f' in the namespace "{owner_ns}"' if owner_ns else ""
            return (
                f'{kind.plural} "{target}" is forbidden: cannot set blockOwnerDeletion if an ownerReference '
                f'refers to a resource you can\'t set finalizers on: User "{USER}" cannot update resource '
                f'"{resource}" in API group "{owner.group}"{owner_where}'
            )
    return None
