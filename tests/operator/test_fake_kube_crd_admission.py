"""The fake API server admits custom resources as a real one does, driven by the real ``kubectl``.

With the CRDs the project ships (``crds/``), ``kubectl apply``/``create`` of the documented examples
stores them pruned and defaulted; an invalid object of each class (type, enum, bound, pattern, list
uniqueness, a CEL rule) exits non-zero naming the field, and nothing is stored or changed. A small
CRD of this module's own covers what the shipped CRDs do not use: a transition rule (``oldSelf``),
``messageExpression`` and ``reason``.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.global_router.crd import CRD_PATH as GLOBAL_CRD_PATH
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import ROOT, crd_document, find, install_crd, install_extension_crds
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

pytestmark = needs_kubectl

EXAMPLES = sorted((ROOT / "crds" / "examples").glob("*.yaml"))
GLOBAL_EXAMPLE = ROOT / "crds" / "examples" / "global" / "global-router.yaml"
IGWC_PATH = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/inference/inferencegatewayconfigs"
WIDGET_GROUP = "fake-admission.example.com"


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    """A fake API server with every CRD the project ships installed."""
    with running_fake_kube() as server:
        install_crd(server)
        install_extension_crds(server)
        server.add(yaml.safe_load((ROOT / GLOBAL_CRD_PATH).read_text()))
        yield server


@pytest.fixture
def kubeconfig(kube: FakeKubeApiServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig", namespace="inference")


def _manifest(tmp_path: Path, obj: dict[str, Any], name: str = "manifest.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj))
    return str(path)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _single_model() -> dict[str, Any]:
    [doc] = _documents(ROOT / "crds" / "examples" / "single-model.yaml")
    return doc


@pytest.mark.parametrize("example", [*EXAMPLES, GLOBAL_EXAMPLE], ids=lambda p: p.name)
def test_kubectl_apply_of_each_documented_example_is_stored(
    kube: FakeKubeApiServer, kubeconfig: Path, example: Path
) -> None:
    applied = run_kubectl(kubeconfig, "apply", "-f", str(example))
    assert applied.returncode == 0, applied.stderr
    assert "Warning" not in applied.stderr, applied.stderr
    for doc in _documents(example):
        namespace = doc["metadata"].get("namespace") or "inference"
        stored = find(kube, doc["kind"], namespace, doc["metadata"]["name"])
        assert stored is not None, doc["metadata"]
        # stored as admitted: each list item got its schema defaults
        if doc["kind"] == "InferenceGatewayConfig":
            assert all("engineType" in s for s in stored["spec"]["schedulers"])
        if doc["kind"] == "GlobalRouterConfig":
            assert all("capacityWeight" in c for c in stored["spec"]["clusters"])


def test_stored_object_has_the_schema_defaults_filled_in(kube: FakeKubeApiServer, kubeconfig: Path) -> None:
    applied = run_kubectl(kubeconfig, "apply", "-f", str(ROOT / "crds" / "examples" / "single-model.yaml"))
    assert applied.returncode == 0, applied.stderr
    stored = find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") or {}
    [scheduler] = stored["spec"]["schedulers"]
    assert {
        k: scheduler[k] for k in ("targetPort", "appProtocol", "scheduler", "engineType", "replicas")
    } == {
        "targetPort": 8000,
        "appProtocol": "http",
        "scheduler": "llm-d",
        "engineType": "vllm",
        "replicas": 2,
    }
    assert stored["spec"]["bbr"] == {"enabled": False, "replicas": 2, "maxRequestBodyBytes": 268435456}


def _with_unknown_fields() -> dict[str, Any]:
    doc = _single_model()
    doc["spec"]["invented"] = 1
    doc["spec"]["schedulers"][0]["extra"] = {"x": 1}
    return doc


def test_unknown_fields_are_pruned_without_strict_validation(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """``--validate=warn`` (fieldValidation=Warn): stored pruned, one warning per dropped field."""
    applied = run_kubectl(
        kubeconfig, "apply", "--validate=warn", "-f", _manifest(tmp_path, _with_unknown_fields())
    )
    assert applied.returncode == 0, applied.stderr
    assert 'unknown field "spec.invented"' in applied.stderr
    assert 'unknown field "spec.schedulers[0].extra"' in applied.stderr
    stored = find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") or {}
    assert "invented" not in stored["spec"]
    assert "extra" not in stored["spec"]["schedulers"][0]


def test_unknown_fields_are_refused_under_kubectls_default_strict_validation(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    applied = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _with_unknown_fields()))
    assert applied.returncode != 0
    assert 'strict decoding error: unknown field "spec.invented"' in applied.stderr
    assert find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") is None


def _broken(change: str) -> tuple[dict[str, Any], str]:
    """The single-model example with one invalid value, and the text the refusal must contain."""
    doc = _single_model()
    scheduler = doc["spec"]["schedulers"][0]
    if change == "type":
        scheduler["targetPort"] = "eight-thousand"
        return doc, "spec.schedulers[0].targetPort in body must be of type integer"
    if change == "enum":
        scheduler["engineType"] = "tgi"
        return doc, 'spec.schedulers[0].engineType: Unsupported value: "tgi"'
    if change == "bound":
        scheduler["targetPort"] = 70000
        return doc, "spec.schedulers[0].targetPort: Invalid value: 70000"
    if change == "required":
        del scheduler["modelName"]
        return doc, "spec.schedulers[0].modelName: Required value"
    if change == "duplicate":
        doc["spec"]["bbr"]["enabled"] = True
        doc["spec"]["schedulers"].append(copy.deepcopy(scheduler) | {"modelName": "other"})
        return doc, 'spec.schedulers[1]: Duplicate value: {"name":"llama3-8b"}'
    assert change == "cel"
    doc["spec"]["schedulers"].append(copy.deepcopy(scheduler) | {"name": "second", "modelName": "other"})
    return doc, 'spec.bbr.enabled: Invalid value: "object": bbr must be enabled when more than one scheduler'


CLASSES = ("type", "enum", "bound", "required", "duplicate", "cel")


@pytest.mark.parametrize("change", CLASSES)
def test_kubectl_create_of_an_invalid_object_is_refused_naming_the_field(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path, change: str
) -> None:
    doc, needle = _broken(change)
    created = run_kubectl(kubeconfig, "create", "-f", _manifest(tmp_path, doc))
    assert created.returncode != 0
    assert 'The InferenceGatewayConfig "llama-gateway" is invalid' in created.stderr
    assert needle in created.stderr, created.stderr
    assert find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") is None


@pytest.mark.parametrize("change", CLASSES)
def test_kubectl_apply_of_an_invalid_change_leaves_the_object_as_it_was(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path, change: str
) -> None:
    assert run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _single_model())).returncode == 0
    before = find(kube, "InferenceGatewayConfig", "inference", "llama-gateway")
    doc, needle = _broken(change)
    applied = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, doc, "changed.yaml"))
    assert applied.returncode != 0
    assert needle in applied.stderr, applied.stderr
    assert find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") == before


def test_the_refusal_lists_each_field_as_a_structured_cause(kube: FakeKubeApiServer) -> None:
    """What clients other than kubectl read: 422 Invalid, ``details.causes`` with reason and field."""
    doc = _single_model()
    doc["spec"]["schedulers"][0] |= {"targetPort": 0, "engineType": "tgi"}
    request = urllib.request.Request(
        f"{kube.url}{IGWC_PATH}",
        data=json.dumps(doc).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(refused.value.read())
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["kind"] == "InferenceGatewayConfig"
    assert status["details"]["group"] == "inference.sagemaker.aws.amazon.com"
    assert {(c["field"], c["reason"]) for c in status["details"]["causes"]} == {
        ("spec.schedulers[0].targetPort", "FieldValueInvalid"),
        ("spec.schedulers[0].engineType", "FieldValueNotSupported"),
    }
    assert status["message"].startswith(
        'InferenceGatewayConfig.inference.sagemaker.aws.amazon.com "llama-gateway" is invalid: ['
    )


def test_a_wrong_type_skips_the_cel_rules_as_the_api_server_does(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    doc, _ = _broken("cel")
    doc["spec"]["schedulers"][1]["targetPort"] = "x"
    created = run_kubectl(kubeconfig, "create", "-f", _manifest(tmp_path, doc))
    assert created.returncode != 0
    assert "some validation rules were not checked because the object was invalid" in created.stderr
    assert "bbr must be enabled" not in created.stderr


def test_a_global_router_config_with_two_clusters_of_one_name_is_refused(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    [doc] = _documents(GLOBAL_EXAMPLE)
    doc["spec"]["clusters"][1]["name"] = doc["spec"]["clusters"][0]["name"]
    created = run_kubectl(kubeconfig, "create", "-f", _manifest(tmp_path, doc))
    assert created.returncode != 0
    assert 'spec.clusters[1]: Duplicate value: {"name":"use1-a"}' in created.stderr, created.stderr
    assert find(kube, "GlobalRouterConfig", "inference", doc["metadata"]["name"]) is None


def _widget_crd() -> dict[str, Any]:
    """A CRD with a transition rule, a ``messageExpression`` and a ``reason`` (ours use none)."""
    spec_schema = {
        "type": "object",
        "required": ["region"],
        "properties": {
            "region": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "region is immutable"}],
            },
            "replicas": {"type": "integer", "default": 1},
            "owner": {"type": "string"},
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.replicas <= 10",
                "messageExpression": "'replicas must be at most 10, got ' + string(self.replicas)",
                "fieldPath": ".replicas",
            },
            {
                "rule": "has(self.owner)",
                "message": "every widget needs an owner",
                "reason": "FieldValueRequired",
                "fieldPath": ".owner",
            },
        ],
    }
    names = {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"}
    return crd_document(WIDGET_GROUP, names, {"spec": spec_schema})


def _widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{WIDGET_GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "inference"},
        "spec": spec,
    }


def test_transition_rules_message_expressions_and_reasons(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    crd = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _widget_crd(), "crd.yaml"))
    assert crd.returncode == 0, crd.stderr

    ownerless = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _widget(region="eu")))
    assert ownerless.returncode != 0
    assert "spec.owner: Required value: every widget needs an owner" in ownerless.stderr

    too_many = run_kubectl(
        kubeconfig, "apply", "-f", _manifest(tmp_path, _widget(region="eu", owner="a", replicas=11))
    )
    assert too_many.returncode != 0
    assert 'spec.replicas: Invalid value: "object": replicas must be at most 10, got 11' in too_many.stderr

    created = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _widget(region="eu", owner="a")))
    assert created.returncode == 0, created.stderr  # no old value: the transition rule is not evaluated
    stored = find(kube, "Widget", "inference", "w") or {}
    assert stored["spec"] == {"region": "eu", "owner": "a", "replicas": 1}

    moved = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _widget(region="us", owner="a")))
    assert moved.returncode != 0
    assert 'spec.region: Invalid value: "string": region is immutable' in moved.stderr
    assert find(kube, "Widget", "inference", "w") == stored

    changed = run_kubectl(kubeconfig, "apply", "-f", _manifest(tmp_path, _widget(region="eu", owner="b")))
    assert changed.returncode == 0, changed.stderr
    assert (find(kube, "Widget", "inference", "w") or {})["spec"]["owner"] == "b"


def test_an_update_that_leaves_an_invalid_value_alone_is_let_through(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """Validation ratcheting (Kubernetes 1.33): an object stored under an older, looser CRD stays
    writable (a label, an unrelated field), but a write that changes the invalid value is refused."""
    doc, _ = _broken("bound")
    kube.add(doc, admit_custom=False)
    labelled = run_kubectl(kubeconfig, "label", "igwc", "llama-gateway", "team=a")
    assert labelled.returncode == 0, labelled.stderr
    doc["spec"]["schedulers"][0]["targetPort"] = 70001
    moved = run_kubectl(kubeconfig, "replace", "-f", _manifest(tmp_path, doc))
    assert moved.returncode != 0
    assert "spec.schedulers[0].targetPort: Invalid value: 70001" in moved.stderr
    stored = find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") or {}
    assert stored["spec"]["schedulers"][0]["targetPort"] == 70000
    assert stored["metadata"]["labels"] == {"team": "a"}


def test_a_rate_limit_tenant_listed_twice_is_refused_as_a_duplicate_map_key(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """``rateLimits.tenants`` is a list keyed by ``tenant`` (a CEL uniqueness rule over its 1,000
    items would exceed the API server's cost budget): the API server refuses a repeated tenant."""
    doc = _single_model()
    doc["spec"]["extensions"] = {
        "rateLimits": {"tenants": [{"tenant": "acme", "burst": 1}, {"tenant": "acme", "burst": 2}]}
    }
    created = run_kubectl(kubeconfig, "create", "-f", _manifest(tmp_path, doc))
    assert created.returncode != 0
    assert 'spec.extensions.rateLimits.tenants[1]: Duplicate value: {"tenant":"acme"}' in created.stderr, (
        created.stderr
    )
    assert find(kube, "InferenceGatewayConfig", "inference", "llama-gateway") is None
