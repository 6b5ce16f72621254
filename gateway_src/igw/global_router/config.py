"""Typed, defaulted view of a *validated* ``GlobalRouterConfig`` (see :mod:`igw.global_router.schema`).

Defaults are the schema's, applied here in one place. :func:`load_global_config` reads, validates
and builds in one step and raises :class:`GlobalConfigError` listing every problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from igw.config.build import build_auth_spec
from igw.config.documents import DocumentReadError, read_resources
from igw.config.errors import ConfigError, Problem
from igw.config.model import MAX_REQUEST_BODY_BYTES, AuthSpec
from igw.global_router.schema import (
    DEFAULT_REPLAY_KEEPALIVE_S,
    KIND,
    is_global_router_config,
    validate_global_document,
)

Policy = Literal["latency-first", "cost-first-within-slo"]

CONFIG_ENV = "IGW_GLOBAL_CONFIG"
"""The environment variable the CDK stack passes the configuration in (``cdk/stacks/global_router_stack.py``
imports this name and writes the variable to the file it gives ``igw global serve --config``); set, the
command treats the file as a copy of it and does not reload it. One name for both sides: the command
told the two cases apart by a literal of its own until session s50."""


class GlobalConfigError(ConfigError):
    """A GlobalRouterConfig could not be loaded; ``problems`` names every field at fault."""

    def _render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        count = len(self.problems)
        head = f"{where}invalid {KIND} ({count} problem{'s' if count != 1 else ''})"
        return "\n".join([head, *(f"  {problem}" for problem in self.problems)])


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    region: str
    endpoint: str
    """Base URL without a trailing slash."""
    models: tuple[str, ...]
    capacity_weight: float = 1.0
    cost_per_million_tokens: float | None = None
    """Price per million tokens (``perGpuHour`` converted through ``tokensPerGpuSecond``)."""


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    policy: Policy = "latency-first"
    ttft_p99_slo_s: float = 2.0
    saturation_threshold: float = 0.8
    inter_region_penalty_s: float = 0.1
    max_attempts: int = 3
    max_request_body_bytes: int = MAX_REQUEST_BODY_BYTES
    """Largest request body accepted (413 above it): each is held whole while clusters are tried."""


@dataclass(frozen=True, slots=True)
class FailoverSpec:
    heartbeat_staleness_s: float = 3.0
    failure_threshold: int = 3
    ejection_s: float = 5.0
    slow_start_s: float = 30.0
    max_ejection_percent: int = 50


@dataclass(frozen=True, slots=True)
class HeartbeatSpec:
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_password_env: str | None = None
    """The environment variable holding the Redis password (:mod:`igw.config.redis_password`)."""
    key_prefix: str = "igw:hb:"
    poll_interval_s: float = 0.5
    required: bool = True


@dataclass(frozen=True, slots=True)
class AccessLogSpec:
    """``spec.accessLog``: the router's per-request JSON lines (:mod:`igw.global_router.access_log`)."""

    enabled: bool = True
    destination: Literal["stdout", "stderr"] = "stdout"


@dataclass(frozen=True, slots=True)
class ModelLimit:
    tenant: str
    model: str
    requests_per_second: float | None = None
    burst: int | None = None
    tokens_per_minute: float | None = None
    token_burst: int | None = None


@dataclass(frozen=True, slots=True)
class GlobalRouterConfig:
    name: str
    region: str
    clusters: tuple[ClusterSpec, ...]
    routing: RoutingSpec = field(default_factory=RoutingSpec)
    failover: FailoverSpec = field(default_factory=FailoverSpec)
    heartbeats: HeartbeatSpec = field(default_factory=HeartbeatSpec)
    connect_timeout_s: float = 2.0
    request_timeout_s: float = 600.0
    max_request_s: float = 3600.0
    """``spec.upstream.maxRequestSeconds``: the bound on a whole request (every attempt, a stream to
    its end); ``request_timeout_s`` bounds each wait only, so a cluster streaming forever (a stuck
    generation's tokens or keep-alive comments) held the client's and its own connection forever."""
    replay_keepalive_s: float = DEFAULT_REPLAY_KEEPALIVE_S
    """``spec.upstream.replayKeepAliveSeconds``: how long a held replay of a stored response stays
    silent towards its client before the router's ``: ping`` (a constant until session s48: a proxy
    in front of the router idling out sooner than 15 s could not be accommodated)."""
    auth: AuthSpec | None = None
    authorization: Mapping[str, Any] = field(default_factory=dict)
    """Raw ``spec.authorization`` (the IGWC ``extensions.authorization`` shape), read by igw.security."""
    rate_limits: Mapping[str, Any] = field(default_factory=dict)
    """Raw ``spec.rateLimits`` (the IGWC ``extensions.rateLimits`` shape), read by igw.security."""
    model_limits: tuple[ModelLimit, ...] = ()
    server_limits: Mapping[str, Any] = field(default_factory=dict)
    """Raw ``spec.serverLimits`` (the IGWC ``extensions.serverLimits`` shape), read by
    :func:`igw.gateway.limits_config.server_limits`: the client listener's timeouts and bounds."""
    access_log: AccessLogSpec = field(default_factory=AccessLogSpec)
    management: Mapping[str, Any] | None = None
    """Raw ``spec.management`` (``{port}``), the IGWC ``extensions.management`` shape; read by
    :func:`igw.gateway.management.management_port` with ``igw global serve --management-port``."""

    def models(self) -> list[str]:
        return sorted({m for c in self.clusters for m in c.models})


