"""What the fake API server does for the operator's clients: watches with bookmarks and 410, GC, status."""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, cast

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from tests.fakes.kube_api import (
    FakeKubeApiServer,
    forget_discovery_cache,
    make_pod,
    running_fake_kube,
    serving_fake_kube,
)
from tests.operator.harness import find, igwc, install_crd


@pytest.fixture
def kube() -> Any:
    with running_fake_kube() as server:
        install_crd(server)
        server.bookmark_interval_s = 0.05
        yield server


def _get(kube: FakeKubeApiServer, path: str, **query: str) -> bytes:
    url = f"{kube.url}{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body


def _watch_lines(kube: FakeKubeApiServer, path: str, **query: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _get(kube, path, **query).decode().splitlines() if line]


def test_watch_sends_bookmarks_when_asked(kube: FakeKubeApiServer) -> None:
    kube.add(igwc("chat"))
    rv = str(kube.store.resource_version)
    path = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/inferencegatewayconfigs"
    events = _watch_lines(
        kube, path, watch="true", allowWatchBookmarks="true", resourceVersion=rv, timeoutSeconds="1"
    )
    assert events
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"]["metadata"]["resourceVersion"] == rv
    quiet = _watch_lines(kube, path, watch="true", resourceVersion=rv, timeoutSeconds="1")
    assert quiet == []


def test_old_resource_version_gets_410_then_relist_works(kube: FakeKubeApiServer) -> None:
    kube.add(igwc("chat"))
    old = "1"
    kube.store.compact()
    path = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/inferencegatewayconfigs"
    [event] = _watch_lines(kube, path, watch="true", resourceVersion=old, timeoutSeconds="1")
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    # The generated client annotates custom-object bodies as ``object``; they are decoded JSON objects.
    listed = cast(
        dict[str, Any],
        custom.list_cluster_custom_object(
            "inference.sagemaker.aws.amazon.com", "v1alpha1", "inferencegatewayconfigs"
        ),
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["chat"]


def test_deleting_an_owner_collects_its_dependents_transitively(kube: FakeKubeApiServer) -> None:
    owner = kube.add(igwc("chat"))
    ref = {"apiVersion": "v1", "kind": "X", "name": "chat", "uid": owner["metadata"]["uid"]}
    child = kube.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "inference", "ownerReferences": [ref]},
            "spec": {},
        }
    )
    grandchild_ref = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "d",
        "uid": child["metadata"]["uid"],
    }
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "g", "namespace": "inference", "ownerReferences": [grandchild_ref]},
        }
    )
    kube.add(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "free", "namespace": "inference"}}
    )
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    custom.delete_namespaced_custom_object(
        "inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat"
    )
    assert find(kube, "Deployment", "inference", "d") is None
    assert find(kube, "ConfigMap", "inference", "g") is None
    assert find(kube, "ConfigMap", "inference", "free") is not None


