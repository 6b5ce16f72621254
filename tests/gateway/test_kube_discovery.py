"""In-cluster discovery against the fake Kubernetes API server, through the real ``kubernetes`` client:
pods Ready / not ready / terminating, changes within a second, bbr-managed LoRA ConfigMaps and
configMapRef EndpointPickerConfigs."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes
import pytest
import yaml

from igw.config.build import build_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.kube import KubeDiscovery
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import serve_app
from igw.launch import picker_configs_from_cluster
from tests.fakes.kube_api import FakeKubeApiServer, make_pod, serving_fake_kube
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

NS = "inference"
WATCH_WITHIN_S = 15.0
"""Watch events arrive in milliseconds; the bound is generous because a loaded machine delays them,
and these tests assert that changes propagate, not how fast."""


def shared_port(*hosts: str) -> int:
    """A port free on every one of the loopback addresses ``hosts``."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind((hosts[0], 0))
            port = int(first.getsockname()[1])
            ok = True
            for h in hosts[1:]:
                with socket.socket() as other:
                    try:
                        other.bind((h, port))
                    except OSError:
                        ok = False
            if ok:
                return port
    raise RuntimeError("no common free port")


def bbr_config_map(name: str, base: str, adapters: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"inference.networking.k8s.io/bbr-managed": "true"},
        },
        "data": {"baseModel": base, "adapters": adapters},
    }


async def test_pods_and_bbr_config_maps_drive_routing_within_a_second() -> None:
    port = shared_port("127.0.0.2", "127.0.0.3")
    s1 = FakeModelServer("pod-1", host="127.0.0.2", port=port)
    s2 = FakeModelServer("pod-2", host="127.0.0.3", port=port)
    async with serving_fake_kube() as kube, running(s1, s2):
        kube.add(make_pod(name="pod-1", namespace=NS, labels={"app": "llama"}, pod_ip="127.0.0.2", port=port))
        kube.add(
            make_pod(name="pod-2", namespace=NS, labels={"app": "llama"}, pod_ip="127.0.0.3", ready=False)
        )
        kube.add(make_pod(name="other", namespace=NS, labels={"app": "qwen"}, pod_ip="127.0.0.4"))
        kube.add(bbr_config_map("adapters", "llama-8b", "- sql-lora\n- chat-lora\n"))
        kube.add(bbr_config_map("broken", "llama-8b", "not: [a list"))
        doc = config_doc(
            [scheduler("llama", "llama-8b", targetPort=port), scheduler("qwen", "qwen", targetPort=port)]
        )
        doc["metadata"]["namespace"] = NS
        config = build_gateway_config(doc)
        api_client = kube.api_client()
        core = kubernetes.client.CoreV1Api(api_client)
        discovery = KubeDiscovery(api_client=api_client, namespace=NS, schedulers=config.schedulers)
        app = create_app(config, discovery=discovery, rng=random.Random(1))
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            state = app[STATE_KEY]
            pool = state.runtime.schedulers["llama"].pool

            def keys() -> set[str]:
                return set(pool.states)

            await wait_for(lambda: keys() == {s1.key}, what="only the Ready pod")
            qwen_pool = state.runtime.schedulers["qwen"].pool
            await wait_for(
                lambda: set(qwen_pool.states) == {f"127.0.0.4:{port}"}, what="second scheduler's pods"
            )
            # the selector was sent to the API server, not applied client-side
            assert any(
                q.get("labelSelector") == "app=llama"
                for _, path, q in kube.requests
                if path.endswith("/pods")
            )

            await asyncio.to_thread(
                core.patch_namespaced_pod_status,
                "pod-2",
                NS,
                {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            )
            await wait_for(
                lambda: keys() == {s1.key, s2.key}, within=WATCH_WITHIN_S, what="pod-2 became Ready"
            )

            await asyncio.to_thread(
                core.patch_namespaced_pod,
                "pod-1",
                NS,
                {"metadata": {"deletionTimestamp": "2026-11-29T00:00:00Z"}},
            )
            await wait_for(
                lambda: keys() == {s2.key}, within=WATCH_WITHIN_S, what="terminating pod-1 removed"
            )

            await wait_for(lambda: state.runtime.router.resolve("sql-lora") is not None, what="bbr adapters")
            route = state.runtime.router.resolve("chat-lora")
            assert route is not None
            assert route.base_model == "llama-8b"
            await wait_for(
                lambda: state.runtime.schedulers["llama"].scheduler.is_fresh(
                    pool.states[s2.key].view(), state.clock()
                )
            )
            import aiohttp

            async with aiohttp.ClientSession() as http:
                resp = await http.post(url + "/v1/completions", json={"model": "sql-lora", "prompt": "x"})
                assert (await resp.json())["server"] == "pod-2"
                assert s2.received[-1].headers["X-Gateway-Base-Model-Name"] == "llama-8b"
                models = [m["id"] for m in (await (await http.get(url + "/v1/models")).json())["data"]]
                assert models == ["llama-8b", "qwen", "chat-lora", "sql-lora"]

            # a reload that changes the selector restarts that scheduler's watch
            other_doc = config_doc(
                [
                    scheduler(
                        "llama", "llama-8b", targetPort=port, modelSelector={"matchLabels": {"app": "qwen"}}
                    )
                ]
            )
            other_doc["metadata"]["namespace"] = NS
            state.apply_config(build_gateway_config(other_doc))
            other_pool = state.runtime.schedulers["llama"].pool
            await wait_for(lambda: set(other_pool.states) == {f"127.0.0.4:{port}"}, what="watch retargeted")
            state.apply_config(config)
            await wait_for(
                lambda: set(state.runtime.schedulers["llama"].pool.states) == {s2.key}, what="back"
            )

            await asyncio.to_thread(core.delete_namespaced_config_map, "adapters", NS)
            await wait_for(
                lambda: state.runtime.router.resolve("sql-lora") is None,
                what="adapters removed",
                within=WATCH_WITHIN_S,
            )
            await asyncio.to_thread(core.delete_namespaced_pod, "pod-2", NS)
            final_pool = state.runtime.schedulers["llama"].pool
            await wait_for(lambda: set(final_pool.states) == set(), what="deleted pod removed")


async def test_config_map_ref_is_read_from_the_cluster() -> None:
    picker = {
        "plugins": [{"type": "queue-scorer"}, {"type": "running-requests-size-scorer"}],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [
                    {"pluginRef": "queue-scorer", "weight": 4},
                    {"pluginRef": "running-requests-size-scorer"},
                ],
            }
        ],
    }
    async with serving_fake_kube() as kube:
        kube.add(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "epp", "namespace": NS},
                "data": {"plugins.yaml": yaml.safe_dump(picker)},
            }
        )
        doc = config_doc([scheduler("llama", "m", configMapRef={"name": "epp", "key": "plugins.yaml"})])
        doc["metadata"]["namespace"] = NS
        config = build_gateway_config(doc)
        pickers = await asyncio.to_thread(picker_configs_from_cluster, config, kube.api_client())
        app = create_app(config, picker_configs=pickers)
        assert app[STATE_KEY].runtime.schedulers["llama"].scheduler.profile.describe() == {
            "queue-scorer": 4.0,
            "running-requests-size-scorer": 1.0,
        }
        missing = build_gateway_config(
            {
                **doc,
                "spec": {**doc["spec"], "schedulers": [scheduler("x", "m", configMapRef={"name": "nope"})]},
            }
        )
        with pytest.raises(ValueError, match="configMapRef inference/nope: HTTP 404"):
            await asyncio.to_thread(picker_configs_from_cluster, missing, kube.api_client())
    _ = time


