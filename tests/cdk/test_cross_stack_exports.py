"""Cross-stack exports stay put when the deployment config changes between deploys.

The stacks pass values through CloudFormation exports (``Fn::ImportValue``). CloudFormation refuses to
delete an export another stack still imports, and ``cdk deploy --all`` updates the producer first, so
an export that only some configs need blocks the change away from them: "Export ... cannot be deleted
as it is in use by <prefix>Inference". Before session s40 the cluster stack exported the HyperPod
cluster ARN only when ``inference.addon.mode: awsManaged`` imported it, so switching a deployment to
``igw`` failed the cluster stack's update. Each producer must export, in every config, whatever any
config's consumers import from it (``docs/infrastructure.md`` lists the changes that are not allowed:
zones removed from a deployed VPC take their subnets, and CloudFormation rightly refuses).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cdk.support import Synthesized

CONFIGS = ("synthesized", "gateway_mode", "variant", "own_namespace")
"""The session fixtures of one account and region: the example (our chart in operator mode, Pod
Identity), gateway mode, AWS's add-on with IRSA and an imported VPC, and another namespace."""


def _imports(value: Any) -> Iterator[str]:
    """Export names a template's value imports, however deeply nested."""
    if isinstance(value, dict):
        if isinstance(value.get("Fn::ImportValue"), str):
            yield value["Fn::ImportValue"]
        for item in value.values():
            yield from _imports(item)
    elif isinstance(value, list):
        for item in value:
            yield from _imports(item)


def _exports(template: dict[str, Any]) -> set[str]:
    return {
        output["Export"]["Name"]
        for output in template.get("Outputs", {}).values()
        if isinstance(output.get("Export", {}).get("Name"), str)
    }


def _producer(export_name: str) -> str:
    """CDK names an export ``<producer stack>:ExportsOutput...``."""
    return export_name.split(":", 1)[0]


def missing_exports(assemblies: dict[str, dict[str, dict[str, Any]]]) -> dict[str, list[str]]:
    """``config -> export names`` that some config imports from a stack this config also has, but that
    this config's stack does not export (so a change between the two configs deletes an export in use)."""
    imported: dict[str, set[str]] = {}
    for templates in assemblies.values():
        for template in templates.values():
            for name in _imports(template):
                imported.setdefault(_producer(name), set()).add(name)
    missing: dict[str, list[str]] = {}
    for config, templates in assemblies.items():
        exported: dict[str, set[str]] = {}
        for template in templates.values():
            for name in _exports(template):
                exported.setdefault(_producer(name), set()).add(name)
        for producer, names in exported.items():
            if lacking := sorted(imported.get(producer, set()) - names):
                missing[config] = missing.get(config, []) + lacking
    return missing


def test_every_export_any_config_imports_is_exported_by_every_config(request: pytest.FixtureRequest) -> None:
    assemblies = {config: request.getfixturevalue(config) for config in CONFIGS}
    templates = {config: synthesized.templates for config, synthesized in assemblies.items()}

    assert missing_exports(templates) == {}
    # The check sees something: the cluster stack's exports are imported in every one of these configs.
    cluster_imports = {name for t in templates["synthesized"].values() for name in _imports(t)}
    assert {_producer(name) for name in cluster_imports} == {"IgwNetwork", "IgwCluster"}


def test_the_check_sees_an_export_only_one_config_has() -> None:
    """The shape before the fix: the HyperPod cluster ARN exported and imported with AWS's add-on only."""
    arn = "IgwCluster:ExportsOutputFnGetAttHyperPodClusterArn"
    name = "IgwCluster:ExportsOutputRefEksCluster"
    output = {"Value": "x", "Export": {"Name": name}}
    imports_name = {"Type": "T", "Properties": {"N": {"Fn::ImportValue": name}}}
    igw: dict[str, dict[str, Any]] = {
        "cluster": {"Resources": {}, "Outputs": {"A": output}},
        "inference": {"Resources": {"R": imports_name}},
    }
    aws_managed: dict[str, dict[str, Any]] = {
        "cluster": {"Resources": {}, "Outputs": {"A": output, "B": {"Value": "y", "Export": {"Name": arn}}}},
        "inference": {"Resources": {"R": imports_name, "S": {"Properties": [{"Fn::ImportValue": arn}]}}},
    }

    assert missing_exports({"igw": igw, "awsManaged": aws_managed}) == {"igw": [arn]}


def test_a_synthesized_fixture_is_what_the_check_reads(synthesized: Synthesized) -> None:
    """Every producer in the example exports under its own stack name (what ``_producer`` relies on)."""
    for role, template in synthesized.templates.items():
        stack_name = synthesized.files[role].name.removesuffix(".template.json")
        assert {_producer(name) for name in _exports(template)} <= {stack_name}
