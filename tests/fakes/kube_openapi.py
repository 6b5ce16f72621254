"""The OpenAPI v3 documents of the fake Kubernetes API server (``/openapi/v3``).

``kubectl`` reads them for two things: whether the server validates fields itself
(``fieldValidation`` among an operation's parameters: then it sends objects without checking them
against a local schema), and ``kubectl explain``, which looks the kind up among
``components.schemas`` by its ``x-kubernetes-group-version-kind`` and prints the descriptions.
apiextensions-apiserver publishes each CRD version's schema there as its ``builder`` builds it: the
CRD's ``openAPIV3Schema`` under the name ``<reversed group>.<version>.<Kind>`` (the group's labels
reversed, as ``util.ToRESTFriendlyName`` names it), ``apiVersion`` and ``kind`` replaced by TypeMeta's
documented properties, ``metadata`` a reference to ``ObjectMeta``, and a ``<Kind>List`` beside it.
The fake listed the paths with no schema, so ``kubectl explain igwc`` failed (``GVK ... not found in
OpenAPI schema``) and no test could read what a user reads there.

A built-in kind's schema is published as kube-openapi names it (``io.k8s.api.apps.v1.Deployment``)
where :mod:`tests.fakes.kube_builtin_schemas` has one (the kinds the operator writes).

Not modelled: the other built-in kinds' schemas (``kubectl explain sts`` still fails here),
``ObjectMeta`` beyond its common fields. The v2 document (``/openapi/v2``, what kubectl 1.27 and
1.28 read) is built from these: :mod:`tests.fakes.kube_openapi_v2`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from tests.fakes.kube_builtin_schemas import component_schemas
from tests.fakes.kube_store import ResourceKind

_CONVENTIONS: Final = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
_TYPE_META: Final[dict[str, dict[str, Any]]] = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers "
        "should convert recognized schemas to the latest internal value, and may reject unrecognized "
        f"values. More info: {_CONVENTIONS}#resources",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents. "
        "Servers may infer this from the endpoint the client submits requests to. Cannot be updated. "
        f"In CamelCase. More info: {_CONVENTIONS}#types-kinds",
    },
}
_META_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    OBJECT_META: {
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all "
        "objects users must create.",
        "properties": {
            "name": {"type": "string", "description": "Name must be unique within a namespace."},
            "namespace": {
                "type": "string",
                "description": "Namespace defines the space within which each name must be unique.",
            },
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string", "default": ""},
                "description": "Map of string keys and values that can be used to organize and categorize "
                "(scope and select) objects.",
            },
            "annotations": {
                "type": "object",
                "additionalProperties": {"type": "string", "default": ""},
                "description": "Annotations is an unstructured key value map stored with a resource that may "
                "be set by external tools to store and retrieve arbitrary metadata.",
            },
            "uid": {
                "type": "string",
                "description": "UID is the unique in time and space value for this object.",
            },
            "resourceVersion": {
                "type": "string",
                "description": "An opaque value that represents the internal version of this object.",
            },
            "generation": {
                "type": "integer",
                "format": "int64",
                "description": "A sequence number representing a specific generation of the desired state.",
            },
        },
    },
    LIST_META: {
        "type": "object",
        "description": "ListMeta describes metadata that synthetic resources must have, including lists.",
        "properties": {
            "resourceVersion": {
                "type": "string",
                "description": "String that identifies the server's internal version of this object.",
            },
            "continue": {"type": "string", "description": "continue may be set if the user set a limit."},
        },
    },
}


def group_version_path(kind: ResourceKind) -> str:
    return f"apis/{kind.group}/{kind.version}" if kind.group else "api/v1"


def schema_name(kind: ResourceKind, kind_name: str | None = None) -> str:
    """``util.ToRESTFriendlyName`` of ``<group>/<version>.<Kind>``: the group's labels reversed."""
    group = ".".join(reversed(kind.group.split("."))) if kind.group else "io.k8s.api.core"
    return f"{group}.{kind.version}.{kind_name or kind.kind}"


def _ref(name: str, description: str) -> dict[str, Any]:
    """A reference with its own description, as kube-openapi writes one in v3 (``allOf``)."""
    return {"description": description, "allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


def published_schemas(kind: ResourceKind) -> dict[str, dict[str, Any]]:
    """The ``components.schemas`` entries apiextensions-apiserver publishes for a CRD version."""
    assert kind.schema is not None
    schema = copy.deepcopy(dict(kind.schema))
    properties = schema.setdefault("properties", {})
    properties.update(copy.deepcopy(_TYPE_META))
    properties["metadata"] = _ref(
        OBJECT_META, f"Standard object's metadata. More info: {_CONVENTIONS}#metadata"
    )
    schema["x-kubernetes-group-version-kind"] = [
        {"group": kind.group, "version": kind.version, "kind": kind.kind}
    ]
    list_kind = f"{kind.kind}List"
    listed = {
        "type": "object",
        "description": f"{list_kind} is a list of {kind.kind}",
        "required": ["items"],
        "properties": {
            **copy.deepcopy(_TYPE_META),
            "items": {
                "type": "array",
                "description": f"List of {kind.plural}. More info: {_CONVENTIONS}",
                "items": {"$ref": f"#/components/schemas/{schema_name(kind)}"},
            },
            "metadata": _ref(LIST_META, f"Standard list metadata. More info: {_CONVENTIONS}#types-kinds"),
        },
        "x-kubernetes-group-version-kind": [
            {"group": kind.group, "version": kind.version, "kind": list_kind}
        ],
    }
    return {schema_name(kind): schema, schema_name(kind, list_kind): listed}


def openapi_group_version(path: str, kinds: Iterable[ResourceKind]) -> dict[str, Any] | None:
    """A group/version's OpenAPI v3 document: the operations ``kubectl`` looks at for
    ``fieldValidation``, and the schema of every kind served from a CRD (``kubectl explain``)."""
    matching = [k for k in kinds if group_version_path(k) == path]
    if not matching:
        return None
    parameters = [
        {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        for name in ("dryRun", "fieldManager", "fieldValidation")
    ]
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for kind in matching:
        gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
        scope = (
            f"/{path}/namespaces/{{namespace}}/{kind.plural}" if kind.namespaced else f"/{path}/{kind.plural}"
        )

        def operation(verb: str, gvk: Mapping[str, str] = gvk) -> dict[str, Any]:
            return {
                "parameters": parameters,
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": dict(gvk),
                "responses": {"200": {"description": "OK"}},
            }

        paths[scope] = {"post": operation("post")}
        paths[f"{scope}/{{name}}"] = {"put": operation("put"), "patch": operation("patch")}
        if kind.schema is not None:
            schemas.update(published_schemas(kind))
        else:
            schemas.update(component_schemas(kind.key))
    if schemas:
        schemas.update(copy.deepcopy(_META_SCHEMAS))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.4"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_root(kinds: Iterable[ResourceKind]) -> dict[str, Any]:
    """``/openapi/v3``: where each group/version's document lives, its hash the document's digest
    (the API server's, so a client's cache of a document is invalidated when a CRD changes)."""
    served = list(kinds)
    paths: dict[str, Any] = {}
    for path in sorted({group_version_path(k) for k in served}):
        document = openapi_group_version(path, served)
        digest = hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
