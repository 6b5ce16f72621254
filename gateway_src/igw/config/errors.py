"""Problems found in a configuration document, and the exception that carries them.

A validator reports *all* problems at once (users fix a file in one round trip, not one error per
run), so the unit of reporting is a list of :class:`Problem`, each naming the exact field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from igw.errors import IgwConfigError
from igw.redaction import redact_value


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a document.

    ``path`` is a JSON path in the document's own field names (``spec.schedulers[1].modelName``;
    empty for the document root), ``message`` says what is wrong in words a user can act on, and
    ``rule`` is a stable identifier of the check (``schema.required``, ``unique-model-name`` ...)
    that tools and tests can match on without parsing the message.
    """

    path: str
    message: str
    rule: str

    def __post_init__(self) -> None:
        # Every problem's words pass the same redaction as the gateway's logs, once, where it is
        # made: messages quote values (a bad enum, a selector's operator) and paths name a
        # document's own keys, and both travel on - ``igw validate`` output in CI logs, the
        # operator's conditions and Events, preflight and audit reports. A token put in a wrong
        # field was quoted whole.
        object.__setattr__(self, "path", redact_value(self.path))
        object.__setattr__(self, "message", redact_value(self.message))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(IgwConfigError, ValueError):
    """A configuration could not be loaded; ``problems`` lists every reason, ``source`` the file."""

    def __init__(self, problems: Sequence[Problem], *, source: str | None = None) -> None:
        self.problems: list[Problem] = list(problems)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        count = len(self.problems)
        head = f"{where}invalid InferenceGatewayConfig ({count} problem{'s' if count != 1 else ''})"
        return "\n".join([head, *(f"  {problem}" for problem in self.problems)])
