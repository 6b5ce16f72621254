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
from igw.config.inference_extension import API_VERSION as EXTENSION_API_VERSION
from igw.config.inference_extension import OBJECTIVE_KIND, REWRITE_KIND
from igw.config.inference_extension_crds import crd_path
from igw.operator.crd_skew import EXTENSION_CRDS, SKEW_RULE, ServedSchema, resolve_skew
from igw.operator.dataplane import CONFIG_KEY, DataPlaneSettings, base_name
from igw.operator.kube import Kube
from igw.operator.reconcile import (
    LAST_ADMITTED_ANNOTATION,
    SKEW_REASON,
    WITHDRAWN_REASON,
    Reconciler,
    last_admitted_text,
)
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import ROOT, condition, find, igwc, write_latest


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


def _accepted_after_a_pass(kube: FakeKubeApiServer, name: str) -> dict[str, Any]:
    """The config's ``Accepted`` condition after :func:`_pass` over it."""
    _pass(kube, name)
    return condition(find(kube, "InferenceGatewayConfig", "inference", name), "Accepted")


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
    accepted = _accepted_after_a_pass(kube, "limited")
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
    accepted = _accepted_after_a_pass(kube, "wants-it")
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
    accepted = _accepted_after_a_pass(kube, "typo")
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


# ---- InferenceObjective and InferenceModelRewrite: the same rule, by the object's own CRD -----------


def _next_extension_crd(kind: str) -> dict[str, Any]:
    """The next release's CRD of ``kind``: an objective's ``spec.futureField`` (integer, default 0),
    a rewrite rule's ``futureMode`` (string, default "off"; a nested path); both parents keep unknown
    fields (so a typo reaches the operator)."""
    crd = copy.deepcopy(yaml.safe_load((ROOT / crd_path(kind)).read_text()))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node = spec if kind == OBJECTIVE_KIND else spec["properties"]["rules"]["items"]
    field = ("futureField", {"type": "integer", "default": 0})
    if kind == REWRITE_KIND:
        field = ("futureMode", {"type": "string", "default": "off"})
    node["properties"][field[0]] = field[1]
    node["x-kubernetes-preserve-unknown-fields"] = True
    return dict(crd)


@pytest.fixture
def next_extension_cluster() -> Iterator[FakeKubeApiServer]:
    """Today's InferenceGatewayConfig CRD, the next release's InferenceObjective and
    InferenceModelRewrite CRDs (the operator under test is the previous)."""
    with running_fake_kube() as kube:
        kube.add(yaml.safe_load((ROOT / CRD_PATH).read_text()))
        for kind in (OBJECTIVE_KIND, REWRITE_KIND):
            kube.add(_next_extension_crd(kind))
        yield kube


def _objective(name: str, pool: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": EXTENSION_API_VERSION,
        "kind": OBJECTIVE_KIND,
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"poolRef": {"name": pool}, "priority": 5, **extra},
    }


def _rewrite(name: str, pool: str, model: str, **extra: Any) -> dict[str, Any]:
    rule = {"matches": [{"model": {"value": "alias"}}], "targets": [{"modelRewrite": model}], **extra}
    return {
        "apiVersion": EXTENSION_API_VERSION,
        "kind": REWRITE_KIND,
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"poolRef": {"name": pool}, "rules": [rule]},
    }


def _served_extensions(kube: FakeKubeApiServer, name: str) -> dict[str, Any]:
    config_map = find(kube, "ConfigMap", "inference", f"{base_name(name)}-config")
    assert config_map is not None
    extensions: dict[str, Any] = yaml.safe_load(config_map["data"][CONFIG_KEY])["spec"].get("extensions", {})
    return extensions


def test_a_newer_objective_and_rewrite_crds_defaults_are_left_out_and_the_objects_merged(
    next_extension_cluster: FakeKubeApiServer,
) -> None:
    """Before: both objects were refused ``unknown field "spec.futureField"`` (resp.
    ``spec.rules[0].futureMode``), InvalidSpec, and not merged, for a value the newer CRD defaulted."""
    kube = next_extension_cluster
    kube.add(igwc("pool", model="llama", app="llama"))
    kube.add(_objective("gold", "pool"))
    kube.add(_rewrite("alias", "pool", "llama"))
    stored = find(kube, OBJECTIVE_KIND, "inference", "gold")
    assert stored is not None
    assert stored["spec"]["futureField"] == 0  # the next CRD defaulted it
    stored = find(kube, REWRITE_KIND, "inference", "alias")
    assert stored is not None
    assert stored["spec"]["rules"][0]["futureMode"] == "off"
    _pass(kube, "pool")

    for kind, name in ((OBJECTIVE_KIND, "gold"), (REWRITE_KIND, "alias")):
        accepted = condition(find(kube, kind, "inference", name), "Accepted")
        assert accepted["status"] == "True", (kind, accepted)
        [note] = [e for e in _events(kube, name) if e["reason"] == SKEW_REASON]  # once in two passes
        assert note["type"] == "Normal"
        assert note["involvedObject"]["kind"] == kind
        assert EXTENSION_CRDS[kind][0] in note["message"]
    extensions = _served_extensions(kube, "pool")
    assert extensions["flowControl"]["objectives"] == [{"name": "gold", "priority": 5}]
    [rule] = extensions["modelRewrites"]["rules"]
    assert rule["model"] == "alias"
    assert "futureMode" not in rule
    config = find(kube, "InferenceGatewayConfig", "inference", "pool")
    assert condition(config, "Accepted")["status"] == "True"


