"""Rewrite jsonschema errors as :class:`~igw.config.errors.Problem` s users can act on.

jsonschema's own messages quote Python reprs and whole sub-documents ("{'a': 1} is not valid under
any of the given schemas"). Here each error becomes a problem at the exact field, in JSON terms:
``unknown field "spec.foo"`` per unexpected key, ``missing required field "spec.bbr"`` per missing
key, ``must be <= 65535 (got 70000)``, and the schema's ``x-igw-hint`` (a human description of a
pattern) instead of the regular expression.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from jsonschema.exceptions import ValidationError

from igw.config.errors import Problem
from igw.config.jsonpath import PathPart, format_path, sort_key
from igw.redaction import redact_value

_JSON_TYPES: Final = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
PROVIDER_PATH: Final = ("spec", "auth", "jwt", "provider")


def json_type(value: Any) -> str:
    for python_type, name in _JSON_TYPES.items():
        if type(value) is python_type:
            return name
    return type(value).__name__


def show(value: Any) -> str:
    """A value as a problem message quotes it: JSON with every credential masked, then cut at 60
    characters (after the masking, so that a token's first characters cannot be left over).

    The messages travel far beyond the file: ``igw validate`` output in CI logs, the operator's
    ``Accepted`` condition and Events (readable by anyone with the cluster's ``view`` role), and
    ``igw preflight`` / ``igw audit`` reports (SARIF uploaded to code scanning). A Redis URL with a
    password in a wrong scheme was quoted whole in all of them, and a JWT's first 57 characters."""
    text = redact_value(json.dumps(value, default=str))
    return text if len(text) <= 60 else text[:57] + "..."


class ProblemCollector:
    """Turns jsonschema errors into :class:`Problem` s, one per distinct (path, rule, message).

    ``quote`` renders a value a message quotes (default :func:`show`); a caller whose values may hold
    other credentials than URL passwords passes a stricter one (the add-on's configuration values:
    :mod:`igw.addon.configuration`, with the gateway's redaction)."""

    def __init__(self, quote: Callable[[Any], str] = show) -> None:
        self.quote = quote
        self.found: dict[tuple[str, str, str], tuple[tuple[PathPart, ...], Problem]] = {}

    def add(self, parts: tuple[PathPart, ...], message: str, rule: str) -> None:
        problem = Problem(path=format_path(parts), message=message, rule=rule)
        self.found.setdefault((problem.path, problem.rule, problem.message), (parts, problem))

    def translate(self, error: ValidationError, *, prefix: tuple[PathPart, ...] = ()) -> None:
        parts: tuple[PathPart, ...] = (*prefix, *error.absolute_path)
        kind: Any = error.validator
        value: Any = error.validator_value
        inst: Any = error.instance
        schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
        hint = schema.get("x-igw-hint")
        if "propertyNames" in error.relative_schema_path and isinstance(inst, str):
            # A map's key (a label key): blamed on the key itself. The CRD cannot say this
            # (structural schemas have no propertyNames); igw validate and the operator's admission do.
            wanted = hint or f"a key matching {value}"
            self.add((*parts, inst), f"key must be {wanted}; got {self.quote(inst)}", "schema.propertyNames")
        elif kind == "additionalProperties" and isinstance(inst, Mapping):
            known = schema.get("properties", {})
            for key in inst:
                if key not in known:
                    full = format_path((*parts, key))
                    extra = ""
                    if parts == ("spec", "extensions"):
                        extra = f" (known extensions: {', '.join(sorted(known)) or 'none'})"
                    self.add((*parts, key), f'unknown field "{full}"{extra}', "schema.unknown-field")
        elif kind == "required" and isinstance(inst, Mapping):
            for key in value:
                if key not in inst:
                    full = format_path((*parts, key))
                    self.add((*parts, key), f'missing required field "{full}"', "schema.required")
        elif kind == "type":
            if parts == PROVIDER_PATH and isinstance(inst, list):
                self.add(
                    parts,
                    "must be one provider object, not a list: write 'provider: {name: ..., issuer: ..., "
                    "remoteJWKS: {uri: ...}, audiences: [...]}' (see schemas/README.md)",
                    "jwt-provider-single-object",
                )
            else:
                self.add(parts, f"expected {value}, got {json_type(inst)}", "schema.type")
        elif kind == "enum":
            allowed = ", ".join(self.quote(v) for v in value)
            self.add(parts, f"must be one of {allowed}; got {self.quote(inst)}", "schema.enum")
        elif kind == "const":
            self.add(parts, f"must be {self.quote(value)}; got {self.quote(inst)}", "schema.const")
        elif kind == "pattern":
            wanted = hint or f"a string matching {value}"
            self.add(parts, f"must be {wanted}; got {self.quote(inst)}", "schema.pattern")
        elif kind == "format":
            wanted = hint or f"a valid {value}"
            self.add(parts, f"must be {wanted}; got {self.quote(inst)}", "schema.format")
        elif kind in {"minLength", "maxLength"}:
            bound = "at least" if kind == "minLength" else "at most"
            length = len(inst) if isinstance(inst, str) else "?"
            self.add(parts, f"must be {bound} {value} characters long (got {length})", f"schema.{kind}")
        elif kind in {"minItems", "maxItems"}:
            bound = "at least" if kind == "minItems" else "at most"
            count = len(inst) if isinstance(inst, list) else "?"
            self.add(parts, f"must have {bound} {value} items (got {count})", f"schema.{kind}")
        elif kind in {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}:
            op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kind]
            self.add(parts, f"must be {op} {value} (got {self.quote(inst)})", f"schema.{kind}")
        elif kind == "uniqueItems" and isinstance(inst, list):
            self._duplicates(parts, inst)
        elif kind in {"anyOf", "oneOf"}:
            wanted = hint or "one of the allowed forms"
            self.add(parts, f"must be {wanted}; got {self.quote(inst)}", f"schema.{kind}")
        elif kind == "not" and isinstance(value, Mapping) and ("enum" in value or "const" in value):
            # a refused value ('latest' as an image tag): named, where "does not satisfy the
            # schema's not rule" left the reader to find the rule
            refused = value["enum"] if "enum" in value else [value["const"]]
            names = ", ".join(self.quote(v) for v in refused)
            self.add(parts, f"must not be {names}; got {self.quote(inst)}", "schema.not")
        elif kind == "not" and isinstance(value, Mapping) and set(value) == {"required"}:
            # fields that exclude each other (an env variable's value and valueFrom)
            fields = " and ".join(str(name) for name in value["required"])
            self.add(parts, f"may not set both {fields}", "schema.not")
        else:
            # jsonschema's own message starts with the whole value (a sub-document, maybe a secret).
            self.add(
                parts, f"does not satisfy the schema's {kind} rule; got {self.quote(inst)}", f"schema.{kind}"
            )

    def _duplicates(self, parts: tuple[PathPart, ...], items: list[Any]) -> None:
        seen: dict[str, int] = {}
        for index, item in enumerate(items):
            key = json.dumps(item, sort_keys=True)
            if key in seen:
                first = format_path((*parts, seen[key]))
                self.add((*parts, index), f"duplicates {first} ({self.quote(item)})", "schema.uniqueItems")
            else:
                seen[key] = index

    def problems(self) -> list[Problem]:
        ordered = sorted(self.found.values(), key=lambda entry: sort_key(entry[0]))
        return [problem for _, problem in ordered]
