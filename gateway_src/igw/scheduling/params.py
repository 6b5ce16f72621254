"""Typed, path-aware reading of a plugin's ``parameters`` mapping.

Plugin factories use :class:`ParamReader` so that a typo such as ``blocksize`` is reported as
``plugins[0].parameters: unknown field 'blocksize'`` instead of being silently ignored.

Two modes. **Strict** (the default, used for everything igw builds itself): every invalid value and
unknown field is an error, all reported at once. **Lenient** (inside :func:`lenient_parameters`, used
for EndpointPickerConfig files so that the reference's files load unchanged): an invalid value falls
back to the plugin's default and an unknown field is ignored, as the reference endpoint picker does,
but each one is logged as a warning naming its path and collected for the caller to report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from igw.scheduling.errors import SchedulerConfigError

_log = logging.getLogger("igw.scheduling")
_LENIENT: ContextVar[list[str] | None] = ContextVar("igw_lenient_plugin_parameters", default=None)


@contextmanager
def lenient_parameters() -> Iterator[list[str]]:
    """Within the block, parameter problems fall back to defaults with a warning instead of raising;
    yields the list the warnings are collected in (each names the parameter's path)."""
    collected: list[str] = []
    token = _LENIENT.set(collected)
    try:
        yield collected
    finally:
        _LENIENT.reset(token)


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

    def duration(self, key: str, default: float, *, parse: Callable[[str], float]) -> float:
        """A duration string (``200ms``) in seconds, > 0."""
        value = self._get(key)
        if value is None:
            return default
        try:
            seconds = parse(value)
        except ValueError as exc:
            self.problems.append(f"{self._path}.{key}: {exc}")
            return default
        if seconds <= 0:
            self.problems.append(f"{self._path}.{key}: must be > 0, got {value!r}")
            return default
        return seconds

    def string(self, key: str, default: str) -> str:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.problems.append(f"{self._path}.{key}: must be a string, got {value!r}")
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
        """Raise every collected problem, plus one per unknown key (strict mode); in lenient mode log
        and collect each one as a warning instead (the invalid values were replaced by defaults)."""
        unknown = [f"{self._path}: unknown field {key!r}" for key in sorted(set(self._params) - self._seen)]
        lenient = _LENIENT.get()
        if lenient is None:
            if self.problems or unknown:
                raise SchedulerConfigError([*self.problems, *unknown])
            return
        for problem in self.problems:
            lenient.append(f"{problem}; using the default instead")
        for problem in unknown:
            lenient.append(f"{problem} ignored")
        for warning in lenient[len(lenient) - len(self.problems) - len(unknown) :]:
            _log.warning("EndpointPickerConfig: %s", warning)
