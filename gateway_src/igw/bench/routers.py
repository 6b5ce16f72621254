"""Live-mode routers: how to start each one as a real process in front of a running fleet.

One explicit registry (:data:`ROUTERS`): our gateway (``igw serve``) with default or tuned weights,
the round-robin proxy (the Kubernetes Service stand-in) and the peer routers installed on demand
(:mod:`igw.bench.peers`). Each starter is an async context manager yielding the router's base URL and
stopping the process on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final

import yaml

from igw.bench.peers import peer_router
from igw.bench.policies.registry import TUNED_WEIGHTS
from igw.bench.processes import router_process
from igw.bench.router_context import RouterContext, RouterStarter
from igw.bench.rr_proxy import LISTENING_PREFIX
from igw.scheduling.factory import WEIGHT_KEYS


@dataclass(frozen=True, slots=True)
class RouterEntry:
    name: str
    description: str
    start: RouterStarter


SCHEDULER_NAME: Final = "bench"
_NO_ADMISSION: Final = {"queueDepthThreshold": 1_000_000, "kvCacheUtilThreshold": 1}
"""Admission off, as in DES mode: round-robin and the peers never answer 429."""


def gateway_config(ctx: RouterContext, *, picker_ref: bool) -> dict[str, Any]:
    """The InferenceGatewayConfig the benchmark runs ``igw serve`` with (written next to the log)."""
    scheduler: dict[str, Any] = {
        "name": SCHEDULER_NAME,
        "modelName": ctx.model,
        "modelSelector": {"matchLabels": {"app": "model-server"}},
    }
    if ctx.lora_adapters:
        scheduler["loraAdapters"] = [{"name": a} for a in ctx.lora_adapters]
    if picker_ref:
        scheduler["configMapRef"] = {"name": "bench-picker", "key": "config.yaml"}
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "igw-bench", "namespace": "default"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [scheduler],
            "extensions": {"routing": {"saturation": dict(_NO_ADMISSION)}},
        },
    }


def picker_config(weights: Mapping[str, float]) -> dict[str, Any]:
    """An EndpointPickerConfig holding explicit weights (including scorers the CRD has no key for)."""

    plugins = [{"type": WEIGHT_KEYS.get(k, k)} for k, w in weights.items() if w > 0]
    refs = [{"pluginRef": WEIGHT_KEYS.get(k, k), "weight": w} for k, w in weights.items() if w > 0]
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [*plugins, {"type": "max-score-picker"}],
        "schedulingProfiles": [{"name": "default", "plugins": [*refs, {"pluginRef": "max-score-picker"}]}],
    }


@contextlib.asynccontextmanager
async def _gateway(ctx: RouterContext, *, tuned: bool) -> AsyncIterator[str]:

    name = "gateway-tuned" if tuned else "gateway-default"
    work = ctx.workdir / name
    work.mkdir(parents=True, exist_ok=True)
    weights = ctx.weights or (TUNED_WEIGHTS if tuned else None)
    (work / "igwc.yaml").write_text(yaml.safe_dump(gateway_config(ctx, picker_ref=weights is not None)))
    endpoints = [
        {"address": url.removeprefix("http://"), "labels": dict(labels)}
        for url, labels in zip(ctx.pod_urls, ctx.pod_labels, strict=True)
    ]
    (work / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {SCHEDULER_NAME: endpoints}}))
    argv = [sys.executable, "-m", "igw.cli.main", "serve", "--config", str(work / "igwc.yaml")]
    argv += ["--endpoints", str(work / "endpoints.yaml"), "--host", "127.0.0.1", "--port", "0", "--no-reload"]
    if weights is not None:
        maps = work / "config-maps" / "bench-picker"
        maps.mkdir(parents=True, exist_ok=True)
        (maps / "config.yaml").write_text(yaml.safe_dump(picker_config(weights)))
        argv += ["--config-maps", str(work / "config-maps")]
    async with router_process(
        name=name,
        argv=argv,
        log_path=work / "gateway.log",
        url_pattern=r"serving \d+ scheduler\(s\) at (http://\S+)",
    ) as url:
        await asyncio.sleep(1.0)  # first scrapes of every pod (50 ms interval) before traffic
        yield url


@contextlib.asynccontextmanager
async def _round_robin(ctx: RouterContext) -> AsyncIterator[str]:
    argv = [sys.executable, "-m", "igw.cli.rr_proxy_process", *ctx.pod_urls]
    async with router_process(
        name="round-robin proxy",
        argv=argv,
        log_path=ctx.workdir / "round-robin" / "proxy.log",
        url_pattern=LISTENING_PREFIX + r"(http://\S+)",
    ) as url:
        yield url


def _peer(router: str, policy: str) -> RouterStarter:
    def start(ctx: RouterContext) -> AbstractAsyncContextManager[str]:
        return peer_router(router=router, policy=policy, ctx=ctx)

    return start


ROUTERS: Final[dict[str, RouterEntry]] = {
    e.name: e
    for e in (
        RouterEntry("round-robin", "round-robin proxy process (Kubernetes Service stand-in)", _round_robin),
        RouterEntry("gateway-default", "igw serve, default weights", lambda c: _gateway(c, tuned=False)),
        RouterEntry("gateway-tuned", "igw serve, tuned weights", lambda c: _gateway(c, tuned=True)),
        RouterEntry("sglang-router", "sglang-router (smg) cache_aware", _peer("sglang", "cache_aware")),
        RouterEntry("vllm-router", "vllm-router cache_aware, real process", _peer("vllm", "cache_aware")),
    )
}  # fmt: skip
