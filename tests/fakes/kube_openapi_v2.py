"""The OpenAPI v2 document of the fake Kubernetes API server (``/openapi/v2``).

kubectl 1.27 and 1.28 read it, and only it, before every ``apply``/``create`` that validates (is
``fieldValidation`` among the PATCH parameters of the kind's path? then the server checks fields)
and for ``kubectl explain``; later versions ask for it during a client-side ``apply`` (and get on
without it). The fake answered 404, so with kubectl 1.27/1.28 every validating write and every
``explain`` failed (``Error from server (NotFound): the server could not find the requested
resource``).

client-go asks for it protobuf-encoded (``Accept: application/com.github.proto-openapi.spec.v2@v1.0
+protobuf``) and unmarshals the body as gnostic's ``openapi.v2.Document`` whatever its content type,
so a JSON answer is refused (``proto: cannot parse invalid wire-format data``). The document is built
from what ``/openapi/v3`` publishes (:mod:`tests.fakes.kube_openapi`: the same paths, the same
schemas, a ``$ref`` to ``#/definitions/...``), then encoded here with the few protobuf wire types the
message needs, field numbers from gnostic's ``OpenAPIv2.proto`` (no protobuf library involved). A
client that accepts JSON (no protobuf in ``Accept``) gets the document as JSON, as the API server
serves it.

The ``x-kubernetes-patch-strategy``/``-merge-key`` extensions of the built-in list fields modelled
come with the v3 schemas (:data:`tests.fakes.kube_builtin_schemas.PATCH_STRATEGIES`). kubectl 1.28
and 1.32 still compute a client-side ``apply``'s patch from their Go types (the same tags): the v2
operations list no ``consumes`` and the v3 PATCH operations no ``requestBody`` media types. Listing
the strategic one in v3 would make kubectl 1.32 compute from the v3 schemas, which fails (``warning:
error calculating patch from openapi v3 spec: unable to find api field "httpGet"``) wherever the
table leaves a field an unmodelled ``object``. Not modelled: ``oneOf``/``anyOf``/``not`` and ``nullable``
(v2 has no such fields: dropped; apiextensions-apiserver also drops a nullable field's ``type``),
the operations' body and response schemas, the ``ETag`` and gzip answers.
"""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tests.fakes.kube_openapi import group_version_path, openapi_group_version
from tests.fakes.kube_store import ResourceKind

PROTOBUF: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The answer's content type as kube-openapi's handler writes it (the ``@`` of the type asked for is
no valid media type: client-go refuses ``mime: unexpected content after media subtype``)."""
_V3_REF: Final = "#/components/schemas/"
_V2_REF: Final = "#/definitions/"


# ---- the document ------------------------------------------------------------------------------


def _v2_schema(schema: Any) -> Any:
    """A v3 schema as v2 writes it: a lone ``allOf`` reference as ``$ref`` beside the description,
    references into ``#/definitions/``, no ``nullable``/``oneOf``/``anyOf``/``not``."""
    if isinstance(schema, list):
        return [_v2_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("nullable", "oneOf", "anyOf", "not"):
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace(_V3_REF, _V2_REF)
        elif key == "allOf" and len(value) == 1 and set(value[0]) == {"$ref"}:
            out["$ref"] = str(value[0]["$ref"]).replace(_V3_REF, _V2_REF)
        elif key == "default" and "allOf" in schema:
            continue  # v2 writes a reference's default nowhere
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _v2_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "allOf"):
            out[key] = _v2_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def openapi_v2(kinds: Iterable[ResourceKind]) -> dict[str, Any]:
    """``/openapi/v2``: every group/version's paths and schemas of ``/openapi/v3`` in one document."""
    served = list(kinds)
    paths: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for path in sorted({group_version_path(k) for k in served}):
        document = openapi_group_version(path, served)
        if document is None:
            continue
        for url, item in document["paths"].items():
            paths[url] = {
                method: {
                    "parameters": [
                        {"name": p["name"], "in": p["in"], "type": "string", "uniqueItems": True}
                        for p in operation["parameters"]
                    ],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": operation["x-kubernetes-action"],
                    "x-kubernetes-group-version-kind": operation["x-kubernetes-group-version-kind"],
                }
                for method, operation in item.items()
            }
        for name, schema in document["components"]["schemas"].items():
            definitions[name] = _v2_schema(schema)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.4"},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
    }


# ---- protobuf wire encoding of gnostic's openapi.v2 messages -------------------------------------


def _varint(number: int) -> bytes:
    out = bytearray()
    number &= (1 << 64) - 1
    while True:
        low = number & 0x7F
        number >>= 7
        if number:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (a string or an embedded message)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _text(number: int, value: Any) -> bytes:
    return _field(number, str(value).encode()) if value not in (None, "") else b""


