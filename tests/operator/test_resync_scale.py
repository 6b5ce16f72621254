"""A resync over many InferenceGatewayConfigs: the lists every pass needs are read once per namespace."""

from __future__ import annotations

import asyncio
from typing import Any

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.handlers import Resync
from igw.operator.kube import Kube
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc, update_spec

COLLECTION = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/{}/inferencegatewayconfigs"


def _accepted(cluster: FakeKubeApiServer, name: str, namespace: str = "inference") -> tuple[str, str]:
    found = condition(find(cluster, "InferenceGatewayConfig", namespace, name), "Accepted")
    return found["status"], found["reason"]


def _config_lists(cluster: FakeKubeApiServer, since: int) -> dict[str, int]:
    """How many times each namespace's InferenceGatewayConfigs were listed (watches aside)."""
    counts: dict[str, int] = {}
    for method, path, query in cluster.requests[since:]:
        for namespace in ("inference", "other"):
            if method == "GET" and path == COLLECTION.format(namespace) and "watch" not in query:
                counts[namespace] = counts.get(namespace, 0) + 1
    return counts


def test_a_resync_lists_each_namespace_once_not_once_per_config(cluster: FakeKubeApiServer) -> None:
    """Each pass listed its namespace's configs (admission's neighbours): n passes of n objects, a
    resync O(n^2) in the configs of a namespace (200 in one namespace: about 12 s of operator CPU per
    resync, which runs every 5 s). Admission still sees every neighbour: the newer of two configs
    serving one model is refused."""
    resync = Resync(Reconciler(Kube(cluster.api_client()), DataPlaneSettings()), interval_s=60)
    objects = [igwc(f"c{i}", model=f"m{i}", app=f"a{i}") for i in range(6)]
    objects += [igwc(f"o{i}", namespace="other", model=f"m{i}", app=f"a{i}") for i in range(3)]
    objects.append(igwc("z-late", model="m0", app="a0"))  # newer than c0, same model
    for obj in objects:
        cluster.add(obj)
        resync.saw("ADDED", obj)
    since = len(cluster.requests)
    asyncio.run(resync.pass_all())
    assert _config_lists(cluster, since) == {"inference": 1, "other": 1}
    assert _accepted(cluster, "c5") == ("True", "Valid")
    assert _accepted(cluster, "z-late") == ("False", "ModelNameConflict")
    assert _accepted(cluster, "o0", "other") == ("True", "Valid")


def test_a_resync_listing_never_undoes_a_newer_pass(cluster: FakeKubeApiServer) -> None:
    """A listing taken before an object's own (event) pass is older than what that pass read: the
    resync pass lists again rather than going back to it (here: re-refusing a config whose older
    neighbour gave the model up, and so flipping its data plane back and forth)."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("a", model="llama", app="llama"))
    cluster.add(igwc("b", model="llama", app="llama"))

    async def scenario() -> None:
        await reconciler.reconcile("inference", "b")
        assert _accepted(cluster, "b") == ("False", "ModelNameConflict")
        listed = await reconciler.listing("inference")  # "a" still serves llama here
        update_spec(cluster, "inference", "a", lambda spec: spec["schedulers"][0].update(modelName="mist"))
        await reconciler.reconcile("inference", "b")  # the event pass: admitted now
        assert _accepted(cluster, "b") == ("True", "Valid")
        await reconciler.reconcile("inference", "b", listed=listed)

    asyncio.run(scenario())
    assert _accepted(cluster, "b") == ("True", "Valid")


def test_a_resync_skips_an_object_whose_pass_is_still_running(cluster: FakeKubeApiServer) -> None:
    """A pass of ``a`` is still running (its read of the object held) when the resync comes: the
    resync passes ``b`` and queues nothing behind ``a``, whose running pass reads it anew. With a
    60 s resync, a cold start of 200 configs queued 200 more passes behind the initial ones."""
    kube = Kube(cluster.api_client())
    reconciler = Reconciler(kube, DataPlaneSettings())
    resync = Resync(reconciler, interval_s=60)
    for obj in (igwc("a", model="m0", app="a0"), igwc("b", model="m1", app="a1")):
        cluster.add(obj)
        resync.saw("ADDED", obj)
    read = kube.get
    reads: list[str] = []
    release, a_read, b_read = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def held_get(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "InferenceGatewayConfig":
            reads.append(name)
            (a_read if name == "a" else b_read).set()
            if name == "a" and reads.count("a") == 1:
                await release.wait()
        return await read(api_version, kind, namespace, name)

    kube.get = held_get  # type: ignore[method-assign]

    async def scenario() -> None:
        first = asyncio.create_task(reconciler.reconcile("inference", "a"))
        await a_read.wait()
        resync_done = asyncio.create_task(resync.pass_all())
        await b_read.wait()  # the resync's pass of b began
        release.set()
        await asyncio.gather(first, resync_done)

    asyncio.run(scenario())
    assert reads.count("a") == 1, reads
    assert reads.count("b") == 1, reads
    assert _accepted(cluster, "a") == ("True", "Valid")
    assert _accepted(cluster, "b") == ("True", "Valid")
