"""The fake API server refuses a malformed CustomResourceDefinition as apiextensions-apiserver does.

Each row of the table breaks one rule of the real server's CRD validation and must come back
422 ``Invalid`` (a Status with ``details.causes``) naming that field with the real wording, with
nothing registered or stored. Every CRD the project ships (``crds/``, the chart's) is admitted,
and the real ``kubectl`` prints the server's refusal of a malformed one and exits non-zero.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.addon import chart, pins
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.fakes.kube_crd_validation import _memoised_errors, crd_errors, with_defaults
from tests.operator.harness import ROOT, crd_document
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "example.com"
SPEC = "spec.validation.openAPIV3Schema.properties[spec]"
"""Where a single-version CRD's schema errors are named: the internal form keeps a schema every
version shares once, under ``spec.validation`` (as a real cluster prints them)."""

Crd = dict[str, Any]


def widget_crd() -> Crd:
    """A valid CRD; each table row breaks one thing in a copy of it."""
    spec_schema = {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "default": 1, "maximum": 10},
            "mode": {"type": "string"},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                },
            },
            "tags": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}}}},
        },
        "x-kubernetes-validations": [
            {"rule": "self.replicas >= 0", "message": "replicas must not be negative"}
        ],
    }
    return crd_document(
        GROUP,
        {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
        {"spec": spec_schema, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        subresources={"status": {}},
        additionalPrinterColumns=[{"name": "Mode", "type": "string", "jsonPath": ".spec.mode"}],
    )


def _root(crd: Crd) -> dict[str, Any]:
    root: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


def _spec(crd: Crd) -> dict[str, Any]:
    spec: dict[str, Any] = _root(crd)["properties"]["spec"]
    return spec


def _prop(crd: Crd, name: str) -> dict[str, Any]:
    prop: dict[str, Any] = _spec(crd)["properties"][name]
    return prop


def _set(path: list[Any], value: Any) -> Callable[[Crd], None]:
    def change(crd: Crd) -> None:
        node: Any = crd
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


def _renamed(group: str, plural: str = "widgets") -> Callable[[Crd], None]:
    def change(crd: Crd) -> None:
        crd["spec"]["group"] = group
        crd["spec"]["names"]["plural"] = plural
        crd["metadata"]["name"] = f"{plural}.{group}"

    return change


def _second_version(change_schema: Callable[[dict[str, Any]], None]) -> Callable[[Crd], None]:
    """Adds a served v2 whose schema differs (so each version's schema is named on its own)."""

    def change(crd: Crd) -> None:
        v2 = copy.deepcopy(crd["spec"]["versions"][0]) | {"name": "v2", "storage": False}
        change_schema(v2["schema"]["openAPIV3Schema"])
        crd["spec"]["versions"].append(v2)

    return change


def _untyped_spec(root: dict[str, Any]) -> None:
    del root["properties"]["spec"]["type"]


def _with_rule(rule: dict[str, Any], on: str = "spec") -> Callable[[Crd], None]:
    def change(crd: Crd) -> None:
        node = _spec(crd) if on == "spec" else _prop(crd, on)
        node["x-kubernetes-validations"] = [rule]

    return change


def _with_ports(**changes: Any) -> Callable[[Crd], None]:
    def change(crd: Crd) -> None:
        ports = _prop(crd, "ports")
        for key, value in changes.items():
            if value is None:
                ports.pop(key, None)
            else:
                ports[key] = value

    return change


def _rule_on_tag_items(crd: Crd) -> None:
    _prop(crd, "tags")["items"]["x-kubernetes-validations"] = [{"rule": "self.key == oldSelf.key"}]


def _drop_key_required(crd: Crd) -> None:
    _prop(crd, "ports")["items"]["required"] = []


def _delete_version_schema(crd: Crd) -> None:
    del crd["spec"]["versions"][0]["schema"]


def _two_storage_versions(crd: Crd) -> None:
    crd["spec"]["versions"].append(copy.deepcopy(crd["spec"]["versions"][0]) | {"name": "v2"})


def _duplicate_version(crd: Crd) -> None:
    crd["spec"]["versions"].append(copy.deepcopy(crd["spec"]["versions"][0]) | {"storage": False})


def _without_kind(crd: Crd) -> None:
    del crd["spec"]["names"]["kind"]


# (id, change, field, the cause's message (the error without its field), reason)
Row = tuple[str, Callable[[Crd], None], str, str, str]
ROWS: list[Row] = [
    (
        "name-not-plural-dot-group",
        _set(["metadata", "name"], "gadgets.example.com"),
        "metadata.name",
        'Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group',
        "FieldValueInvalid",
    ),
    (
        "group-without-dot",
        _renamed("example"),
        "spec.group",
        'Invalid value: "example": should be a domain with at least one dot',
        "FieldValueInvalid",
    ),
    (
        "group-not-dns",
        _renamed("Example.com"),
        "spec.group",
        'Invalid value: "Example.com": a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        "FieldValueInvalid",
    ),
    (
        "scope-unknown",
        _set(["spec", "scope"], "Global"),
        "spec.scope",
        'Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
        "FieldValueNotSupported",
    ),
    ("scope-missing", _set(["spec", "scope"], ""), "spec.scope", "Required value", "FieldValueRequired"),
    (
        "plural-not-dns-1035",
        _renamed(GROUP, "wid-gets-"),
        "spec.names.plural",
        'Invalid value: "wid-gets-": a DNS-1035 label must consist of lower case alphanumeric '
        "characters or '-', start with an alphabetic character, and end with an alphanumeric character "
        "(e.g. 'my-name', or "
        "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        "FieldValueInvalid",
    ),
    ("kind-missing", _without_kind, "spec.names.kind", "Required value", "FieldValueRequired"),
    (
        "kind-malformed",
        _set(["spec", "names", "kind"], "Wid_get"),
        "spec.names.kind",
        'Invalid value: "Wid_get": may have mixed case, but should otherwise match: a DNS-1035 label',
        "FieldValueInvalid",
    ),
    (
        "list-kind-equals-kind",
        _set(["spec", "names", "listKind"], "Widget"),
        "spec.names.listKind",
        'Invalid value: "Widget": kind and listKind may not be the same',
        "FieldValueInvalid",
    ),
    (
        "short-name-malformed",
        _set(["spec", "names", "shortNames"], ["w_d"]),
        "spec.names.shortNames[0]",
        'Invalid value: "w_d": a DNS-1035 label',
        "FieldValueInvalid",
    ),
    (
        "no-storage-version",
        _set(["spec", "versions", 0, "storage"], False),
        "spec.versions",
        "must have exactly one version marked as storage version",
        "FieldValueInvalid",
    ),
    (
        "no-storage-version-stored-versions",
        _set(["spec", "versions", 0, "storage"], False),
        "status.storedVersions",
        "Invalid value: []string(nil): must have at least one stored version",
        "FieldValueInvalid",
    ),
    (
        "two-storage-versions",
        _two_storage_versions,
        "spec.versions",
        "must have exactly one version marked as storage version",
        "FieldValueInvalid",
    ),
    (
        "duplicate-version-names",
        _duplicate_version,
        "spec.versions",
        "must contain unique version names",
        "FieldValueInvalid",
    ),
    (
        "version-name-not-dns-1035",
        _set(["spec", "versions", 0, "name"], "V1"),
        "spec.versions[0].name",
        'Invalid value: "V1": a DNS-1035 label must consist of',
        "FieldValueInvalid",
    ),
    (
        "schema-missing",
        _delete_version_schema,
        "spec.versions[0].schema.openAPIV3Schema",
        "Required value",
        "FieldValueRequired",
    ),
    (
        "untyped-field",
        lambda crd: _prop(crd, "mode").pop("type"),
        f"{SPEC}.properties[mode].type",
        "Required value: must not be empty for specified object fields",
        "FieldValueRequired",
    ),
    (
        "untyped-field-in-one-version",
        _second_version(_untyped_spec),
        "spec.versions[1].schema.openAPIV3Schema.properties[spec].type",
        "Required value: must not be empty for specified object fields",
        "FieldValueRequired",
    ),
    (
        "untyped-array-items",
        lambda crd: _prop(crd, "tags")["items"].pop("type"),
        f"{SPEC}.properties[tags].items.type",
        "Required value: must not be empty for specified array items",
        "FieldValueRequired",
    ),
    (
        "array-without-items",
        lambda crd: _prop(crd, "tags").pop("items"),
        f"{SPEC}.properties[tags].items",
        "Required value: must be specified",
        "FieldValueRequired",
    ),
    (
        "root-not-object",
        lambda crd: _root(crd).update(type="array", items={"type": "string"}),
        "spec.validation.openAPIV3Schema.type",
        'Invalid value: "array": must be object at the root',
        "FieldValueInvalid",
    ),
    (
        "additional-properties-beside-properties",
        lambda crd: _spec(crd).update(additionalProperties={"type": "string"}),
        f"{SPEC}.additionalProperties",
        "Forbidden: additionalProperties and properties are mutual exclusive",
        "FieldValueForbidden",
    ),
    (
        "metadata-beyond-name",
        lambda crd: _root(crd)["properties"]["metadata"].update(properties={"labels": {"type": "object"}}),
        "spec.validation.openAPIV3Schema.properties[metadata]",
        "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly "
        "specified",
        "FieldValueForbidden",
    ),
    (
        "type-in-value-validation",
        lambda crd: _prop(crd, "mode").update(anyOf=[{"type": "string", "maxLength": 3}]),
        f"{SPEC}.properties[mode].anyOf[0].type",
        "Forbidden: must be empty to be structural",
        "FieldValueForbidden",
    ),
    (
        "value-validation-of-undeclared-field",
        lambda crd: _root(crd).update(anyOf=[{"properties": {"extra": {"maxLength": 3}}}]),
        "spec.validation.openAPIV3Schema.properties[extra]",
        "Required value: because it is defined in spec.validation.openAPIV3Schema.anyOf[0].properties[extra]",
        "FieldValueRequired",
    ),
    (
        "default-in-root-metadata",
        lambda crd: _root(crd)["properties"]["metadata"].update(default={}),
        "spec.validation.openAPIV3Schema.properties[metadata].default",
        "Forbidden: must not be set in top-level metadata",
        "FieldValueForbidden",
    ),
    (
        "preserve-unknown-fields-false",
        lambda crd: _spec(crd).update({"x-kubernetes-preserve-unknown-fields": False}),
        f"{SPEC}.x-kubernetes-preserve-unknown-fields",
        "Invalid value: false: must be true or undefined",
        "FieldValueInvalid",
    ),
    (
        "unique-items",
        lambda crd: _prop(crd, "tags").update(uniqueItems=True),
        f"{SPEC}.properties[tags].uniqueItems",
        "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        "FieldValueForbidden",
    ),
    (
        "pattern-does-not-compile",
        lambda crd: _prop(crd, "mode").update(pattern="([a-z"),
        f"{SPEC}.properties[mode].pattern",
        'Invalid value: "([a-z": must be a valid regular expression',
        "FieldValueInvalid",
    ),
    (
        "pattern-go-cannot-compile",  # a look-ahead: Python's re compiles it, Go's regexp (RE2) does not
        lambda crd: _prop(crd, "mode").update(pattern="^(?=a)"),
        f"{SPEC}.properties[mode].pattern",
        'Invalid value: "^(?=a)": must be a valid regular expression',
        "FieldValueInvalid",
    ),
    (
        "unknown-type",
        lambda crd: _prop(crd, "mode").update(type="text"),
        f"{SPEC}.properties[mode].type",
        'Unsupported value: "text": supported values: "array", "boolean", "integer", "number", "object", '
        '"string"',
        "FieldValueNotSupported",
    ),
    (
        "list-map-without-keys",
        _with_ports(**{"x-kubernetes-list-map-keys": None}),
        f"{SPEC}.properties[ports].x-kubernetes-list-map-keys",
        "Required value: must not be empty if x-kubernetes-list-type is map",
        "FieldValueRequired",
    ),
    (
        "list-map-key-not-a-property",
        _with_ports(**{"x-kubernetes-list-map-keys": ["id"]}),
        f"{SPEC}.properties[ports].x-kubernetes-list-map-keys",
        'Invalid value: []string{"id"}: entries must all be names of item properties',
        "FieldValueInvalid",
    ),
    (
        "list-map-key-optional-without-default",
        _drop_key_required,
        f"{SPEC}.properties[ports].items.properties[name].default",
        "Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a "
        "required property",
        "FieldValueRequired",
    ),
    (
        "list-map-keys-without-list-type",
        _with_ports(**{"x-kubernetes-list-type": None}),
        f"{SPEC}.properties[ports].x-kubernetes-list-type",
        "Required value: must be map if x-kubernetes-list-map-keys is non-empty",
        "FieldValueRequired",
    ),
    (
        "list-type-on-a-string",
        lambda crd: _prop(crd, "mode").update({"x-kubernetes-list-type": "set"}),
        f"{SPEC}.properties[mode].type",
        'Invalid value: "string": must be array if x-kubernetes-list-type is specified',
        "FieldValueInvalid",
    ),
    (
        "default-of-the-wrong-type",
        lambda crd: _prop(crd, "replicas").update(default="one"),
        f"{SPEC}.properties[replicas].default",
        'Invalid value: "string":  in body must be of type integer: "string"',
        "FieldValueTypeInvalid",
    ),
    (
        "default-out-of-bounds",
        lambda crd: _prop(crd, "replicas").update(default=20),
        f"{SPEC}.properties[replicas].default",
        "Invalid value: 20:  in body should be less than or equal to 10",
        "FieldValueInvalid",
    ),
    (
        "default-with-unknown-fields",
        lambda crd: _spec(crd).update(default={"replicas": 2, "colour": "red"}),
        f"{SPEC}.default",
        'Invalid value: map[string]interface {}{"colour":"red", "replicas":2}: must not have unknown fields',
        "FieldValueInvalid",
    ),
    (
        "default-failing-its-cel-rule",
        _with_rule({"rule": "self == 0", "message": "must be zero"}, on="replicas"),
        f"{SPEC}.properties[replicas].default",
        'Invalid value: "integer": must be zero',
        "FieldValueInvalid",
    ),
    (
        "rule-does-not-compile",
        _with_rule({"rule": "self.replicas >"}),
        f"{SPEC}.x-kubernetes-validations[0].rule",
        "compilation failed: ERROR: <input>:1:",
        "FieldValueInvalid",
    ),
    (
        "rule-names-an-undeclared-field",
        _with_rule({"rule": "self.replica >= 0"}),
        f"{SPEC}.x-kubernetes-validations[0].rule",
        "compilation failed: ERROR: <input>:1:5: undefined field 'replica'",
        "FieldValueInvalid",
    ),
    (
        "rule-reads-root-metadata-labels",
        lambda crd: _root(crd).update(
            {"x-kubernetes-validations": [{"rule": "self.metadata.labels.size() > 0"}]}
        ),
        "spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule",
        "compilation failed: ERROR: <input>:1:14: undefined field 'labels'",
        "FieldValueInvalid",
    ),
    (
        "message-expression-does-not-compile",
        _with_rule({"rule": "self.replicas >= 0", "messageExpression": "'bad: ' +"}),
        f"{SPEC}.x-kubernetes-validations[0].messageExpression",
        "messageExpression compilation failed: ERROR: <input>:1:",
        "FieldValueInvalid",
    ),
    (
        "old-self-in-an-atomic-list",
        _rule_on_tag_items,
        f"{SPEC}.properties[tags].items.x-kubernetes-validations[0].rule",
        'Invalid value: "self.key == oldSelf.key": oldSelf cannot be used on the uncorrelatable portion '
        f"of the schema within {SPEC}.properties[tags]",
        "FieldValueInvalid",
    ),
    (
        "rule-reason-unknown",
        _with_rule({"rule": "self.replicas >= 0", "reason": "FieldValueTooLong"}),
        f"{SPEC}.x-kubernetes-validations[0].reason",
        'Unsupported value: "FieldValueTooLong": supported values: "FieldValueDuplicate", '
        '"FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"',
        "FieldValueNotSupported",
    ),
    (
        "multi-line-rule-without-message",
        _with_rule({"rule": "self.replicas >= 0 &&\nself.replicas <= 10"}),
        f"{SPEC}.x-kubernetes-validations[0].message",
        "Required value: message must be specified if rule contains line breaks",
        "FieldValueRequired",
    ),
    (
        "rule-field-path-not-in-schema",
        _with_rule({"rule": "self.replicas >= 0", "fieldPath": ".replica"}),
        f"{SPEC}.x-kubernetes-validations[0].fieldPath",
        'Invalid value: ".replica": must be a valid path',
        "FieldValueInvalid",
    ),
    (
        "root-field-not-allowed-with-status",
        lambda crd: _root(crd).update(minProperties=1),
        "spec.validation.openAPIV3Schema",
        "fields are allowed at the root of the schema if the status subresource is enabled",
        "FieldValueInvalid",
    ),
    (
        "nullable-root",
        lambda crd: _root(crd).update(nullable=True),
        "spec.validation.openAPIV3Schema.nullable",
        "Forbidden: nullable cannot be true at the root",
        "FieldValueForbidden",
    ),
    (
        "printer-column-type",
        _set(["spec", "versions", 0, "additionalPrinterColumns", 0, "type"], "text"),
        "spec.additionalPrinterColumns[0].type",
        'Invalid value: "text": must be one of boolean,date,integer,number,string',
        "FieldValueInvalid",
    ),
    (
        "scale-path-outside-spec",
        _set(
            ["spec", "versions", 0, "subresources", "scale"],
            {"specReplicasPath": ".status.replicas", "statusReplicasPath": ".status.replicas"},
        ),
        "spec.subresources.scale.specReplicasPath",
        'Invalid value: ".status.replicas": should be a json path under .spec',
        "FieldValueInvalid",
    ),
    (
        "preserve-unknown-fields-true",
        _set(["spec", "preserveUnknownFields"], True),
        "spec.preserveUnknownFields",
        "Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in "
        "spec.versions[*].schema instead",
        "FieldValueInvalid",
    ),
    (
        "webhook-conversion-without-config",
        _set(["spec", "conversion"], {"strategy": "Webhook"}),
        "spec.conversion.webhookClientConfig",
        "Required value: required when strategy is set to Webhook",
        "FieldValueRequired",
    ),
    (
        "protected-group-without-approval",
        _renamed("widgets.k8s.io"),
        "metadata.annotations[api-approved.kubernetes.io]",
        'Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see '
        "https://github.com/kubernetes/enhancements/pull/1111",
        "FieldValueRequired",
    ),
]


def broken(change: Callable[[Crd], None]) -> Crd:
    crd = widget_crd()
    change(crd)
    return crd


def _post(kube: FakeKubeApiServer, body: Crd, *, method: str = "POST", name: str = "") -> dict[str, Any]:
    """The fake's answer to a CRD write over HTTP: the stored CRD, or the refusal's Status."""
    request = urllib.request.Request(
        f"{kube.url}{CRD_PATH}{'/' + name if name else ''}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as refused:
        answer = json.loads(refused.read())
    return answer


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    """One server per test: a row whose rule were missing would store its CRD, and only its row
    should fail."""
    with running_fake_kube() as server:
        yield server


def _crd_names(kube: FakeKubeApiServer) -> set[str]:
    return {o["metadata"]["name"] for o in kube.store.iter_all() if o["kind"] == "CustomResourceDefinition"}


def test_the_table_starts_from_a_valid_crd(kube: FakeKubeApiServer) -> None:
    """Without this, a row could pass because of a mistake in the base CRD."""
    assert crd_errors(with_defaults(widget_crd())) == []
    assert _crd_names(kube) == set()


@pytest.mark.parametrize(
    ("change", "field", "message", "reason"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_a_malformed_crd_is_refused_naming_the_field(
    kube: FakeKubeApiServer, change: Callable[[Crd], None], field: str, message: str, reason: str
) -> None:
    crd = broken(change)
    status = _post(kube, crd)
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 422, "Invalid"), status
    assert status["details"]["kind"] == "CustomResourceDefinition"
    assert status["details"]["group"] == "apiextensions.k8s.io"
    causes = {c["field"]: c for c in status["details"]["causes"]}
    assert field in causes, status["message"]
    assert causes[field]["reason"] == reason
    assert causes[field]["message"].startswith(message) or message in causes[field]["message"], causes[field]
    assert status["message"].startswith(
        f'CustomResourceDefinition.apiextensions.k8s.io "{crd["metadata"]["name"]}"'
    )
    assert f"{field}: {causes[field]['message']}" in status["message"]
    # nothing half-registered: neither the object nor its kind
    assert _crd_names(kube) == set()
    assert not any(k.group == crd["spec"]["group"] for k in kube.store.kinds.values())


def test_checking_the_same_crd_again_reuses_the_verdict() -> None:
    """Tests install the same CRDs hundreds of times; the full check of the large one costs
    milliseconds, so a repeated document is answered from the memo (and answered the same)."""
    crd = with_defaults(broken(lambda crd: _prop(crd, "mode").pop("type")))
    first = crd_errors(crd)
    hits = _memoised_errors.cache_info().hits
    assert crd_errors(copy.deepcopy(crd)) == first != []
    assert _memoised_errors.cache_info().hits == hits + 1


def _shipped_crds() -> list[tuple[str, Crd]]:
    shipped = [
        (path.name, yaml.safe_load(path.read_text())) for path in sorted((ROOT / "crds").glob("*.yaml"))
    ]
    rendered = chart.render({"mode": "operator"}, release="igw", namespace=pins.ADDON_NAMESPACE)
    shipped += [
        (f"chart:{o['metadata']['name']}", o) for o in rendered if o["kind"] == "CustomResourceDefinition"
    ]
    assert len(shipped) == 7, [name for name, _ in shipped]
    return shipped


@pytest.mark.parametrize(("label", "crd"), _shipped_crds(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_shipped_crd_is_admitted(label: str, crd: Crd) -> None:
    with running_fake_kube() as kube:
        stored = _post(kube, crd)
        assert stored.get("kind") == "CustomResourceDefinition", stored.get("message")
        [version] = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
        assert stored["status"]["storedVersions"] == [version]
        assert (crd["spec"]["group"], version, crd["spec"]["names"]["plural"]) in kube.store.kinds


def test_the_v1_defaults_are_stored(kube: FakeKubeApiServer) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = f"gadgets.{GROUP}"
    crd["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
    stored = _post(kube, crd)
    assert stored["spec"]["names"] == {
        "plural": "gadgets",
        "kind": "Gadget",
        "singular": "gadget",
        "listKind": "GadgetList",
    }
    assert stored["spec"]["conversion"] == {"strategy": "None"}


@pytest.fixture
def stored_widget() -> Iterator[tuple[FakeKubeApiServer, Crd]]:
    with running_fake_kube() as kube:
        created = _post(kube, widget_crd())
        assert created["kind"] == "CustomResourceDefinition", created
        # Read back, as the API server's controllers write its Established condition after the create
        # (a write carrying the create's resourceVersion would be refused 409).
        crds = kube.store.kinds[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        yield kube, kube.store.get(crds, "", created["metadata"]["name"])


def _causes(status: dict[str, Any]) -> dict[str, str]:
    assert (status.get("code"), status.get("reason")) == (422, "Invalid"), status
    return {c["field"]: c["message"] for c in status["details"]["causes"]}


def test_group_plural_scope_and_kind_are_immutable(stored_widget: tuple[FakeKubeApiServer, Crd]) -> None:
    kube, stored = stored_widget
    changed = copy.deepcopy(stored)
    changed["spec"]["group"] = "example.org"
    changed["spec"]["names"] |= {
        "plural": "gizmos",
        "kind": "Gizmo",
        "singular": "gizmo",
        "listKind": "GizmoList",
    }
    changed["spec"]["scope"] = "Cluster"
    causes = _causes(_post(kube, changed, method="PUT", name=stored["metadata"]["name"]))
    assert causes == {
        "spec.scope": 'Invalid value: "Cluster": field is immutable',
        "spec.names.kind": 'Invalid value: "Gizmo": field is immutable',
        "spec.group": 'Invalid value: "example.org": field is immutable',
        "spec.names.plural": 'Invalid value: "gizmos": field is immutable',
    }


def test_a_stored_version_may_not_leave_spec_versions(stored_widget: tuple[FakeKubeApiServer, Crd]) -> None:
    """Moving storage to v2 keeps v1 in ``status.storedVersions``; dropping v1 then is refused until a
    storage migration removes it from there, as on a real cluster."""
    kube, stored = stored_widget
    name = stored["metadata"]["name"]
    v2 = copy.deepcopy(stored["spec"]["versions"][0]) | {"name": "v2", "storage": True}
    stored["spec"]["versions"][0]["storage"] = False
    stored["spec"]["versions"].append(v2)
    moved = _post(kube, stored, method="PUT", name=name)
    assert moved["status"]["storedVersions"] == ["v1", "v2"], moved
    moved["spec"]["versions"] = [v2]
    causes = _causes(_post(kube, moved, method="PUT", name=name))
    assert causes["status.storedVersions[0]"].startswith(
        'Invalid value: "v1": missing from spec.versions; v1 was previously a storage version'
    )


def test_a_refused_update_leaves_the_crd_and_its_admission_as_they_were(
    stored_widget: tuple[FakeKubeApiServer, Crd],
) -> None:
    kube, stored = stored_widget
    kind = kube.store.kinds[(GROUP, "v1", "widgets")]
    changed = copy.deepcopy(stored)
    del changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "replicas"
    ]["type"]
    changed["spec"]["names"]["shortNames"] = ["wdg"]
    _causes(_post(kube, changed, method="PUT", name=stored["metadata"]["name"]))
    assert kube.store.kinds[(GROUP, "v1", "widgets")] == kind
    assert kube.store.kinds[(GROUP, "v1", "widgets")].schema == kind.schema
    [now] = [o for o in kube.store.iter_all() if o["kind"] == "CustomResourceDefinition"]
    assert now["spec"] == stored["spec"]
    # the old schema still admits custom resources: replicas must be an integer
    widget = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"replicas": "x"},
    }
    with pytest.raises(Exception, match="must be of type integer"):
        kube.add(widget)


def test_a_merge_patch_that_breaks_the_crd_is_refused(stored_widget: tuple[FakeKubeApiServer, Crd]) -> None:
    kube, stored = stored_widget
    request = urllib.request.Request(
        f"{kube.url}{CRD_PATH}/{stored['metadata']['name']}",
        data=json.dumps({"spec": {"versions": [{"name": "v1", "served": True, "storage": False}]}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"},
        method="PATCH",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    causes = _causes(json.loads(refused.value.read()))
    assert causes["spec.versions"].endswith("must have exactly one version marked as storage version")
    assert causes["spec.versions[0].schema.openAPIV3Schema"] == "Required value"


@needs_kubectl
def test_kubectl_apply_of_a_malformed_crd_prints_the_servers_refusal(tmp_path: Path) -> None:
    crd = widget_crd()
    crd["spec"]["versions"][0]["storage"] = False
    del _prop(crd, "mode")["type"]
    manifest = tmp_path / "crd.yaml"
    manifest.write_text(yaml.safe_dump(crd))
    with running_fake_kube() as kube:
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        applied = run_kubectl(kubeconfig, "apply", "-f", str(manifest))
        assert applied.returncode != 0
        assert f'The CustomResourceDefinition "widgets.{GROUP}" is invalid:' in applied.stderr, applied.stderr
        assert "spec.versions: Invalid value:" in applied.stderr
        assert "must have exactly one version marked as storage version" in applied.stderr
        assert (
            f"{SPEC}.properties[mode].type: Required value: must not be empty for specified object fields"
            in (applied.stderr)
        )
        assert _crd_names(kube) == set()
        manifest.with_name("ok.yaml").write_text(yaml.safe_dump(widget_crd()))
        created = run_kubectl(kubeconfig, "apply", "-f", str(manifest.with_name("ok.yaml")))
        assert created.returncode == 0, created.stderr
        assert f"customresourcedefinition.apiextensions.k8s.io/widgets.{GROUP} created" in created.stdout
