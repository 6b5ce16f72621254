"""The fake Kubernetes API server, exercised through the real ``kubernetes`` client."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import kubernetes
import pytest
import yaml

from igw.config.crd import CRD_PATH
from tests.fakes.kube_api import (
    FakeKubeApiServer,
    make_pod,
    running_fake_kube,
    unreachable_url,
)

ROOT = Path(__file__).resolve().parents[2]


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
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [
                {"name": "main", "modelName": "m", "modelSelector": {"matchLabels": {"app": "m"}}}
            ],
        },
    }
    # As on a real API server, the kind is served only once its CRD is installed.
    with pytest.raises(kubernetes.client.ApiException) as missing:
        custom.create_namespaced_custom_object(group, version, "ml", "inferencegatewayconfigs", igwc)
    assert missing.value.status == 404
    kube.add(yaml.safe_load((ROOT / CRD_PATH).read_text()))
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


def test_an_open_watch_can_be_ended_mid_stream_with_410(kube: FakeKubeApiServer) -> None:
    """:meth:`FakeKubeApiServer.gone_open_watches`: the events so far, then an ``ERROR`` event with a
    410 ``Expired`` Status, which the real client (``timeoutSeconds`` set) raises."""
    api = kubernetes.client.CoreV1Api(kube.api_client())
    kube.add(make_pod(name="p", namespace="ns"))
    seen: list[str] = []

    def expire_when_open() -> None:
        deadline = time.monotonic() + 5
        while not kube.open_watches() and time.monotonic() < deadline:
            time.sleep(0.01)
        kube.add(make_pod(name="q", namespace="ns"))
        kube.gone_open_watches()

    def watch_all() -> None:
        for event in _watch().stream(api.list_namespaced_pod, "ns", timeout_seconds=5):
            seen.append(event["object"].metadata.name)

    timer = threading.Timer(0.05, expire_when_open)
    timer.start()
    with pytest.raises(kubernetes.client.ApiException) as err:
        watch_all()
    timer.join()
    assert err.value.status == 410
    assert "Expired" in str(err.value.reason)
    assert seen[0] == "p"
    assert kube.gone_sent == 1
    # The client raises on the ERROR event; the server's handler ends its stream right after, on
    # its own thread: asserting at once raced it (failed at random).
    deadline = time.monotonic() + 5
    while kube.open_watches() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kube.open_watches() == []


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


def _config_map(
    name: str, data: dict[str, str] | None = None, *, resource_version: str | None = None
) -> kubernetes.client.V1ConfigMap:
    meta = kubernetes.client.V1ObjectMeta(name=name, resource_version=resource_version)
    return kubernetes.client.V1ConfigMap(metadata=meta, data=data)


def _refusal(call: Callable[[], object]) -> tuple[int, str]:
    """The HTTP status and the Status message of the API error ``call`` raises."""
    with pytest.raises(kubernetes.client.ApiException) as refused:
        call()
    return int(refused.value.status or 0), str(json.loads(str(refused.value.body))["message"])


def test_a_dry_run_is_validated_and_admitted_but_stores_nothing(kube: FakeKubeApiServer) -> None:
    """``?dryRun=All`` runs defaulting, validation and admission and answers the object as it would be
    stored; the store, its resourceVersion and the watch history are untouched."""
    reviewed = kube.add_validating_webhook(
        "policy.example.com",
        ["configmaps"],
        lambda _op, obj, _old: "no 'forbidden' key" if "forbidden" in (obj.get("data") or {}) else None,
    )
    api = kubernetes.client.CoreV1Api(kube.api_client())
    apps = kubernetes.client.AppsV1Api(kube.api_client())
    stored = api.create_namespaced_config_map("ns", _config_map("cm", {"k": "v"}))
    assert stored.metadata is not None
    version = kube.store.resource_version
    history = kube.store.events_after(0)

    replaced = api.replace_namespaced_config_map("cm", "ns", _config_map("cm", {"k": "dry"}), dry_run="All")
    assert replaced.data == {"k": "dry"}
    assert replaced.metadata is not None
    assert replaced.metadata.resource_version == stored.metadata.resource_version
    patched = api.patch_namespaced_config_map("cm", "ns", {"data": {"k2": "v2"}}, dry_run="All")
    assert patched.data == {"k": "v", "k2": "v2"}
    created = api.create_namespaced_config_map("ns", _config_map("new", {}), dry_run="All")
    assert created.metadata is not None
    assert created.metadata.uid
    assert not created.metadata.resource_version
    labels = {"app": "d"}
    deployment = kubernetes.client.V1Deployment(
        metadata=kubernetes.client.V1ObjectMeta(name="d"),
        spec=kubernetes.client.V1DeploymentSpec(
            selector=kubernetes.client.V1LabelSelector(match_labels=labels),
            template=kubernetes.client.V1PodTemplateSpec(
                metadata=kubernetes.client.V1ObjectMeta(labels=labels),
                spec=kubernetes.client.V1PodSpec(
                    containers=[kubernetes.client.V1Container(name="c", image="x")]
                ),
            ),
        ),
    )
    defaulted = apps.create_namespaced_deployment("ns", deployment, dry_run="All")
    assert defaulted.spec is not None
    assert defaulted.spec.replicas == 1
    api.delete_namespaced_config_map("cm", "ns", dry_run="All")

    assert kube.store.resource_version == version
    assert kube.store.events_after(0) == history
    assert api.read_namespaced_config_map("cm", "ns").data == {"k": "v"}
    assert _refusal(lambda: api.read_namespaced_config_map("new", "ns"))[0] == 404
    assert _refusal(lambda: apps.read_namespaced_deployment("d", "ns"))[0] == 404
    assert [(op, name, dry) for op, name, dry in reviewed if dry] == [
        ("UPDATE", "cm", True),
        ("UPDATE", "cm", True),
        ("CREATE", "new", True),
    ]

    # What a write would be refused for, its dry run is refused for too: validation, conflicts, webhooks.
    answers = {
        "invalid name": _refusal(
            lambda: api.create_namespaced_config_map("ns", _config_map("Bad_Name"), dry_run="All")
        ),
        "exists": _refusal(lambda: api.create_namespaced_config_map("ns", _config_map("cm"), dry_run="All")),
        "stale": _refusal(
            lambda: api.replace_namespaced_config_map(
                "cm", "ns", _config_map("cm", resource_version="12345"), dry_run="All"
            )
        ),
        "webhook": _refusal(
            lambda: api.patch_namespaced_config_map("cm", "ns", {"data": {"forbidden": "x"}}, dry_run="All")
        ),
        "bad value": _refusal(
            lambda: api.create_namespaced_config_map("ns", _config_map("x"), dry_run="Yes")
        ),
    }
    assert {what: code for what, (code, _) in answers.items()} == {
        "invalid name": 422,
        "exists": 409,
        "stale": 409,
        "webhook": 400,
        "bad value": 422,
    }
    assert answers["webhook"][1] == (
        "admission webhook \"policy.example.com\" denied the request: no 'forbidden' key"
    )
    assert answers["bad value"][1] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Yes"}: '
        'supported values: "All"'
    )
    assert kube.store.resource_version == version


def test_a_validating_webhook_denies_real_writes_as_the_api_server_answers(kube: FakeKubeApiServer) -> None:
    """The webhook sees creates and updates of the kinds it matches; a denial is the webhook's code and
    ``admission webhook "<name>" denied the request: <message>``, and nothing is written."""

    def no_load_balancer(_op: str, obj: Mapping[str, Any], _old: Mapping[str, Any] | None) -> str | None:
        return "no LoadBalancer" if (obj.get("spec") or {}).get("type") == "LoadBalancer" else None

    reviewed = kube.add_validating_webhook("gatekeeper", ["services"], no_load_balancer, code=403)
    api = kubernetes.client.CoreV1Api(kube.api_client())
    service = kubernetes.client.V1Service(
        metadata=kubernetes.client.V1ObjectMeta(name="svc"),
        spec=kubernetes.client.V1ServiceSpec(type="ClusterIP"),
    )
    api.create_namespaced_service("ns", service)
    version = kube.store.resource_version
    denied = _refusal(lambda: api.patch_namespaced_service("svc", "ns", {"spec": {"type": "LoadBalancer"}}))
    assert denied == (403, 'admission webhook "gatekeeper" denied the request: no LoadBalancer')
    assert kube.store.resource_version == version
    served = api.read_namespaced_service("svc", "ns")
    assert served.spec is not None
    assert served.spec.type == "ClusterIP"
    api.create_namespaced_config_map("ns", _config_map("cm"))  # a kind it does not match
    assert reviewed == [("CREATE", "svc", False), ("UPDATE", "svc", False)]


def test_a_server_answering_html_is_named_not_a_kubernetes_api() -> None:
    """A kubeconfig whose server is a proxy or login page answering 200 HTML: the JSON decoder's error
    ended the whole scan (``cannot read the source: JSONDecodeError``, before session s50). Every kind
    is not-evaluated, saying what answered, without quoting the body."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from igw.checks.sources.live_kube import live_kube_view

    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>secret-looking login page</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        configuration = kubernetes.client.Configuration()
        configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
        view = live_kube_view(kubernetes.client.ApiClient(configuration), source="t")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    messages = {getattr(value, "reason", None) for value in view.objects.values()}
    assert messages == {
        "not a Kubernetes API: listing Pod, the server answered "
        "HTTP 200 with Content-Type 'text/html', not a Kubernetes list (is the kubeconfig's server a "
        "proxy or a login page?)"
    }
