"""The fake publishes built-in kinds' schemas (``kubectl explain deploy``) and decodes their writes as
the API server does: unknown fields refused under ``fieldValidation=Strict``, else dropped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import find
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

pytestmark = needs_kubectl

_TYPO_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "bogusField": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x", "imagePullPolicyy": "Always"}]},
        },
    },
}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[tuple[FakeKubeApiServer, Path]]:
    with running_fake_kube() as kube:
        yield kube, kube.write_kubeconfig(tmp_path / "kubeconfig")


def test_kubectl_explain_reads_a_built_in_kinds_schema(kubeconfig: tuple[FakeKubeApiServer, Path]) -> None:
    """``kubectl explain deploy.spec`` failed with ``GVK map[group:apps kind:Deployment version:v1]
    not found in OpenAPI schema``: the fake published no schema for built-in kinds."""
    _kube, config = kubeconfig
    spec = run_kubectl(config, "explain", "deploy.spec")
    assert spec.returncode == 0, spec.stderr
    assert "FIELD: spec <DeploymentSpec>" in spec.stdout
    assert "template\t<PodTemplateSpec>" in spec.stdout
    nested = run_kubectl(config, "explain", "deploy.spec.template.spec.containers.imagePullPolicy")
    assert nested.returncode == 0, nested.stderr
    assert "FIELD: imagePullPolicy <string>" in nested.stdout
    assert run_kubectl(config, "explain", "svc.spec.ports.targetPort").returncode == 0


def test_strict_apply_names_a_built_in_kinds_unknown_fields(
    kubeconfig: tuple[FakeKubeApiServer, Path], tmp_path: Path
) -> None:
    """``kubectl apply`` (``fieldValidation=Strict``) of a Deployment with a typo'd field is refused
    400 naming each unknown field, as the API server's strict decoding refuses it; the fake stored
    it. With ``--validate=warn`` the write goes through with one warning per field, the fields
    dropped, as decoding into the Go type drops them."""
    kube, config = kubeconfig
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(_TYPO_DEPLOYMENT))
    refused = run_kubectl(config, "apply", "--validate=strict", "-f", str(manifest))
    assert refused.returncode != 0
    assert (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        'unknown field "spec.bogusField", unknown field "spec.template.spec.containers[0].imagePullPolicyy"'
    ) in refused.stderr
    assert find(kube, "Deployment", "default", "web") is None

    warned = run_kubectl(config, "apply", "--validate=warn", "-f", str(manifest))
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: unknown field "spec.bogusField"' in warned.stderr
    stored = find(kube, "Deployment", "default", "web")
    assert stored is not None
    assert "bogusField" not in stored["spec"]
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert "imagePullPolicyy" not in container
    assert (container["name"], container["image"], container["imagePullPolicy"]) == ("c", "x", "Always")


_OPERATOR_KINDS: list[tuple[dict[str, Any], str]] = [
    ({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": {"a": "b"}, "tyep": "x"}, "tyep"),
    (
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "automountServiceAccountToken": True,
            "imagePullSecrets": [{"name": "pull", "namespace": "x"}],
        },
        "imagePullSecrets[0].namespace",
    ),
    (
        {
            "apiVersion": "v1",
            "kind": "Event",
            "involvedObject": {"kind": "Pod", "name": "p", "nam": "x"},
            "reason": "R",
            "message": "m",
        },
        "involvedObject.nam",
    ),
    (
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "verb": ["list"]}],
        },
        "rules[0].verb",
    ),
    (
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "s", "namespaces": "default"}],
        },
        "subjects[0].namespaces",
    ),
    (
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}, "maxUnavaliable": 2},
        },
        "spec.maxUnavaliable",
    ),
    (
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "spec": {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "exept": []}}], "ports": [{"port": 53}]}
                ],
            },
        },
        "spec.egress[0].to[0].ipBlock.exept",
    ),
    (
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "maxReplicas": 3,
                "behavior": {"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSecond": 60}]}},
            },
        },
        "spec.behavior.scaleDown.policies[0].periodSecond",
    ),
]


@pytest.mark.parametrize(
    ("manifest", "unknown"), _OPERATOR_KINDS, ids=[m["kind"] for m, _ in _OPERATOR_KINDS]
)
def test_strict_apply_refuses_unknown_fields_of_the_kinds_the_operator_writes(
    kubeconfig: tuple[FakeKubeApiServer, Path], tmp_path: Path, manifest: dict[str, Any], unknown: str
) -> None:
    """The other built-in kinds the operator writes (Secret, ServiceAccount, Event, Role,
    RoleBinding, PodDisruptionBudget, NetworkPolicy, HorizontalPodAutoscaler) are decoded into their
    type too: an unknown field, nested or not, is refused under ``Strict`` and dropped otherwise. The
    fake had no schema for them and stored whatever a write carried, so an operator manifest with a
    field a cluster refuses passed here; ``kubectl explain`` of them failed."""
    kube, config = kubeconfig
    kind = manifest["kind"]
    body = {**manifest, "metadata": {"name": "x", "namespace": "default"}}
    path = tmp_path / "object.yaml"
    path.write_text(yaml.safe_dump(body))
    refused = run_kubectl(config, "apply", "--validate=strict", "-f", str(path))
    assert refused.returncode != 0
    assert f'strict decoding error: unknown field "{unknown}"' in refused.stderr
    assert find(kube, kind, "default", "x") is None

    warned = run_kubectl(config, "apply", "--validate=warn", "-f", str(path))
    assert warned.returncode == 0, warned.stderr
    assert f'Warning: unknown field "{unknown}"' in warned.stderr
    assert find(kube, kind, "default", "x") is not None
    explained = run_kubectl(config, "explain", kind.lower())
    assert explained.returncode == 0, explained.stderr
    assert f"KIND:       {kind}" in explained.stdout


def _deployment(spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    }


_SPEC = {
    "selector": {"matchLabels": {"app": "web"}},
    "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "img"}]},
    },
}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {**_SPEC, "replicas": "3"},
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
        ),
        ([], "json: cannot unmarshal array into Go struct field Deployment.spec of type v1.DeploymentSpec"),
        (
            {**_SPEC, "template": {"spec": {"containers": [{"name": "c", "command": ["run", 1]}]}}},
            "json: cannot unmarshal number into Go struct field "
            "Container.spec.template.spec.containers.command of type string",
        ),
    ],
)
def test_a_built_in_kinds_field_of_the_wrong_type_is_refused(
    kubeconfig: tuple[FakeKubeApiServer, Path], tmp_path: Path, spec: Any, error: str
) -> None:
    """``kubectl apply`` of a Deployment with ``replicas: "3"``, ``spec: []`` or a number in a
    container's command is refused 400 with the JSON decoder's wording, whatever the validation
    directive, as the API server's decoding into the Go type refuses it; the fake stored it."""
    kube, config = kubeconfig
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(_deployment(spec)))
    for validate in ("--validate=strict", "--validate=false"):
        refused = run_kubectl(config, "apply", validate, "-f", str(manifest))
        assert refused.returncode != 0
        assert "Error from server (BadRequest)" in refused.stderr
        assert f'Deployment in version "v1" cannot be handled as a Deployment: {error}' in refused.stderr
    assert find(kube, "Deployment", "default", "web") is None