@pytest.mark.parametrize("through", ["body", "query"])
def test_an_orphaning_delete_keeps_the_dependents_without_their_owner_reference(
    kube: FakeKubeApiServer, through: str
) -> None:
    """``propagationPolicy: Orphan`` (``kubectl delete --cascade=orphan`` sends it in the body): the
    dependents stay, their reference to the deleted owner removed and any other kept, as the garbage
    collector leaves them. The fake collected them regardless, so no test could see an orphan."""
    owner = kube.add(igwc("chat"))
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "0000-other"}
    ref = {
        "apiVersion": "v1",
        "kind": "X",
        "name": "chat",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    for name, refs in (("only", [ref]), ("shared", [ref, other])):
        meta = {"name": name, "namespace": "inference", "ownerReferences": refs}
        kube.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    args = ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat")
    if through == "body":
        custom.delete_namespaced_custom_object(*args, propagation_policy="Orphan")
    else:
        url = f"{kube.url}/apis/{args[0]}/{args[1]}/namespaces/{args[2]}/{args[3]}/{args[4]}"
        request = urllib.request.Request(f"{url}?propagationPolicy=Orphan", method="DELETE")
        urllib.request.urlopen(request, timeout=10).close()
    assert find(kube, "InferenceGatewayConfig", "inference", "chat") is None
    only, shared = (
        find(kube, "ConfigMap", "inference", "only"),
        find(kube, "ConfigMap", "inference", "shared"),
    )
    assert only is not None
    assert "ownerReferences" not in only["metadata"]
    assert shared is not None
    assert shared["metadata"]["ownerReferences"] == [other]


def test_main_resource_writes_keep_the_status_subresource(kube: FakeKubeApiServer) -> None:
    kube.add(igwc("chat"))
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    args = ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat")
    custom.patch_namespaced_custom_object_status(*args, {"status": {"models": "llama"}})
    # The generated client annotates custom-object bodies as ``object``; they are decoded JSON objects.
    updated = cast(
        dict[str, Any],
        custom.patch_namespaced_custom_object(
            *args, {"status": {"models": "forged"}, "metadata": {"labels": {"a": "b"}}}
        ),
    )
    assert updated["status"] == {"models": "llama"}
    assert updated["metadata"]["generation"] == 1
    spec_change = cast(
        dict[str, Any], custom.patch_namespaced_custom_object(*args, {"spec": {"bbr": {"enabled": False}}})
    )
    assert spec_change["metadata"]["generation"] == 2
    stale = dict(updated)
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(*args, stale)
    assert conflict.value.status == 409


def test_a_patch_never_overwrites_a_write_that_landed_after_its_read(
    kube: FakeKubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server applies a patch atomically (GuaranteedUpdate): a write landing between the
    patch's read and its write is kept and the patch applied on top, as when kopf annotates an
    object while a user changes its spec (a lost update there failed the lifecycle test in CI)."""
    kube.add(igwc("chat"))
    kind = kube.store.kind_for(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )
    real_get = kube.store.get
    interleaved: list[str] = []

    def get_then_someone_writes(*args: Any, **kwargs: Any) -> dict[str, Any]:
        read = real_get(*args, **kwargs)
        if not interleaved:
            newer = real_get(*args, **kwargs)
            newer["spec"]["schedulers"][0]["replicas"] = 3
            interleaved.append(
                kube.store.replace(kind, "inference", "chat", newer)["metadata"]["resourceVersion"]
            )
        return read

    monkeypatch.setattr(kube.store, "get", get_then_someone_writes)
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    args = ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat")
    patched = cast(
        dict[str, Any],
        custom.patch_namespaced_custom_object(
            *args, {"metadata": {"annotations": {"operator.igw.dev/x": "1"}}}
        ),
    )
    assert interleaved
    assert patched["spec"]["schedulers"][0]["replicas"] == 3
    assert patched["metadata"]["annotations"]["operator.igw.dev/x"] == "1"
    assert patched["metadata"]["generation"] == 2
    assert int(patched["metadata"]["resourceVersion"]) > int(interleaved[0])


def test_a_patch_naming_a_stale_resource_version_gets_409_and_changes_nothing(
    kube: FakeKubeApiServer,
) -> None:
    created = kube.add(igwc("chat"))
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    args = ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat")
    custom.patch_namespaced_custom_object(*args, {"metadata": {"labels": {"a": "1"}}})
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"a": "2"}}}
    with pytest.raises(ApiException) as conflict:
        custom.patch_namespaced_custom_object(*args, stale)
    assert conflict.value.status == 409
    assert (find(kube, "InferenceGatewayConfig", "inference", "chat") or {})["metadata"]["labels"] == {
        "a": "1"
    }
    current = (find(kube, "InferenceGatewayConfig", "inference", "chat") or {})["metadata"]["resourceVersion"]
    fresh = {"metadata": {"resourceVersion": current, "labels": {"a": "3"}}}
    patched = cast(dict[str, Any], custom.patch_namespaced_custom_object(*args, fresh))
    assert patched["metadata"]["labels"] == {"a": "3"}


def _send(
    kube: FakeKubeApiServer, method: str, path: str, body: Any, content_type: str
) -> tuple[int, dict[str, Any]]:
    """One raw request: its status code and JSON answer (an error's ``Status`` too)."""
    request = urllib.request.Request(
        f"{kube.url}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


IGWC_PATH = (
    "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/inference/inferencegatewayconfigs/chat"
)


def test_a_uid_in_a_write_is_a_precondition_only_where_the_api_server_makes_it_one(
    kube: FakeKubeApiServer,
) -> None:
    """Another object's ``metadata.uid`` in a write, as the API server answers it (sources:
    apiserver ``rest.defaultUpdatedObjectInfo.Preconditions``, ``rest.BeforeUpdate``, apiextensions
    ``statusStrategy.PrepareForUpdate``): a PUT (object or ``/status``) makes it a precondition, 409
    ``Precondition failed: UID in precondition``; a merge patch of the object fails validation (422,
    ``field is immutable``), as does one of a pod's ``/status``; a merge patch of a custom resource's
    ``/status`` drops it and writes anyway; a JSON patch ``test`` of ``/metadata/uid`` is refused 422
    when it differs. The fake copied the stored uid over whatever a write sent, so nothing failed."""
    uid = kube.add(igwc("chat"))["metadata"]["uid"]
    other = "00000000-0000-4000-8000-000000000000"
    current = find(kube, "InferenceGatewayConfig", "inference", "chat") or {}
    for path in (IGWC_PATH, f"{IGWC_PATH}/status"):
        replaced = {**current, "metadata": {**current["metadata"], "uid": other}, "status": {"models": "x"}}
        code, answer = _send(kube, "PUT", path, replaced, "application/json")
        assert code == 409, answer
        assert answer["reason"] == "Conflict"
        assert answer["message"] == (
            "Operation cannot be fulfilled on inferencegatewayconfigs.inference.sagemaker.aws.amazon.com "
            '"chat": '
            "StorageError: invalid object, Code: 4, Key: /registry/inference.sagemaker.aws.amazon.com/"
            "inferencegatewayconfigs/inference/chat, ResourceVersion: 0, AdditionalErrorMsg: Precondition "
            f"failed: UID in precondition: {other}, UID in object meta: {uid}"
        )
    merge = "application/merge-patch+json"
    code, answer = _send(kube, "PATCH", IGWC_PATH, {"metadata": {"uid": other, "labels": {"a": "b"}}}, merge)
    assert code == 422, answer
    assert answer["message"] == (
        'InferenceGatewayConfig.inference.sagemaker.aws.amazon.com "chat" is invalid: '
        f'metadata.uid: Invalid value: "{other}": field is immutable'
    )
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "{other}": field is immutable',
            "field": "metadata.uid",
        }
    ]
    code, answer = _send(
        kube, "PATCH", f"{IGWC_PATH}/status", {"metadata": {"uid": other}, "status": {"models": "y"}}, merge
    )
    assert code == 200, answer
    assert (answer["metadata"]["uid"], answer["status"]) == (uid, {"models": "y"})

    json_patch = "application/json-patch+json"
    test_other: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": other},
        {"op": "add", "path": "/status", "value": {"models": "z"}},
    ]
    code, answer = _send(kube, "PATCH", f"{IGWC_PATH}/status", test_other, json_patch)
    assert code == 422, answer
    test_same = [{**test_other[0], "value": uid}, test_other[1]]
    code, answer = _send(kube, "PATCH", f"{IGWC_PATH}/status", test_same, json_patch)
    assert code == 200, answer
    assert answer["status"] == {"models": "z"}
    assert (find(kube, "InferenceGatewayConfig", "inference", "chat") or {})["metadata"].get("labels") is None

    kube.add(make_pod(name="p", namespace="inference", labels={"app": "x"}))
    pod_uid = (find(kube, "Pod", "inference", "p") or {})["metadata"]["uid"]
    pod_status = "/api/v1/namespaces/inference/pods/p/status"
    code, answer = _send(
        kube, "PATCH", pod_status, {"metadata": {"uid": other}, "status": {"phase": "Failed"}}, merge
    )
    assert code == 422, answer
    code, answer = _send(
        kube, "PATCH", pod_status, {"metadata": {"uid": pod_uid}, "status": {"phase": "Failed"}}, merge
    )
    assert code == 200, answer


def test_discovery_lists_short_names_and_status_subresources(kube: FakeKubeApiServer) -> None:
    document = json.loads(_get(kube, "/apis/inference.sagemaker.aws.amazon.com/v1alpha1"))
    resources = {r["name"]: r for r in document["resources"]}
    assert resources["inferencegatewayconfigs"]["shortNames"] == ["igwc"]
    assert "inferencegatewayconfigs/status" in resources
    groups = json.loads(_get(kube, "/apis"))
    assert "coordination.k8s.io" in {g["name"] for g in groups["groups"]}


@pytest.mark.parametrize(
    ("kind_and_name", "labels", "needle"),
    [
        (("Service", "s" * 64), {}, "must be no more than 63 characters"),
        (("Service", "1st"), {}, "a DNS-1035 label must consist of"),
        (("ConfigMap", "Upper"), {}, "a lowercase RFC 1123 subdomain must consist of"),
        (("ConfigMap", "ok"), {"app": "v" * 64}, 'metadata.labels[app]: Invalid value: "' + "v" * 64),
        (("ConfigMap", "ok"), {"bad/key/x": "v"}, 'metadata.labels: Invalid value: "bad/key/x"'),
    ],
)
def test_the_fake_refuses_names_and_labels_the_api_server_refuses(
    kube: FakeKubeApiServer, kind_and_name: tuple[str, str], labels: dict[str, str], needle: str
) -> None:
    """As a real cluster does: 422 Invalid with the field path, through the real client."""
    kind, name = kind_and_name
    core = kubernetes.client.CoreV1Api(kube.api_client())
    metadata = kubernetes.client.V1ObjectMeta(name=name, labels=labels)

    def create() -> object:
        if kind == "Service":
            return core.create_namespaced_service("inference", kubernetes.client.V1Service(metadata=metadata))
        return core.create_namespaced_config_map(
            "inference", kubernetes.client.V1ConfigMap(metadata=metadata)
        )

    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.status == 422
    assert needle in json.loads(refused.value.body or "{}")["message"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("schedulers[0].name", "main\n"),  # Python's $ matches before a final newline; Go's does not
        ("schedulers[0].modelSelector.matchLabels.app", "llama\n"),
    ],
)
def test_a_pattern_is_matched_as_go_matches_it(kube: FakeKubeApiServer, path: str, value: str) -> None:
    """The CRD's ``pattern`` s are Go regular expressions (RE2): before session s38 the fake matched
    them with Python's ``re`` and stored what a real API server refuses."""
    body = igwc("chat")
    node: Any = body["spec"]
    *parents, last = path.replace("[0]", ".0").split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(*_status_args()[:4], body)
    assert refused.value.status == 422
    assert f"spec.{path} in body should match" in json.loads(str(refused.value.body))["message"]
    assert find(kube, "InferenceGatewayConfig", "inference", "chat") is None


