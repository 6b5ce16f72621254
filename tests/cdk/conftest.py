"""Fixtures of the CDK tests: each deployment config is synthesized once per test session and every
test reads that cloud assembly (a synthesis costs seconds of jsii/node time)."""

from __future__ import annotations

import os

import pytest

from tests.cdk.support import (
    Synthesized,
    example_document,
    existing_document,
    gateway_mode_document,
    synthesize,
    variant_document,
)

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The example deployment config, synthesized once per session."""
    return synthesize(example_document(), tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def gateway_mode(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default config in the chart's gateway mode, synthesized once per session."""
    return synthesize(gateway_mode_document(), tmp_path_factory.mktemp("cdk-gateway-mode.out"))


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The variant config, synthesized once per session."""
    return synthesize(variant_document(), tmp_path_factory.mktemp("cdk-variant.out"))


@pytest.fixture(scope="session")
def existing(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The existing-cluster config, synthesized once per session."""
    return synthesize(existing_document(), tmp_path_factory.mktemp("cdk-existing.out"))


@pytest.fixture(scope="session")
def own_namespace(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The example with its InferenceGatewayConfig in a namespace of its own (``inference``, as every
    example under ``crds/examples/`` has it), synthesized once per session."""
    document = example_document()
    document["inference"]["gatewayConfig"]["namespace"] = "inference"
    return synthesize(document, tmp_path_factory.mktemp("cdk-own-namespace.out"))
