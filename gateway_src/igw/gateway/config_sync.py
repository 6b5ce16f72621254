"""Serve an InferenceGatewayConfig kept in a ConfigMap: mirror it into the hot-reloaded config file.

Gateway pods created by ``igw operator`` run ``igw serve --config FILE --config-map NS/NAME``: the
operator renders each admitted spec into that ConfigMap, and this module copies the ConfigMap's key
into FILE - once before start-up, then on every watch event - so the existing file hot reload
(:mod:`igw.gateway.reload`: validate, swap, or keep the running config) serves the new spec within
one ``configReloadInterval`` of the API server's event. A ConfigMap volume would also work, but the
kubelet refreshes mounted ConfigMaps only every sync period (a minute or more by default).

The pods watch the ConfigMap rather than the InferenceGatewayConfig itself on purpose: only specs
the operator admitted (valid and without model-name conflicts) reach the ConfigMap, so a refused
edit never reaches the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from igw.errors import IgwGatewayError

log = logging.getLogger("igw.gateway.config_sync")

DEFAULT_KEY: Final = "config.yaml"


class ConfigSyncError(IgwGatewayError, ValueError):
    """The ConfigMap reference is malformed, or the ConfigMap / key cannot be read at start-up."""


@dataclass(frozen=True, slots=True)
class ConfigMapRef:
    namespace: str
    name: str
    key: str = DEFAULT_KEY

    @classmethod
    def parse(cls, text: str) -> ConfigMapRef:
        """``NAMESPACE/NAME`` or ``NAMESPACE/NAME/KEY`` (key default ``config.yaml``)."""
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ConfigSyncError(f"--config-map {text!r}: expected NAMESPACE/NAME or NAMESPACE/NAME/KEY")
        return cls(*parts)


def write_if_changed(path: Path, text: str) -> bool:
    """Replace ``path`` atomically with ``text`` unless it already holds it; ``True`` when written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)
    return True


def _key_text(config_map: Any, ref: ConfigMapRef) -> str | None:
    data = getattr(config_map, "data", None) or {}
    value = data.get(ref.key)
    return value if isinstance(value, str) else None


def fetch_config_map(api_client: Any, ref: ConfigMapRef, path: Path) -> None:
    """Write the ConfigMap's key to ``path`` now (start-up); :class:`ConfigSyncError` if unreadable."""
    # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from igw.gateway.discovery.kube_client import unreachable_reason

    try:
        config_map = client.CoreV1Api(api_client).read_namespaced_config_map(ref.name, ref.namespace)
    except ApiException as exc:
        raise ConfigSyncError(
            f"ConfigMap {ref.namespace}/{ref.name}: {exc.status} {exc.reason}".rstrip()
        ) from exc
    except (HTTPError, OSError) as exc:  # no answer at all: a traceback before session s42
        raise ConfigSyncError(
            f"ConfigMap {ref.namespace}/{ref.name}: cannot reach the API server: {unreachable_reason(exc)}"
        ) from exc
    text = _key_text(config_map, ref)
    if text is None:
        raise ConfigSyncError(f"ConfigMap {ref.namespace}/{ref.name} has no key {ref.key!r}")
    write_if_changed(path, text)


class ConfigMapFileSync:
    """Watches one ConfigMap and mirrors one key into a file (deleted map or key: keep the file)."""

    def __init__(self, api_client: Any, ref: ConfigMapRef, path: Path) -> None:
        self.ref = ref
        self.path = path
        self._api_client = api_client
        self._watch: Any = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes import client

        from igw.gateway.discovery.kube import _WatchThread

        self._watch = _WatchThread(
            name=f"configmap/{self.ref.name}",
            list_fn=client.CoreV1Api(self._api_client).list_namespaced_config_map,
            kwargs={"namespace": self.ref.namespace, "field_selector": f"metadata.name={self.ref.name}"},
            on_objects=self._on_objects,
            loop=loop,
        )
        self._watch.start()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _on_objects(self, objects: dict[str, Any]) -> None:
        where = f"ConfigMap {self.ref.namespace}/{self.ref.name}"
        config_map = objects.get(f"{self.ref.namespace}/{self.ref.name}")
        if config_map is None:
            log.warning("%s is gone; serving the last configuration", where)
            return
        text = _key_text(config_map, self.ref)
        if text is None:
            log.warning("%s has no key %r; serving the last configuration", where, self.ref.key)
            return
        if write_if_changed(self.path, text):
            log.info("%s changed; wrote %s for the hot reload", where, self.path)
