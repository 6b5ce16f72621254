"""Per-model authorization: which callers may use which models (``authorization.modelAccess``).

Without rules every authenticated caller may use every model (AWS's behaviour once ``spec.auth``
is set). With rules the default is deny: a model is allowed when at least one rule matches both
the caller (its ``claim`` is a string among ``values``, or an array with an element among them)
and the model (an exact name, or an ``fnmatch`` pattern such as ``llama-*``). Models are matched
by the name the client asked for, so a LoRA adapter is authorized by its own name.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from igw.security.claims import claim_at
from igw.security.settings import ModelAccessRule


class ModelAccessPolicy:
    def __init__(self, rules: tuple[ModelAccessRule, ...]) -> None:
        self._rules = rules

    @property
    def restricted(self) -> bool:
        return bool(self._rules)

    def allows(self, claims: Mapping[str, Any], *, model: str) -> bool:
        if not self._rules:
            return True
        for rule in self._rules:
            if _caller_matches(claim_at(claims, rule.claim), rule.values) and _model_matches(
                model, rule.models
            ):
                return True
        return False


def _caller_matches(value: Any, values: tuple[str, ...]) -> bool:
    if isinstance(value, str):
        return value in values
    if isinstance(value, list):
        return any(isinstance(v, str) and v in values for v in value)
    return False


def _model_matches(model: str, patterns: tuple[str, ...]) -> bool:
    return any(model == p or fnmatch.fnmatchcase(model, p) for p in patterns)
