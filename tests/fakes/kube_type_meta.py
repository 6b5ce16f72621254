"""A write's ``apiVersion`` and ``kind`` checked against the URL's resource, as the API server checks them.

The API server decodes a create's or an update's body with the URL's group, version and kind as
defaults only: a body that names another API version is refused 400 ``BadRequest`` (``the API version
in the data (v2) does not match the expected API version (v1)``, the create and update handlers'
``AcceptsGroupVersion``), and one that names another kind cannot be decoded into the URL's type
(400 ``<Kind> in version "<v>" cannot be handled as a <URL kind>``, ``transformDecodeError``) - for a
custom resource, whose body decodes as unstructured, the strategy's ``ValidateTypeMeta`` refuses it
instead (422 ``Invalid``, cause ``kind: Invalid value: "<Kind>": must be <URL kind>``). A server-side
apply patch naming another version, or none, is refused 400 by the field manager
(:func:`check_apply_patch`). A body that leaves either out
gets the URL's. The fake rewrote both to the URL's and stored the write (201), so a client that sent a
Secret to the ConfigMaps URL, or a manifest of another version, passed here and fails on a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.fakes.kube_field_errors import FieldError, invalid_details, invalid_message, quoted
from tests.fakes.kube_store import ResourceKind, StoreError


def check_type_meta(kind: ResourceKind, body: Mapping[str, Any], *, custom: bool) -> None:
    """Refuse a create's or update's ``body`` whose ``apiVersion`` or ``kind`` is not ``kind``'s
    (``custom``: served from a CRD, whose kind mismatch is a 422 rather than a decoding error)."""
    sent_version, sent_kind = body.get("apiVersion"), body.get("kind")
    if sent_version and sent_version != kind.api_version:
        raise StoreError(
            400,
            "BadRequest",
            f"the API version in the data ({sent_version}) does not match the expected API version "
            f"({kind.api_version})",
        )
    if not sent_kind or sent_kind == kind.kind:
        return
    if not custom:
        raise StoreError(
            400,
            "BadRequest",
            f'{sent_kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"the object provided is not a {kind.kind}",
        )
    name = str((body.get("metadata") or {}).get("name") or "")
    error = FieldError("kind", "FieldValueInvalid", quoted(sent_kind), f"must be {kind.kind}")
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    raise StoreError(
        422,
        "Invalid",
        invalid_message(qualified, name, [error]),
        details=invalid_details(kind.group, kind.kind, name, [error]),
    )


def check_apply_patch(kind: ResourceKind, patch: Any) -> None:
    """Refuse a server-side apply patch the field manager refuses (400 ``BadRequest``): one that is
    no YAML map (``applyPatcher`` decodes it into one), one naming another API version than the
    URL's or none (``Incorrect version specified in apply patch``), and one carrying
    ``metadata.managedFields`` (an applier may not set ownership itself).

    Why: the fake took an apply without ``apiVersion`` (201, as if the URL's), stored the
    ``managedFields`` an apply sent, and answered a patch that was a YAML list or string with a 500
    traceback, where a cluster answers each with a 400 naming the problem."""
    if patch is None:
        patch = {}
    if not isinstance(patch, Mapping):
        got = {list: "array", str: "string", bool: "bool"}.get(type(patch), "number")
        raise StoreError(
            400,
            "BadRequest",
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
            f"{got} into Go value of type map[string]interface {{}}",
        )
    sent_version = patch.get("apiVersion")
    if sent_version != kind.api_version:
        raise StoreError(
            400,
            "BadRequest",
            "Incorrect version specified in apply patch. "
            f"Specified patch version: {sent_version or ''}, expected: {kind.api_version}",
        )
    meta = patch.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("managedFields"), list):
        raise StoreError(400, "BadRequest", "metadata.managedFields must be nil")


def check_patched_type_meta(kind: ResourceKind, patched: Mapping[str, Any], *, custom: bool) -> None:
    """Refuse a JSON or JSON merge patch whose result names another ``apiVersion`` or ``kind`` than
    ``kind``'s, as the API server's patch handler does (``jsonPatcher.applyPatchToCurrentObject``,
    ``apiserver/pkg/endpoints/handlers/patch.go``): it decodes the patched JSON into the URL's type,
    which fails for another kind (no conversion from a Secret to a ConfigMap) or a version the
    scheme does not know, answered 422 ``Invalid`` with a ``patch`` cause carrying the patched
    document. A custom resource decodes as unstructured: another version fails the CR converter
    (``request to convert CR from an invalid group/version``), another kind the strategy's
    ``ValidateTypeMeta`` (as :func:`check_type_meta`). A strategic merge patch decodes by the Go type
    and ignores both (nothing to refuse). The fake stored the URL's and answered 200."""
    sent_version, sent_kind = patched.get("apiVersion"), patched.get("kind")
    version_differs = bool(sent_version) and sent_version != kind.api_version
    kind_differs = bool(sent_kind) and sent_kind != kind.kind
    if not version_differs and not kind_differs:
        return
    if custom and not version_differs:
        check_type_meta(kind, patched, custom=True)
        return
    if custom:
        detail = f"request to convert CR from an invalid group/version: {sent_version}"
    elif version_differs:
        group, _, version = str(sent_version).rpartition("/")
        shown = f"{group}/{version}" if group else version
        detail = (
            f'no kind "{sent_kind or kind.kind}" is registered for version "{shown}" in scheme '
            '"pkg/api/legacyscheme/scheme.go:30"'
        )
    else:
        api_package = f"k8s.io/api/{kind.group.split('.')[0] or 'core'}/{kind.version}"
        internal = f"k8s.io/kubernetes/pkg/apis/{kind.group.split('.')[0] or 'core'}"
        detail = f"converting ({api_package}) {sent_kind} to ({internal}) {kind.kind}: unknown conversion"
    document = json.dumps(patched, separators=(",", ":"))
    error = FieldError("patch", "FieldValueInvalid", json.dumps(document), detail)
    raise StoreError(
        422, "Invalid", invalid_message("", "", [error]), details=invalid_details("", "", "", [error])
    )
