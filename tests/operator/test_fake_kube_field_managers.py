"""The fake API server keeps ``managedFields`` and judges server-side apply as the API server does
(:mod:`tests.fakes.kube_field_managers`): the 409 a conflicting apply gets, ``force`` taking the
fields over, an apply that stops setting a field removing it, and every write filed under its
manager."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import igwc, install_crd
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def _send(
    kube: FakeKubeApiServer, method: str, path: str, body: Any, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    data = (yaml.safe_dump(body) if "yaml" in content_type else json.dumps(body)).encode()
    request = urllib.request.Request(f"{kube.url}{path}", data=data, method=method)
    request.add_header("Content-Type", content_type)
    request.add_header("User-Agent", "probe/1.0 (linux)")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def _apply(
    kube: FakeKubeApiServer, name: str, data: dict[str, str], query: str
) -> tuple[int, dict[str, Any]]:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    return _send(kube, "PATCH", f"{CONFIG_MAPS}/{name}?{query}", manifest, "application/apply-patch+yaml")


def _managers(obj: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def test_every_write_is_filed_under_its_manager_and_a_write_leaving_them_out_keeps_them(
    kube: FakeKubeApiServer,
) -> None:
    """A create or update names its manager (``fieldManager``, else the User-Agent's first segment)
    and owns the fields it changed; a PUT that sends no ``managedFields`` keeps the stored ones; a
    write changing nothing stores nothing."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    code, created = _send(kube, "POST", CONFIG_MAPS, body)
    assert code == 201
    assert _managers(created) == {("probe", "Update"): {"f:data": {"f:a": {}}}}
    code, patched = _send(
        kube,
        "PATCH",
        f"{CONFIG_MAPS}/c?fieldManager=editor",
        {"data": {"b": "2"}},
        "application/merge-patch+json",
    )
    assert _managers(patched) == {
        ("probe", "Update"): {"f:data": {"f:a": {}}},
        ("editor", "Update"): {"f:data": {"f:b": {}}},
    }
    code, replaced = _send(kube, "PUT", f"{CONFIG_MAPS}/c", {**body, "data": {"a": "1", "b": "2"}})
    assert code == 200
    assert replaced["metadata"]["managedFields"] == patched["metadata"]["managedFields"]
    assert replaced["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


def test_an_apply_over_another_managers_field_is_refused_409_until_forced(kube: FakeKubeApiServer) -> None:
    """An apply setting a field another manager owns to another value is refused 409 ``Conflict``
    naming the manager and field (``details.causes``: one ``FieldManagerConflict`` each), nothing
    written; the same value is shared without conflict; ``force=true`` takes the field over."""
    assert _apply(kube, "c", {"a": "1", "b": "2"}, "fieldManager=ops")[0] == 201
    _send(
        kube,
        "PATCH",
        f"{CONFIG_MAPS}/c?fieldManager=kubectl-edit",
        {"data": {"a": "9", "b": "8"}},
        "application/merge-patch+json",
    )
    code, refused = _apply(kube, "c", {"a": "1", "b": "2"}, "fieldManager=ops")
    assert (code, refused["reason"]) == (409, "Conflict")
    assert refused["message"] == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-edit" using v1:\n- .data.a\n- .data.b'
    )
    assert refused["details"]["causes"] == [
        {
            "type": "FieldManagerConflict",
            "message": 'conflict with "kubectl-edit" using v1',
            "field": ".data.a",
        },
        {
            "type": "FieldManagerConflict",
            "message": 'conflict with "kubectl-edit" using v1',
            "field": ".data.b",
        },
    ]
    code, refused = _apply(kube, "c", {"a": "1", "b": "8"}, "fieldManager=ops")
    assert (
        refused["message"] == 'Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.a'
    )
    assert _send(kube, "GET", f"{CONFIG_MAPS}/c", None)[1]["data"] == {"a": "9", "b": "8"}
    code, forced = _apply(kube, "c", {"a": "1", "b": "8"}, "fieldManager=ops&force=true")
    assert (code, forced["data"]) == (200, {"a": "1", "b": "8"})
    assert _managers(forced) == {
        ("ops", "Apply"): {"f:data": {"f:a": {}, "f:b": {}}},
        ("kubectl-edit", "Update"): {"f:data": {"f:b": {}}},
    }


def test_an_apply_that_stops_setting_a_field_removes_it_unless_another_manager_owns_it(
    kube: FakeKubeApiServer,
) -> None:
    """The fake merged an apply: a field the manifest dropped stayed on the object."""
    _apply(kube, "c", {"a": "1", "b": "2", "c": "3"}, "fieldManager=ops")
    _apply(kube, "c", {"c": "3"}, "fieldManager=other")
    code, applied = _apply(kube, "c", {"a": "1"}, "fieldManager=ops")
    assert (code, applied["data"]) == (200, {"a": "1", "c": "3"})
    assert _managers(applied) == {
        ("ops", "Apply"): {"f:data": {"f:a": {}}},
        ("other", "Apply"): {"f:data": {"f:c": {}}},
    }


def test_a_keyed_list_item_is_owned_field_by_field(kube: FakeKubeApiServer) -> None:
    """A Deployment's containers are a list keyed by name: a conflict names the item's field."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments/d"
    assert (
        _send(kube, "PATCH", f"{path}?fieldManager=ops", deployment, "application/apply-patch+yaml")[0] == 201
    )
    image = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}}
    _send(kube, "PATCH", f"{path}?fieldManager=kubectl-set", image, "application/strategic-merge-patch+json")
    code, refused = _send(
        kube, "PATCH", f"{path}?fieldManager=ops", deployment, "application/apply-patch+yaml"
    )
    assert (code, refused["message"]) == (
        409,
        'Apply failed with 1 conflict: conflict with "kubectl-set" using apps/v1: '
        '.spec.template.spec.containers[name="c"].image',
    )


@needs_kubectl
def test_kubectl_apply_server_side_meets_the_conflict_and_force_conflicts_resolves_it(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\ndata: {a: '1'}\n"
    )
    assert run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(manifest)).returncode == 0
    assert run_kubectl(kubeconfig, "patch", "cm", "c", "-p", '{"data":{"a":"9"}}').returncode == 0
    refused = run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(manifest))
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        'error: Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: .data.a\n'
    )
    forced = run_kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    assert forced.returncode == 0
    got = json.loads(run_kubectl(kubeconfig, "get", "cm", "c", "-o", "json", "--show-managed-fields").stdout)
    assert got["data"] == {"a": "1"}
    assert _managers(got) == {("kubectl", "Apply"): {"f:data": {"f:a": {}}}}


def _deployment_manifest(replicas: int | None = None) -> str:
    spec = {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "x:1"}]},
        },
    }
    if replicas is not None:
        spec = {"replicas": replicas}
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
    }
    return yaml.safe_dump({**manifest, "spec": spec})


@needs_kubectl
def test_a_field_the_api_server_defaulted_is_no_appliers_and_another_may_apply_it(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A Deployment applied without ``spec.replicas`` gets 1 from defaulting, owned by no one: an
    HPA-like manager applying ``replicas: 3`` succeeds and keeps it when the first re-applies. The
    fake made the applier own the defaulted field, so the second apply was refused 409
    (``conflict with "ops": .spec.replicas``)."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "d.yaml").write_text(_deployment_manifest())
    (tmp_path / "scale.yaml").write_text(_deployment_manifest(replicas=3))
    apply = ("apply", "--server-side", "-f")
    assert run_kubectl(kubeconfig, *apply, str(tmp_path / "d.yaml"), "--field-manager=ops").returncode == 0
    got = json.loads(
        run_kubectl(kubeconfig, "get", "deploy", "d", "-o", "json", "--show-managed-fields").stdout
    )
    assert got["spec"]["replicas"] == 1
    assert "f:replicas" not in _managers(got)[("ops", "Apply")]["f:spec"]
    scaled = run_kubectl(kubeconfig, *apply, str(tmp_path / "scale.yaml"), "--field-manager=hpa")
    assert (scaled.returncode, scaled.stderr) == (0, "")
    assert run_kubectl(kubeconfig, *apply, str(tmp_path / "d.yaml"), "--field-manager=ops").returncode == 0
    got = json.loads(
        run_kubectl(kubeconfig, "get", "deploy", "d", "-o", "json", "--show-managed-fields").stdout
    )
    assert got["spec"]["replicas"] == 3
    assert _managers(got)[("hpa", "Apply")] == {"f:spec": {"f:replicas": {}}}


@needs_kubectl
def test_container_and_service_ports_are_lists_keyed_by_port_and_protocol(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A container's ``ports`` (keyed by ``containerPort`` and ``protocol``, TCP when left out) and a
    Service's (``port`` and ``protocol``) merge item by item: two managers applying a port each both
    keep theirs, and a port applied again with its default protocol spelled out is the same item. The
    fake held both lists atomic: the second manager's apply was refused 409 (``conflict with "a":
    .spec.ports``), and forced it would have dropped the first manager's port."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")

    def apply(manager: str, manifest: dict[str, Any]) -> None:
        path = tmp_path / f"{manager}.yaml"
        path.write_text(yaml.safe_dump(manifest))
        done = run_kubectl(
            kubeconfig, "apply", "--server-side", f"--field-manager={manager}", "-f", str(path)
        )
        assert (done.returncode, done.stderr) == (0, "")

    meta = {"name": "s", "namespace": "default"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
    apply(
        "a", {**pod, "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}]}}
    )
    apply(
        "b", {**pod, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 9090, "name": "m"}]}]}}
    )
    apply(
        "c",
        {**pod, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}},
    )
    got = json.loads(run_kubectl(kubeconfig, "get", "pod", "s", "-o", "json", "--show-managed-fields").stdout)
    assert [p["containerPort"] for p in got["spec"]["containers"][0]["ports"]] == [80, 9090]
    owned = _managers(got)[("b", "Apply")]["f:spec"]["f:containers"]['k:{"name":"c"}']["f:ports"]
    assert list(owned) == ['k:{"containerPort":9090,"protocol":"TCP"}']

    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta}
    apply("a", {**service, "spec": {"selector": {"app": "d"}, "ports": [{"port": 80, "name": "http"}]}})
    apply("b", {**service, "spec": {"ports": [{"port": 9090, "name": "metrics"}]}})
    got = json.loads(run_kubectl(kubeconfig, "get", "svc", "s", "-o", "json", "--show-managed-fields").stdout)
    assert [p["port"] for p in got["spec"]["ports"]] == [80, 9090]
    assert list(_managers(got)[("b", "Apply")]["f:spec"]["f:ports"]) == ['k:{"port":9090,"protocol":"TCP"}']


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "kind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n",
            "Incorrect version specified in apply patch. Specified patch version: , expected: v1",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, managedFields: [{manager: x}]}\n",
            "metadata.managedFields must be nil",
        ),
        (
            "- apiVersion: v1\n",
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal "
            "array into Go value of type map[string]interface {}",
        ),
    ],
)
@pytest.mark.parametrize("exists", [False, True])
def test_an_apply_patch_the_field_manager_cannot_take_is_refused_400(
    kube: FakeKubeApiServer, body: str, message: str, exists: bool
) -> None:
    """An apply with no ``apiVersion``, one carrying ``managedFields`` and one that is no YAML map are
    refused 400 ``BadRequest``, nothing written. The fake stored the first two (201/200, the second's
    ownership taken as sent) and answered the third with a 500 traceback."""
    if exists:
        assert _apply(kube, "c", {"a": "0"}, "fieldManager=ops")[0] == 201
    request = urllib.request.Request(
        f"{kube.url}{CONFIG_MAPS}/c?fieldManager=ops", data=body.encode(), method="PATCH"
    )
    request.add_header("Content-Type", "application/apply-patch+yaml")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    answer = json.loads(refused.value.read())
    assert (refused.value.code, answer["reason"], answer["message"]) == (400, "BadRequest", message)
    items = _send(kube, "GET", CONFIG_MAPS, None)[1]["items"]
    assert [(i["data"], _managers(i)) for i in items] == (
        [({"a": "0"}, {("ops", "Apply"): {"f:data": {"f:a": {}}}})] if exists else []
    )


@needs_kubectl
def test_an_item_an_applier_stops_listing_leaves_the_keyed_list_whole(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A manifest that drops an env var (a list keyed by name) removes that item. The fake removed the
    item's fields one by one, its key among the first, so the rest no longer matched the key and a
    nameless fragment (``{"value": "2"}``) stayed in the list, which a cluster refuses as an env var."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    container = {
        "name": "c",
        "image": "x:1",
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    manifest = yaml.safe_load(_deployment_manifest())
    manifest["spec"]["template"]["spec"]["containers"] = [container]
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(path)).returncode == 0
    container["env"] = [{"name": "A", "value": "1"}]
    path.write_text(yaml.safe_dump(manifest))
    assert run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(path)).returncode == 0
    got = json.loads(run_kubectl(kubeconfig, "get", "deploy", "d", "-o", "json").stdout)
    assert got["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]


@needs_kubectl
def test_an_apply_naming_a_key_twice_is_refused_and_nothing_is_written(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """An env var named twice (and a port listed twice) cannot be typed by the field manager: 500,
    no reason, ``failed to create typed patch object``, every duplicate named; nothing is created,
    and an existing object is left as it was. The fake created the Deployment with both items (and
    kept the last one on an update)."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = yaml.safe_load(_deployment_manifest())
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(manifest))
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    container["ports"] = [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump(manifest))
    refused = run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(twice))
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error from server: failed to create typed patch object "
        "(default/d; apps/v1, Kind=Deployment): errors:\n"
        '  .spec.template.spec.containers[name="c"].env: duplicate entries for key [name="A"]\n'
        '  .spec.template.spec.containers[name="c"].ports: duplicate entries for key '
        '[containerPort=80,protocol="TCP"]\n'
    )
    assert run_kubectl(kubeconfig, "get", "deploy", "d").returncode == 1
    assert run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(path)).returncode == 0
    assert run_kubectl(kubeconfig, "apply", "--server-side", "-f", str(twice)).returncode == 1
    got = json.loads(run_kubectl(kubeconfig, "get", "deploy", "d", "-o", "json").stdout)
    assert "env" not in got["spec"]["template"]["spec"]["containers"][0]


def test_a_field_the_crd_schema_defaulted_is_no_appliers(kube: FakeKubeApiServer) -> None:
    """A custom resource applied without ``spec.bbr.replicas`` gets the schema's ``default: 2``, owned
    by no one: another manager applies ``replicas: 3`` without a conflict. The fake gave the defaulted
    field to the applier, so that apply was refused 409 (``conflict with "ops": .spec.bbr.replicas``)."""
    install_crd(kube)
    config = igwc("chat", namespace="default")
    path = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/default/inferencegatewayconfigs/chat"
    code, created = _send(kube, "PATCH", f"{path}?fieldManager=ops", config, "application/apply-patch+yaml")
    assert (code, created["spec"]["bbr"]["replicas"]) == (201, 2)
    assert _managers(created)[("ops", "Apply")]["f:spec"]["f:bbr"] == {"f:enabled": {}}
    tuned = {**config, "spec": {"bbr": {"replicas": 3}}}
    code, applied = _send(kube, "PATCH", f"{path}?fieldManager=tuner", tuned, "application/apply-patch+yaml")
    assert (code, applied["spec"]["bbr"]["replicas"]) == (200, 3)
