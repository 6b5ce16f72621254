"""A CustomResourceDefinition write, refused as apiextensions-apiserver refuses a malformed one.

The real API server validates every create, update, patch and apply of a CRD before storing it
(``k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation``, with the structural-schema
rules of ``pkg/apiserver/schema`` and the defaulting rules of ``pkg/apiserver/schema/defaulting``),
and answers 422 ``Invalid`` naming every failing field. Before this module the fake registered any
CRD it was given, so a CRD without a storage version, with an untyped schema node or with a CEL
rule that does not compile passed every test here and would be refused by the first real cluster.

As on the real server the v1 object is first defaulted (``names.singular`` from the kind,
``names.listKind`` = kind + ``List``, ``conversion.strategy: None``) and converted to the internal
form: when every version carries the same schema (or the same subresources, or the same printer
columns) it is checked once, and its errors are named under ``spec.validation.openAPIV3Schema``
(``spec.subresources``, ``spec.additionalPrinterColumns``) instead of ``spec.versions[i]...`` - the
paths a real cluster prints for a single-version CRD.

Modelled, with apimachinery's wording and field paths:

* ``metadata.name`` a DNS subdomain equal to ``<spec.names.plural>.<spec.group>``; the API
  approval annotation for ``*.k8s.io``/``*.kubernetes.io`` groups;
* ``spec.group`` (a DNS subdomain with a dot), ``spec.scope``, ``spec.names`` (required names,
  DNS-1035 labels, mixed-case kinds, ``listKind`` differing from ``kind``, short names,
  categories), ``spec.preserveUnknownFields``, ``spec.conversion`` (strategy, webhook config,
  review versions);
* ``spec.versions``: DNS-1035 and unique names, exactly one storage version, a schema for every
  version, ``deprecationWarning``, ``subresources.scale`` paths, ``additionalPrinterColumns``;
  ``status.storedVersions`` (the server's: a stored version may not leave ``spec.versions``);
* each schema: the OpenAPI subset (types, forbidden keywords, ``uniqueItems``, ``additionalProperties``
  beside ``properties``, ``nullable`` root, the root fields allowed with a ``/status`` subresource,
  defaults forbidden in the root ``metadata``/``apiVersion``/``kind``), structurality (a ``type``
  on every node unless ``x-kubernetes-int-or-string``/``x-kubernetes-preserve-unknown-fields``,
  ``items`` for arrays, no ``additionalProperties`` at the root, nothing but value validations under
  ``allOf``/``anyOf``/``oneOf``/``not`` and only for structurally declared fields, the root
  ``metadata`` limited to ``name``/``generateName``), ``pattern`` s that do not compile, the
  ``x-kubernetes-list-type``/``list-map-keys``/``map-type`` rules, and defaults that are not pruned,
  do not validate against their own schema or fail its CEL rules;
* ``x-kubernetes-validations``: rule/message/messageExpression/reason/fieldPath rules, rules and
  message expressions that do not parse, a rule naming a field of ``self``/``oldSelf`` that the
  schema does not declare (cel-go's ``undefined field``; a rule on the root sees only ``name`` and
  ``generateName`` of ``metadata``), ``oldSelf`` on a portion of the schema that cannot be
  correlated (items of a list that is not ``x-kubernetes-list-type: map``, properties of an atomic
  map), ``optionalOldSelf`` without ``oldSelf``;
* on update: ``spec.group`` and ``spec.names.plural`` immutable, ``spec.scope`` and
  ``spec.names.kind`` immutable (every stored CRD counts as established).

Not modelled: the rest of CEL type checking (cel-python only parses; the fields a rule names are
checked along plain ``self.a[0].b`` chains only, not through macro variables such as ``x`` in
``self.all(x, x.a)``, nor on objects that preserve unknown fields or use escaped names, and a rule
that is not boolean or calls a function with wrong types is accepted here and refused by a real
cluster; cel-python's parser also lacks the ``?.`` optional syntax, so such a rule is refused
here), the CEL cost estimates (``igw generate`` checks the shipped CRDs' cost, see
igw.config.cel_cost), ``selectableFields``, ``x-kubernetes-embedded-resource`` metadata defaults,
webhook URL/service/CA bundle details, the ``status.acceptedNames`` checks, warnings (unrecognized
formats), and the leniency the server keeps for CRDs stored by older releases (every CRD stored here
passed these rules). A new CRD is established at once: the fake server writes its ``acceptedNames``
and ``NamesAccepted``/``Established`` conditions right after the create (no name conflicts are
looked for). ``pattern`` compiles
with Python's ``re``, not Go's RE2. An invalid value that is a Go struct or list (``spec.versions``,
a rule) is printed abbreviated, where Go prints its ``%#v``; parse errors carry cel-python's
position, not cel-go's reason text.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from celpy.celparser import CELParseError

from tests.fakes.kube_cel import program, program_ast, rule_errors
from tests.fakes.kube_field_errors import FieldError
from tests.fakes.kube_regexp import GoRegexpError, go_regexp
from tests.fakes.kube_structural import problems, prune

_DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MESSAGE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name', or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_OPENAPI_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_COLUMN_TYPES: Final = "boolean,date,integer,number,string"
_COLUMN_FORMATS: Final = "byte,date,date-time,double,float,int32,int64,password"
_RULE_REASONS: Final = (
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
)
_META_FIELDS: Final = ("apiVersion", "kind", "metadata")
_APPROVAL: Final = "api-approved.kubernetes.io"
_APPROVAL_LINK: Final = "see https://github.com/kubernetes/enhancements/pull/1111"
_ROOT_FIELDS_WITH_STATUS: Final = {
    "description": "Description",
    "type": "Type",
    "format": "Format",
    "title": "Title",
    "maximum": "Maximum",
    "exclusiveMaximum": "ExclusiveMaximum",
    "minimum": "Minimum",
    "exclusiveMinimum": "ExclusiveMinimum",
    "maxLength": "MaxLength",
    "minLength": "MinLength",
    "pattern": "Pattern",
    "maxItems": "MaxItems",
    "minItems": "MinItems",
    "uniqueItems": "UniqueItems",
    "multipleOf": "MultipleOf",
    "required": "Required",
    "items": "Items",
    "properties": "Properties",
    "externalDocs": "ExternalDocs",
    "example": "Example",
    "x-kubernetes-preserve-unknown-fields": "XPreserveUnknownFields",
    "x-kubernetes-validations": "XValidations",
}
_SCHEMA_FIELD_ORDER: Final = (
    "id", "$schema", "$ref", "description", "type", "nullable", "format", "title", "default", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
    "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties", "minProperties", "required",
    "items", "allOf", "oneOf", "anyOf", "not", "properties", "additionalProperties", "patternProperties",
    "dependencies", "additionalItems", "definitions", "externalDocs", "example",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-map-type",
    "x-kubernetes-validations",
)  # fmt: skip
_ROOT, _ITEM, _FIELD = 0, 1, 2
_TYPE_REQUIRED: Final = {
    _ROOT: "must not be empty at the root",
    _ITEM: "must not be empty for specified array items",
    _FIELD: "must not be empty for specified object fields",
}
_INT_OR_STRING_ANY_OF: Final = [{"type": "integer"}, {"type": "string"}]


# ---- apimachinery's field errors and Go's value printing -------------------------------------------
def _go(value: Any) -> str:
    """A JSON value as Go's ``%#v`` prints it inside an interface (maps with sorted keys)."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go(v) for v in value) + "}"
    if isinstance(value, Mapping):
        items = ", ".join(f"{json.dumps(str(k))}:{_go(v)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + items + "}"
    return repr(value)


