"""Hot reload of the configuration file: poll, validate, swap - or keep the running config.

The file is checked every ``configReloadInterval``; when its content changes it is loaded with the
config engineer's loader (schema + admission rules) and the gateway runtime is rebuilt. When the
parts request security reads change (``spec.auth``, ``spec.extensions.authorization`` /
``rateLimits``, see :func:`~igw.gateway.guards.guard_inputs`) and the gateway has a guard factory,
a new request guard is built and started first and must become ready (JWKS loaded) within
``guard_ready_timeout_s``; then runtime and guard are swapped together (no await in between, so no
request sees one without the other) and the old guard is closed.

The file's content is compared by digest (SHA-256), not by modification time or size, so two edits
of the same size within the file system's timestamp granularity are both seen. A file that fails to
load is read again after :data:`TORN_WRITE_SETTLE_S`: when its content changed in between, it was
read while being written in place (truncated, then written: an editor, ``kubectl cp``, a script's
``open(path, "w")``), and the check is left for the next interval instead of rejected; before
session s48 such a torn read was logged as an error, counted as a rejected reload and shown in
``/readyz`` although the file being written was valid. (Kubernetes ConfigMap volumes swap a symlink
and :mod:`igw.gateway.config_sync` writes a temporary file and renames it: no torn reads there.)

A file that cannot be read is reported once and loaded again when it can be, even unchanged.
A reload rejected only because its new guard did not start or become ready (the issuer's keys could
not be fetched: an issuer down or flaky for a moment) is tried again every interval, the file
unchanged, until it is applied or the file changes: before session s40 the file's digest was taken as
settled, so the configuration was never applied after the issuer came back - and in an ``igw serve
--workers`` group whose worker 0 fetched the keys while another worker's fetch failed, the workers
served two configurations (two audiences, two sets of rate limits) until the file changed again.
Any failure (YAML, schema, admission rule, EndpointPickerConfig, routing extension, a guard setting,
a guard that does not become ready) is logged with its own message, counted as
``igw_config_reloads{result="rejected"}``, shown in ``/readyz`` and by
``igw_config_last_reload_successful`` 0 until a reload is applied; the running configuration and
guard stay in force and a half-built new guard is closed. An applied reload logs the new file's notes
(AWS's fields it sets that igw accepts without effect, :attr:`GatewayConfig.notes`), as ``igw serve``
does at start: a user who edits the file never runs ``igw validate``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from igw.config.errors import ConfigError
from igw.config.loader import load_gateway_config
from igw.config.model import GatewayConfig
from igw.config.restart_only import LIVE_SERVER_LIMITS, RESTART_ONLY, SERVER_LIMITS, restart_only_values
from igw.errors import IgwGatewayError
from igw.gateway.body_budget import DEFAULT_BYTES as BODY_DEFAULT_BYTES
from igw.gateway.body_budget import budget_meaning
from igw.gateway.file_watch import TORN_WRITE_SETTLE_S, PolledFile, file_digest
from igw.gateway.guards import GuardFactory, RequestGuard, guard_inputs
from igw.gateway.limits_config import ServerLimitsError, reload_token_room_problem
from igw.gateway.memory import configured_queue_bytes
from igw.gateway.picker_share import PickerReadPending, SharedPickerConfigs
from igw.gateway.runtime import PickerConfigs
from igw.gateway.state import GatewayState
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.flow_control import EXTENSION_NAME as FLOW_EXTENSION

log = logging.getLogger("igw.gateway.reload")

PickerConfigLoader = Callable[[GatewayConfig], PickerConfigs]
GUARD_READY_TIMEOUT_S = 10.0
"""How long a reloaded guard may take to become ready (load its issuer's keys) before the reload is
rejected; twice the default JWKS fetch timeout."""
_READY_POLL_S = 0.02
FOLLOWER_POLL_FACTOR = 10
"""A follower (see :attr:`ConfigReloader.follows`) still checks the file itself every this many
reload intervals: a safety net should a nudge be lost."""

__all__ = ["TORN_WRITE_SETTLE_S", "ConfigReloader", "file_digest"]


class GuardReloadError(IgwGatewayError, ValueError):
    """The new configuration's request guard could not be built or did not become ready."""


class GuardNotReadyError(GuardReloadError):
    """The new guard was built but did not start or become ready in time: the issuer, not the
    configuration, is at fault, so the same file is tried again (:attr:`ConfigReloader.retrying`)."""


class ConfigReloader(PolledFile):
    """An ``igw serve`` gateway's configuration file, reloaded when it changes (the module's
    docstring); the watching itself is :class:`~igw.gateway.file_watch.PolledFile`'s."""

    def __init__(
        self,
        path: Path,
        *,
        state: GatewayState,
        load_picker_configs: PickerConfigLoader | None = None,
        guard_factory: GuardFactory | None = None,
        guard_ready_timeout_s: float = GUARD_READY_TIMEOUT_S,
        loaded_digest: str | None = None,
        max_header_field_bytes: int | None = None,
        limit_options: frozenset[str] = frozenset(),
    ) -> None:
        """``limit_options``: the ``ServerLimits`` fields given on ``igw serve``'s command line
        (``--max-body-bytes-held``...): they win over the configuration at start, and so on reload.

        ``max_header_field_bytes``: the listener's header field limit, fixed at start; a reload whose
        token cap it cannot carry is rejected (:func:`~igw.gateway.limits_config.reload_token_room_problem`).
        ``None``: not checked (no listener of igw's own, as in some tests).

        ``loaded_digest``: :func:`file_digest` of the file as it was when the running configuration
        was loaded from it, taken before that load. Without it the file is read now, and an edit that
        landed between the load and now (the seconds a process takes to start; with ``--config-map``,
        worker 0's first ConfigMap read writes the file in that time) was taken for the running
        configuration and never applied."""
        super().__init__(path, loaded_digest=loaded_digest, task_name="config reload")
        self.state = state
        self._started_with = restart_only_values(state.runtime.config.extensions)
        """The restart-only extensions this process runs with (:mod:`igw.config.restart_only`)."""
        self.load_picker_configs = load_picker_configs
        self.guard_factory = guard_factory
        self.guard_ready_timeout_s = guard_ready_timeout_s
        self.max_header_field_bytes = max_header_field_bytes
        self.limit_options = limit_options
        self.follows = False
        """Check when nudged (:meth:`nudge`) rather than every interval (every
        :data:`FOLLOWER_POLL_FACTOR` intervals at the latest): how the workers of an ``igw serve
        --workers`` group other than worker 0 reload, told by worker 0 when the file changed, so all
        of them apply a change within milliseconds of each other instead of up to an interval apart."""
        self.retrying = False
        """The file's current content was rejected because its guard did not become ready: the next
        check loads it again although it did not change (every interval, a follower too)."""

    def wait_s(self) -> float:
        interval = self.state.runtime.settings.config_reload_interval_s
        return interval * FOLLOWER_POLL_FACTOR if self.follows and not self.retrying else interval

    async def check(self) -> bool | None:
        """Reload if the file changed: ``True`` applied, ``False`` rejected, ``None`` unchanged."""
        previous = self._digest, self.retrying
        digest = self.changed_digest(again=self.retrying)
        if not isinstance(digest, str):
            return digest
        self.retrying = False
        new_guard: RequestGuard | None = None
        try:
            config = load_gateway_config(self.path)
            if self.max_header_field_bytes is not None:
                room = reload_token_room_problem(config, self.max_header_field_bytes)
                if room is not None:
                    raise ServerLimitsError([f"{self.path}: {room}"])
            pickers = None
            if isinstance(self.load_picker_configs, SharedPickerConfigs):  # a worker group: one read
                shared = self.load_picker_configs
                pickers = await asyncio.to_thread(shared.load, config, digest, wait=True)
            elif self.load_picker_configs is not None:
                pickers = await asyncio.to_thread(self.load_picker_configs, config)
            new_guard = await self._next_guard(config)
            before = restart_only_values(self.state.runtime.config.extensions)
            body_before = _stated_body_bytes(self.state.runtime.config)
            self.state.apply_config(config, picker_configs=pickers)
        except PickerReadPending:
            # A follower's check ran ahead of worker 0's read of this file: not a change yet; worker
            # 0 tells it when it has read (and this check comes again).
            self._digest, self.retrying = previous
            return None
        except GuardNotReadyError as exc:
            self.retrying = True
            return self.reject(f"{exc} (tried again every configReloadInterval)")
        except (ConfigError, SchedulerConfigError, ValueError) as exc:
            if new_guard is not None:
                await new_guard.close()
            if await self.being_written(digest):
                self._digest, self.retrying = previous
                return None
            return self.reject(str(exc))
        if new_guard is not None:
            old_guard, self.state.guard = self.state.guard, new_guard
            await old_guard.close()
            log.info("request guard rebuilt: %s", new_guard.readiness().detail)
        self.state.metrics.config_reloads.labels("applied").inc()
        self.state.metrics.config_reload_ok.set(1)
        log.info("configuration %s reloaded and applied", self.path)
        if not self.follows:  # worker 0 of a group logs them, not every worker once more
            for note in config.notes:
                log.warning("%s", note)
        self._recheck_memory(config, body_before)
        after = restart_only_values(config.extensions)
        for name, running in RESTART_ONLY.items():
            if after.get(name) == before.get(name):
                continue
            if after.get(name) == self._started_with.get(name):
                log.info("spec.extensions.%s is back to what this process runs with", name)
            else:
                log.warning(
                    "spec.extensions.%s changed%s: %s until igw serve restarts",
                    name,
                    _changed_fields(before.get(name), after.get(name)),
                    running,
                )
        return True

    def _recheck_memory(self, config: GatewayConfig, body_before: int | None) -> None:
        """Apply the reloaded request-body budget (``serverLimits.maxBodyBytesHeld``,
        ``body_before``: the running configuration's, ``None`` when derived) and re-check the memory
        plan against it and ``flowControl.maxBytes``: the new plan is logged, and WARNED when its
        parts full pass the process's share. The prefix index keeps the size it got at start.

        The budget is the counter every request's handler reads (:mod:`igw.gateway.body_budget`), so
        the new limit holds from the next body on: lowered below what uploads in progress hold, they
        keep their bytes and finish (a chunked one's next chunk is held to the new bound, as to the
        old) while new bodies are answered 503 ``server_busy`` until the bytes held fit under it;
        raised, the next body is admitted (there is no queue of refused bodies: each was answered
        with ``Retry-After``). A ``--max-body-bytes-held`` given on the command line wins, as at
        start. Until session s50 the budget kept its start value, and the reload only WARNED that
        ``serverLimits`` needed a restart."""
        budget = self.state.body_budget
        body = _stated_body_bytes(config)
        fixed = "max_body_bytes_held" in self.limit_options
        if fixed and body != body_before and not self.follows:
            log.warning(
                "spec.extensions.serverLimits.maxBodyBytesHeld changed, but --max-body-bytes-held given to "
                "igw serve wins: request bodies held at once stay at most %d bytes",
                budget.limit,
            )
        plan = self.state.memory_plan
        was = budget.limit
        if plan is None:  # no memory plan (an app without igw serve): the stated value, else the default
            if not fixed and body != body_before:
                budget.limit = BODY_DEFAULT_BYTES if body is None else body
        else:
            new = plan.with_queue(configured_queue_bytes(config.stated_extensions.get(FLOW_EXTENSION)))
            if not fixed and body != body_before:  # a queue-only change leaves the budget as it is
                new = new.with_body(body)
            if new == plan:
                return
            self.state.memory_plan = new
            budget.limit = new.body_bytes
            # Turning flow control on with maxBytes unset reserves nothing new: only a new size is
            # news. Worker 0 of a group logs it, not every worker once more.
            if (new.queue_bytes, new.body_bytes) != (plan.queue_bytes, plan.body_bytes) and not self.follows:
                log.info(
                    "%s (reloaded; the prefix index keeps its size from the start until igw serve restarts)",
                    new.describe(),
                )
                if (overcommit := new.overcommit_warning()) is not None:
                    log.warning("%s", overcommit)
        if budget.limit != was and not self.follows:
            log.info(
                "request bodies held at once: at most %d bytes from now on (was %d; %s, reloaded): %s",
                budget.limit,
                was,
                "serverLimits.maxBodyBytesHeld" if body is not None else "derived",
                budget_meaning(budget.limit),
            )

    async def _next_guard(self, config: GatewayConfig) -> RequestGuard | None:
        """A started, ready guard for ``config``, or ``None`` when the running one still fits."""
        if self.guard_factory is None or guard_inputs(config) == guard_inputs(self.state.runtime.config):
            return None
        try:
            guard = self.guard_factory(config)
        except ValueError as exc:
            raise GuardReloadError(f"request guard: {exc}") from exc
        try:
            await guard.start()
            await self._wait_ready(guard)
        except BaseException as exc:
            await guard.close()
            if isinstance(exc, GuardReloadError):
                raise
            if isinstance(exc, Exception):
                raise GuardNotReadyError(f"request guard failed to start: {exc!r}") from exc
            raise
        return guard

    async def _wait_ready(self, guard: RequestGuard) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.guard_ready_timeout_s
        while not (readiness := guard.readiness()).ready:
            if loop.time() >= deadline:
                raise GuardNotReadyError(
                    f"request guard not ready after {self.guard_ready_timeout_s:g}s: {readiness.detail}"
                )
            await asyncio.sleep(_READY_POLL_S)

    def reject(self, message: str) -> bool:
        self.state.config_error = message
        self.state.metrics.config_reloads.labels("rejected").inc()
        self.state.metrics.config_reload_ok.set(0)
        log.error("configuration reload rejected, the running configuration stays: %s", message)
        return False


def _stated_body_bytes(config: GatewayConfig) -> int | None:
    """``spec.extensions.serverLimits.maxBodyBytesHeld`` of ``config``; ``None`` when 0 or unset
    (derived from the memory plan)."""
    limits = config.extensions.get(SERVER_LIMITS)
    value = limits.get("maxBodyBytesHeld") if isinstance(limits, Mapping) else None
    return int(value) if value else None


def _changed_fields(before: object, after: object) -> str:
    """`` (headerTimeout, maxConnections)``: the fields of an extension a reload changed, for its
    restart-required WARNING (``""`` when it is not a mapping on both sides: added or removed).
    ``serverLimits``' :data:`LIVE_SERVER_LIMITS` are applied, and left out by the caller already."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return ""
    keys = sorted(
        k for k in {*before, *after} if before.get(k) != after.get(k) and k not in LIVE_SERVER_LIMITS
    )
    return f" ({', '.join(keys)})" if keys else ""
