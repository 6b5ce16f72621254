"""Evaluate a model-server container against the requirements kept as data.

The rules (minimum versions, flags that must or must not be present, which KV-cache metric names a
version exposes) live in the engine catalogue, :mod:`igw.engines`, so that pre-flight checks, the
simulator and the gateway all read one table. This module only interprets it. Every requirement
yields ``ok``, ``fail`` or ``unknown`` - an image whose version cannot be read is "unknown", never
silently passed or failed.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from packaging.version import InvalidVersion, Version

from igw.config.image_refs import EngineVersion, KnownVersion, engine_version
from igw.engines import ENGINES, Engine, FlagRule

_K8S_ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class Verdict(StrEnum):
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class MetricRange:
    """KV-cache metric names exposed by versions in ``[since, before)`` (open ends allowed)."""

    names: tuple[str, ...]
    since: Version | None = None
    before: Version | None = None

    def contains(self, version: Version) -> bool:
        if self.since is not None and version < self.since:
            return False
        return self.before is None or version < self.before


@dataclass(frozen=True, slots=True)
class EngineRequirements:
    engine: str
    display_name: str
    minimum_version: Version
    minimum_reason: str
    required_flags: tuple[FlagRule, ...]
    forbidden_flags: tuple[FlagRule, ...]
    kv_cache_metrics: tuple[MetricRange, ...]

    def kv_cache_metric_names(self, version: Version) -> tuple[str, ...]:
        """Names this version exposes, in order of preference; empty when no range covers it."""
        for metric_range in self.kv_cache_metrics:
            if metric_range.contains(version):
                return metric_range.names
        return ()


@dataclass(frozen=True, slots=True)
class RequirementResult:
    requirement: str
    """Stable id: ``minimum-version``, ``required-flag:<flag>``, ``forbidden-flag:<flag>``, ``kv-metrics``."""
    verdict: Verdict
    message: str


@dataclass(frozen=True, slots=True)
class ModelServerCheck:
    engine: str
    image: str
    version: EngineVersion
    results: tuple[RequirementResult, ...]
    kv_cache_metrics: tuple[str, ...]
    """KV-cache metric names this version exposes (preferred first); empty when the version is unknown."""

    @property
    def verdict(self) -> Verdict:
        """``fail`` if any requirement fails, else ``unknown`` if any is unknown, else ``ok``."""
        verdicts = {result.verdict for result in self.results}
        if Verdict.FAIL in verdicts:
            return Verdict.FAIL
        return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.OK


def _version(value: Any, *, where: str) -> Version:
    try:
        return Version(str(value))
    except InvalidVersion as exc:
        raise ValueError(f"{where}: {value!r} is not a PEP 440 version") from exc


def _engine(entry: Engine) -> EngineRequirements:
    where = f"engine catalogue: {entry.name}"
    ranges = tuple(
        MetricRange(
            names=item.names,
            since=None if item.since is None else _version(item.since, where=f"{where}.kv_cache_metrics"),
            before=None if item.before is None else _version(item.before, where=f"{where}.kv_cache_metrics"),
        )
        for item in entry.kv_cache_metrics
    )
    return EngineRequirements(
        engine=entry.name,
        display_name=entry.display_name,
        minimum_version=_version(entry.minimum_version, where=f"{where}.minimum_version"),
        minimum_reason=entry.minimum_reason,
        required_flags=entry.required_flags,
        forbidden_flags=entry.forbidden_flags,
        kv_cache_metrics=ranges,
    )


@functools.cache
def _catalogue_requirements() -> Mapping[str, EngineRequirements]:
    return {name: _engine(entry) for name, entry in ENGINES.items()}


def load_requirements(catalogue: Mapping[str, Engine] | None = None) -> Mapping[str, EngineRequirements]:
    """The requirements table by engine name, from ``catalogue`` (default: :data:`igw.engines.ENGINES`).

    ``ValueError`` naming the entry and field when a version in it is not a PEP 440 version.
    """
    if catalogue is None:
        return _catalogue_requirements()
    return {name: _engine(entry) for name, entry in catalogue.items()}


def command_tokens(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Container args as the process sees them.

    ``$(VAR)`` is expanded from ``env`` as Kubernetes does; an arg holding a shell command line is split.
    """
    tokens: list[str] = []
    for arg in args:
        expanded = _K8S_ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), arg)
        if any(ch.isspace() for ch in expanded):
            try:
                tokens.extend(shlex.split(expanded))
            except ValueError:
                tokens.extend(expanded.split())
        else:
            tokens.append(expanded)
    return tokens


