"""One model, two configs, in a race: the operator's own record of what it admitted decides.

Driven through the reconciler directly: the race (a neighbour's ``status.models`` not yet written when
another config's pass admits) cannot be timed through kubectl, but a resync's namespace listing, taken
once for every pass of the resync, is read before a watch-triggered pass writes that status."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import yaml

from igw.operator.dataplane import CONFIG_KEY, DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import LAST_ADMITTED_ANNOTATION, Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc, update_spec


def _served_models(cluster: FakeKubeApiServer, name: str) -> list[str]:
    config_map = find(cluster, "ConfigMap", "inference", f"{name}-gateway-config")
    if config_map is None:
        return []
    spec = yaml.safe_load(config_map["data"][CONFIG_KEY])["spec"]
    return [str(s["modelName"]) for s in spec["schedulers"]]


def _take(model: str) -> Any:
    def edit(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = model
        spec["schedulers"][0]["modelSelector"] = {"matchLabels": {"app": model}}

    return edit


def test_an_edit_racing_a_new_configs_first_pass_does_not_serve_its_model_twice(
    cluster: FakeKubeApiServer,
) -> None:
    """``later`` is applied and admitted for mistral; before its ``status.models`` reaches the pass
    that admits ``chat`` (a resync's listing taken earlier), ``chat`` is edited to take mistral. By
    status alone neither served it, so the older object kept it: both data planes served mistral (and
    ``later``, refused at its next pass, kept serving it too). The operator's record of what it
    admitted refuses the edit."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(network_policy=False))

    async def scenario() -> None:
        cluster.add(igwc("chat", model="llama", app="llama"))
        assert await reconciler.reconcile("inference", "chat")
        cluster.add(igwc("later", model="mistral", app="mistral"))
        listed = await reconciler.listing("inference")  # the resync's lists: newer has no status yet
        assert await reconciler.reconcile("inference", "later")
        update_spec(cluster, "inference", "chat", _take("mistral"))
        assert await reconciler.reconcile("inference", "chat", listed=listed)
        for _ in range(2):  # later passes, with fresh lists
            for name in ("chat", "later"):
                assert await reconciler.reconcile("inference", name)

    asyncio.run(scenario())
    serving = [name for name in ("chat", "later") if "mistral" in _served_models(cluster, name)]
    assert serving == ["later"]
    assert _served_models(cluster, "chat") == ["llama"]
    older = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    refused = condition(older, "Accepted")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")
    assert 'is already served by InferenceGatewayConfig "later"' in refused["message"]
    assert (
        condition(find(cluster, "InferenceGatewayConfig", "inference", "later"), "Accepted")["status"]
        == "True"
    )


def test_two_configs_naming_one_model_in_concurrent_passes_are_not_both_admitted(
    cluster: FakeKubeApiServer,
) -> None:
    """Two new configs naming one model, their first passes running together (kopf runs each object's
    handler concurrently): each pass's list may predate the other object, so neither saw the other and
    both were admitted. The first pass to admit the model records it; the other is refused."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(network_policy=False))

    async def scenario() -> None:
        listed = await reconciler.listing("inference")  # taken before either exists
        cluster.add(igwc("second", model="llama"))
        cluster.add(igwc("first", model="llama"))
        await asyncio.gather(
            reconciler.reconcile("inference", "second", listed=listed),
            reconciler.reconcile("inference", "first", listed=listed),
        )
        for _ in range(2):
            for name in ("first", "second"):
                assert await reconciler.reconcile("inference", name)

    asyncio.run(scenario())
    serving = [name for name in ("first", "second") if "llama" in _served_models(cluster, name)]
    assert len(serving) == 1, serving
    accepted = [
        name
        for name in ("first", "second")
        if condition(find(cluster, "InferenceGatewayConfig", "inference", name), "Accepted")["status"]
        == "True"
    ]
    assert accepted == serving


def test_a_refused_configs_data_plane_is_restored_after_a_restart_with_its_config_map_gone(
    cluster: FakeKubeApiServer,
) -> None:
    """A refused config keeps serving its last admitted spec, put back from its served ConfigMap or
    the operator's memory. After an operator restart with that ConfigMap deleted there was neither:
    nothing was restored. The operator keeps that spec in an annotation on the config itself."""
    settings = DataPlaneSettings(network_policy=False)
    limit_below_request = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}

    async def before_restart() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("chat"))
        assert await reconciler.reconcile("inference", "chat")
        update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=limit_below_request))
        assert await reconciler.reconcile("inference", "chat")

    asyncio.run(before_restart())
    admitted = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert admitted is not None
    for kind_name, api_version, name in (
        ("ConfigMap", "v1", "chat-gateway-config"),
        ("Deployment", "apps/v1", "chat-gateway"),
    ):
        cluster.store.delete(
            cluster.store.kind_for(api_version=api_version, kind=kind_name), "inference", name
        )

    async def after_restart() -> None:
        assert await Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat")

    asyncio.run(after_restart())
    restored = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert restored is not None
    assert restored["data"] == admitted["data"]
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    resources = deployment["spec"]["template"]["spec"]["containers"][0].get("resources") or {}
    assert resources.get("limits", {}).get("cpu") != "1", "the refused spec must not be applied"
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert condition(chat, "Accepted")["status"] == "False"
    assert condition(chat, "GatewayProgrammed")["status"] == "True"


def test_an_annotation_edited_into_an_invalid_spec_is_not_restored(cluster: FakeKubeApiServer) -> None:
    """The annotation is editable by whoever may edit the config, as the served ConfigMap is: what it
    holds is checked as a spec before anything is applied from it (here the refused spec itself,
    copied into it, which would otherwise be applied)."""
    settings = DataPlaneSettings(network_policy=False)

    async def scenario() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("chat"))
        assert await reconciler.reconcile("inference", "chat")
        kind = cluster.store.kind_for(
            api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
        )
        current = find(cluster, "InferenceGatewayConfig", "inference", "chat")
        assert current is not None
        assert current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION]
        current["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
        current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION] = json.dumps(current["spec"])
        cluster.store.replace(kind, "inference", "chat", current)
        cluster.store.delete(
            cluster.store.kind_for(api_version="v1", kind="ConfigMap"), "inference", "chat-gateway-config"
        )
        assert await Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat")

    asyncio.run(scenario())
    assert find(cluster, "ConfigMap", "inference", "chat-gateway-config") is None
