"""Hot reload of ``igw global serve``'s configuration file (since session s50: before, the router read
it once and an edit was ignored without a word).

The file is watched as a tier-1 gateway's is (:class:`~igw.gateway.file_watch.PolledFile`: checked
every :data:`RELOAD_INTERVAL_S`, compared by digest, an unreadable file reported once, a file caught
while being written in place checked again). A change is loaded and validated as at start - the
schema and cross-field rules (:func:`~igw.global_router.config.load_global_config`) and what the
command line checks on top (``spec.serverLimits``, ``spec.management`` with its flags) - and a
failure keeps the running configuration: one ERROR naming every problem by its path, counted in
``igw_global_config_reloads_total{result="rejected"}``.

A valid change is applied at once where that is cheap and safe (:data:`LIVE`: the clusters, the
routing policy, the upstream timeouts, ``serverLimits.maxBodyBytesHeld``, ``failover`` but its
``heartbeatStalenessSeconds``); every other field is
restart-only (:func:`restart_only_values`): the running value stays and one WARNING names each such
field the edit changed (an INFO when an edit puts them back to what the process runs with).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from aiohttp import web

from igw.config.errors import ConfigError
from igw.gateway.body_budget import budget_meaning
from igw.gateway.file_watch import PolledFile
from igw.gateway.memory import MemoryPlan, memory_plan
from igw.gateway.serving import ServerLimits
from igw.gateway.worker_count import memory_limit
from igw.global_router.config import GlobalRouterConfig, load_global_config
from igw.global_router.server import ROUTER_KEY, GlobalRouter, apply_global_config

log = logging.getLogger("igw.global_router.reload")

RELOAD_INTERVAL_S: Final = 1.0
"""How often the file is checked (tier 1's default ``configReloadInterval``)."""

BODY_BYTES_HELD: Final = "maxBodyBytesHeld"
"""The one ``spec.serverLimits`` field applied live (the listener holds the others)."""

LIVE: Final = (
    "metadata.name",
    "spec.clusters",
    "spec.routing",
    "spec.upstream",
    f"spec.serverLimits.{BODY_BYTES_HELD}",
    "spec.failover.failureThreshold",
    "spec.failover.ejectionSeconds",
    "spec.failover.slowStartSeconds",
    "spec.failover.maxEjectionPercent",
)
"""The fields a reload applies (docs/global-router.md, "Reloading the configuration")."""

_RESTART_ONLY: Final[Mapping[str, Callable[[GlobalRouterConfig], object]]] = {
    "spec.region": lambda c: c.region,
    "spec.failover.heartbeatStalenessSeconds": lambda c: c.failover.heartbeat_staleness_s,
    "spec.heartbeats.redis.url": lambda c: c.heartbeats.redis_url,
    "spec.heartbeats.redis.passwordEnv": lambda c: c.heartbeats.redis_password_env,
    "spec.heartbeats.redis.keyPrefix": lambda c: c.heartbeats.key_prefix,
    "spec.heartbeats.pollIntervalSeconds": lambda c: c.heartbeats.poll_interval_s,
    "spec.heartbeats.required": lambda c: c.heartbeats.required,
    "spec.auth": lambda c: c.auth,
    "spec.authorization": lambda c: c.authorization,
    "spec.rateLimits": lambda c: c.rate_limits,
    "spec.modelRateLimits": lambda c: c.model_limits,
    "spec.accessLog.enabled": lambda c: c.access_log.enabled,
    "spec.accessLog.destination": lambda c: c.access_log.destination,
    "spec.management": lambda c: c.management,
}


def restart_only_values(config: GlobalRouterConfig) -> dict[str, object]:
    """``config``'s restart-only fields by path: the heartbeat reader holds ``heartbeats`` (its Redis
    client, its poll period) and ``failover.heartbeatStalenessSeconds`` (its replica merges; and the
    rule that the poll period is below it checks the file's period, not the running one: a live
    staleness could fall below the running period, draining every cluster between reads), the
    request guard and the limiters hold ``auth``, ``authorization``, ``rateLimits`` and
    ``modelRateLimits`` (their Redis connections and buckets), the log handlers ``accessLog``, the
    listeners ``management`` and ``serverLimits`` (but :data:`BODY_BYTES_HELD`, one field each),
    and ``region`` (``--region`` overrides it) orders every plan."""
    values = {path: read(config) for path, read in _RESTART_ONLY.items()}
    for key, value in config.server_limits.items():
        if key != BODY_BYTES_HELD:
            values[f"spec.serverLimits.{key}"] = value
    return values


def running_config(new: GlobalRouterConfig, started: GlobalRouterConfig) -> GlobalRouterConfig:
    """``new`` with its restart-only fields the ones the process ``started`` with: what the router
    routes by after a reload (so a field read per request, ``accessLog.enabled``, cannot half-apply)."""
    server_limits = {k: v for k, v in started.server_limits.items() if k != BODY_BYTES_HELD}
    if BODY_BYTES_HELD in new.server_limits:
        server_limits[BODY_BYTES_HELD] = new.server_limits[BODY_BYTES_HELD]
    return dataclasses.replace(
        new,
        region=started.region,
        failover=dataclasses.replace(
            new.failover, heartbeat_staleness_s=started.failover.heartbeat_staleness_s
        ),
        heartbeats=started.heartbeats,
        auth=started.auth,
        authorization=started.authorization,
        rate_limits=started.rate_limits,
        model_limits=started.model_limits,
        server_limits=server_limits,
        access_log=started.access_log,
        management=started.management,
    )


def body_plan(held: int | None) -> MemoryPlan:
    """The replica's memory plan with ``held`` (``serverLimits.maxBodyBytesHeld``; ``None``: derived
    from the memory limit, else 256 MiB) bytes of request bodies at once."""
    return memory_plan(memory_limit(), 1, prefix_index=False, flow_queue=False, body_bytes=held or None)


class GlobalConfigReloader(PolledFile):
    """``igw global serve``'s configuration file, reloaded into ``app``'s router when it changes."""

    def __init__(
        self,
        app: web.Application,
        path: Path,
        *,
        validate: Callable[[GlobalRouterConfig], ServerLimits],
        loaded_digest: str | None = None,
        interval_s: float = RELOAD_INTERVAL_S,
    ) -> None:
        """``validate``: the checks the command line makes beyond the document's own (its flags
        against ``spec.serverLimits`` and ``spec.management``), raising ``ValueError`` naming the
        path at fault; returns the listener limits the document asks for. ``loaded_digest``: as
        :class:`~igw.gateway.file_watch.PolledFile`'s."""
        super().__init__(path, loaded_digest=loaded_digest, task_name="global config reload")
        self.app = app
        self.validate = validate
        self.interval_s = interval_s
        self._started = self.router.config
        """What this process runs with: the restart-only fields stay these."""
        self._file = self._started
        """The configuration last loaded from the file (the restart-only fields as written)."""

    @property
    def router(self) -> GlobalRouter:
        return self.app[ROUTER_KEY]

    def wait_s(self) -> float:
        return self.interval_s

    async def check(self) -> bool | None:
        previous = self._digest
        digest = self.changed_digest()
        if not isinstance(digest, str):
            return digest
        try:
            config = load_global_config(self.path)
            held = self.validate(config).max_body_bytes_held or None
        except (ConfigError, ValueError) as exc:
            if await self.being_written(digest):
                self._digest = previous
                return None
            return self.reject(str(exc))
        before, self._file = self._file, config
        running = self.router.config
        applied = running_config(config, self._started)
        apply_global_config(self.app, applied)
        self.router.metrics.config_reloads.labels("applied").inc()
        self.router.metrics.config_reload_ok.set(1)
        self.router.config_error = None
        log.info(
            "configuration %s reloaded and applied: %d cluster(s), policy %s",
            self.path,
            len(applied.clusters),
            applied.routing.policy,
        )
        if running.server_limits.get(BODY_BYTES_HELD) != applied.server_limits.get(BODY_BYTES_HELD):
            self._apply_body_bytes(held)
        self._name_restart_only(before, config)
        return True

    def _apply_body_bytes(self, held: int | None) -> None:
        """The request-body budget from the reloaded ``maxBodyBytesHeld``, as tier 1's reload does:
        uploads in progress keep what they hold, the next body is held to the new bound."""
        budget = self.router.body_budget
        was = budget.limit
        plan = body_plan(held)
        budget.limit = plan.body_bytes
        if (overcommit := plan.overcommit_warning()) is not None:
            log.warning("%s", overcommit)
        log.info(
            "request bodies held at once: at most %d bytes from now on (was %d; %s, reloaded): %s",
            budget.limit,
            was,
            "spec.serverLimits.maxBodyBytesHeld" if held else "derived",
            budget_meaning(budget.limit),
        )

    def _name_restart_only(self, before: GlobalRouterConfig, after: GlobalRouterConfig) -> None:
        was, now, started = (restart_only_values(c) for c in (before, after, self._started))
        changed = [path for path in sorted({*was, *now}) if was.get(path) != now.get(path)]
        back = [path for path in changed if now.get(path) == started.get(path)]
        pending = [path for path in changed if path not in back]
        if back:
            log.info("%s back to what this process runs with", ", ".join(back))
        if pending:
            log.warning(
                "%s changed in %s: restart-only, the running value%s stay%s until igw global serve "
                "restarts (the rest of the edit is applied)",
                ", ".join(pending),
                self.path,
                "s" if len(pending) != 1 else "",
                "" if len(pending) != 1 else "s",
            )

    def reject(self, message: str) -> bool:
        self.router.metrics.config_reloads.labels("rejected").inc()
        self.router.metrics.config_reload_ok.set(0)
        self.router.config_error = message
        log.error("configuration reload rejected, the running configuration stays: %s", message)
        return False
