"""The fake API server applies a strategic merge patch as the API server does (by the built-in types'
patch strategies, directives included), and refuses a patch that changes an object's kind or version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import find, igwc, install_crd
from tests.operator.kubectl_cli import kubectl, needs_kubectl, run_kubectl

pytestmark = needs_kubectl


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


_CONTAINER_DEFAULTS = {
    "imagePullPolicy": "Always",  # the images are untagged: ``:latest``
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": {},
}
"""What the API server fills in on every container it stores (the fake does too)."""


def _deployment() -> dict[str, Any]:
    container = {
        "name": "c1",
        "image": "x",
        "env": [{"name": "A", "value": "1"}],
        "ports": [{"containerPort": 80}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default", "finalizers": ["a/x"]},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [container, {"name": "c2", "image": "y"}]},
            },
        },
    }


def _pod_spec(kube: FakeKubeApiServer) -> dict[str, Any]:
    found = find(kube, "Deployment", "default", "d")
    assert found is not None
    return dict(found["spec"]["template"]["spec"])


def test_a_strategic_merge_patch_merges_keyed_lists_by_their_merge_keys(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``kubectl patch`` (strategic by default) of one container merges it into ``containers`` by
    ``name`` and its ``env`` by ``name`` (an item it adds first, as ``normalizeElementOrder`` puts
    it); ``$patch: delete`` removes an item; ``finalizers`` merge as a set. The fake replaced every
    list with the patch's and stored the ``$patch`` item as a container."""
    kube.add(_deployment())
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")

    def patch(body: dict[str, Any]) -> None:
        kubectl(config, "patch", "deployment", "d", "-p", json.dumps(body))

    patch(
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "c1", "env": [{"name": "B", "value": "2"}]}]}}
            }
        }
    )
    c1, c2 = _pod_spec(kube)["containers"]
    assert c1 == {
        "name": "c1",
        "image": "x",
        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
        "ports": [{"containerPort": 80, "protocol": "TCP"}],
        **_CONTAINER_DEFAULTS,
    }
    assert c2 == {"name": "c2", "image": "y", **_CONTAINER_DEFAULTS}
    patch({"spec": {"template": {"spec": {"containers": [{"name": "c2", "$patch": "delete"}]}}}})
    assert [c["name"] for c in _pod_spec(kube)["containers"]] == ["c1"]
    patch(
        {"spec": {"template": {"spec": {"containers": [{"name": "c1", "ports": [{"$patch": "replace"}]}]}}}}
    )
    assert _pod_spec(kube)["containers"][0]["ports"] == []  # "$patch: replace" alone: an empty list
    patch({"metadata": {"finalizers": ["b/y"]}})
    found = find(kube, "Deployment", "default", "d")
    assert found is not None
    assert sorted(found["metadata"]["finalizers"]) == ["a/x", "b/y"]
    patch({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    found = find(kube, "Deployment", "default", "d")
    assert found is not None
    assert found["metadata"]["finalizers"] == ["b/y"]


def test_client_side_apply_keeps_the_containers_it_does_not_manage(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``kubectl apply`` (client-side: a three-way strategic merge patch with ``$setElementOrder``)
    of a changed image keeps a container another writer added; the fake dropped it."""
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = tmp_path / "d.json"
    applied = _deployment()
    del applied["metadata"]["finalizers"]
    applied["spec"]["template"]["spec"]["containers"] = [{"name": "c1", "image": "x"}]
    manifest.write_text(json.dumps(applied))
    kubectl(config, "apply", "-f", str(manifest))
    side = {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}}}
    kubectl(config, "patch", "deployment", "d", "-p", json.dumps(side))
    applied["spec"]["template"]["spec"]["containers"][0]["image"] = "x2"
    manifest.write_text(json.dumps(applied))
    kubectl(config, "apply", "-f", str(manifest))
    assert [(c["name"], c["image"]) for c in _pod_spec(kube)["containers"]] == [
        ("sidecar", "s"),  # the patch put it first; the apply's order keeps the live one's
        ("c1", "x2"),
    ]
    assert not any(k.startswith("$") for k in json.dumps(_pod_spec(kube)).split('"'))


def test_retain_keys_drops_the_live_keys_it_does_not_name(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``$retainKeys`` (a Deployment's ``strategy`` switched to ``Recreate``) clears the other keys;
    a patch setting a key it does not name is refused 400."""
    deployment = _deployment()
    deployment["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    kube.add(deployment)
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    recreate = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    kubectl(config, "patch", "deployment", "d", "-p", json.dumps(recreate))
    found = find(kube, "Deployment", "default", "d")
    assert found is not None
    assert found["spec"]["strategy"] == {"type": "Recreate"}
    bad = {"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}}
    refused = run_kubectl(config, "patch", "deployment", "d", "-p", json.dumps(bad))
    assert refused.returncode != 0
    assert "invalid patch format of retainKeys" in refused.stderr


def test_a_custom_resource_refuses_a_strategic_merge_patch(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """A CRD's kind has no patch strategies: the API server answers 415 and ``kubectl patch``
    (strategic unless told otherwise) fails; ``--type merge`` works."""
    install_crd(kube)
    kube.add(igwc("chat"))
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    refused = run_kubectl(
        config, "patch", "igwc", "chat", "-n", "inference", "-p", '{"spec":{"bbr":{"replicas":3}}}'
    )
    assert refused.returncode != 0
    assert "application/strategic-merge-patch+json" not in refused.stderr.split("include:")[-1]
    assert "UnsupportedMediaType" in refused.stderr or "unknown format" in refused.stderr
    kubectl(
        config,
        "patch",
        "igwc",
        "chat",
        "-n",
        "inference",
        "--type",
        "merge",
        "-p",
        '{"spec":{"bbr":{"replicas":3}}}',
    )


@pytest.mark.parametrize(
    ("patch_type", "patch", "message"),
    [
        (
            "merge",
            '{"kind":"Secret"}',
            "converting (k8s.io/api/core/v1) Secret to (k8s.io/kubernetes/pkg/apis/core) ConfigMap",
        ),
        (
            "json",
            '[{"op":"replace","path":"/kind","value":"Secret"}]',
            "Secret to (k8s.io/kubernetes/pkg/apis/core) ConfigMap",
        ),
        ("merge", '{"apiVersion":"v2"}', 'no kind "ConfigMap" is registered for version "v2"'),
    ],
)
def test_a_patch_changing_a_built_in_object_s_kind_or_version_is_refused(
    kube: FakeKubeApiServer, tmp_path: Path, patch_type: str, patch: str, message: str
) -> None:
    """The patch handler decodes the patched document into the URL's type: another kind or an
    unknown version fails (422, cause ``patch``) and nothing is stored; a strategic merge patch
    decodes by the Go type and ignores both. The fake answered ``patched (no change)``."""
    kube.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}})
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    refused = run_kubectl(config, "patch", "configmap", "cm", "--type", patch_type, "-p", patch)
    assert refused.returncode != 0
    assert "The request is invalid: patch: Invalid value:" in refused.stderr
    assert message in refused.stderr
    ignored = run_kubectl(
        config, "patch", "configmap", "cm", "-p", patch if patch_type == "merge" else '{"kind":"Secret"}'
    )
    assert ignored.returncode == 0
    assert "(no change)" in ignored.stdout


def test_a_patch_changing_a_custom_resource_s_kind_or_version_is_refused(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A custom resource's patched kind fails ``ValidateTypeMeta`` (422 ``kind: Invalid value``), an
    unknown version the CR converter (422, cause ``patch``); the fake stored both."""
    install_crd(kube)
    kube.add(igwc("chat"))
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    kind = run_kubectl(
        config, "patch", "igwc", "chat", "-n", "inference", "--type", "merge", "-p", '{"kind":"Gateway"}'
    )
    assert kind.returncode != 0
    assert 'kind: Invalid value: "Gateway": must be InferenceGatewayConfig' in kind.stderr
    version = '{"apiVersion":"inference.sagemaker.aws.amazon.com/v9"}'
    moved = run_kubectl(config, "patch", "igwc", "chat", "-n", "inference", "--type", "merge", "-p", version)
    assert moved.returncode != 0
    assert "request to convert CR from an invalid group/version" in moved.stderr
    stored = find(kube, "InferenceGatewayConfig", "inference", "chat")
    assert stored is not None
    assert stored["metadata"]["generation"] == 1


def test_apply_of_changed_env_and_ports_merges_by_their_keys_and_diff_shows_it_first(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``kubectl apply`` twice, the second with other ``env`` and ``ports``: the three-way patch
    deletes what the first applied and the second does not name (env ``A``, port 80, container
    ``c2``), changes ``B`` by its ``name`` key, adds ``C`` and port 8080, and keeps the env another
    writer added (``LIVE``) where it stood, as a real API server merges them; ``kubectl diff`` (a
    server-side dry run of the same patch) shows that beforehand and nothing once it is applied."""
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    manifest = tmp_path / "d.json"
    applied = _deployment()
    del applied["metadata"]["finalizers"]
    web = applied["spec"]["template"]["spec"]["containers"][0]
    web["env"] = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    web["ports"] = [{"containerPort": 80, "name": "http"}, {"containerPort": 443, "name": "https"}]
    manifest.write_text(json.dumps(applied))
    kubectl(config, "apply", "-f", str(manifest))
    live = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "c1", "env": [{"name": "LIVE", "value": "x"}]}]}}
        }
    }
    kubectl(config, "patch", "deployment", "d", "-p", json.dumps(live))

    web["env"] = [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    web["ports"] = [{"containerPort": 443, "name": "https"}, {"containerPort": 8080, "name": "alt"}]
    applied["spec"]["template"]["spec"]["containers"] = [web]
    manifest.write_text(json.dumps(applied))
    diff = run_kubectl(config, "diff", "-f", str(manifest))
    assert diff.returncode == 1, diff.stderr
    removed = [line[1:].strip() for line in diff.stdout.splitlines() if line.startswith("-  ")]
    added = [line[1:].strip() for line in diff.stdout.splitlines() if line.startswith("+  ")]
    assert "- name: A" in removed
    assert "- containerPort: 80" in removed
    assert "name: c2" in removed
    assert "- name: C" in added
    assert "- containerPort: 8080" in added
    assert not any("LIVE" in line for line in removed)

    kubectl(config, "apply", "-f", str(manifest))
    (container,) = _pod_spec(kube)["containers"]
    assert container["env"] == [
        {"name": "LIVE", "value": "x"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert container["ports"] == [
        {"containerPort": 443, "name": "https", "protocol": "TCP"},
        {"containerPort": 8080, "name": "alt", "protocol": "TCP"},
    ]
    again = run_kubectl(config, "diff", "-f", str(manifest))
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
