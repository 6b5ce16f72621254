"""Typed, path-aware reading of a plugin's ``parameters`` mapping (closed: unknown keys are errors).

Plugin factories use :class:`ParamReader` so that a typo such as ``blocksize`` is reported as
``plugins[0].parameters: unknown field 'blocksize'`` instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from igw.scheduling.errors import SchedulerConfigError


class ParamReader:
    """Reads parameters one by one, collecting problems; :meth:`finish` raises them all at once."""

    def __init__(self, params: Mapping[str, Any] | None, *, path: str) -> None:
        self._params: Mapping[str, Any] = params or {}
        self._path = path
        self._seen: set[str] = set()
        self.problems: list[str] = []
        if not isinstance(self._params, Mapping):
            self.problems.append(f"{path}: must be a mapping, got {type(params).__name__}")
            self._params = {}

    def _get(self, key: str) -> Any:
        self._seen.add(key)
        return self._params.get(key)

    def number(
        self, key: str, default: float, *, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.append(f"{self._path}.{key}: must be a number, got {value!r}")
            return default
        if minimum is not None and value < minimum:
            self.problems.append(f"{self._path}.{key}: must be >= {minimum}, got {value!r}")
            return default
        if maximum is not None and value > maximum:
            self.problems.append(f"{self._path}.{key}: must be <= {maximum}, got {value!r}")
            return default
        return float(value)

    def integer(self, key: str, default: int, *, minimum: int | None = None) -> int:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.append(f"{self._path}.{key}: must be an integer, got {value!r}")
            return default
        if minimum is not None and value < minimum:
            self.problems.append(f"{self._path}.{key}: must be >= {minimum}, got {value!r}")
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problems.append(f"{self._path}.{key}: must be true or false, got {value!r}")
            return default
        return value

    def string_map(self, key: str) -> dict[str, str]:
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.problems.append(f"{self._path}.{key}: must be a mapping of strings to strings")
            return {}
        return dict(value)

    def finish(self) -> None:
        """Raise every collected problem, plus one per unknown key."""
        for key in sorted(set(self._params) - self._seen):
            self.problems.append(f"{self._path}: unknown field {key!r}")
        if self.problems:
            raise SchedulerConfigError(self.problems)