def test_a_patch_leaving_a_field_of_the_wrong_type_is_refused(
    kubeconfig: tuple[FakeKubeApiServer, Path], tmp_path: Path
) -> None:
    """A merge patch setting a Service's port to a string is refused 422 with one ``patch`` cause
    (the patcher's ``NewInvalid``), the stored Service unchanged; the fake stored the string."""
    kube, config = kubeconfig
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"ports": [{"port": 80}]},
    }
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(yaml.safe_dump(service))
    created = run_kubectl(config, "create", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    patch = '{"spec":{"ports":[{"port":"8080"}]}}'
    refused = run_kubectl(config, "patch", "svc", "web", "--type=merge", "-p", patch)
    assert refused.returncode != 0
    assert "The request is invalid: patch: Invalid value: " in refused.stderr
    assert (
        "json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32"
    ) in refused.stderr
    stored = find(kube, "Service", "default", "web")
    assert stored is not None
    assert stored["spec"]["ports"][0]["port"] == 80


def test_statefulset_and_pod_schemas_are_published_and_enforced(
    kubeconfig: tuple[FakeKubeApiServer, Path], tmp_path: Path
) -> None:
    """``kubectl explain sts.spec`` / ``pod.spec.containers`` failed (``GVK ... not found in
    OpenAPI schema``) and ``apply --validate=strict`` stored a StatefulSet or Pod with a typo'd
    field: neither kind had a schema here. Both are refused 400 naming the field, as on a cluster."""
    kube, config = kubeconfig
    explained = run_kubectl(config, "explain", "sts.spec")
    assert explained.returncode == 0, explained.stderr
    assert "FIELD: spec <StatefulSetSpec>" in explained.stdout
    assert "serviceName\t<string>" in explained.stdout
    containers = run_kubectl(config, "explain", "pod.spec.containers")
    assert containers.returncode == 0, containers.stderr
    assert "FIELD: containers <[]Container>" in containers.stdout

    pod_spec = {"containers": [{"name": "c", "image": "img", "imagePullPolicyy": "Always"}]}
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {
            "serviceNam": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": pod_spec},
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "one", "namespace": "default"},
        "spec": pod_spec,
    }
    manifest = tmp_path / "both.yaml"
    manifest.write_text(yaml.safe_dump_all([statefulset, pod]))
    refused = run_kubectl(config, "apply", "--validate=strict", "-f", str(manifest))
    assert refused.returncode != 0
    assert (
        'StatefulSet in version "v1" cannot be handled as a StatefulSet: strict decoding error: '
        'unknown field "spec.serviceNam", unknown field "spec.template.spec.containers[0].imagePullPolicyy"'
    ) in refused.stderr
    assert (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagePullPolicyy"'
    ) in refused.stderr
    assert find(kube, "StatefulSet", "default", "db") is None
    assert find(kube, "Pod", "default", "one") is None
