from __future__ import annotations

from pathlib import Path

import pytest

from igw.config.documents import read_documents
from igw.config.loader import load_gateway_config
from igw.config.validate import is_gateway_config, validate_document

from .cel_harness import cel_failures
from .support import EXAMPLES

REQUIRED_EXAMPLES = {
    "single-model.yaml",
    "multi-model-bbr.yaml",
    "lora-adapters.yaml",
    "jwt-audiences.yaml",
    "jwt-required-claims.yaml",
    "tls-auto-issue.yaml",
    "custom-weights.yaml",
    "configmap-ref.yaml",
}


def test_the_documented_examples_exist() -> None:
    assert {path.name for path in EXAMPLES} >= REQUIRED_EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid_for_python_and_cel(path: Path) -> None:
    configs = [doc.content for doc in read_documents(path) if is_gateway_config(doc.content)]
    assert configs, f"{path.name} holds no InferenceGatewayConfig"
    for doc in configs:
        assert validate_document(doc) == []
        assert cel_failures(doc) == set()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_into_the_typed_model(path: Path) -> None:
    config = load_gateway_config(path)
    assert config.schedulers
    assert all(s.target_port >= 1 for s in config.schedulers)


def test_examples_cover_the_features_they_are_named_for() -> None:
    by_name = {p.name: load_gateway_config(p) for p in EXAMPLES}
    assert len(by_name["multi-model-bbr.yaml"].schedulers) > 1
    assert by_name["multi-model-bbr.yaml"].bbr.enabled
    assert by_name["lora-adapters.yaml"].schedulers[0].lora_adapters
    jwt = by_name["jwt-audiences.yaml"].auth
    assert jwt is not None
    assert jwt.jwt_provider.audiences
    claims = by_name["jwt-required-claims.yaml"].auth
    assert claims is not None
    assert claims.jwt_provider.required_claims
    tls = by_name["tls-auto-issue.yaml"].tls
    assert tls is not None
    assert tls.auto_issue
    assert by_name["custom-weights.yaml"].schedulers[0].weights is not None
    assert by_name["configmap-ref.yaml"].schedulers[0].config_map_ref is not None
