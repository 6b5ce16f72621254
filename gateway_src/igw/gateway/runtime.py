"""The configuration-derived state of a running gateway, swapped atomically on hot reload.

A :class:`GatewayRuntime` holds, per ``spec.schedulers[]`` entry, its scheduler (the pure
:mod:`igw.scheduling` library), its endpoint pool and its engine's metric families, plus the
body-based model router. Building one does all validation that can fail (EndpointPickerConfig
parsing, routing settings), so a reload either yields a complete new runtime or leaves the old one
untouched. Endpoint pools, and schedulers whose definition did not change, are carried over so a
reload does not forget scraped metrics, in-flight counts or the prefix index; a rebuilt scheduler
takes over its predecessor's outlier detection (failure counts and ejections).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from igw.config.engine_selection import scheduler_engines
from igw.config.model import GatewayConfig, SchedulerSpec
from igw.engines import MetricFamilies
from igw.gateway.endpoints import EndpointPool, EndpointState
from igw.gateway.model_rewrite import EXTENSION_NAME as REWRITES_EXTENSION
from igw.gateway.model_rewrite import ModelRewrites
from igw.gateway.model_router import ModelRouter
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.flow_control import EXTENSION_NAME as FLOW_EXTENSION
from igw.scheduling.flow_control import FlowControlSettings
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import EXTENSION_NAME, RoutingSettings
from igw.scheduling.types import EndpointKey

EjectionHook = Callable[[str, EndpointKey, float, int], None]
RequestFaultHook = Callable[[str, frozenset[EndpointKey]], None]
"""Told of a request taken for the fault: ``(scheduler, the endpoints it failed on)``."""
"""Told of each ejection by a scheduler's outlier detection: ``(scheduler, endpoint, seconds,
failures in a row)``."""

PickerConfigs = Mapping[str, Mapping[str, Any]]
"""``configMapRef`` name/key -> EndpointPickerConfig document (see :func:`picker_config_key`)."""


def picker_config_key(spec: SchedulerSpec) -> str | None:
    ref = spec.config_map_ref
    return None if ref is None else f"{ref.name}/{ref.key}"


@dataclass(slots=True)
class SchedulerRuntime:
    spec: SchedulerSpec
    scheduler: Scheduler
    pool: EndpointPool
    families: MetricFamilies
    picker_config: Mapping[str, Any] | None
    engine: str = "vllm"
    """The name of the engine its pods run (:mod:`igw.engines`): ``engineType``, or the
    ``spec.extensions.engines`` entry naming this scheduler."""
    route_timeout_s: float | None = field(init=False)
    """The spec's ``routeTimeout``; ``None`` or ``0`` mean no timeout (``routeTimeout: 0s`` disables
    it). Set at construction (a reload builds a new runtime): read per request, where a property is
    an interpreted call in the compiled build."""

    def __post_init__(self) -> None:
        t = self.spec.route_timeout_s
        self.route_timeout_s = t if t else None


class GatewayRuntime:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        rng: random.Random,
        clock: Callable[[], float],
        picker_configs: PickerConfigs | None = None,
        bbr_adapters: Mapping[str, str] | None = None,
        previous: GatewayRuntime | None = None,
        index_blocks: int | None = None,
        on_ejected: EjectionHook | None = None,
        on_request_fault: RequestFaultHook | None = None,
    ) -> None:
        """``index_blocks``: the blocks every scheduler's prefix index may hold together (this
        process's share of the container's memory, :func:`igw.gateway.memory.memory_plan`;
        ``None``: no bound), shared equally by the schedulers. ``on_ejected``: told of every
        scheduler's ejections, ``on_request_fault`` of every request its outlier detection took for
        the fault (the gateway counts and logs both)."""
        self.config = config
        self.index_blocks = index_blocks
        self.settings = RoutingSettings.from_extension(config.extensions.get(EXTENSION_NAME))
        engines = scheduler_engines(config)
        flow = config.extensions.get(FLOW_EXTENSION)
        self.flow_settings = (
            None
            if flow is None
            else FlowControlSettings.from_extension(
                flow, scheduler_engines={name: engine.name for name, engine in engines.items()}
            )
        )
        """``spec.extensions.flowControl``: ``None`` when saturated requests are refused at once."""
        self.picker_configs: PickerConfigs = dict(picker_configs or {})
        self.rng = rng
        self.clock = clock
        self.schedulers: dict[str, SchedulerRuntime] = {}
        for spec in config.schedulers:
            key = picker_config_key(spec)
            picker_config = None if key is None else self.picker_configs.get(key)
            old = previous.schedulers.get(spec.name) if previous is not None else None
            reuse = (
                old is not None
                and old.spec == spec
                and old.picker_config == picker_config
                and previous is not None
                and previous.settings.scheduling_inputs() == self.settings.scheduling_inputs()
            )
            if reuse and old is not None:
                scheduler = old.scheduler
            else:
                scheduler = scheduler_from_spec(
                    spec, routing=self.settings, rng=rng, picker_config=picker_config
                )
                if old is not None:
                    scheduler.outliers.adopt(old.scheduler.outliers)
                    scheduler.responses.adopt(old.scheduler.responses)
                if on_ejected is not None:
                    scheduler.outliers.on_ejected = _told(on_ejected, spec.name)
                if on_request_fault is not None:
                    scheduler.outliers.on_request_fault = functools.partial(on_request_fault, spec.name)
            pool = old.pool if old is not None else EndpointPool()
            self.schedulers[spec.name] = SchedulerRuntime(
                spec=spec,
                scheduler=scheduler,
                pool=pool,
                families=engines[spec.name].families,
                picker_config=picker_config,
                engine=engines[spec.name].name,
            )
        share = None if index_blocks is None else max(1, index_blocks // max(1, len(self.schedulers)))
        for sr in self.schedulers.values():
            sr.scheduler.bound_indexes(share)
        self.router = ModelRouter(config.schedulers, bbr_adapters=bbr_adapters)
        self.rewrites = ModelRewrites.from_extension(
            config.extensions.get(REWRITES_EXTENSION), routable=lambda m: self.router.resolve(m) is not None
        )
        """Canary splits (``spec.extensions.modelRewrites``), swapped with the runtime on reload."""

    def with_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        """Swap in a router built from new bbr-managed ConfigMap data (schedulers unchanged)."""
        self.router = ModelRouter(self.config.schedulers, bbr_adapters=adapters)

    def endpoints(self) -> Iterator[tuple[str, EndpointState]]:
        for name, sr in self.schedulers.items():
            for state in sr.pool.states.values():
                yield name, state

    def ejections(self) -> Iterator[tuple[str, EndpointKey, float]]:
        """``(scheduler, endpoint, seconds left)`` of every endpoint ejected now."""
        now = self.clock()
        for name, sr in self.schedulers.items():
            for key, seconds in sr.scheduler.outliers.seconds_left(sr.pool.states.keys(), now):
                yield name, key, seconds


def _told(hook: EjectionHook, scheduler: str) -> Callable[[EndpointKey, float, int], None]:
    """``hook`` for one scheduler's ejections."""

    def ejected(key: EndpointKey, seconds: float, failures: int) -> None:
        hook(scheduler, key, seconds, failures)

    return ejected
