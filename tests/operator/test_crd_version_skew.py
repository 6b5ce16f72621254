"""An operator older than the InferenceGatewayConfig CRD the API server serves (mid-upgrade).

Helm applies the new CRD before the new operator's pods take the lease, and the API server defaults
stored objects under the CRD it serves on every read. Before session s48 a pass of the previous
operator in that window refused every config with ``serverLimits`` (``unknown field
"spec.extensions.serverLimits.futureField"``, a Warning Event) for a field the newer CRD had only
defaulted. Now (:mod:`igw.operator.crd_skew`): a newer CRD's default is left out of the served
configuration and the config stays admitted; a value set for a field this operator lacks is refused
naming the skew; a field the served CRD does not declare either (a typo) is refused as before.

The "next" CRD is today's with ``serverLimits.futureField`` (integer, default 0), and
``serverLimits`` keeping unknown fields (so a typo reaches the operator, as on a CRD that preserves
them; otherwise the API server prunes it).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from igw.config.crd import CRD_NAME, CRD_PATH
from igw.operator.crd_skew import SKEW_RULE, ServedSchema, resolve_skew
from igw.operator.dataplane import CONFIG_KEY, DataPlaneSettings, base_name
from igw.operator.kube import Kube
from igw.operator.reconcile import SKEW_REASON, Reconciler
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import ROOT, condition, find, igwc


def _server_limits(crd: dict[str, Any]) -> dict[str, Any]:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    extensions = root["properties"]["spec"]["properties"]["extensions"]
    node: dict[str, Any] = extensions["properties"]["serverLimits"]
    return node


def _next_crd() -> dict[str, Any]:
    crd = copy.deepcopy(yaml.safe_load((ROOT / CRD_PATH).read_text()))
    limits = _server_limits(crd)
    limits["properties"]["futureField"] = {"type": "integer", "default": 0}
    limits["x-kubernetes-preserve-unknown-fields"] = True
    return dict(crd)


@pytest.fixture
def next_crd_cluster() -> Iterator[FakeKubeApiServer]:
    """A fake API server serving the next release's CRD (the operator under test is the previous)."""
    with running_fake_kube() as kube:
        kube.add(_next_crd())
        yield kube


def _config(name: str, model: str, limits: dict[str, Any]) -> dict[str, Any]:
    doc = igwc(name, model=model, app=model)
    doc["spec"]["extensions"] = {"serverLimits": {"headerTimeout": "10s", **limits}}
    return doc


def _pass(kube: FakeKubeApiServer, *names: str) -> None:
    reconciler = Reconciler(Kube(kube.api_client()), DataPlaneSettings())
    for _ in range(2):  # the note is once per generation, not once per pass
        for name in names:
            assert asyncio.run(reconciler.reconcile("inference", name)) is True


def _events(kube: FakeKubeApiServer, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.store.iter_all() if e["kind"] == "Event" and e["involvedObject"]["name"] == name]


def test_a_newer_crds_default_is_left_out_and_the_config_stays_accepted(
    next_crd_cluster: FakeKubeApiServer,
) -> None:
    kube = next_crd_cluster
    kube.add(_config("limited", "llama", {}))
    stored = find(kube, "InferenceGatewayConfig", "inference", "limited")
    assert stored is not None
    assert stored["spec"]["extensions"]["serverLimits"]["futureField"] == 0  # the next CRD defaulted it
    _pass(kube, "limited")

    accepted = condition(find(kube, "InferenceGatewayConfig", "inference", "limited"), "Accepted")
    assert accepted["status"] == "True", accepted
    config_map = find(kube, "ConfigMap", "inference", f"{base_name('limited')}-config")
    assert config_map is not None
    served = yaml.safe_load(config_map["data"][CONFIG_KEY])
    limits = served["spec"]["extensions"]["serverLimits"]
    assert "futureField" not in limits
    assert limits["headerTimeout"] == "10s"
    events = _events(kube, "limited")
    assert not [e for e in events if e["reason"].startswith("AcceptedInvalid")], events
    assert [e["reason"] for e in events if e["reason"].startswith("Accepted")] == ["AcceptedValid"]
    [note] = [e for e in events if e["reason"] == SKEW_REASON]
    assert note["type"] == "Normal"
    assert note["message"].startswith("spec.extensions.serverLimits.futureField: declared and defaulted")


def test_a_value_set_for_a_field_only_the_newer_crd_declares_is_refused_naming_the_skew(
    next_crd_cluster: FakeKubeApiServer,
) -> None:
    kube = next_crd_cluster
    kube.add(_config("wants-it", "mistral", {"futureField": 5}))
    _pass(kube, "wants-it")
    accepted = condition(find(kube, "InferenceGatewayConfig", "inference", "wants-it"), "Accepted")
    assert accepted["status"] == "False"
    assert accepted["reason"] == "InvalidSpec"
    message = accepted["message"]
    assert message.startswith('spec.extensions.serverLimits.futureField: "spec.extensions.serverLimits.')
    assert f"is declared by the served CRD {CRD_NAME} (generation 1)" in message
    assert "not known to this operator (igw " in message
    assert f"[{SKEW_RULE}]" in message
    assert find(kube, "ConfigMap", "inference", f"{base_name('wants-it')}-config") is None


def test_a_field_the_served_crd_does_not_declare_either_is_refused_as_before(
    next_crd_cluster: FakeKubeApiServer,
) -> None:
    kube = next_crd_cluster
    kube.add(_config("typo", "qwen", {"futureFeild": 0}))
    _pass(kube, "typo")
    accepted = condition(find(kube, "InferenceGatewayConfig", "inference", "typo"), "Accepted")
    assert accepted["status"] == "False"
    assert accepted["message"] == (
        'spec.extensions.serverLimits.futureFeild: unknown field "spec.extensions.serverLimits.futureFeild" '
        "[schema.unknown-field]"
    )


def test_a_newer_objects_default_counts_with_its_nested_defaults_applied() -> None:
    """An object field defaulted ``{}`` whose properties have defaults reads as those defaults (the
    API server applies nested defaults to a parent's default); only that value is a default."""
    from igw.config.validate import validate_document
    from igw.operator.dataplane import served_document

    node = {
        "type": "object",
        "default": {},
        "properties": {"level": {"type": "integer", "default": 3}},
    }
    root = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"future": node}}},
    }
    schema = ServedSchema(7, root)
    for value, left_out in (({"level": 3}, True), ({"level": 4}, False), ({"level": True}, False)):
        doc = igwc("nested")
        doc["metadata"]["uid"] = "u"
        doc["spec"]["future"] = value
        skew = resolve_skew(doc, validate_document(served_document(doc)), schema)
        assert ("future" not in skew.igwc["spec"]) is left_out, value
        assert bool(skew.dropped) is left_out
        assert any(p.rule == SKEW_RULE for p in skew.problems) is not left_out
