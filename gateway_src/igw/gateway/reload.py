"""Hot reload of the configuration file: poll, validate, swap - or keep the running config.

The file is checked every ``configReloadInterval``; when its content changes it is loaded with the
config engineer's loader (schema + admission rules) and the gateway runtime is rebuilt. Any failure
(YAML, schema, admission rule, EndpointPickerConfig, routing extension) is logged with the
validator's own message, counted as ``igw_config_reloads{result="rejected"}`` and shown in
``/readyz``; the running configuration stays in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from igw.config.errors import ConfigError
from igw.config.loader import load_gateway_config
from igw.config.model import GatewayConfig
from igw.gateway.runtime import PickerConfigs
from igw.gateway.state import GatewayState
from igw.scheduling.errors import SchedulerConfigError

log = logging.getLogger("igw.gateway.reload")

PickerConfigLoader = Callable[[GatewayConfig], PickerConfigs]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ConfigReloader:
    def __init__(
        self,
        path: Path,
        *,
        state: GatewayState,
        load_picker_configs: PickerConfigLoader | None = None,
    ) -> None:
        self.path = path
        self.state = state
        self.load_picker_configs = load_picker_configs
        self._digest = _digest(path)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="config reload")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.state.runtime.settings.config_reload_interval_s)
            await self.check()

    async def check(self) -> bool | None:
        """Reload if the file changed: ``True`` applied, ``False`` rejected, ``None`` unchanged."""
        try:
            digest = _digest(self.path)
        except OSError as exc:
            return self._reject(f"{self.path}: cannot be read: {exc}")
        if digest == self._digest:
            return None
        self._digest = digest
        try:
            config = load_gateway_config(self.path)
            pickers = None
            if self.load_picker_configs is not None:
                pickers = await asyncio.to_thread(self.load_picker_configs, config)
            self.state.apply_config(config, picker_configs=pickers)
        except (ConfigError, SchedulerConfigError, ValueError) as exc:
            return self._reject(str(exc))
        self.state.metrics.config_reloads.labels("applied").inc()
        log.info("configuration %s reloaded and applied", self.path)
        return True

    def _reject(self, message: str) -> bool:
        self.state.config_error = message
        self.state.metrics.config_reloads.labels("rejected").inc()
        log.error("configuration reload rejected, the running configuration stays: %s", message)
        return False