def test_a_value_set_for_a_field_only_the_newer_objective_crd_declares_is_refused_naming_that_crd(
    next_extension_cluster: FakeKubeApiServer,
) -> None:
    kube = next_extension_cluster
    kube.add(igwc("pool", model="llama", app="llama"))
    kube.add(_objective("wants", "pool", futureField=3))
    kube.add(_objective("typo", "pool", futureFeild=0))
    kube.add(_rewrite("mode", "pool", "llama", futureMode="on"))
    _pass(kube, "pool")

    wants = condition(find(kube, OBJECTIVE_KIND, "inference", "wants"), "Accepted")
    assert (wants["status"], wants["reason"]) == ("False", "InvalidSpec")
    assert (
        f'"spec.futureField" is declared by the served CRD {EXTENSION_CRDS[OBJECTIVE_KIND][0]}'
        in (wants["message"])
    )
    mode = condition(find(kube, REWRITE_KIND, "inference", "mode"), "Accepted")
    assert (mode["status"], mode["reason"]) == ("False", "InvalidSpec")
    assert f"is declared by the served CRD {EXTENSION_CRDS[REWRITE_KIND][0]}" in mode["message"]
    typo = condition(find(kube, OBJECTIVE_KIND, "inference", "typo"), "Accepted")
    assert typo["message"] == 'spec.futureFeild: unknown field "spec.futureFeild"'
    assert "flowControl" not in _served_extensions(kube, "pool")


# ---- the restore after a rollback: a last admitted spec written by a newer operator ----------------


def test_a_last_admitted_spec_with_a_field_of_a_rolled_back_version_is_restored_without_it() -> None:
    """The served CRD is today's (rolled back with the operator); the last admitted spec, written by the
    newer operator, holds ``serverLimits.futureField: 5``; the current spec is refused and the data
    plane was deleted. Before: the restore check refused that spec (``unknown field``) and nothing
    was put back. Now the field is left out, a Warning Event names it, and the rest is restored."""
    with running_fake_kube() as kube:
        kube.add(yaml.safe_load((ROOT / CRD_PATH).read_text()))
        kube.add(_config("back", "llama", {}))
        _pass(kube, "back")
        newer = copy.deepcopy(find(kube, "InferenceGatewayConfig", "inference", "back"))
        assert newer is not None
        newer["spec"]["extensions"]["serverLimits"]["futureField"] = 5

        def refused(current: dict[str, Any]) -> None:
            current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION] = last_admitted_text(newer["spec"])
            current["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
            kind = kube.store.kind_for(api_version=current["apiVersion"], kind=current["kind"])
            kube.store.replace(kind, "inference", "back", current)

        write_latest(kube, "InferenceGatewayConfig", "inference", "back", refused)
        for kind_name, api_version in (("ConfigMap", "v1"), ("Deployment", "apps/v1")):
            suffix = "-config" if kind_name == "ConfigMap" else ""
            kind = kube.store.kind_for(api_version=api_version, kind=kind_name)
            kube.store.delete(kind, "inference", f"{base_name('back')}{suffix}")
        # a new Reconciler: after the operator's restart (the rollback)
        accepted = _accepted_after_a_pass(kube, "back")
        assert accepted["status"] == "False"
        assert find(kube, "Deployment", "inference", base_name("back")) is not None
        limits = _served_extensions(kube, "back")["serverLimits"]
        assert "futureField" not in limits
        assert limits["headerTimeout"] == "10s"
        [note] = [e for e in _events(kube, "back") if e["reason"] == WITHDRAWN_REASON]
        assert note["type"] == "Warning"
        assert note["message"].startswith(
            "spec.extensions.serverLimits.futureField: in the last admitted spec"
        )
