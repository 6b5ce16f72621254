"""Body-based routing: which scheduler serves the model a request names.

Sources, in order of precedence:

1. a scheduler's ``modelName`` (the base model);
2. a scheduler's ``loraAdapters`` (adapter -> that scheduler's base model);
3. in-cluster, ConfigMaps labelled ``inference.networking.k8s.io/bbr-managed: "true"`` with data keys
   ``baseModel`` and ``adapters`` (a YAML list), as AWS's BBR documents; the base model must be some
   scheduler's ``modelName``.

The router is immutable; discovery builds a new one when the ConfigMaps change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from igw.config.model import SchedulerSpec

NO_MATCH_MESSAGE: Final = (
    "no matching model: set the model in the request body or the x-gateway-model-name header"
)
MODEL_HEADER: Final = "x-gateway-model-name"
BASE_MODEL_HEADER: Final = "x-gateway-base-model-name"


@dataclass(frozen=True, slots=True)
class ModelRoute:
    scheduler: str
    """Name of the ``spec.schedulers[]`` entry."""
    model: str
    base_model: str
    adapter: str | None


class ModelRouter:
    def __init__(
        self, schedulers: Sequence[SchedulerSpec], *, bbr_adapters: Mapping[str, str] | None = None
    ) -> None:
        routes: dict[str, ModelRoute] = {}
        by_base = {s.model_name: s for s in schedulers}
        for adapter, base in (bbr_adapters or {}).items():
            spec = by_base.get(base)
            if spec is not None:
                routes[adapter] = ModelRoute(spec.name, adapter, base, adapter)
        for s in schedulers:
            for adapter in s.lora_adapters:
                routes[adapter] = ModelRoute(s.name, adapter, s.model_name, adapter)
        for s in schedulers:
            routes[s.model_name] = ModelRoute(s.name, s.model_name, s.model_name, None)
        self._routes = routes
        adapters: dict[str, set[str]] = {s.name: set() for s in schedulers}
        for route in routes.values():
            if route.adapter is not None:
                adapters.setdefault(route.scheduler, set()).add(route.adapter)
        self.adapters: Mapping[str, frozenset[str]] = {k: frozenset(v) for k, v in adapters.items()}
        """Per scheduler: the adapters routed to it (its ``loraAdapters`` and the bbr-managed adapters
        of its model), the ``adapter`` label values ``igw_endpoint_lora_adapter`` always keeps."""
        self.bbr_adapters: Mapping[str, str] = dict(bbr_adapters or {})
        self.unroutable_bbr: tuple[str, ...] = tuple(
            sorted(f"{a} -> {b}" for a, b in self.bbr_adapters.items() if b not in by_base)
        )
        """ConfigMap mappings whose base model no scheduler serves (shown in /readyz)."""

    def resolve(self, model: str) -> ModelRoute | None:
        return self._routes.get(model)

    def models(self) -> list[ModelRoute]:
        """Every routable name, base models first (for ``GET /v1/models``)."""
        return sorted(self._routes.values(), key=lambda r: (r.adapter is not None, r.model))
