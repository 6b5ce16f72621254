"""Fixtures of the CDK tests: each deployment config is synthesized once per test session and every
test reads that cloud assembly (a synthesis costs seconds of jsii/node time)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cdk.support import EXAMPLES, Synthesized

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def _synthesize(document: dict[str, Any], outdir: Path) -> Synthesized:
    from cdk import config
    from cdk.app_builder import build_app

    built = build_app(config.parse(document), outdir=outdir)
    assembly = built.app.synth()
    roles = {
        "network": built.network,
        "cluster": built.cluster,
        "platform": built.platform,
        "inference": built.inference,
    }
    templates: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    for role, stack in roles.items():
        if stack is None:
            continue
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        templates[role] = artifact.template
        files[role] = outdir / artifact.template_file
    return Synthesized(outdir=outdir, templates=templates, files=files)


def _example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return document


def example_document() -> dict[str, Any]:
    """The default: a new VPC, EKS and HyperPod cluster, our chart with our image, TLS and DNS."""
    return _example("deployment.yaml")


def gateway_mode_document() -> dict[str, Any]:
    """The default config with the chart's explicit ``mode: gateway``: the chart runs one gateway itself."""
    document = example_document()
    document["inference"]["addon"]["configurationValues"] = {
        "mode": "gateway",
        "replicaCount": 3,
        "service": {"scheme": "internal"},
    }
    return document


def variant_document() -> dict[str, Any]:
    """Every non-default choice at once: imported VPC, API_AND_CONFIG_MAP, public+private endpoint, admin
    access entry, IRSA instead of Pod Identity, and AWS's managed add-on instead of our chart."""
    return _example("aws-managed-addon.yaml")


def existing_document() -> dict[str, Any]:
    """Existing-cluster mode: the cluster (and vpc-cni) exist; only add-ons and the gateway are created."""
    return _example("existing-cluster.yaml")


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The example deployment config, synthesized once per session."""
    return _synthesize(example_document(), tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def gateway_mode(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default config in the chart's gateway mode, synthesized once per session."""
    return _synthesize(gateway_mode_document(), tmp_path_factory.mktemp("cdk-gateway-mode.out"))


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The variant config, synthesized once per session."""
    return _synthesize(variant_document(), tmp_path_factory.mktemp("cdk-variant.out"))


@pytest.fixture(scope="session")
def existing(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The existing-cluster config, synthesized once per session."""
    return _synthesize(existing_document(), tmp_path_factory.mktemp("cdk-existing.out"))


@pytest.fixture(scope="session")
def own_namespace(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The example with its InferenceGatewayConfig in a namespace of its own (``inference``, as every
    example under ``crds/examples/`` has it), synthesized once per session."""
    document = example_document()
    document["inference"]["gatewayConfig"]["namespace"] = "inference"
    return _synthesize(document, tmp_path_factory.mktemp("cdk-own-namespace.out"))
