"""Build the typed :class:`~igw.config.model.GatewayConfig` from a validated document.

Defaults come from the ``default`` keywords of the JSON Schema (the same values Kubernetes applies
from the CRD), so there is one list of defaults; :func:`apply_defaults` fills them in, then the
document is read field by field. A document must pass :func:`igw.config.validate.validate_document`
first - this module trusts types and raises ``KeyError``/``TypeError`` otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, cast

from igw.config.durations import parse_duration
from igw.config.model import (
    AuthSpec,
    BbrSpec,
    ConfigMapRef,
    DefaultBackend,
    GatewayConfig,
    JwtProvider,
    LabelSelector,
    LabelSelectorRequirement,
    RequiredClaim,
    SchedulerSpec,
    TlsSpec,
    Weights,
)
from igw.config.schema import shared_schema
from igw.config.weight_keys import SCORER_WEIGHTS

DEFAULT_NAMESPACE = "default"


def apply_defaults(node: Any, schema: Mapping[str, Any]) -> Any:
    """Return a copy of ``node`` with schema defaults filled in, Kubernetes-style.

    As in the API server, a default applies only where its parent object exists: ``bbr.replicas``
    is filled when ``bbr`` is present, but an absent ``weights`` object is not created.
    """
    if isinstance(node, dict):
        result = {key: copy.deepcopy(value) for key, value in node.items()}
        properties: Mapping[str, Any] = schema.get("properties", {})
        for key, sub in properties.items():
            if key not in result and "default" in sub:
                result[key] = copy.deepcopy(sub["default"])
            if key in result:
                result[key] = apply_defaults(result[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key in result:
                if key not in properties:
                    result[key] = apply_defaults(result[key], extra)
        return result
    if isinstance(node, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(item, schema["items"]) for item in node]
    return node


def _selector(data: Mapping[str, Any]) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(data.get("matchLabels", {})),
        match_expressions=tuple(
            LabelSelectorRequirement(
                key=expr["key"], operator=expr["operator"], values=tuple(expr.get("values", ()))
            )
            for expr in data.get("matchExpressions", ())
        ),
    )


def _weights(data: Mapping[str, Any]) -> Weights:
    return Weights(**{row.field: data.get(row.key) for row in SCORER_WEIGHTS})


def _scheduler(data: Mapping[str, Any]) -> SchedulerSpec:
    weights = data.get("weights")
    cmap = data.get("configMapRef")
    timeout = data.get("routeTimeout")
    return SchedulerSpec(
        name=data["name"],
        model_selector=_selector(data["modelSelector"]),
        model_name=data["modelName"],
        target_port=data["targetPort"],
        app_protocol=data["appProtocol"],
        scheduler=data["scheduler"],
        engine_type=data["engineType"],
        weights=_weights(weights) if weights is not None else None,
        config_map_ref=ConfigMapRef(name=cmap["name"], key=cmap["key"]) if cmap is not None else None,
        replicas=data["replicas"],
        lora_adapters=tuple(data.get("loraAdapters", ())),
        route_timeout_s=parse_duration(timeout) if timeout is not None else None,
        log_level=data.get("logLevel", 0),
        env=tuple(data.get("env", ())),
        env_from=tuple(data.get("envFrom", ())),
    )


def _bbr(data: Mapping[str, Any]) -> BbrSpec:
    backend = data.get("defaultBackend")
    return BbrSpec(
        enabled=data["enabled"],
        replicas=data["replicas"],
        default_backend=DefaultBackend(name=backend["name"], port=backend["port"]) if backend else None,
        max_request_body_bytes=data["maxRequestBodyBytes"],
    )


def build_auth_spec(data: Mapping[str, Any]) -> AuthSpec:
    """``spec.auth`` of a validated document (shared with the GlobalRouterConfig, same shape)."""
    provider = data["jwt"]["provider"]
    return AuthSpec(
        jwt_provider=JwtProvider(
            name=provider["name"],
            issuer=provider["issuer"],
            jwks_uri=provider["remoteJWKS"]["uri"],
            audiences=tuple(provider.get("audiences", ())),
            required_claims=tuple(
                RequiredClaim(name=c["name"], value_type=c["valueType"], values=tuple(c["values"]))
                for c in provider.get("requiredClaims", ())
            ),
        )
    )


def build_gateway_config(doc: Mapping[str, Any]) -> GatewayConfig:
    """The typed view of a *validated* InferenceGatewayConfig document, documented defaults applied."""
    full = cast(dict[str, Any], apply_defaults(dict(doc), shared_schema()))
    metadata, spec = full["metadata"], full["spec"]
    tls = spec.get("tls")
    metrics = spec.get("observability", {}).get("metrics", {})
    return GatewayConfig(
        name=metadata["name"],
        namespace=metadata.get("namespace", DEFAULT_NAMESPACE),
        bbr=_bbr(spec["bbr"]),
        schedulers=tuple(_scheduler(item) for item in spec["schedulers"]),
        tls=TlsSpec(acm_arn=tls.get("acmArn") or None) if tls is not None else None,
        auth=build_auth_spec(spec["auth"]) if "auth" in spec else None,
        metrics_enabled=metrics.get("enabled", True),
        pod_defaults=dict(spec.get("podDefaults", {})),
        extensions=dict(spec.get("extensions", {})),
        stated_extensions=copy.deepcopy(dict(doc["spec"].get("extensions", {}))),
    )