def _shown(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted, simple types bare, the rest ``%#v``."""
    return "null" if value is None else _go(value)


def _strings(values: Sequence[Any] | None) -> str:
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def _rule_value(rule: Mapping[str, Any]) -> str:
    """An ``apiextensions.ValidationRule`` as ``%#v`` prints it (pointer addresses not reproduced)."""
    reason = rule.get("reason")
    optional = rule.get("optionalOldSelf")
    return (
        f"apiextensions.ValidationRule{{Rule:{json.dumps(str(rule.get('rule') or ''))}, "
        f"Message:{json.dumps(str(rule.get('message') or ''))}, "
        f"MessageExpression:{json.dumps(str(rule.get('messageExpression') or ''))}, "
        f"Reason:(*apiextensions.FieldValueErrorReason)({'nil' if reason is None else '0x...'}), "
        f"FieldPath:{json.dumps(str(rule.get('fieldPath') or ''))}, "
        f"OptionalOldSelf:(*bool)({'nil' if optional is None else '0x...'})}}"
    )


def _required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "FieldValueRequired", detail=detail)


def _forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "FieldValueForbidden", detail=detail)


def _invalid(path: str, shown: str, detail: str) -> FieldError:
    return FieldError(path, "FieldValueInvalid", shown, detail)


def _unsupported(path: str, value: str, allowed: Sequence[str]) -> FieldError:
    listed = ", ".join(json.dumps(a) for a in allowed)
    return FieldError(path, "FieldValueNotSupported", json.dumps(value), f"supported values: {listed}")


def _subdomain(value: str) -> list[str]:
    found = ["must be no more than 253 characters"] if len(value) > 253 else []
    return found + ([] if _DNS1123_SUBDOMAIN.fullmatch(value) else [_SUBDOMAIN_MESSAGE])


def _label(value: str) -> list[str]:
    found = ["must be no more than 63 characters"] if len(value) > 63 else []
    return found + ([] if _DNS1035_LABEL.fullmatch(value) else [_LABEL_MESSAGE])


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _key(path: str, key: str) -> str:
    return f"{path}.properties[{key}]"


# ---- the v1 object: defaults, and the internal form's hoisting of identical per-version fields ------
def with_defaults(crd: Mapping[str, Any]) -> dict[str, Any]:
    """``crd`` with the v1 API's defaults (``SetDefaults_CustomResourceDefinitionSpec``) filled in."""
    out = copy.deepcopy(dict(crd))
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict):
        return out
    names = spec.setdefault("names", {})
    if isinstance(names, dict):
        kind = str(names.get("kind") or "")
        if not names.get("singular"):
            names["singular"] = kind.lower()
        if not names.get("listKind") and kind:
            names["listKind"] = f"{kind}List"
    if spec.get("conversion") is None:
        spec["conversion"] = {"strategy": "None"}
    return out


@dataclass(frozen=True, slots=True)
class _Internal:
    """What the internal form keeps once: a field every version sets identically (else ``None``)."""

    schema: Mapping[str, Any] | None
    subresources: Mapping[str, Any] | None
    columns: list[Any]
    schema_hoisted: bool
    subresources_hoisted: bool
    columns_hoisted: bool


def _hoisted(versions: list[Mapping[str, Any]]) -> _Internal:
    if not versions:
        return _Internal(None, None, [], False, False, False)

    def same(key: str) -> bool:
        return all(v.get(key) == versions[0].get(key) for v in versions)

    schema_same, sub_same, col_same = same("schema"), same("subresources"), same("additionalPrinterColumns")
    return _Internal(
        _dict(versions[0].get("schema")) if schema_same and versions[0].get("schema") is not None else None,
        _dict(versions[0].get("subresources")) if sub_same and versions[0].get("subresources") else None,
        _list(versions[0].get("additionalPrinterColumns")) if col_same else [],
        schema_same,
        sub_same,
        col_same,
    )


