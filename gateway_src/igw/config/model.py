"""Typed, defaulted view of a *validated* ``InferenceGatewayConfig``.

The JSON Schema in ``schemas/`` is the contract; this module is how Python code reads a document
that already passed validation (``igw.config.validate``). Field names follow the CRD (camelCase in
YAML, snake_case here). Defaults are the documented ones and are applied here, in one place.

Construct with :func:`igw.config.build.build_gateway_config`; it assumes a valid document and raises
``KeyError``/``TypeError`` on anything else, so callers must validate first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

API_GROUP: Final = "inference.sagemaker.aws.amazon.com"
API_VERSION: Final = "v1alpha1"
KIND: Final = "InferenceGatewayConfig"
MAX_REQUEST_BODY_BYTES: Final = 268_435_456

EngineType = Literal["vllm", "sglang"]
SchedulerKind = Literal["llm-d", "epp"]


@dataclass(frozen=True, slots=True)
class DefaultBackend:
    name: str | None = None
    port: int = 8000


@dataclass(frozen=True, slots=True)
class BbrSpec:
    enabled: bool
    replicas: int = 2
    default_backend: DefaultBackend | None = None
    max_request_body_bytes: int = MAX_REQUEST_BODY_BYTES


@dataclass(frozen=True, slots=True)
class TlsSpec:
    acm_arn: str | None = None
    """``None`` or empty: auto-issue through cert-manager and import into ACM."""

    @property
    def auto_issue(self) -> bool:
        return not self.acm_arn


@dataclass(frozen=True, slots=True)
class RequiredClaim:
    name: str
    value_type: Literal["String", "StringArray"]
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JwtProvider:
    name: str
    issuer: str
    jwks_uri: str
    audiences: tuple[str, ...] = ()
    required_claims: tuple[RequiredClaim, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthSpec:
    jwt_provider: JwtProvider


@dataclass(frozen=True, slots=True)
class Weights:
    """Scorer weights. ``None`` means "not set": the scheduler applies its default for that scorer.

    One field per row of :data:`igw.config.weight_keys.SCORER_WEIGHTS` (a test keeps them equal)."""

    queue: int | None = None
    kv_cache: int | None = None
    prefix: int | None = None
    lru: int | None = None
    lora_affinity: int | None = None
    running_requests: int | None = None
    predicted_latency: int | None = None


@dataclass(frozen=True, slots=True)
class ConfigMapRef:
    name: str
    key: str = "default-plugins.yaml"


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes label-selector semantics (all terms ANDed; empty selector matches everything)."""
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def to_query(self) -> str:
        """The selector as a Kubernetes ``labelSelector`` query string."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for req in self.match_expressions:
            if req.operator == "In":
                parts.append(f"{req.key} in ({','.join(req.values)})")
            elif req.operator == "NotIn":
                parts.append(f"{req.key} notin ({','.join(req.values)})")
            elif req.operator == "Exists":
                parts.append(req.key)
            else:
                parts.append(f"!{req.key}")
        return ",".join(parts)


@dataclass(frozen=True, slots=True)
class SchedulerSpec:
    name: str
    model_selector: LabelSelector
    model_name: str
    target_port: int = 8000
    app_protocol: Literal["http", "kubernetes.io/h2c"] = "http"
    scheduler: SchedulerKind = "llm-d"
    engine_type: EngineType = "vllm"
    weights: Weights | None = None
    config_map_ref: ConfigMapRef | None = None
    replicas: int = 2
    lora_adapters: tuple[str, ...] = ()
    route_timeout_s: float | None = None
    """``routeTimeout`` in seconds; ``None`` when unset, ``0`` disables the timeout (``0s``)."""
    log_level: int = 0
    env: tuple[Mapping[str, Any], ...] = ()
    env_from: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    name: str
    namespace: str
    bbr: BbrSpec
    schedulers: tuple[SchedulerSpec, ...]
    tls: TlsSpec | None = None
    auth: AuthSpec | None = None
    metrics_enabled: bool = True
    pod_defaults: Mapping[str, Any] = field(default_factory=dict)
    extensions: Mapping[str, Any] = field(default_factory=dict)
    """Our own fields beyond AWS's shape (``spec.x-igw`` is *not* used; see ``schemas/README.md``).
    Raw validated mappings keyed by extension name, interpreted by the component that owns them."""
    stated_extensions: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """``spec.extensions`` as the document states it, before the schema's defaults are filled in:
    what the user set, for the messages that say so (the memory plan's ``flowControl.maxBytes``:
    ``extensions`` holds its default once ``flowControl`` is present, which the start log called
    configured until session s48). Not part of the configuration (equality ignores it)."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """``FILE:LINE: note: ...`` for each of AWS's fields the document sets that igw accepts without
    acting on (:mod:`igw.config.unused_fields`), filled by the file loader so that ``igw serve`` and
    its hot reload can log them; not part of the configuration (equality ignores it)."""

    def scheduler_for_model(self, model: str) -> SchedulerSpec | None:
        for sched in self.schedulers:
            if sched.model_name == model or model in sched.lora_adapters:
                return sched
        return None
