from __future__ import annotations

import dataclasses
from typing import Any

from igw.config.build import apply_defaults, build_gateway_config
from igw.config.model import (
    MAX_REQUEST_BODY_BYTES,
    BbrSpec,
    ConfigMapRef,
    DefaultBackend,
    SchedulerSpec,
)
from igw.config.schema import resolved_schema

from .cases import base_document


def _minimal() -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "m"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": "s", "modelName": "model", "modelSelector": {"matchLabels": {"app": "s"}}}
            ],
        },
    }


def test_documented_defaults_apply() -> None:
    config = build_gateway_config(_minimal())
    assert config.namespace == "default"
    assert config.bbr == BbrSpec(enabled=False, replicas=2, max_request_body_bytes=MAX_REQUEST_BODY_BYTES)
    (sched,) = config.schedulers
    assert (sched.target_port, sched.app_protocol, sched.scheduler, sched.engine_type, sched.replicas) == (
        8000,
        "http",
        "llm-d",
        "vllm",
        2,
    )
    assert sched.weights is None
    assert sched.config_map_ref is None
    assert sched.route_timeout_s is None
    assert config.metrics_enabled is True
    assert config.tls is None
    assert config.auth is None


def _field_default(cls: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def test_schema_defaults_match_the_model_defaults() -> None:
    """Two places carry defaults (CRD schema, dataclasses); they must not drift apart."""
    spec = resolved_schema()["properties"]["spec"]["properties"]
    sched = spec["schedulers"]["items"]["properties"]
    pairs = {
        ("targetPort", "target_port"),
        ("appProtocol", "app_protocol"),
        ("scheduler", "scheduler"),
        ("engineType", "engine_type"),
        ("replicas", "replicas"),
    }
    for camel, snake in pairs:
        assert sched[camel]["default"] == _field_default(SchedulerSpec, snake), camel
    assert spec["bbr"]["properties"]["replicas"]["default"] == _field_default(BbrSpec, "replicas")
    assert spec["bbr"]["properties"]["maxRequestBodyBytes"]["default"] == MAX_REQUEST_BODY_BYTES
    backend_port = spec["bbr"]["properties"]["defaultBackend"]["properties"]["port"]["default"]
    assert backend_port == _field_default(DefaultBackend, "port")
    assert sched["configMapRef"]["properties"]["key"]["default"] == _field_default(ConfigMapRef, "key")


def test_weights_default_only_inside_a_given_weights_object() -> None:
    doc = _minimal()
    doc["spec"]["schedulers"][0]["weights"] = {"queue": 5}
    weights = build_gateway_config(doc).schedulers[0].weights
    assert weights is not None
    assert (weights.queue, weights.kv_cache, weights.prefix, weights.lru) == (5, 2, 3, None)


def test_full_document_is_read_field_by_field() -> None:
    config = build_gateway_config(base_document())
    llama, qwen = config.schedulers
    assert llama.route_timeout_s == 30.0
    assert llama.lora_adapters == ("sql-lora",)
    assert llama.model_selector.matches({"app": "llama", "tier": "gpu"})
    assert not llama.model_selector.matches({"app": "llama", "tier": "cpu"})
    assert qwen.config_map_ref == ConfigMapRef(name="qwen-plugins", key="default-plugins.yaml")
    assert qwen.engine_type == "sglang"
    assert qwen.scheduler == "epp"
    assert config.auth is not None
    assert config.auth.jwt_provider.jwks_uri == "https://idp.example.com/jwks.json"
    assert config.tls is not None
    assert not config.tls.auto_issue
    assert config.scheduler_for_model("sql-lora") is llama


def test_apply_defaults_does_not_modify_its_input() -> None:
    doc = _minimal()
    before = repr(doc)
    apply_defaults(doc, resolved_schema())
    assert repr(doc) == before


def test_route_timeout_zero_disables() -> None:
    doc = _minimal()
    doc["spec"]["schedulers"][0]["routeTimeout"] = "0s"
    assert build_gateway_config(doc).schedulers[0].route_timeout_s == 0.0


def test_empty_acm_arn_means_auto_issue() -> None:
    doc = _minimal()
    doc["spec"]["tls"] = {"acmArn": ""}
    tls = build_gateway_config(doc).tls
    assert tls is not None
    assert tls.auto_issue