def _cost(raw: Mapping[str, Any] | None) -> float | None:
    if not raw:
        return None
    if "perMillionTokens" in raw:
        return float(raw["perMillionTokens"])
    # USD per GPU-hour / (tokens per GPU-hour / 1e6)
    return float(raw["perGpuHour"]) / (float(raw["tokensPerGpuSecond"]) * 3600.0 / 1e6)


def build_global_config(doc: Mapping[str, Any]) -> GlobalRouterConfig:
    """Build from a document that passed :func:`validate_global_document` (else KeyError/TypeError)."""
    spec = doc["spec"]
    routing = spec.get("routing", {})
    failover = spec.get("failover", {})
    heartbeats = spec.get("heartbeats", {})
    redis = heartbeats.get("redis", {})
    upstream = spec.get("upstream", {})
    management = spec.get("management")
    access_log = spec.get("accessLog", {})
    d_r, d_f, d_h = RoutingSpec(), FailoverSpec(), HeartbeatSpec()
    return GlobalRouterConfig(
        name=str(doc["metadata"]["name"]),
        region=str(spec["region"]),
        clusters=tuple(
            ClusterSpec(
                name=c["name"],
                region=c["region"],
                endpoint=str(c["endpoint"]).rstrip("/"),
                models=tuple(c["models"]),
                capacity_weight=float(c.get("capacityWeight", 1.0)),
                cost_per_million_tokens=_cost(c.get("cost")),
            )
            for c in spec["clusters"]
        ),
        routing=RoutingSpec(
            policy=routing.get("policy", d_r.policy),
            ttft_p99_slo_s=float(routing.get("slo", {}).get("ttftP99Seconds", d_r.ttft_p99_slo_s)),
            saturation_threshold=float(routing.get("saturationThreshold", d_r.saturation_threshold)),
            inter_region_penalty_s=float(
                routing.get("interRegionPenaltySeconds", d_r.inter_region_penalty_s)
            ),
            max_attempts=int(routing.get("maxAttempts", d_r.max_attempts)),
            max_request_body_bytes=int(routing.get("maxRequestBodyBytes", d_r.max_request_body_bytes)),
        ),
        failover=FailoverSpec(
            heartbeat_staleness_s=float(failover.get("heartbeatStalenessSeconds", d_f.heartbeat_staleness_s)),
            failure_threshold=int(failover.get("failureThreshold", d_f.failure_threshold)),
            ejection_s=float(failover.get("ejectionSeconds", d_f.ejection_s)),
            slow_start_s=float(failover.get("slowStartSeconds", d_f.slow_start_s)),
            max_ejection_percent=int(failover.get("maxEjectionPercent", d_f.max_ejection_percent)),
        ),
        heartbeats=HeartbeatSpec(
            redis_url=str(redis.get("url", d_h.redis_url)),
            redis_password_env=redis.get("passwordEnv"),
            key_prefix=str(redis.get("keyPrefix", d_h.key_prefix)),
            poll_interval_s=float(heartbeats.get("pollIntervalSeconds", d_h.poll_interval_s)),
            required=bool(heartbeats.get("required", d_h.required)),
        ),
        connect_timeout_s=float(upstream.get("connectTimeoutSeconds", 2.0)),
        request_timeout_s=float(upstream.get("requestTimeoutSeconds", 600.0)),
        max_request_s=float(upstream.get("maxRequestSeconds", 3600.0)),
        replay_keepalive_s=float(upstream.get("replayKeepAliveSeconds", DEFAULT_REPLAY_KEEPALIVE_S)),
        auth=build_auth_spec(spec["auth"]) if "auth" in spec else None,
        authorization=dict(spec.get("authorization", {})),
        rate_limits=dict(spec.get("rateLimits", {})),
        server_limits=dict(spec.get("serverLimits", {})),
        model_limits=tuple(
            ModelLimit(
                tenant=e["tenant"],
                model=e["model"],
                requests_per_second=e.get("requestsPerSecond"),
                burst=e.get("burst"),
                tokens_per_minute=e.get("tokensPerMinute"),
                token_burst=e.get("tokenBurst"),
            )
            for e in spec.get("modelRateLimits", [])
        ),
        management=dict(management) if management is not None else None,
        access_log=AccessLogSpec(
            enabled=bool(access_log.get("enabled", True)),
            destination="stderr" if access_log.get("destination") == "stderr" else "stdout",
        ),
    )


def parse_global_config(doc: Any, *, source: str | None = None) -> GlobalRouterConfig:
    """Validate then build one document; :class:`GlobalConfigError` with every problem if invalid."""
    problems = validate_global_document(doc)
    if problems:
        raise GlobalConfigError(problems, source=source)
    return build_global_config(doc)


def load_global_config(path: str | Path) -> GlobalRouterConfig:
    """Read the one GlobalRouterConfig document of ``path``."""
    try:
        documents = read_resources(path)
    except DocumentReadError as exc:
        raise GlobalConfigError([Problem("", str(exc), "unreadable")], source=str(path)) from exc
    found = [d for d in documents if is_global_router_config(d.content)]
    if len(found) != 1:
        message = f"expected exactly one {KIND} document, found {len(found)}"
        raise GlobalConfigError([Problem("", message, "global-one-document")], source=str(path))
    return parse_global_config(found[0].content, source=str(path))
