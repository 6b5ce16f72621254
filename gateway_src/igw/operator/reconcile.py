"""One reconciliation pass over one InferenceGatewayConfig: admit, apply, observe, report.

The pass is level-triggered and idempotent, so kopf may call it on every create / update / resume
and on a timer: it re-reads the object, admits it (:mod:`igw.operator.admission`), applies the
data plane only when admitted (a refused spec leaves the previous data plane untouched), observes
what runs (the rendered configuration actually served, the gateway Deployment and Service, the
model-server pods of each served scheduler), then writes the status when it changed and posts
one Event per condition transition. Passes over the same object never overlap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from igw.config.build import build_gateway_config
from igw.config.model import KIND
from igw.operator.admission import admit
from igw.operator.dataplane import CONFIG_KEY, DataPlaneSettings, base_name, desired_objects
from igw.operator.kube import IGWC_API_VERSION, Kube
from igw.operator.status import Observation, compute_status

log = logging.getLogger("igw.operator")

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _error_text(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    return f"{type(exc).__name__}: {body or exc}"[:2000]


class Reconciler:
    """Reconciles objects by ``(namespace, name)``; one lock per object serialises its passes."""

    def __init__(self, kube: Kube, settings: DataPlaneSettings, *, clock: Clock = _utc_now) -> None:
        self._kube = kube
        self._settings = settings
        self._clock = clock
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def reconcile(self, namespace: str, name: str) -> None:
        lock = self._locks.setdefault((namespace, name), asyncio.Lock())
        async with lock:
            igwc = await self._kube.get(IGWC_API_VERSION, KIND, namespace, name)
            if igwc is None or (igwc.get("metadata") or {}).get("deletionTimestamp"):
                self._locks.pop((namespace, name), None)
                return
            await self._pass(igwc)

    async def _pass(self, igwc: dict[str, Any]) -> None:
        meta = igwc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        neighbours = await self._kube.list(IGWC_API_VERSION, KIND, namespace)
        refusal = admit(igwc, neighbours)
        apply_error: str | None = None
        if refusal is None:
            try:
                for desired in desired_objects(igwc, self._settings):
                    if await self._kube.apply(desired):
                        log.info(
                            "%s/%s: applied %s %s",
                            namespace,
                            name,
                            desired["kind"],
                            desired["metadata"]["name"],
                        )
            except Exception as exc:  # any API refusal is reported on the object, not raised
                apply_error = _error_text(exc)
                log.warning("%s/%s: applying the data plane failed: %s", namespace, name, apply_error)
        seen = await self._observe(igwc, refusal=refusal, apply_error=apply_error)
        status, transitions = compute_status(igwc, seen, now=self._clock())
        if _differs(status, igwc.get("status") or {}):
            await self._kube.patch_status(namespace, name, status)
        for transition in transitions:
            await self._kube.event(
                igwc,
                reason=f"{transition.type}{transition.reason}",
                message=f"{transition.type}={transition.status}: {transition.message}",
                warning=transition.warning,
            )

    async def _observe(self, igwc: Mapping[str, Any], **admission: Any) -> Observation:
        meta = igwc["metadata"]
        namespace, base = meta["namespace"], base_name(meta["name"])
        config_map = await self._kube.get("v1", "ConfigMap", namespace, f"{base}-config")
        served: dict[str, Any] | None = None
        if config_map is not None:
            loaded = yaml.safe_load((config_map.get("data") or {}).get(CONFIG_KEY) or "null")
            served = loaded if isinstance(loaded, dict) else None
        deployment = await self._kube.get("apps/v1", "Deployment", namespace, base)
        service = await self._kube.get("v1", "Service", namespace, base)
        pods: dict[str, list[dict[str, Any]]] = {}
        if served is not None:
            for scheduler in build_gateway_config(served).schedulers:
                pods[scheduler.name] = await self._kube.list(
                    "v1", "Pod", namespace, label_selector=scheduler.model_selector.to_query() or None
                )
        return Observation(
            refusal=admission["refusal"],
            programmed=served is not None and deployment is not None and admission["apply_error"] is None,
            apply_error=admission["apply_error"],
            served_spec=(served or {}).get("spec"),
            deployment=deployment,
            service=service,
            pods=pods,
        )


def _differs(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` (a merge patch) would change ``old``."""
    return any(old.get(key) != value for key, value in new.items())