async def test_an_ipv6_pod_is_scraped_and_sent_requests() -> None:
    """An IPv6 pod IP becomes ``[ip]:port``: joined as it was (``::1:PORT``, itself a valid IPv6
    address), the scraper split it at the last colon and kept the pod fresh while the proxy read it
    as a host on port 80, and every request routed there was answered 502."""
    server = FakeModelServer("pod-v6", host="::1", port=0)
    async with serving_fake_kube() as kube, running(server):
        kube.add(make_pod(name="pod-v6", namespace=NS, labels={"app": "llama"}, pod_ip="::1"))
        doc = config_doc([scheduler("llama", "llama-8b", targetPort=server.port)])
        doc["metadata"]["namespace"] = NS
        config = build_gateway_config(doc)
        discovery = KubeDiscovery(api_client=kube.api_client(), namespace=NS, schedulers=config.schedulers)
        app = create_app(config, discovery=discovery, rng=random.Random(1))
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            state = app[STATE_KEY]
            sr = state.runtime.schedulers["llama"]
            key = f"[::1]:{server.port}"
            await wait_for(lambda: set(sr.pool.states) == {key}, what="the IPv6 pod", within=WATCH_WITHIN_S)
            await wait_for(lambda: sr.scheduler.is_fresh(sr.pool.states[key].view(), state.clock()))
            import aiohttp

            async with aiohttp.ClientSession() as http:
                resp = await http.post(url + "/v1/completions", json={"model": "llama-8b", "prompt": "x"})
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["server"] == "pod-v6"


class _RecordingSink:
    """A discovery sink that keeps the latest endpoint keys per scheduler."""

    def __init__(self) -> None:
        self.keys: dict[str, list[str]] = {}

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self.keys[scheduler] = [e.key for e in endpoints]

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        pass

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        pass


def _llama_discovery(kube: FakeKubeApiServer, **options: Any) -> KubeDiscovery:
    """Discovery in :data:`NS` through ``kube`` for one scheduler, ``llama`` (pods labelled
    ``app: llama``, port 8000); ``options``: :class:`KubeDiscovery`'s timings under test."""
    doc = config_doc([scheduler("llama", "llama-8b", targetPort=8000)])
    doc["metadata"]["namespace"] = NS
    config = build_gateway_config(doc)
    return KubeDiscovery(api_client=kube.api_client(), namespace=NS, schedulers=config.schedulers, **options)


