"""The API server's regular expressions: Go's ``regexp`` package, RE2 syntax, matched with RE2.

Python's ``re`` differs from it where the fake must not: ``$`` also matches before a final newline,
and ``\\d``/``\\w``/``\\s`` match Unicode classes. With ``re`` the fake admitted ``"name\\n"`` and
``"٣"`` (an Arabic-Indic digit) where a real API server answers 422, and accepted CRDs whose
patterns use look-arounds, which Go cannot compile.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False


class GoRegexpError(ValueError):
    """A pattern Go's ``regexp`` cannot compile."""


@functools.lru_cache(maxsize=1024)
def go_regexp(pattern: str) -> Any:
    """``pattern`` compiled as the API server compiles a schema's ``pattern``."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise GoRegexpError(str(exc)) from exc


def go_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (Go's ``MatchString``)."""
    return go_regexp(pattern).search(text) is not None
