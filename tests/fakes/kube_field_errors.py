"""apimachinery's ``field.Error``: one refused field, worded and classified as the API server does.

A 422 ``Invalid`` answer carries each failing field twice: in the message (``spec.x: Invalid
value: 3: spec.x in body should be <= 2``) and as a structured cause in ``details.causes``
(``{"reason": "FieldValueInvalid", "message": "Invalid value: 3: ...", "field": "spec.x"}``).
``kubectl`` prints the causes (``The InferenceGatewayConfig "chat" is invalid: spec.x: ...``), so
the fake has to fill both the way apimachinery's ``field.Error.Error()`` and
``errors.NewInvalid`` do, or a test of a refusal would pass here on a different wording.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

_LABELS: Final = {
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueInvalid": "Invalid value",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "InternalError": "Internal error",
}
_WITHOUT_VALUE: Final = frozenset(
    {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "InternalError"}
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One cause: ``reason`` is apimachinery's ``ErrorType`` string (``FieldValueInvalid``, ...)."""

    field: str
    reason: str
    value: str | None = None
    """The offending value as apimachinery prints it (already quoted), where the type shows one."""
    detail: str = ""
    node: str | None = None
    """Where the value that decides validation ratcheting lives, when not at ``field`` (a CEL rule's
    own node, whatever its ``fieldPath``)."""
    transition: bool = False
    """From a transition rule (``oldSelf``): never ratcheted."""

    @property
    def body(self) -> str:
        """The cause's ``message``: the error without its field (``ErrorBody()``)."""
        text = _LABELS[self.reason]
        if self.reason not in _WITHOUT_VALUE and self.value is not None:
            text = f"{text}: {self.value}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body}" if self.field else self.body

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.body, "field": self.field}


def quoted(value: Any) -> str:
    """A value as apimachinery prints it in an error: strings quoted, numbers bare, maps and lists
    as compact JSON."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (bool, dict, list)) or value is None:
        return json.dumps(value, separators=(",", ":"))
    return repr(value)


def invalid_message(kind: str, name: str, errors: Sequence[FieldError]) -> str:
    """``errors.NewInvalid``'s message: one cause bare, several in brackets, each wording once
    (``ErrorList.ToAggregate`` drops repeats; ``details.causes`` keeps them)."""
    unique = list(dict.fromkeys(str(e) for e in errors))
    listed = ", ".join(unique)
    return f'{kind} "{name}" is invalid: ' + (listed if len(unique) == 1 else f"[{listed}]")


def invalid_details(group: str, kind: str, name: str, errors: Sequence[FieldError]) -> dict[str, Any]:
    """The Status ``details`` of a 422 ``Invalid``: what was refused, and each field's cause."""
    return {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]}