# ---- the CRD object ---------------------------------------------------------------------------------
def crd_errors(crd: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Every rule ``crd`` (defaulted, see :func:`with_defaults`) breaks, in the real server's order;
    ``old`` is the stored CRD on an update.

    Memoised on the documents' JSON: the checks are deterministic, and tests install the same CRDs
    again and again (one large CRD costs milliseconds to check)."""
    crd_json = json.dumps(crd, sort_keys=True, default=str)
    old_json = None if old is None else json.dumps(old, sort_keys=True, default=str)
    return list(_memoised_errors(crd_json, old_json))


@functools.lru_cache(maxsize=256)
def _memoised_errors(crd_json: str, old_json: str | None) -> tuple[FieldError, ...]:
    return tuple(_crd_errors(json.loads(crd_json), None if old_json is None else json.loads(old_json)))


def _crd_errors(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    meta = _dict(crd.get("metadata"))
    spec = _dict(crd.get("spec"))
    names = _dict(spec.get("names"))
    group = str(spec.get("group") or "")
    errors: list[FieldError] = []
    if old is None:
        name = str(meta.get("name") or "")
        if not name:
            errors.append(_required("metadata.name", "name or generateName is required"))
        else:
            messages = _subdomain(name)
            if name != f"{names.get('plural') or ''}.{group}":
                messages.append('must be spec.names.plural+"."+spec.group')
            errors += [_invalid("metadata.name", json.dumps(name), m) for m in messages]
    errors += _spec_errors(spec)
    errors += _stored_version_errors(crd, old)
    errors += _approval_errors(crd, old)
    if spec.get("preserveUnknownFields") is True:
        errors.append(
            _invalid(
                "spec.preserveUnknownFields",
                "true",
                "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in "
                "spec.versions[*].schema instead",
            )
        )
    if old is not None:
        errors += _immutable_errors(spec, _dict(old.get("spec")))
    return errors


def stored_versions(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """``status.storedVersions`` as the server keeps it: the old list plus the storage version."""
    stored = [str(v) for v in _list(_dict(_dict(old).get("status")).get("storedVersions"))]
    for version in _list(_dict(crd.get("spec")).get("versions")):
        if isinstance(version, Mapping) and version.get("storage") is True:
            if version.get("name") not in stored:
                stored.append(str(version.get("name")))
            break
    return stored


def _stored_version_errors(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    stored = stored_versions(crd, old)
    path = "status.storedVersions"
    if not stored:
        return [_invalid(path, _strings(None), "must have at least one stored version")]
    names = [
        str(v.get("name")) for v in _list(_dict(crd.get("spec")).get("versions")) if isinstance(v, Mapping)
    ]
    return [
        _invalid(
            f"{path}[{index}]",
            json.dumps(version),
            f"missing from spec.versions; {version} was previously a storage version, and must remain in "
            f"spec.versions until a storage migration ensures no data remains persisted in {version} and "
            f"removes {version} from status.storedVersions",
        )
        for index, version in enumerate(stored)
        if version not in names
    ]


def _approval_errors(crd: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    group = str(_dict(crd.get("spec")).get("group") or "")
    protected = any(group == g or group.endswith(f".{g}") for g in ("k8s.io", "kubernetes.io"))
    if not protected:
        return []

    def state(obj: Mapping[str, Any]) -> str:
        value = str(_dict(_dict(obj.get("metadata")).get("annotations")).get(_APPROVAL) or "")
        if not value:
            return "missing"
        if value.startswith("unapproved"):
            return "bypassed"
        return "approved" if re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s]+\S*", value) else "invalid"

    new_state = state(crd)
    if (old is not None and state(old) == new_state) or new_state in ("approved", "bypassed"):
        return []
    path = f"metadata.annotations[{_APPROVAL}]"
    if new_state == "missing":
        return [
            _required(path, f'protected groups must have approval annotation "{_APPROVAL}", {_APPROVAL_LINK}')
        ]
    value = str(_dict(_dict(crd.get("metadata")).get("annotations")).get(_APPROVAL))
    return [
        _invalid(
            path,
            json.dumps(value),
            f'protected groups must have approval annotation "{_APPROVAL}" with either a URL or a reason '
            f'starting with "unapproved", {_APPROVAL_LINK}',
        )
    ]


def _immutable_errors(spec: Mapping[str, Any], old_spec: Mapping[str, Any]) -> list[FieldError]:
    names, old_names = _dict(spec.get("names")), _dict(old_spec.get("names"))
    pairs = (
        ("spec.scope", spec.get("scope"), old_spec.get("scope")),
        ("spec.names.kind", names.get("kind"), old_names.get("kind")),
        ("spec.group", spec.get("group"), old_spec.get("group")),
        ("spec.names.plural", names.get("plural"), old_names.get("plural")),
    )
    return [_invalid(path, _shown(new), "field is immutable") for path, new, before in pairs if new != before]


def _spec_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    group = str(spec.get("group") or "")
    if not group:
        errors.append(_required("spec.group"))
    elif problems_ := _subdomain(group):
        errors.append(_invalid("spec.group", json.dumps(group), ",".join(problems_)))
    elif "." not in group:
        errors.append(_invalid("spec.group", json.dumps(group), "should be a domain with at least one dot"))
    scope = str(spec.get("scope") or "")
    if not scope:
        errors.append(_required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errors.append(_unsupported("spec.scope", scope, ("Cluster", "Namespaced")))

    versions = [v if isinstance(v, Mapping) else {} for v in _list(spec.get("versions"))]
    internal = _hoisted(versions)
    if internal.schema is None or internal.schema.get("openAPIV3Schema") is None:
        errors += [
            _required(f"spec.versions[{i}].schema.openAPIV3Schema")
            for i, v in enumerate(versions)
            if internal.schema_hoisted or _dict(v.get("schema")).get("openAPIV3Schema") is None
        ]
    if spec.get("preserveUnknownFields") is True and any(
        _has_default(_dict(v.get("schema")).get("openAPIV3Schema")) for v in versions
    ):
        errors.append(
            _invalid(
                "spec.preserveUnknownFields", "true", "must be false in order to use defaults in the schema"
            )
        )

    any_status = any("status" in _dict(v.get("subresources")) for v in versions)
    seen: set[str] = set()
    storage = 0
    for index, version in enumerate(versions):
        path = f"spec.versions[{index}]"
        name = str(version.get("name") or "")
        storage += version.get("storage") is True
        seen.add(name)
        if found := _label(name):
            errors.append(_invalid(f"{path}.name", json.dumps(name), ",".join(found)))
        errors += _deprecation_errors(version, path)
        if not internal.schema_hoisted:
            status = "status" in _dict(version.get("subresources"))
            errors += _validation_errors(_dict(version.get("schema")), status, f"{path}.schema")
        if not internal.subresources_hoisted:
            errors += _subresource_errors(_dict(version.get("subresources")), f"{path}.subresources")
        if not internal.columns_hoisted:
            for col, column in enumerate(_list(version.get("additionalPrinterColumns"))):
                errors += _column_errors(_dict(column), f"{path}.additionalPrinterColumns[{col}]")
    shown_versions = "[]apiextensions.CustomResourceDefinitionVersion{...}"
    if len(seen) != len(versions):
        errors.append(_invalid("spec.versions", shown_versions, "must contain unique version names"))
    if storage != 1:
        errors.append(
            _invalid(
                "spec.versions", shown_versions, "must have exactly one version marked as storage version"
            )
        )
    errors += _names_errors(_dict(spec.get("names")))
    if internal.schema_hoisted and internal.schema is not None:
        errors += _validation_errors(internal.schema, any_status, "spec.validation")
    if internal.subresources_hoisted and internal.subresources is not None:
        errors += _subresource_errors(internal.subresources, "spec.subresources")
    if internal.columns_hoisted:
        for col, column in enumerate(internal.columns):
            errors += _column_errors(_dict(column), f"spec.additionalPrinterColumns[{col}]")
    errors += _conversion_errors(_dict(spec.get("conversion")), spec)
    return errors


def _deprecation_errors(version: Mapping[str, Any], path: str) -> list[FieldError]:
    warning = version.get("deprecationWarning")
    if warning is None:
        return []
    text = str(warning)
    where = f"{path}.deprecationWarning"
    if version.get("deprecated") is not True:
        return [_invalid(where, json.dumps(text), "can only be set for deprecated versions")]
    found = []
    if len(text.encode()) > 256:
        found.append("must be <= 256 characters long")
    if not text:
        found.append("must not be an empty string")
    for index, char in enumerate(text):
        if not char.isprintable():
            found.append(
                "must only contain printable UTF-8 characters; non-printable character found at index "
                f"{index}"
            )
            break
    return [_invalid(where, json.dumps(text), m) for m in found]


def _names_errors(names: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    path = "spec.names"
    values = {key: str(names.get(key) or "") for key in ("plural", "singular", "kind", "listKind")}
    errors += [_required(f"{path}.{key}") for key, value in values.items() if not value]
    for key in ("plural", "singular"):
        if values[key] and (found := _label(values[key])):
            errors.append(_invalid(f"{path}.{key}", json.dumps(values[key]), ",".join(found)))
    for key in ("kind", "listKind"):
        if values[key] and (found := _label(values[key].lower())):
            detail = "may have mixed case, but should otherwise match: " + ",".join(found)
            errors.append(_invalid(f"{path}.{key}", json.dumps(values[key]), detail))
    for index, short in enumerate(_list(names.get("shortNames"))):
        if found := _label(str(short)):
            errors.append(_invalid(f"{path}.shortNames[{index}]", json.dumps(str(short)), ",".join(found)))
    if values["kind"] and values["kind"] == values["listKind"]:
        errors.append(
            _invalid(
                f"{path}.listKind", json.dumps(values["listKind"]), "kind and listKind may not be the same"
            )
        )
    for index, category in enumerate(_list(names.get("categories"))):
        if found := _label(str(category)):
            errors.append(_invalid(f"{path}.categories[{index}]", json.dumps(str(category)), ",".join(found)))
    return errors


def _json_path_errors(value: str, path: str) -> list[FieldError]:
    if not value:
        return [_invalid(path, '""', "must not be empty")]
    if not value.startswith("."):
        return [_invalid(path, json.dumps(value), "must be a simple json path starting with .")]
    return []


def _column_errors(column: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not column.get("name"):
        errors.append(_required(f"{path}.name"))
    kind = str(column.get("type") or "")
    if not kind:
        errors.append(_required(f"{path}.type", f"must be one of {_COLUMN_TYPES}"))
    elif kind not in _COLUMN_TYPES.split(","):
        errors.append(_invalid(f"{path}.type", json.dumps(kind), f"must be one of {_COLUMN_TYPES}"))
    fmt = str(column.get("format") or "")
    if fmt and fmt not in _COLUMN_FORMATS.split(","):
        errors.append(_invalid(f"{path}.format", json.dumps(fmt), f"must be one of {_COLUMN_FORMATS}"))
    json_path = str(column.get("jsonPath") or "")
    if not json_path:
        errors.append(_required(f"{path}.JSONPath"))
    else:
        errors += _json_path_errors(json_path, f"{path}.JSONPath")
    return errors


def _subresource_errors(subresources: Mapping[str, Any], path: str) -> list[FieldError]:
    scale = subresources.get("scale")
    if not isinstance(scale, Mapping):
        return []
    errors: list[FieldError] = []
    for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")):
        value = str(scale.get(key) or "")
        where = f"{path}.scale.{key}"
        if not value:
            errors.append(_required(where))
        elif found := _json_path_errors(value, where):
            errors += found
        elif not value.startswith(prefix):
            errors.append(
                _invalid(where, json.dumps(value), f"should be a json path under {prefix.rstrip('.')}")
            )
    selector = str(scale.get("labelSelectorPath") or "")
    where = f"{path}.scale.labelSelectorPath"
    if selector and (found := _json_path_errors(selector, where)):
        errors += found
    elif selector and not selector.startswith((".spec.", ".status.")):
        errors.append(
            _invalid(where, "(*string)(0x...)", "should be a json path under either .spec or .status")
        )
    return errors


def _conversion_errors(conversion: Mapping[str, Any], spec: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    path = "spec.conversion"
    strategy = str(conversion.get("strategy") or "")
    if strategy and strategy != "None" and spec.get("preserveUnknownFields") is True:
        errors.append(
            _invalid(
                f"{path}.strategy", json.dumps(strategy), "must be None if spec.preserveUnknownFields is true"
            )
        )
    if not strategy:
        return [*errors, _required(f"{path}.strategy")]
    if strategy not in ("None", "Webhook"):
        return [*errors, _unsupported(f"{path}.strategy", strategy, ("None", "Webhook"))]
    webhook = conversion.get("webhook")
    if strategy == "Webhook":
        config = _dict(webhook).get("clientConfig")
        if not isinstance(config, Mapping):
            errors.append(
                _required(f"{path}.webhookClientConfig", "required when strategy is set to Webhook")
            )
        elif (config.get("url") is None) == (config.get("service") is None):
            errors.append(
                _required(f"{path}.webhookClientConfig", "exactly one of url or service is required")
            )
        reviews = [str(v) for v in _list(_dict(webhook).get("conversionReviewVersions"))]
        where = f"{path}.conversionReviewVersions"
        if not reviews:
            errors.append(_required(where))
        elif not set(reviews) & {"v1", "v1beta1"}:
            errors.append(_invalid(where, _strings(reviews), "must include at least one of v1, v1beta1"))
    elif isinstance(webhook, Mapping):
        if webhook.get("clientConfig") is not None:
            errors.append(
                _forbidden(
                    f"{path}.webhookClientConfig", "should not be set when strategy is not set to Webhook"
                )
            )
        if webhook.get("conversionReviewVersions"):
            errors.append(
                _forbidden(
                    f"{path}.conversionReviewVersions",
                    "should not be set when strategy is not set to Webhook",
                )
            )
    return errors


# ---- one schema ---------------------------------------------------------------------------------------
def _has_default(schema: Any) -> bool:
    """Whether any node of ``schema`` declares a ``default`` (``schemaHasDefaults``)."""
    if not isinstance(schema, Mapping):
        return False
    if schema.get("default") is not None:
        return True
    children: list[Any] = [schema.get("items"), schema.get("not"), schema.get("additionalProperties")]
    children += list(_dict(schema.get("properties")).values())
    for junctor in ("allOf", "anyOf", "oneOf"):
        children += _list(schema.get(junctor))
    return any(_has_default(child) for child in children)


def _validation_errors(validation: Mapping[str, Any], status_enabled: bool, path: str) -> list[FieldError]:
    """``validateCustomResourceDefinitionValidation``: one schema, at ``path`` (``...schema`` or
    ``spec.validation``)."""
    schema = validation.get("openAPIV3Schema")
    if not isinstance(schema, Mapping):
        return []
    root = f"{path}.openAPIV3Schema"
    errors: list[FieldError] = []
    if status_enabled:
        for keyword in sorted(schema, key=lambda k: _order(k)):
            if not schema[keyword] and schema[keyword] != 0:
                continue
            if keyword == "type":
                if schema["type"] != "object":
                    detail = (
                        'only "object" is allowed as the type at the root of the schema if the status '
                        "subresource is enabled"
                    )
                    errors.append(_invalid(f"{root}.type", json.dumps(str(schema["type"])), detail))
                    break
                continue
            if keyword not in _ROOT_FIELDS_WITH_STATUS:
                allowed = " ".join(_ROOT_FIELDS_WITH_STATUS.values())
                detail = (
                    f"only [{allowed}] fields are allowed at the root of the schema if the status "
                    "subresource is enabled"
                )
                errors.append(_invalid(root, "apiextensions.JSONSchemaProps{...}", detail))
                break
    if schema.get("nullable") is True:
        errors.append(_forbidden(f"{root}.nullable", "nullable cannot be true at the root"))
    structural = _structural_errors(schema, root)
    cel_ok = False
    if structural:
        errors += structural
    elif defaults := _default_errors(schema, root):
        errors += defaults
    else:
        cel_ok = True
    schema_errors, cel_errors = _openapi_errors(schema, root, _Context(), is_root=True, cel=cel_ok)
    return errors + schema_errors + cel_errors


def _order(keyword: str) -> int:
    return _SCHEMA_FIELD_ORDER.index(keyword) if keyword in _SCHEMA_FIELD_ORDER else len(_SCHEMA_FIELD_ORDER)


# ---- structurality (pkg/apiserver/schema: ValidateStructural) ------------------------------------------
def _structural_errors(schema: Mapping[str, Any], path: str) -> list[FieldError]:
    found = _invariants(schema, _ROOT, path) + _completeness(schema, path)
    return sorted(found, key=str)


def _invariants(s: Mapping[str, Any], level: int, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    kind = str(s.get("type") or "")
    items = s.get("items")
    if kind == "array" and items is None:
        errors.append(_required(f"{path}.items", "must be specified"))
    if isinstance(items, Mapping):
        errors += _invariants(items, _ITEM, f"{path}.items")
    properties = _dict(s.get("properties"))
    for key, child in properties.items():
        errors += _invariants(_dict(child), _FIELD, _key(path, key))
    additional = s.get("additionalProperties")
    if additional is not None:
        if level == _ROOT:
            errors.append(_forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(additional, Mapping):
            errors += _invariants(additional, _FIELD, f"{path}.additionalProperties")
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = s.get("x-kubernetes-embedded-resource") is True
    if int_or_string and preserve:
        errors.append(
            _invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields",
                "true",
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    if int_or_string and embedded:
        errors.append(
            _invalid(
                f"{path}.x-kubernetes-embedded-resource",
                "true",
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    skip_any_of = s.get("anyOf") == _INT_OR_STRING_ANY_OF
    all_of = _list(s.get("allOf"))
    skip_first = bool(all_of) and _dict(all_of[0]).get("anyOf") == _INT_OR_STRING_ANY_OF
    errors += _value_validation(s, skip_any_of, skip_first, path)
    if embedded and kind != "object":
        detail = "must be object if x-kubernetes-embedded-resource is true"
        errors.append(
            _required(f"{path}.type", detail)
            if not kind
            else _invalid(f"{path}.type", json.dumps(kind), detail)
        )
    elif not kind and not int_or_string and not preserve:
        errors.append(_required(f"{path}.type", _TYPE_REQUIRED[level]))
    if embedded and additional is not None:
        errors.append(
            _forbidden(
                f"{path}.additionalProperties", "must not be used if x-kubernetes-embedded-resource is set"
            )
        )
    if level == _ROOT and kind and kind != "object":
        errors.append(_invalid(f"{path}.type", json.dumps(kind), "must be object at the root"))
    check_meta = level == _ROOT or embedded
    for key in ("kind", "apiVersion"):
        if key in properties and check_meta and _dict(properties[key]).get("type") != "string":
            shown = json.dumps(str(_dict(properties[key]).get("type") or ""))
            errors.append(_invalid(f"{_key(path, key)}.type", shown, "must be string"))
    if "metadata" in properties:
        errors += _metadata_invariants(
            _dict(properties["metadata"]), check_meta, level, _key(path, "metadata")
        )
    if embedded and not preserve and not properties:
        errors.append(
            _required(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without "
                "x-kubernetes-preserve-unknown-fields",
            )
        )
    return errors


def _metadata_invariants(s: Mapping[str, Any], check: bool, level: int, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if check and s.get("type") != "object":
        errors.append(_invalid(f"{path}.type", json.dumps(str(s.get("type") or "")), "must be object"))
    if level == _ROOT:
        rest = {k: v for k, v in s.items() if k not in ("type", "default") and not _zero(v)}
        properties = _dict(rest.get("properties"))
        if set(properties) <= {"name", "generateName"}:
            rest.pop("properties", None)
        if rest:
            errors.append(
                _forbidden(
                    path,
                    "must not specify anything other than name and generateName, but metadata is "
                    "implicitly specified",
                )
            )
    return errors


def _zero(value: Any) -> bool:
    return value is None or value is False or value == "" or value == [] or value == {}


def _value_validation(
    s: Mapping[str, Any], skip_any_of: bool, skip_first_all_of: bool, path: str
) -> list[FieldError]:
    errors: list[FieldError] = []
    if not skip_any_of:
        for index, nested in enumerate(_list(s.get("anyOf"))):
            errors += _nested(_dict(nested), False, f"{path}.anyOf[{index}]")
    for index, nested in enumerate(_list(s.get("allOf"))):
        errors += _nested(_dict(nested), skip_first_all_of and index == 0, f"{path}.allOf[{index}]")
    for index, nested in enumerate(_list(s.get("oneOf"))):
        errors += _nested(_dict(nested), False, f"{path}.oneOf[{index}]")
    if isinstance(s.get("not"), Mapping):
        errors += _nested(s["not"], False, f"{path}.not")
    pattern = s.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            go_regexp(pattern)
        except GoRegexpError as exc:
            detail = f"must be a valid regular expression, but isn't: error parsing regexp: {exc}"
            errors.append(_invalid(f"{path}.pattern", json.dumps(pattern), detail))
    return errors


_NESTED_FORBIDDEN: Final = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def _nested(v: Mapping[str, Any], skip_any_of: bool, path: str) -> list[FieldError]:
    """``validateNestedValueValidation``: under a junctor only value validations may appear."""
    errors = _value_validation(v, skip_any_of, False, path)
    if isinstance(v.get("items"), Mapping):
        errors += _nested(v["items"], False, f"{path}.items")
    for key, child in _dict(v.get("properties")).items():
        errors += _nested(_dict(child), False, _key(path, key))
    for keyword, detail in _NESTED_FORBIDDEN:
        value = v.get(keyword)
        if keyword in ("x-kubernetes-list-type", "x-kubernetes-map-type", "default", "additionalProperties"):
            set_ = value is not None
        else:
            set_ = not _zero(value)
        if set_:
            errors.append(_forbidden(f"{path}.{keyword}", detail))
    if "metadata" in _dict(v.get("properties")):
        errors.append(_forbidden(_key(path, "metadata"), "must not be specified in a nested context"))
    return errors


def _completeness(s: Mapping[str, Any], path: str) -> list[FieldError]:
    """``validateStructuralCompleteness`` (the root's junctors only, as upstream)."""
    return _junctor_completeness(s, s, path, path)


def _junctor_completeness(
    v: Mapping[str, Any], s: Mapping[str, Any] | None, s_path: str, v_path: str
) -> list[FieldError]:
    errors: list[FieldError] = []
    nested: list[tuple[Any, str]] = []
    if isinstance(v.get("not"), Mapping):
        nested.append((v["not"], f"{v_path}.not"))
    for junctor in ("allOf", "anyOf", "oneOf"):
        nested += [(n, f"{v_path}.{junctor}[{i}]") for i, n in enumerate(_list(v.get(junctor)))]
    for node, node_path in nested:
        errors += _nested_completeness(_dict(node), s, s_path, node_path)
    return errors


def _nested_completeness(
    v: Mapping[str, Any], s: Mapping[str, Any] | None, s_path: str, v_path: str
) -> list[FieldError]:
    if s is None:
        return [_required(s_path, f"because it is defined in {v_path}")]
    errors = _junctor_completeness(v, s, s_path, v_path)
    if isinstance(v.get("items"), Mapping):
        items = s.get("items")
        errors += _nested_completeness(
            v["items"], items if isinstance(items, Mapping) else None, f"{s_path}.items", f"{v_path}.items"
        )
    declared = _dict(s.get("properties"))
    for key, child in _dict(v.get("properties")).items():
        if key not in declared:
            errors.append(_required(_key(s_path, key), f"because it is defined in {_key(v_path, key)}"))
        else:
            errors += _nested_completeness(
                _dict(child), _dict(declared[key]), _key(s_path, key), _key(v_path, key)
            )
    return errors


# ---- defaults (pkg/apiserver/schema/defaulting: ValidateDefaults) --------------------------------------
def _under(prefix: str, error: FieldError) -> FieldError:
    """``error`` (found validating a default as its own document) moved under ``prefix``."""
    if not error.field:
        field = prefix
    elif error.field.startswith("["):
        field = f"{prefix}{error.field}"
    else:
        field = f"{prefix}.{error.field}"
    return replace(error, field=field, node=None)


def _rules_parse(schema: Any) -> bool:
    """Whether every CEL rule and message expression in ``schema`` parses (else defaults skip CEL)."""
    if isinstance(schema, Mapping):
        for rule in _list(schema.get("x-kubernetes-validations")):
            for key in ("rule", "messageExpression"):
                text = _dict(rule).get(key)
                if isinstance(text, str) and text.strip() and _parse_error(text) is not None:
                    return False
        return all(_rules_parse(v) for k, v in schema.items() if k != "x-kubernetes-validations")
    if isinstance(schema, list):
        return all(_rules_parse(v) for v in schema)
    return True


def _default_errors(s: Mapping[str, Any], path: str, *, root: bool = True) -> list[FieldError]:
    errors: list[FieldError] = []
    if "default" in s and s["default"] is not None and not root:
        default = s["default"]
        where = f"{path}.default"
        if prune(s, default) != default:
            errors.append(_invalid(where, _shown(default), "must not have unknown fields"))
        found = [_under(where, e) for e in problems(s, default, "")]
        if not found and _rules_parse(s):
            found = [_under(where, e) for e in rule_errors(s, default, "")]
        errors += found
    if isinstance(s.get("items"), Mapping):
        errors += _default_errors(s["items"], f"{path}.items", root=False)
    for key, child in _dict(s.get("properties")).items():
        if root and key in _META_FIELDS:
            continue  # defaults there are forbidden outright (see _openapi_errors)
        errors += _default_errors(_dict(child), _key(path, key), root=False)
    return errors


# ---- the OpenAPI subset and the extensions (ValidateCustomResourceDefinitionOpenAPISchema) --------------
@dataclass(frozen=True, slots=True)
class _Context:
    """``specStandardValidatorV3``'s state on the way down."""

    allow_defaults: bool = True
    defaults_reason: str = ""
    inside_meta: bool = False
    uncorrelatable: str | None = None

    def forbid_old_self(self, path: str) -> _Context:
        return self if self.uncorrelatable is not None else replace(self, uncorrelatable=path)


def _standard_errors(s: Mapping[str, Any], path: str, ctx: _Context) -> list[FieldError]:
    errors: list[FieldError] = []
    kind = s.get("type")
    if isinstance(kind, str) and kind and kind not in _OPENAPI_TYPES:
        errors.append(_unsupported(f"{path}.type", kind, _OPENAPI_TYPES))
    if s.get("default") is not None and not ctx.allow_defaults:
        detail = "must not be set" + (f" {ctx.defaults_reason}" if ctx.defaults_reason else "")
        errors.append(_forbidden(f"{path}.default", detail))
    for keyword, detail in (
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ):
        if not _zero(s.get(keyword)):
            errors.append(_forbidden(f"{path}.{keyword}", detail))
    if kind == "null":
        errors.append(
            _forbidden(f"{path}.type", "type cannot be set to null, use nullable as an alternative")
        )
    if isinstance(s.get("items"), list) and s["items"]:
        errors.append(_forbidden(f"{path}.items", "items must be a schema object and not an array"))
    if ctx.inside_meta and s.get("x-kubernetes-embedded-resource") is True:
        errors.append(
            _forbidden(f"{path}.x-kubernetes-embedded-resource", "must not be used inside of resource meta")
        )
    return errors


def _openapi_errors(
    s: Mapping[str, Any], path: str, ctx: _Context, *, is_root: bool = False, cel: bool = False
) -> tuple[list[FieldError], list[FieldError]]:
    """``(schema errors, CEL errors)`` of ``s`` and everything below it; ``cel``: whether the rules may
    be compiled (the schema is structural and its defaults valid)."""
    errors = _standard_errors(s, path, ctx)
    cel_errors: list[FieldError] = []

    def add(found: tuple[list[FieldError], list[FieldError]]) -> None:
        errors.extend(found[0])
        cel_errors.extend(found[1])

    if s.get("uniqueItems") is True:
        errors.append(
            _forbidden(
                f"{path}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    properties = _dict(s.get("properties"))
    additional = s.get("additionalProperties")
    if additional is not None:
        if properties and (additional is False or isinstance(additional, Mapping)):
            errors.append(
                _forbidden(
                    f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
                )
            )
        if isinstance(additional, Mapping):
            sub = ctx
            if ctx.inside_meta:
                sub = replace(
                    ctx,
                    allow_defaults=False,
                    defaults_reason="inside additionalProperties applying to object metadata",
                )
            add(_openapi_errors(additional, f"{path}.additionalProperties", sub, cel=cel))
    embedded = s.get("x-kubernetes-embedded-resource") is True
    for key in sorted(properties):
        sub = ctx
        if s.get("x-kubernetes-map-type") == "atomic":
            sub = sub.forbid_old_self(path)
        if (is_root or embedded) and key in _META_FIELDS:
            sub = replace(sub, inside_meta=True)
            if is_root:
                sub = replace(sub, allow_defaults=False, defaults_reason=f"in top-level {key}")
        add(_openapi_errors(_dict(properties[key]), _key(path, key), sub, cel=cel))
    if isinstance(s.get("not"), Mapping):
        add(_openapi_errors(s["not"], f"{path}.not", ctx))
    for junctor in ("allOf", "oneOf", "anyOf"):
        for index, nested in enumerate(_list(s.get(junctor))):
            add(_openapi_errors(_dict(nested), f"{path}.{junctor}[{index}]", ctx))
    items = s.get("items")
    list_type = s.get("x-kubernetes-list-type")
    if isinstance(items, Mapping):
        sub = ctx if list_type == "map" else ctx.forbid_old_self(path)
        add(_openapi_errors(items, f"{path}.items", sub, cel=cel))
    errors += _extension_errors(s, path)
    rules = _list(s.get("x-kubernetes-validations"))
    if rules:
        errors += _rule_shape_errors(s, rules, path)
        if not errors and cel:
            cel_errors += _rule_compile_errors(rules, path, ctx, s, is_root)
    return errors, cel_errors


def _type_needed(s: Mapping[str, Any], path: str, wanted: str, detail: str) -> list[FieldError]:
    kind = str(s.get("type") or "")
    if kind == wanted:
        return []
    return [
        _required(f"{path}.type", detail) if not kind else _invalid(f"{path}.type", json.dumps(kind), detail)
    ]


def _extension_errors(s: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        errors.append(
            _invalid(f"{path}.x-kubernetes-preserve-unknown-fields", "false", "must be true or undefined")
        )
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None:
        errors += _type_needed(s, path, "object", "must be object if x-kubernetes-map-type is specified")
        if map_type not in ("atomic", "granular"):
            errors.append(
                _unsupported(f"{path}.x-kubernetes-map-type", str(map_type), ("atomic", "granular"))
            )
    list_type = s.get("x-kubernetes-list-type")
    items = s.get("items")
    item = _dict(items)
    if list_type is not None and s.get("type") != "array":
        errors += _type_needed(s, path, "array", "must be array if x-kubernetes-list-type is specified")
    elif list_type == "set" and isinstance(items, Mapping):
        detail = "must be atomic as item of a list with x-kubernetes-list-type=set"
        if item.get("type") == "array" and item.get("x-kubernetes-list-type") not in (None, "atomic"):
            errors.append(
                _invalid(
                    f"{path}.items.x-kubernetes-list-type",
                    json.dumps(str(item["x-kubernetes-list-type"])),
                    detail,
                )
            )
        if item.get("type") == "object" and item.get("x-kubernetes-map-type") != "atomic":
            shown = (
                "null"
                if item.get("x-kubernetes-list-type") is None
                else json.dumps(str(item["x-kubernetes-list-type"]))
            )
            errors.append(_invalid(f"{path}.items.x-kubernetes-map-type", shown, detail))
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        errors.append(
            _unsupported(f"{path}.x-kubernetes-list-type", str(list_type), ("atomic", "set", "map"))
        )
    keys = [str(k) for k in _list(s.get("x-kubernetes-list-map-keys"))]
    if keys:
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        if list_type is None:
            errors.append(_required(f"{path}.x-kubernetes-list-type", detail))
        elif list_type != "map":
            errors.append(_invalid(f"{path}.x-kubernetes-list-type", json.dumps(str(list_type)), detail))
    if list_type == "map":
        errors += _map_list_errors(s, keys, path)
    if isinstance(items, Mapping) and list_type in ("set", "map"):
        if item.get("nullable") is True:
            errors.append(
                _forbidden(
                    f"{path}.items.nullable", f"cannot be nullable when x-kubernetes-list-type is {list_type}"
                )
            )
        if list_type == "map":
            required = set(_list(item.get("required")))
            for key in keys:
                if key not in _dict(item.get("properties")):
                    continue
                prop = _dict(_dict(item.get("properties"))[key])
                where = _key(f"{path}.items", key)
                if key not in required and prop.get("default") is None:
                    errors.append(
                        _required(
                            f"{where}.default",
                            "this property is in x-kubernetes-list-map-keys, so it must have a default or "
                            "be a required property",
                        )
                    )
                if prop.get("nullable") is True:
                    errors.append(
                        _forbidden(
                            f"{where}.nullable",
                            "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                        )
                    )
    return errors


def _map_list_errors(s: Mapping[str, Any], keys: list[str], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    items = s.get("items")
    if not keys:
        errors.append(
            _required(
                f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"
            )
        )
    if items is None:
        errors.append(_required(f"{path}.items", "must have a schema if x-kubernetes-list-type is map"))
    elif not isinstance(items, Mapping):
        errors.append(
            _invalid(
                f"{path}.items",
                "(*apiextensions.JSONSchemaPropsOrArray)(0x...)",
                "must only have a single schema if x-kubernetes-list-type is map",
            )
        )
    elif items.get("type") != "object":
        errors.append(
            _invalid(
                f"{path}.items.type",
                json.dumps(str(items.get("type") or "")),
                "must be object if parent array's x-kubernetes-list-type is map",
            )
        )
    else:
        seen: set[str] = set()
        properties = _dict(items.get("properties"))
        for key in keys:
            if key in properties:
                if _dict(properties[key]).get("type") in ("array", "object"):
                    errors.append(
                        _invalid(
                            f"{_key(f'{path}.items', key)}.type",
                            json.dumps("object"),
                            "must be a scalar type if parent array's x-kubernetes-list-type is map",
                        )
                    )
            else:
                errors.append(
                    _invalid(
                        f"{path}.x-kubernetes-list-map-keys",
                        _strings(keys),
                        "entries must all be names of item properties",
                    )
                )
            if key in seen:
                errors.append(
                    _invalid(
                        f"{path}.x-kubernetes-list-map-keys",
                        _strings(keys),
                        "must not contain duplicate entries",
                    )
                )
            seen.add(key)
    return errors


_NEWLINES: Final = re.compile(r"[\n\r]+")


def _rule_shape_errors(s: Mapping[str, Any], rules: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, raw in enumerate(rules):
        rule = _dict(raw)
        where = f"{path}.x-kubernetes-validations[{index}]"
        text = str(rule.get("rule") or "")
        message = str(rule.get("message") or "")
        expression = str(rule.get("messageExpression") or "")
        if not text.strip():
            errors.append(_required(f"{where}.rule", "rule is not specified"))
        elif message and not message.strip():
            errors.append(_invalid(f"{where}.message", json.dumps(message), "must be non-empty if specified"))
        elif _NEWLINES.search(message.strip()):
            errors.append(_invalid(f"{where}.message", json.dumps(message), "must not contain line breaks"))
        elif _NEWLINES.search(text.strip()) and not message.strip():
            errors.append(
                _required(f"{where}.message", "message must be specified if rule contains line breaks")
            )
        if expression and not expression.strip():
            errors.append(
                _required(f"{where}.messageExpression", "messageExpression must be non-empty if specified")
            )
        reason = rule.get("reason")
        if reason is not None and reason not in _RULE_REASONS:
            errors.append(_unsupported(f"{where}.reason", str(reason), _RULE_REASONS))
        field_path = str(rule.get("fieldPath") or "")
        if field_path and not field_path.strip():
            errors.append(
                _invalid(f"{where}.fieldPath", json.dumps(field_path), "must be non-empty if specified")
            )
        if _NEWLINES.search(field_path):
            errors.append(
                _invalid(f"{where}.fieldPath", json.dumps(field_path), "must not contain line breaks")
            )
        if field_path and not _field_path_valid(s, field_path):
            errors.append(_invalid(f"{where}.fieldPath", json.dumps(field_path), "must be a valid path"))
    return errors


_FIELD_PATH_PART: Final = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\['([^']*)'\]|\[(\d+)\]")


def _field_path_valid(schema: Mapping[str, Any], field_path: str) -> bool:
    """``cel.ValidFieldPath``: ``.a.b``, ``['a.b']`` or ``[0]`` steps that the schema declares."""
    node: Mapping[str, Any] = schema
    position = 0
    while position < len(field_path):
        match = _FIELD_PATH_PART.match(field_path, position)
        if match is None:
            return False
        position = match.end()
        name = match.group(1) if match.group(1) is not None else match.group(2)
        if name is not None:
            declared = _dict(node.get("properties"))
            if name in declared:
                node = _dict(declared[name])
            elif isinstance(node.get("additionalProperties"), Mapping):
                node = node["additionalProperties"]
            else:
                return False
        else:
            if node.get("type") != "array" or not isinstance(node.get("items"), Mapping):
                return False
            node = node["items"]
    return True


def _parse_error(expression: str) -> str | None:
    """cel-python's parse error of ``expression`` worded as cel-go's issue list, or ``None``."""
    try:
        program(expression)
    except CELParseError as exc:
        line, column = getattr(exc, "line", None) or 1, getattr(exc, "column", None) or 0
        text = expression.splitlines()[line - 1] if expression.splitlines() else expression
        return f"ERROR: <input>:{line}:{column}: Syntax error\n | {text}\n | {'.' * max(column - 1, 0)}^"
    return None


def _declared(node: Mapping[str, Any], name: str, metadata: bool) -> tuple[bool, Mapping[str, Any] | None]:
    """Whether ``node.name`` type-checks as cel-go types it from the schema, and the node it reaches
    (``None``: not followed). Only objects with declared properties and nothing else are checked;
    names with apiextensions' ``__escapes__`` are not followed."""
    if metadata:  # a rule sees only the root metadata's name and generateName
        return name in ("name", "generateName"), None
    declared = _dict(node.get("properties"))
    if isinstance(node.get("additionalProperties"), Mapping):
        return True, node["additionalProperties"]
    checked = (
        node.get("type") == "object"
        and bool(declared)
        and node.get("additionalProperties") is None
        and node.get("x-kubernetes-preserve-unknown-fields") is not True
        and "__" not in name
    )
    if not checked:
        return True, None
    return name in declared, _dict(declared[name]) if name in declared else None


def _undefined_fields(expression: str, schema: Mapping[str, Any], is_root: bool) -> str | None:
    """cel-go's type checker's ``undefined field`` for a ``self``/``oldSelf`` field chain the schema does
    not declare, or ``None``. Chains through macro variables or function results are not followed."""
    tree: Any = program_ast(expression)
    found: list[tuple[int, int, str]] = []

    def resolve(node: Any) -> tuple[Mapping[str, Any] | None, bool]:
        """``(schema node, is the root metadata)`` that ``node`` denotes, ``(None, False)`` if unknown."""
        kind = getattr(node, "data", None)
        children = getattr(node, "children", [])
        if kind == "member" and len(children) == 1:
            return resolve(children[0])
        if kind == "primary" and len(children) == 1 and getattr(children[0], "data", None) == "ident":
            return (schema, False) if str(children[0].children[0]) in ("self", "oldSelf") else (None, False)
        if kind == "member_index":
            base, _ = resolve(children[0])
            if base is not None and base.get("type") == "array" and isinstance(base.get("items"), Mapping):
                return base["items"], False
            if base is not None and isinstance(base.get("additionalProperties"), Mapping):
                return base["additionalProperties"], False
            return None, False
        if kind == "member_dot":
            base, metadata = resolve(children[0])
            token = children[1]
            if base is None:
                return None, False
            if is_root and base is schema and str(token) in _META_FIELDS:  # always there at the root
                return _dict(_dict(schema.get("properties")).get(str(token))), str(token) == "metadata"
            ok, reached = _declared(base, str(token), metadata)
            if not ok:
                found.append((token.line, token.column - 1, str(token)))
                return None, False
            return reached, False
        return None, False

    for subtree in tree.iter_subtrees():
        if subtree.data == "member_dot":
            resolve(subtree)
    if not found:
        return None
    line, column, name = min(found)
    text = expression.splitlines()[line - 1]
    return f"ERROR: <input>:{line}:{column}: undefined field '{name}'\n | {text}\n | {'.' * (column - 1)}^"


def _rule_compile_errors(
    rules: list[Any], path: str, ctx: _Context, schema: Mapping[str, Any], is_root: bool
) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, raw in enumerate(rules):
        rule = _dict(raw)
        where = f"{path}.x-kubernetes-validations[{index}]"
        text = str(rule.get("rule") or "")
        if not text.strip():
            continue
        failure = _parse_error(text) or _undefined_fields(text, schema, is_root)
        if failure is not None:
            errors.append(_invalid(f"{where}.rule", _rule_value(rule), f"compilation failed: {failure}"))
            continue
        expression = str(rule.get("messageExpression") or "")
        if expression.strip() and (failure := _parse_error(expression)) is not None:
            errors.append(
                _invalid(
                    f"{where}.messageExpression",
                    _rule_value(rule),
                    f"messageExpression compilation failed: {failure}",
                )
            )
        if re.search(r"\boldSelf\b", text):
            if ctx.uncorrelatable is not None:
                detail = (
                    "oldSelf cannot be used on the uncorrelatable portion of the schema within "
                    f"{ctx.uncorrelatable}"
                )
                errors.append(_invalid(f"{where}.rule", json.dumps(text), detail))
        elif rule.get("optionalOldSelf") is not None:
            errors.append(
                _invalid(
                    f"{where}.optionalOldSelf",
                    _shown(rule["optionalOldSelf"]),
                    "may not be set if oldSelf is not used in rule",
                )
            )
    return errors