def test_a_generated_name_is_cut_as_the_api_server_cuts_it(kube: FakeKubeApiServer) -> None:
    """``generateName`` longer than 58 characters is cut to 58 before the 5 random ones, so an Event
    about a 253-character object (``generateName: <name>.``) is stored with a 63-character name."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    base = "team-a.prod." + "x" * 240 + "."
    involved = kubernetes.client.V1ObjectReference(kind="ConfigMap", name="x", namespace="inference")
    event = kubernetes.client.CoreV1Event(
        metadata=kubernetes.client.V1ObjectMeta(generate_name=base), involved_object=involved
    )
    created = core.create_namespaced_event("inference", event)
    name = str(created.metadata.name)
    assert len(name) == 63
    assert name.startswith(base[:58])


def test_annotations_over_256_kib_together_are_refused(kube: FakeKubeApiServer) -> None:
    """apimachinery's ``TotalAnnotationSizeLimitB``: keys and values of all annotations together."""
    core = kubernetes.client.CoreV1Api(kube.api_client())
    half = {"a": "x" * (128 * 1024), "b": "y" * (128 * 1024)}  # 2 bytes of keys over the limit

    def create(name: str, annotations: dict[str, str]) -> object:
        metadata = kubernetes.client.V1ObjectMeta(name=name, annotations=annotations)
        return core.create_namespaced_config_map(
            "inference", kubernetes.client.V1ConfigMap(metadata=metadata)
        )

    with pytest.raises(ApiException) as refused:
        create("big", half)
    assert refused.value.status == 422
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in str(refused.value.body)
    create("fits", {"a": "x" * (128 * 1024), "b": "y" * (128 * 1024 - 2)})


