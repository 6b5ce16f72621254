"""Reading ``InferenceGatewayConfig`` objects inside checks, tolerant of invalid documents.

Checks must report on configs that fail validation too (that is when operators need them most),
so this reads the raw manifest defensively instead of building the typed ``GatewayConfig``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from igw import engines
from igw.checks.inventory import Manifest
from igw.checks.k8s import namespace_of, ref, spec

DEFAULT_TARGET_PORT = 8000
DEFAULT_ENGINE = engines.DEFAULT_ENGINE


@dataclass(frozen=True, slots=True)
class SchedulerEntry:
    config: Manifest
    index: int
    raw: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or f"#{self.index}")

    @property
    def resource(self) -> str:
        return f"{ref(self.config)} scheduler {self.name}"

    @property
    def namespace(self) -> str:
        return namespace_of(self.config)

    @property
    def engine_type(self) -> str:
        """The engine the gateway reads these pods as: ``tgi`` or ``generic`` when
        ``spec.extensions.engines`` lists this scheduler, else its ``engineType``."""
        chosen = section(self.config, "extensions", "engines") or {}
        tgi = chosen.get("tgi")
        if isinstance(tgi, list) and self.name in tgi:
            return engines.TGI.name
        generic = chosen.get("generic")
        if isinstance(generic, list) and any(
            isinstance(g, Mapping) and g.get("scheduler") == self.name for g in generic
        ):
            return engines.GENERIC
        return str(self.raw.get("engineType") or DEFAULT_ENGINE)

    @property
    def target_port(self) -> int:
        value = self.raw.get("targetPort", DEFAULT_TARGET_PORT)
        return value if isinstance(value, int) else DEFAULT_TARGET_PORT

    @property
    def model_selector(self) -> Mapping[str, Any] | None:
        value = self.raw.get("modelSelector")
        return value if isinstance(value, Mapping) else None


def schedulers(config: Manifest) -> Iterator[SchedulerEntry]:
    items = spec(config).get("schedulers")
    if isinstance(items, list):
        for index, item in enumerate(items):
            if isinstance(item, Mapping):
                yield SchedulerEntry(config, index, item)


def section(config: Manifest, *path: str) -> Mapping[str, Any] | None:
    """``section(cfg, "auth", "jwt")`` → the mapping at ``spec.auth.jwt`` or ``None``."""
    node: Any = spec(config)
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node if isinstance(node, Mapping) else None


def jwt_providers(config: Manifest) -> list[Mapping[str, Any]]:
    """``spec.auth.jwt.provider`` as a list (the AWS doc leaves object-vs-list open; accept both)."""
    jwt = section(config, "auth", "jwt")
    if jwt is None:
        return []
    provider = jwt.get("provider", jwt.get("providers"))
    if isinstance(provider, Mapping):
        return [provider]
    if isinstance(provider, list):
        return [p for p in provider if isinstance(p, Mapping)]
    return []