def _has_flag(tokens: Sequence[str], flag: str) -> bool:
    return any(token == flag or token.startswith(f"{flag}=") for token in tokens)


def _minimum(req: EngineRequirements, version: EngineVersion) -> RequirementResult:
    name = req.display_name
    if not isinstance(version, KnownVersion):
        return RequirementResult(
            "minimum-version",
            Verdict.UNKNOWN,
            f"cannot tell whether {name} >= {req.minimum_version}: {version}",
        )
    if version.version >= req.minimum_version:
        return RequirementResult(
            "minimum-version", Verdict.OK, f"{name} {version.version} >= {req.minimum_version}"
        )
    return RequirementResult(
        "minimum-version",
        Verdict.FAIL,
        f"{name} {version.version} is older than the required {req.minimum_version}: {req.minimum_reason}",
    )


def check_model_server(
    *,
    engine: str,
    image: str,
    args: Sequence[str],
    env: Mapping[str, str],
    requirements: Mapping[str, EngineRequirements] | None = None,
) -> ModelServerCheck:
    """Check one model-server container (its ``engineType``, image, command+args and env).

    ``ValueError`` for an engine the requirements table does not know.
    """
    table = load_requirements() if requirements is None else requirements
    req = table.get(engine)
    if req is None:
        raise ValueError(f"unknown engine {engine!r}; known engines: {', '.join(sorted(table))}")
    version = engine_version(image)
    tokens = command_tokens(args, env)
    results = [_minimum(req, version)]
    for rule in req.required_flags:
        present = _has_flag(tokens, rule.flag)
        results.append(
            RequirementResult(
                f"required-flag:{rule.flag}",
                Verdict.OK if present else Verdict.FAIL,
                f"{rule.flag} is set" if present else f"{rule.flag} is missing: {rule.reason}",
            )
        )
    for rule in req.forbidden_flags:
        present = _has_flag(tokens, rule.flag)
        results.append(
            RequirementResult(
                f"forbidden-flag:{rule.flag}",
                Verdict.FAIL if present else Verdict.OK,
                f"{rule.flag} is set: {rule.reason}" if present else f"{rule.flag} is not set",
            )
        )
    metrics: tuple[str, ...] = ()
    if not req.kv_cache_metrics:
        # The engine publishes no KV-cache gauge in any version (TGI): nothing to upgrade to.
        results.append(
            RequirementResult(
                "kv-metrics",
                Verdict.OK,
                f"{req.display_name} publishes no KV-cache gauge (scorer leaves it out)",
            )
        )
    elif isinstance(version, KnownVersion):
        metrics = req.kv_cache_metric_names(version.version)
        results.append(
            RequirementResult(
                "kv-metrics",
                Verdict.OK if metrics else Verdict.FAIL,
                f"exposes {', '.join(metrics)}"
                if metrics
                else f"{req.display_name} {version.version} exposes no known KV-cache metric",
            )
        )
    else:
        results.append(
            RequirementResult("kv-metrics", Verdict.UNKNOWN, f"KV-cache metric names unknown: {version}")
        )
    return ModelServerCheck(
        engine=engine, image=image, version=version, results=tuple(results), kv_cache_metrics=metrics
    )
