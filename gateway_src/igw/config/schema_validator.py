"""JSON Schema validators whose ``pattern`` keyword is matched by RE2, as the Kubernetes API server's is.

Why: jsonschema checks ``pattern`` with Python's ``re.search``, which differs from the engines that
judge the same documents in a cluster. The Kubernetes API server checks a CRD's ``pattern`` (and
Helm a chart's ``values.schema.json``) with Go's ``regexp``, RE2 syntax. Two differences let
``igw validate`` pass what the cluster refuses (found by probing in session s38):

- In Python, ``$`` also matches before a final newline. So ``name: "llama3-8b\\n"`` (a scheduler's
  name, a label value, a tier-2 cluster's endpoint) passed every ``^...$`` pattern. ``kubectl
  apply`` refused the same file, and a gateway reading it from a file put the newline into its log
  lines and metric labels.
- In Python, ``\\d``, ``\\w`` and ``\\s`` match any Unicode digit, letter or space (``"٣"`` is a
  ``\\d``). In RE2 they are ASCII only.

So every schema a user's document is checked against in this project goes through
:func:`schema_validator`. It keeps the keyword's name, ``pattern``, so error messages
(:mod:`igw.config.schema_messages`) are unchanged. RE2 is Google's implementation (the
``google-re2`` wheel); Go's ``regexp`` implements the same syntax and semantics.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, Final

import re2
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator

from igw.config.schema import SchemaError

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 refuses raises re2.error; it is not also printed to stderr


@functools.lru_cache(maxsize=2048)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (kept: a schema's patterns are few and checked many times). A
    pattern RE2 cannot compile (a look-around, a back-reference) is a broken schema: the API server
    refuses a CRD that holds one."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise SchemaError(f"pattern {pattern!r} is not an RE2 regular expression: {exc}") from exc


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, as the API server's ``pattern`` check
    decides it (unanchored search; ``$`` is the end of the text)."""
    return compiled(pattern).search(text) is not None


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """jsonschema's ``pattern`` keyword, matched by RE2."""
    if validator.is_type(instance, "string") and not pattern_matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.lru_cache(maxsize=8)
def _with_re2(cls: type[Validator]) -> type[Validator]:
    extended: type[Validator] = validators.extend(cls, {"pattern": _pattern})  # type: ignore[no-untyped-call]  # untyped in types-jsonschema
    return extended


def schema_validator(schema: Mapping[str, Any], *, formats: bool = True) -> Validator:
    """A validator of ``schema`` (its draft from ``$schema``, else 2020-12) with RE2 ``pattern``
    matching; ``formats``: check ``format`` too (jsonschema's format checker)."""
    cls = validators.validator_for(schema, default=Draft202012Validator)
    checker = FormatChecker() if formats else None
    return _with_re2(cls)(schema, format_checker=checker)