def _flag(number: int, value: Any) -> bytes:
    return _varint(number << 3) + b"\x01" if value is True else b""


def _integer(number: int, value: Any) -> bytes:
    return _varint(number << 3) + _varint(int(value)) if isinstance(value, int) else b""


def _double(number: int, value: Any) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return b""
    return _varint(number << 3 | 1) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    """``openapi.v2.Any``: the value as YAML (field 2; JSON is YAML)."""
    return _text(2, json.dumps(value))


def _named_any(number: int, name: str, value: Any) -> bytes:
    return _field(number, _text(1, name) + _field(2, _any(value)))


def _extensions(number: int, node: Mapping[str, Any]) -> bytes:
    return b"".join(_named_any(number, k, v) for k, v in node.items() if k.startswith("x-"))


_SCHEMA_SCALARS: Final[Sequence[tuple[str, int, Any]]] = (
    ("$ref", 1, _text),
    ("format", 2, _text),
    ("title", 3, _text),
    ("description", 4, _text),
    ("multipleOf", 6, _double),
    ("maximum", 7, _double),
    ("exclusiveMaximum", 8, _flag),
    ("minimum", 9, _double),
    ("exclusiveMinimum", 10, _flag),
    ("maxLength", 11, _integer),
    ("minLength", 12, _integer),
    ("pattern", 13, _text),
    ("maxItems", 14, _integer),
    ("minItems", 15, _integer),
    ("uniqueItems", 16, _flag),
    ("maxProperties", 17, _integer),
    ("minProperties", 18, _integer),
    ("discriminator", 26, _text),
    ("readOnly", 27, _flag),
)


def _schema(node: Mapping[str, Any]) -> bytes:
    """``openapi.v2.Schema``."""
    out = bytearray()
    for key, number, encode in _SCHEMA_SCALARS:
        if key in node:
            out += encode(number, node[key])
    if "default" in node:
        out += _field(5, _any(node["default"]))
    out += b"".join(_text(19, name) for name in node.get("required") or [])
    out += b"".join(_field(20, _any(value)) for value in node.get("enum") or [])
    extra = node.get("additionalProperties")
    if isinstance(extra, bool):
        out += _field(21, _flag(2, True) if extra else _varint(2 << 3) + b"\x00")
    elif isinstance(extra, Mapping):
        out += _field(21, _field(1, _schema(extra)))
    kind = node.get("type")
    if kind:
        out += _field(22, b"".join(_text(1, t) for t in ([kind] if isinstance(kind, str) else kind)))
    items = node.get("items")
    if isinstance(items, Mapping):
        out += _field(23, _field(1, _schema(items)))
    out += b"".join(_field(24, _schema(sub)) for sub in node.get("allOf") or [])
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        named = b"".join(_field(1, _text(1, k) + _field(2, _schema(v))) for k, v in properties.items())
        out += _field(25, named)
    if "example" in node:
        out += _field(30, _any(node["example"]))
    out += _extensions(31, node)
    return bytes(out)


def _operation(node: Mapping[str, Any]) -> bytes:
    """``openapi.v2.Operation``: query parameters, one response, the ``x-kubernetes-*`` extensions."""
    out = bytearray()
    for parameter in node.get("parameters") or []:
        query = (
            _text(2, parameter["in"])
            + _text(4, parameter["name"])
            + _text(6, parameter.get("type"))
            + _flag(20, parameter.get("uniqueItems"))
        )
        # ParametersItem.parameter > Parameter.non_body_parameter > query_parameter_sub_schema
        out += _field(8, _field(1, _field(2, _field(3, query))))
    responses = b"".join(
        _field(1, _text(1, code) + _field(2, _field(1, _text(1, response.get("description")))))
        for code, response in (node.get("responses") or {}).items()
    )
    out += _field(9, responses)
    out += _extensions(13, node)
    return bytes(out)


_METHODS: Final = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def encoded(document: Mapping[str, Any]) -> bytes:
    """``document`` (as :func:`openapi_v2` builds it) as a protobuf ``openapi.v2.Document``."""
    info = document.get("info") or {}
    paths = b"".join(
        _field(
            2,
            _text(1, url)
            + _field(2, b"".join(_field(_METHODS[m], _operation(op)) for m, op in item.items())),
        )
        for url, item in document["paths"].items()
    )
    definitions = b"".join(
        _field(1, _text(1, name) + _field(2, _schema(schema)))
        for name, schema in document["definitions"].items()
    )
    return (
        _text(1, document["swagger"])
        + _field(2, _text(1, info.get("title")) + _text(2, info.get("version")))
        + _field(8, paths)
        + _field(9, definitions)
    )