def _status_args() -> tuple[str, str, str, str, str]:
    return ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inference", "inferencegatewayconfigs", "chat")


def test_status_writes_are_pruned_to_the_crd_schema(kube: FakeKubeApiServer) -> None:
    """Undeclared status fields and undeclared nulls are dropped, as the real API server prunes them."""
    kube.add(igwc("chat"))
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    status = {"models": "llama", "invented": 1, "address": None, "tls": {"acmArn": "a", "extra": "x"}}
    updated = cast(
        dict[str, Any], custom.patch_namespaced_custom_object_status(*_status_args(), {"status": status})
    )
    assert updated["status"] == {"models": "llama", "tls": {"acmArn": "a"}}
    assert (find(kube, "InferenceGatewayConfig", "inference", "chat") or {})["status"] == updated["status"]


@pytest.mark.parametrize(
    ("status", "needle"),
    [
        (
            {"conditions": [{"type": "Ready", "status": "Maybe"}]},
            'status.conditions[0].status: Unsupported value: "Maybe"',
        ),
        (
            {"conditions": [{"type": "Ready", "status": "True", "message": "m" * 32769}]},
            "status.conditions[0].message: Too long: may not be more than 32768 characters",
        ),
        ({"conditions": [{"status": "True"}]}, "status.conditions[0].type: Required value"),
        (
            {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]},
            "status.conditions[1]: Duplicate value",
        ),
        (
            {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}]},
            "must be of type date-time",
        ),
        ({"readyEndpoints": -1}, "status.readyEndpoints: Invalid value: -1"),
        ({"readyEndpoints": "3"}, "status.readyEndpoints in body must be of type integer"),
        (
            {"schedulers": [{"name": "a", "rolloutState": "Sideways"}]},
            'status.schedulers[0].rolloutState: Unsupported value: "Sideways"',
        ),
    ],
)
def test_status_writes_the_crd_schema_refuses_get_422(
    kube: FakeKubeApiServer, status: dict[str, Any], needle: str
) -> None:
    kube.add(igwc("chat"))
    custom = kubernetes.client.CustomObjectsApi(kube.api_client())
    custom.patch_namespaced_custom_object_status(*_status_args(), {"status": {"models": "kept"}})
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object_status(*_status_args(), {"status": status})
    assert refused.value.status == 422
    assert needle in json.loads(str(refused.value.body))["message"]
    assert (find(kube, "InferenceGatewayConfig", "inference", "chat") or {})["status"] == {"models": "kept"}