async def test_a_watch_that_goes_silent_is_given_up_and_the_pods_are_listed_again() -> None:
    """A watch whose connection was black-holed sends nothing and never ends (not at its
    ``timeoutSeconds`` either: the server's end of it cannot reach the client). Without a read
    deadline the watch thread blocked in its socket read for good and the pool stopped following its
    pods: a pod added after the stall was still unseen a minute later. With one it is given up one
    grace period after its timeout and the pods are listed again."""
    async with serving_fake_kube() as kube:
        kube.add(make_pod(name="pod-1", namespace=NS, labels={"app": "llama"}, pod_ip="10.0.0.1"))
        sink = _RecordingSink()
        discovery = _llama_discovery(kube, watch_timeout_s=2, read_grace_s=1.0)
        await discovery.start(sink)
        try:
            await wait_for(lambda: sink.keys.get("llama") == ["10.0.0.1:8000"], what="the first pod")
            await wait_for(lambda: len(kube.open_watches()) == 2, what="both watches open")
            kube.stall_open_watches()
            kube.add(make_pod(name="pod-2", namespace=NS, labels={"app": "llama"}, pod_ip="10.0.0.2"))
            await wait_for(
                lambda: sink.keys.get("llama") == ["10.0.0.1:8000", "10.0.0.2:8000"],
                within=WATCH_WITHIN_S,
                what="the pod added while the watch was silent",
            )
        finally:
            await discovery.stop()


async def test_a_forbidden_pod_list_is_logged_once_with_the_missing_permission_and_retried_slower(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Role without ``list pods`` (RBAC 403): the gateway says once which permission it lacks, in
    the API server's words, and tries again less and less often; once the Role is fixed the pods are
    found. Before, the list was retried every second, each time logged as an ERROR without the
    message that names the permission."""
    async with serving_fake_kube() as kube:
        kube.add(make_pod(name="pod-1", namespace=NS, labels={"app": "llama"}, pod_ip="10.0.0.1"))
        kube.forbid("pods")
        sink = _RecordingSink()
        discovery = _llama_discovery(kube)
        with caplog.at_level(logging.INFO, logger="igw.gateway.discovery"):
            await discovery.start(sink)
            try:

                def tries() -> int:
                    return sum(1 for _, path, _ in kube.requests if path.endswith("/pods"))

                await wait_for(lambda: tries() >= 3, within=WATCH_WITHIN_S, what="three tries")
                await asyncio.sleep(1.5)  # tries at 0, 1 and 3 s, the next at 7 s (before: every second)
                assert tries() == 3
                errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
                assert errors == [
                    "watch pods/llama failed: HTTP 403 Forbidden: pods is forbidden: User "
                    '"system:serviceaccount:igw:test" cannot list resource "pods" in API group "" '
                    'in the namespace "inference"; retrying'
                ]
                kube.allow_all()
                await wait_for(
                    lambda: sink.keys.get("llama") == ["10.0.0.1:8000"],
                    within=WATCH_WITHIN_S,
                    what="the pods once the Role allows listing them",
                )
            finally:
                await discovery.stop()


async def test_a_watch_ended_by_410_gone_is_listed_again_at_once_and_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The API server ends a watch whose resourceVersion fell out of its window with an ``ERROR``
    event carrying a 410 Status; with ``timeoutSeconds`` set the client raises it. That is the
    routine end of a watch on a busy cluster, not a failure: listed again at once and logged at
    INFO, as client-go's reflector does. Before, it was logged as an ERROR and re-listed only after
    the failure back-off (here set to 30 s, so a pod added meanwhile stayed unseen)."""
    async with serving_fake_kube() as kube:
        kube.add(make_pod(name="pod-1", namespace=NS, labels={"app": "llama"}, pod_ip="10.0.0.1"))
        sink = _RecordingSink()
        discovery = _llama_discovery(kube, retry_delay_s=30.0)
        with caplog.at_level(logging.INFO, logger="igw.gateway.discovery"):
            await discovery.start(sink)
            try:
                await wait_for(lambda: sink.keys.get("llama") == ["10.0.0.1:8000"], what="the first pod")
                await wait_for(lambda: len(kube.open_watches()) == 2, what="both watches open")
                kube.gone_open_watches()
                await wait_for(lambda: kube.gone_sent == 2, what="both watches ended with 410")
                kube.add(make_pod(name="pod-2", namespace=NS, labels={"app": "llama"}, pod_ip="10.0.0.2"))
                await wait_for(
                    lambda: sink.keys.get("llama") == ["10.0.0.1:8000", "10.0.0.2:8000"],
                    within=WATCH_WITHIN_S,
                    what="the pod added after the 410",
                )
                await wait_for(lambda: len(kube.open_watches()) == 2, what="both watches open again")
            finally:
                await discovery.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == []
    expired = [r.getMessage() for r in caplog.records if "resourceVersion expired" in r.getMessage()]
    assert sorted(m.split(":")[0] for m in expired) == ["watch configmaps/bbr-managed", "watch pods/llama"]
