"""The fake Kubernetes API server, exercised through the real ``kubernetes`` client."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import kubernetes
import pytest

from tests.fakes.kube_api import (
    FakeKubeApiServer,
    make_pod,
    running_fake_kube,
    unreachable_url,
)


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def _watch() -> Any:
    """A ``kubernetes.watch.Watch``: the library leaves that module unannotated."""
    return kubernetes.watch.Watch()  # type: ignore[no-untyped-call]


def _names(items: Any) -> list[str]:
    return sorted(item.metadata.name for item in items)


def test_label_selectors_are_honoured(kube: FakeKubeApiServer) -> None:
    kube.add(make_pod(name="a", namespace="ns1", labels={"app": "llama", "tier": "gpu"}))
    kube.add(make_pod(name="b", namespace="ns1", labels={"app": "mistral"}))
    kube.add(make_pod(name="c", namespace="ns2", labels={"app": "llama"}))
    api = kubernetes.client.CoreV1Api(kube.api_client())
    assert _names(api.list_namespaced_pod("ns1", label_selector="app=llama").items) == ["a"]
    assert _names(api.list_pod_for_all_namespaces(label_selector="app==llama").items) == ["a", "c"]
    assert _names(api.list_pod_for_all_namespaces(label_selector="app in (llama,mistral),tier").items) == [
        "a"
    ]
    assert _names(api.list_pod_for_all_namespaces(label_selector="app notin (llama)").items) == ["b"]
    assert _names(api.list_pod_for_all_namespaces(label_selector="!tier").items) == ["b", "c"]
    assert _names(api.list_pod_for_all_namespaces(label_selector="app!=llama").items) == ["b"]
    assert _names(api.list_pod_for_all_namespaces(field_selector="metadata.namespace=ns2").items) == ["c"]
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.list_pod_for_all_namespaces(label_selector="app in (llama")
    assert err.value.status == 400


def test_crud_conflicts_and_patch(kube: FakeKubeApiServer) -> None:
    api = kubernetes.client.CoreV1Api(kube.api_client())
    body = kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name="cm", namespace="ns"), data={"k": "v"}
    )
    created = api.create_namespaced_config_map("ns", body)
    assert created.metadata is not None
    assert created.metadata.resource_version
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.create_namespaced_config_map("ns", body)
    assert err.value.status == 409
    patched = api.patch_namespaced_config_map("cm", "ns", {"data": {"k2": "v2"}})
    assert patched.data == {"k": "v", "k2": "v2"}
    stale = kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(
            name="cm", resource_version=created.metadata.resource_version
        ),
        data={},
    )
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.replace_namespaced_config_map("cm", "ns", stale)
    assert err.value.status == 409
    api.delete_namespaced_config_map("cm", "ns")
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.read_namespaced_config_map("cm", "ns")
    assert err.value.status == 404


def test_custom_objects_and_crd_registration(kube: FakeKubeApiServer) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    group, version = "inference.sagemaker.aws.amazon.com", "v1alpha1"
    igwc = {
        "apiVersion": f"{group}/{version}",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "gw", "namespace": "ml"},
        "spec": {"bbr": {"enabled": True}},
    }
    custom.create_namespaced_custom_object(group, version, "ml", "inferencegatewayconfigs", igwc)
    # The generated client annotates custom-object bodies as ``object``; they are decoded JSON objects.
    listed = cast(
        dict[str, Any], custom.list_cluster_custom_object(group, version, "inferencegatewayconfigs")
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["gw"]
    kube.add(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                # a real API server refuses a CRD without exactly one storage version and a schema
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object"}},
                    }
                ],
            },
        }
    )
    custom.create_namespaced_custom_object(
        "example.com",
        "v1",
        "ns",
        "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
    )
    widget = cast(
        dict[str, Any], custom.get_namespaced_custom_object("example.com", "v1", "ns", "widgets", "w")
    )
    assert widget["kind"] == "Widget"


def test_watch_streams_events_with_resource_versions(kube: FakeKubeApiServer) -> None:
    api = kubernetes.client.CoreV1Api(kube.api_client())
    kube.add(make_pod(name="existing", namespace="ns", labels={"app": "m"}))
    seen: list[tuple[str, str, str]] = []

    def mutate() -> None:
        kube.add(make_pod(name="new", namespace="ns", labels={"app": "m"}))
        kube.add(make_pod(name="other", namespace="ns", labels={"app": "x"}))
        api.patch_namespaced_pod("new", "ns", {"metadata": {"annotations": {"a": "b"}}})
        api.delete_namespaced_pod("new", "ns")

    watcher = _watch()
    timer = threading.Timer(0.2, mutate)
    timer.start()
    for event in watcher.stream(api.list_namespaced_pod, "ns", label_selector="app=m", timeout_seconds=5):
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
        if event["type"] == "DELETED":
            watcher.stop()
    timer.join()
    assert [(t, n) for t, n, _ in seen] == [
        ("ADDED", "existing"),
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
    ]
    versions = [int(rv) for _, _, rv in seen]
    assert versions == sorted(versions)


def test_watch_from_compacted_version_gets_410(kube: FakeKubeApiServer) -> None:
    api = kubernetes.client.CoreV1Api(kube.api_client())
    kube.add(make_pod(name="p", namespace="ns"))
    kube.add(make_pod(name="q", namespace="ns"))
    kube.store.compact()
    with pytest.raises(kubernetes.client.ApiException) as err:
        for _ in _watch().stream(api.list_namespaced_pod, "ns", resource_version="1", timeout_seconds=2):
            pass
    assert err.value.status == 410


def test_forbidden_and_unreachable(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    api = kubernetes.client.CoreV1Api(kube.api_client())
    kube.forbid("pods")
    with pytest.raises(kubernetes.client.ApiException) as err:
        api.list_pod_for_all_namespaces()
    assert err.value.status == 403
    assert err.value.body is not None
    assert json.loads(err.value.body)["message"].startswith("pods is forbidden")
    assert "cannot list resource" in json.loads(err.value.body)["message"]
    api.list_namespaced_config_map("ns")  # other resources unaffected
    kube.allow_all()
    assert api.list_pod_for_all_namespaces().items == []
    configuration = kubernetes.client.Configuration()
    configuration.host = unreachable_url()
    configuration.retries = 0
    dead = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    with pytest.raises(Exception, match=r"(?i)connect|refused"):
        dead.list_pod_for_all_namespaces(_request_timeout=2)


def test_kubeconfig_and_token(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    kube.required_token = "s3cret"
    path = kube.write_kubeconfig(tmp_path / "config", namespace="ml")
    # kubernetes.config is unannotated in the library.
    client = kubernetes.config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    assert kubernetes.client.CoreV1Api(client).list_namespace().items == []
    anonymous = kubernetes.client.CoreV1Api(kube.api_client(token="wrong"))
    with pytest.raises(kubernetes.client.ApiException) as err:
        anonymous.list_namespace()
    assert err.value.status == 401
    assert kubernetes.client.VersionApi(client).get_code().git_version.startswith("v1.33")


async def test_async_usage_on_the_running_loop() -> None:
    async with FakeKubeApiServer() as kube:
        kube.add(make_pod(name="p", namespace="ns", labels={"app": "m"}))
        api = kubernetes.client.CoreV1Api(kube.api_client())
        pods = await asyncio.to_thread(api.list_pod_for_all_namespaces, label_selector="app=m")
        assert _names(pods.items) == ["p"]


def test_paging_with_limit_and_continue(kube: FakeKubeApiServer) -> None:
    for index in range(5):
        kube.add(make_pod(name=f"p{index}", namespace="ns"))
    api = kubernetes.client.CoreV1Api(kube.api_client())
    first = api.list_namespaced_pod("ns", limit=2)
    assert _names(first.items) == ["p0", "p1"]
    assert first.metadata is not None
    assert first.metadata.remaining_item_count == 3
    second = api.list_namespaced_pod("ns", limit=2, _continue=first.metadata._continue)
    assert second.metadata is not None
    third = api.list_namespaced_pod("ns", limit=2, _continue=second.metadata._continue)
    assert third.metadata is not None
    assert _names(second.items + third.items) == ["p2", "p3", "p4"]
    assert third.metadata._continue is None


def test_live_source_reads_every_page(kube: FakeKubeApiServer) -> None:
    from igw.checks.sources import live_kube

    for index in range(7):
        kube.add(make_pod(name=f"p{index}", namespace="ns"))
    original = live_kube.PAGE_SIZE
    live_kube.PAGE_SIZE = 3
    try:
        view = live_kube.live_kube_view(kube.api_client(), source="t")
    finally:
        live_kube.PAGE_SIZE = original
    pods = view.objects["Pod"]
    assert isinstance(pods, list)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"p{i}" for i in range(7)]
    assert all(p["kind"] == "Pod" for p in pods)
    pages = [q for m, path, q in kube.requests if path == "/api/v1/pods"]
    assert [q.get("limit") for q in pages] == ["3", "3", "3"]


def test_selector_watch_sees_objects_enter_and_leave(kube: FakeKubeApiServer) -> None:
    api = kubernetes.client.CoreV1Api(kube.api_client())
    kube.add(make_pod(name="p", namespace="ns", labels={"app": "other"}))
    seen: list[tuple[str, str]] = []

    def relabel() -> None:
        api.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"app": "m"}}})
        api.patch_namespaced_pod("p", "ns", {"metadata": {"annotations": {"x": "1"}}})
        api.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"app": "gone"}}})

    timer = threading.Timer(0.2, relabel)
    timer.start()
    watcher = _watch()
    for event in watcher.stream(api.list_namespaced_pod, "ns", label_selector="app=m", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.labels["app"]))
        if event["type"] == "DELETED":
            watcher.stop()
    timer.join()
    assert seen == [("ADDED", "m"), ("MODIFIED", "m"), ("DELETED", "gone")]