def _discovery_cache(url: str) -> Path:
    """The file in which the kubernetes dynamic client caches what ``url`` serves."""
    return Path(tempfile.gettempdir(), f"osrcp-{hashlib.md5(url.encode()).hexdigest()}.json")


def test_a_stopped_fake_server_leaves_no_discovery_cache_in_the_temporary_folder() -> None:
    """The cache a client wrote of the fake's address goes when the fake stops (one file per port
    used was left in the temporary folder)."""
    from kubernetes.dynamic import DynamicClient

    with running_fake_kube() as kube:
        DynamicClient(kube.api_client())  # type: ignore[no-untyped-call]
        cache = _discovery_cache(kube.url)
        assert cache.exists()
    assert not cache.exists()


async def test_a_stopped_fake_server_on_the_loop_leaves_no_discovery_cache() -> None:
    from kubernetes.dynamic import DynamicClient

    async with serving_fake_kube() as kube:
        await asyncio.to_thread(DynamicClient, kube.api_client())
        cache = _discovery_cache(kube.url)
        assert cache.exists()
    assert not cache.exists()


def test_a_new_fake_server_leaves_no_discovery_cache_of_its_address_behind() -> None:
    """The dynamic client caches discovery per host and port in the temporary folder and reads it
    back without asking: a stale cache of an earlier fake on the same port (other kinds) made a
    ``/scale`` lookup fail with ``KeyError('scale')`` in a CI run. The fake removes the cache of its
    address when it starts, as a new API server would have none; the file it removes is the one the
    client writes (a change of the library's naming fails here)."""
    from kubernetes.dynamic import DynamicClient

    with running_fake_kube() as kube:
        stale = _discovery_cache(kube.url)
        assert not stale.exists()
        DynamicClient(kube.api_client())  # type: ignore[no-untyped-call]
        assert stale.exists()  # the client's cache of this address: the file the fake forgets
        forget_discovery_cache(kube.url)
        assert not stale.exists()
        client = DynamicClient(kube.api_client())  # type: ignore[no-untyped-call]
        deployments = client.resources.get(api_version="apps/v1", kind="Deployment")
        assert "scale" in deployments.subresources


