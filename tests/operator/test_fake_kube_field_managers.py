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
