"""The dev tear-down flag (``-c destroyData=true``, :mod:`cdk.constructs.removal`): every stateful
resource of every stack is deleted with its stack (buckets emptied first), and kept without it.

Before session s45 only the global router's Redis had such a flag (``globalRouterDestroyData``); the
buckets, log groups and the EKS secrets key of a dev stack were always retained, so ``cdk destroy``
left them behind. The old name still works for the global router stack alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cdk import nag
from cdk.constructs.removal import (
    DESTROY_DATA_CONTEXT,
    ROUTER_DESTROY_DATA_CONTEXT,
    DestroyDataContextError,
)
from tests.cdk.support import example_document, variant_document
from tests.cdk.test_service_trust_and_removal import DELETED_WITH_THE_STACK, STATEFUL

KEPT = {
    "AWS::S3::Bucket": "Retain",
    "AWS::Logs::LogGroup": "Retain",
    "AWS::KMS::Key": "Retain",
    "AWS::ElastiCache::ReplicationGroup": "Snapshot",
}
"""Each stateful resource type the stacks create, and its deletion policy without the flag."""

Templates = dict[str, dict[str, Any]]


def _app_templates(context: Mapping[str, object], outdir: Path) -> Templates:
    """The default and the variant (AWS's add-on: the TLS buckets) per-cluster apps and the global
    router, synthesized with ``context``; cdk-nag findings are written under ``outdir``."""
    import aws_cdk as cdk

    from cdk import config
    from cdk.app_builder import build_app, feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import build_global_router_stack

    templates: Templates = {}
    for name, document in (("default", example_document()), ("variant", variant_document())):
        app = cdk.App(outdir=str(outdir / name), context={**feature_flags(), **context})
        built = build_app(config.parse(document), app=app)
        assembly = app.synth()
        for stack in built.stacks:
            templates[f"{name}/{stack.stack_name}"] = assembly.get_stack_artifact(stack.artifact_id).template
    app = cdk.App(outdir=str(outdir / "global"), context={**feature_flags(), **context})
    router = build_global_router_stack(app, load(EXAMPLE_FILE))
    templates["global"] = app.synth().get_stack_artifact(router.artifact_id).template
    return templates


def _policies(templates: Templates) -> dict[str, set[tuple[str, str]]]:
    """Stateful type -> the (DeletionPolicy, UpdateReplacePolicy) pairs its resources have, leaving out
    those deleted with the stack on purpose."""
    found: dict[str, set[tuple[str, str]]] = {}
    for template in templates.values():
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] in STATEFUL and not logical_id.startswith(tuple(DELETED_WITH_THE_STACK)):
                policies = (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
                found.setdefault(resource["Type"], set()).add(policies)
    return found


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Templates:
    return _app_templates({}, tmp_path_factory.mktemp("kept"))


@pytest.fixture(scope="module")
def destroyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Templates, Path]:
    outdir = tmp_path_factory.mktemp("destroyed")
    return _app_templates({DESTROY_DATA_CONTEXT: "true"}, outdir), outdir


def test_the_stacks_create_each_stateful_type_listed(kept: Templates) -> None:
    assert set(_policies(kept)) == set(KEPT)


@pytest.mark.parametrize("kind", sorted(KEPT))
def test_without_the_flag_each_stateful_type_is_kept(kept: Templates, kind: str) -> None:
    assert _policies(kept)[kind] == {(KEPT[kind], KEPT[kind])}


@pytest.mark.parametrize("kind", sorted(KEPT))
def test_with_the_flag_each_stateful_type_is_deleted(destroyed: tuple[Templates, Path], kind: str) -> None:
    assert _policies(destroyed[0])[kind] == {("Delete", "Delete")}


def test_with_the_flag_every_bucket_is_emptied_before_it_is_deleted(
    destroyed: tuple[Templates, Path],
) -> None:
    for name, template in destroyed[0].items():
        resources = template["Resources"]
        buckets = {logical for logical, r in resources.items() if r["Type"] == "AWS::S3::Bucket"}
        emptied = {
            r["Properties"]["BucketName"]["Ref"]
            for r in resources.values()
            if r["Type"] == "Custom::S3AutoDeleteObjects"
        }
        assert emptied == buckets, name


def test_with_the_flag_cdk_nag_still_has_no_unsuppressed_findings(
    destroyed: tuple[Templates, Path],
) -> None:
    for app in ("default", "variant", "global"):
        violations, _ = nag.read_report(destroyed[1] / app)
        assert violations == [], app


def _router_redis_policy(context: Mapping[str, object]) -> str:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from cdk.app_builder import feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import build_global_router_stack

    app = cdk.App(context={**feature_flags(), **context})
    stack = build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
    (redis,) = Template.from_stack(stack).find_resources("AWS::ElastiCache::ReplicationGroup").values()
    return str(redis["DeletionPolicy"])


def test_the_old_router_flag_still_deletes_the_router_data_and_agrees_with_the_new() -> None:
    assert _router_redis_policy({ROUTER_DESTROY_DATA_CONTEXT: "true"}) == "Delete"
    assert _router_redis_policy({ROUTER_DESTROY_DATA_CONTEXT: True, DESTROY_DATA_CONTEXT: "true"}) == "Delete"
    with pytest.raises(DestroyDataContextError, match="disagree"):
        _router_redis_policy({ROUTER_DESTROY_DATA_CONTEXT: "true", DESTROY_DATA_CONTEXT: "false"})


def test_the_old_router_flag_does_not_delete_the_per_cluster_data() -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from cdk import config
    from cdk.app_builder import build_app, feature_flags

    app = cdk.App(context={**feature_flags(), ROUTER_DESTROY_DATA_CONTEXT: "true"})
    built = build_app(config.parse(example_document()), app=app)
    (key,) = Template.from_stack(built.cluster).find_resources("AWS::KMS::Key").values()
    assert key["DeletionPolicy"] == "Retain"


def test_a_misspelt_value_is_refused_naming_the_flag() -> None:
    import aws_cdk as cdk

    from cdk import config
    from cdk.app_builder import build_app, feature_flags
    from cdk.synth_errors import refusal

    app = cdk.App(context={**feature_flags(), DESTROY_DATA_CONTEXT: "yes"})
    with pytest.raises(DestroyDataContextError) as caught:
        build_app(config.parse(example_document()), app=app)
    assert refusal(caught.value) == f"context {DESTROY_DATA_CONTEXT}: expected true or false, got 'yes'"