def _message(exc: ApiException) -> str:
    return str(json.loads(exc.body or "{}")["message"])


def _role(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": list(rules)}


def test_owner_references_need_the_grants_the_owner_references_plugin_wants(kube: FakeKubeApiServer) -> None:
    """Under RBAC the fake answers as ``OwnerReferencesPermissionEnforcement``: a create naming an owner
    with ``blockOwnerDeletion: true`` needs ``update`` on the owner's ``finalizers``; a replace that
    changes the owner references needs ``delete`` on the object. Before, every such write passed, so a
    chart RBAC without the finalizers grant looked enough and failed on a cluster with the plugin."""
    owner = kube.add(igwc("chat"))
    ref = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "name": "chat",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    core: Any = kubernetes.client.CoreV1Api(kube.api_client())  # dict bodies, as the operator sends
    configmaps = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}
    finalizers = {
        "apiGroups": ["inference.sagemaker.aws.amazon.com"],
        "resources": ["inferencegatewayconfigs/finalizers"],
        "verbs": ["update"],
    }

    def body(name: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
        meta = {"name": name, "namespace": "inference", "ownerReferences": refs}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}

    kube.enforce_rbac([_role(configmaps)])
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map("inference", body("owned", [ref]))
    assert refused.value.status == 403
    assert "cannot set blockOwnerDeletion" in _message(refused.value)
    assert '"inferencegatewayconfigs/finalizers"' in _message(refused.value)
    core.create_namespaced_config_map("inference", body("plain", []))  # no owner: nothing more to grant
    core.create_namespaced_config_map("inference", body("loose", [{**ref, "blockOwnerDeletion": False}]))

    kube.enforce_rbac([_role(configmaps, finalizers)])
    core.create_namespaced_config_map("inference", body("owned", [ref]))
    core.replace_namespaced_config_map("owned", "inference", body("owned", [ref]))  # refs unchanged
    with pytest.raises(ApiException) as adopting:
        core.replace_namespaced_config_map("plain", "inference", body("plain", [ref]))
    assert adopting.value.status == 403
    assert "cannot set an ownerRef on a resource you can't delete" in _message(adopting.value)

    kube.enforce_rbac([_role({**configmaps, "verbs": ["get", "create", "update", "delete"]}, finalizers)])
    core.replace_namespaced_config_map("plain", "inference", body("plain", [ref]))
    kube.allow_all()
