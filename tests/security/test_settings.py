"""The extension schemas and their typed readers: schemas closed, defaults identical in both places,
bad documents refused naming the field (through the project's real validator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from igw.config.validate import validate_document
from igw.security.settings import AuthorizationSettings, RateLimitSettings, TlsTerminationSettings

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "extensions"
OURS = ("authorization", "rateLimits", "tlsTermination")


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return schema


def resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = root["$defs"][ref.removeprefix("#/$defs/")]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def stated_defaults(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Every ``default`` in an object schema, as a document (nested objects included)."""
    doc: dict[str, Any] = {}
    for name, prop in node.get("properties", {}).items():
        prop = resolve(prop, root)
        if "default" in prop:
            doc[name] = prop["default"]
        elif prop.get("type") == "object":
            nested = stated_defaults(prop, root)
            if nested:
                doc[name] = nested
    return doc


def closed_everywhere(node: Any, path: str = "") -> list[str]:
    open_objects: list[str] = []
    if isinstance(node, dict):
        if node.get("type") == "object" and node.get("additionalProperties") is not False:
            open_objects.append(path or "<root>")
        for key, value in node.items():
            open_objects += closed_everywhere(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            open_objects += closed_everywhere(value, f"{path}[{index}]")
    return open_objects


@pytest.mark.parametrize("name", OURS)
def test_schema_is_valid_and_closed(name: str) -> None:
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    assert closed_everywhere(schema) == []


def test_authorization_defaults_match_the_schema() -> None:
    schema = load("authorization")
    assert AuthorizationSettings.from_mapping(
        stated_defaults(schema, schema)
    ) == AuthorizationSettings.from_mapping({})
    assert AuthorizationSettings.from_mapping({}) == AuthorizationSettings()


def test_rate_limit_defaults_match_the_schema() -> None:
    schema = load("rateLimits")
    assert RateLimitSettings.from_mapping(stated_defaults(schema, schema)) == RateLimitSettings.from_mapping(
        {}
    )
    assert RateLimitSettings.from_mapping({}) == RateLimitSettings()


def test_tls_defaults_match_the_schema() -> None:
    schema = load("tlsTermination")
    files = {"certFile": "/c", "keyFile": "/k"}
    stated = TlsTerminationSettings.from_mapping({**stated_defaults(schema, schema), **files})
    assert stated == TlsTerminationSettings.from_mapping(files)
    assert TlsTerminationSettings.from_mapping(files) == TlsTerminationSettings(cert_file="/c", key_file="/k")


def test_full_authorization_document_is_read() -> None:
    raw = {
        "tenantClaim": "org.id",
        "tenantHeader": "x-tenant",
        "requireTenant": True,
        "prefixCacheIsolation": "tenant",
        "modelAccess": [{"claim": "groups", "values": ["a"], "models": ["m-*"]}],
        "forwardClaims": [{"claim": "sub", "header": "x-sub"}],
        "forwardAuthorization": True,
        "maxForwardedHeaderBytes": 256,
        "algorithms": ["ES256"],
        "clockSkew": "5s",
        "maxTokenLifetime": "1h",
        "maxTokenBytes": 4096,
        "allowedTokenTypes": ["at+jwt"],
        "oidcDiscovery": True,
        "jwks": {
            "ttl": "1m",
            "maxStale": "2h",
            "unknownKidCooldown": "15s",
            "fetchTimeout": "2s",
            "maxBytes": 2048,
            "maxKeys": 5,
        },
        "verifiedTokenCache": {"maxEntries": 0, "maxAge": "10s"},
    }
    assert not Draft202012Validator(load("authorization")).is_valid({**raw, "bogus": 1})
    Draft202012Validator(load("authorization")).validate(raw)
    s = AuthorizationSettings.from_mapping(raw)
    assert (s.tenant_claim, s.tenant_header, s.require_tenant) == ("org.id", "x-tenant", True)
    assert s.isolate_prefix_caches
    assert s.model_access[0].models == ("m-*",)
    assert s.forwarded_header_names == {"x-tenant", "x-sub"}
    assert (s.clock_skew_s, s.max_token_lifetime_s, s.max_token_bytes) == (5, 3600, 4096)
    assert (s.jwks.ttl_s, s.jwks.max_stale_s, s.jwks.unknown_kid_cooldown_s) == (60, 7200, 15)
    assert (s.jwks.fetch_timeout_s, s.jwks.max_bytes, s.jwks.max_keys) == (2, 2048, 5)
    assert (s.verified_token_cache.max_entries, s.verified_token_cache.max_age_s) == (0, 10)


def test_cooldown_under_ten_seconds_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"authorization\.jwks\.unknownKidCooldown: must be at least 10s"):
        AuthorizationSettings.from_mapping({"jwks": {"unknownKidCooldown": "5s"}})


@pytest.mark.parametrize(
    ("jwks", "message"),
    [
        ({"ttl": "0s"}, r"jwks\.ttl: must be greater than 0s"),
        ({"fetchTimeout": "0ms"}, r"jwks\.fetchTimeout: must be greater than 0s"),
        ({"maxStale": "0s"}, r"jwks\.maxStale: must be at least ttl"),
        ({"ttl": "1h", "maxStale": "10m"}, r"jwks\.maxStale: must be at least ttl"),
    ],
)
def test_a_jwks_timing_the_cache_cannot_keep_is_refused_naming_the_field(
    jwks: dict[str, str], message: str
) -> None:
    """The guard's own check (the global router's configuration reaches it without the
    InferenceGatewayConfig's admission rules). ``ttl: 0s`` refetched the keys 422 times a second
    with no traffic; ``maxStale: 0s`` fetched them once per request and refused every token."""
    with pytest.raises(ValueError, match=message):
        AuthorizationSettings.from_mapping({"jwks": jwks})


def gateway_doc(extensions: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "g", "namespace": "n"},
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [{"name": "s", "modelSelector": {"matchLabels": {"a": "b"}}, "modelName": "m"}],
            "extensions": extensions,
        },
    }


@pytest.mark.parametrize(
    ("extensions", "field"),
    [
        ({"authorization": {"tenantClam": "x"}}, "spec.extensions.authorization.tenantClam"),
        ({"authorization": {"clockSkew": "60"}}, "spec.extensions.authorization.clockSkew"),
        ({"authorization": {"algorithms": ["HS256"]}}, "spec.extensions.authorization.algorithms[0]"),
        ({"authorization": {"algorithms": ["none"]}}, "spec.extensions.authorization.algorithms[0]"),
        (
            {"authorization": {"forwardClaims": [{"claim": "sub", "header": "x_sub"}]}},
            "spec.extensions.authorization.forwardClaims[0].header",
        ),
        ({"authorization": {"jwks": {"maxBytes": 10}}}, "spec.extensions.authorization.jwks.maxBytes"),
        # igw validate accepted these before session s39; igw serve refused the first, and the
        # others left a gateway refetching its keys without pause or once per request
        (
            {"authorization": {"jwks": {"unknownKidCooldown": "5s"}}},
            "spec.extensions.authorization.jwks.unknownKidCooldown",
        ),
        ({"authorization": {"jwks": {"ttl": "0s"}}}, "spec.extensions.authorization.jwks.ttl"),
        (
            {"authorization": {"jwks": {"fetchTimeout": "0ms"}}},
            "spec.extensions.authorization.jwks.fetchTimeout",
        ),
        ({"authorization": {"jwks": {"maxStale": "0s"}}}, "spec.extensions.authorization.jwks.maxStale"),
        (
            {"authorization": {"jwks": {"ttl": "1h", "maxStale": "10m"}}},
            "spec.extensions.authorization.jwks.maxStale",
        ),
        ({"rateLimits": {"backend": "memcached"}}, "spec.extensions.rateLimits.backend"),
        (
            {"rateLimits": {"default": {"requestsPerSecond": 0}}},
            "spec.extensions.rateLimits.default.requestsPerSecond",
        ),
        ({"rateLimits": {"onRedisUnavailable": "maybe"}}, "spec.extensions.rateLimits.onRedisUnavailable"),
        ({"rateLimits": {"redis": {"url": "http://x"}}}, "spec.extensions.rateLimits.redis.url"),
        (
            {"rateLimits": {"tenants": [{"requestsPerSecond": 1}]}},
            "spec.extensions.rateLimits.tenants[0].tenant",
        ),
        ({"tlsTermination": {"certFile": "/c"}}, "spec.extensions.tlsTermination.keyFile"),
        (
            {"tlsTermination": {"certFile": "/c", "keyFile": "/k", "minVersion": "TLSv1.1"}},
            "spec.extensions.tlsTermination.minVersion",
        ),
    ],
)
def test_bad_extension_documents_are_refused_naming_the_field(extensions: dict[str, Any], field: str) -> None:
    problems = [str(p) for p in validate_document(gateway_doc(extensions))]
    assert problems, "the document must be refused"
    assert any(field in p for p in problems), problems


def test_good_extension_document_passes_the_project_validator() -> None:
    extensions = {
        "authorization": {
            "tenantClaim": "org",
            "modelAccess": [{"claim": "g", "values": ["a"], "models": ["*"]}],
        },
        "rateLimits": {"backend": "redis", "default": {"requestsPerSecond": 5, "tokensPerMinute": 10000}},
        "tlsTermination": {"certFile": "/etc/tls/tls.crt", "keyFile": "/etc/tls/tls.key"},
    }
    assert [str(p) for p in validate_document(gateway_doc(extensions))] == []


def test_plain_http_jwks_uri_is_refused_naming_the_field() -> None:
    from prometheus_client import CollectorRegistry

    from igw.security.factory import build_request_guard
    from tests.security.helpers import make_config

    config = make_config(issuer="https://idp.example", jwks_uri="http://idp.example/jwks")
    with pytest.raises(ValueError, match=r"remoteJWKS\.uri: not an https URL"):
        build_request_guard(config, registry=CollectorRegistry())


@pytest.mark.parametrize("interval", ["0s", "0ms", "99ms"])
def test_a_tls_reload_interval_under_100ms_is_refused(interval: str) -> None:
    """``tlsTermination.reloadInterval`` under 100ms (rule ``tls-reload-interval-minimum``) stops the
    gateway at start: before session s42 ``0s`` re-read and hashed the certificate and key without
    pause, half a CPU core of an idle ``igw serve``."""
    with pytest.raises(ValueError, match=r"tlsTermination\.reloadInterval: must be at least 100ms"):
        TlsTerminationSettings.from_mapping({"certFile": "/c", "keyFile": "/k", "reloadInterval": interval})
    assert TlsTerminationSettings.from_mapping(
        {"certFile": "/c", "keyFile": "/k", "reloadInterval": "100ms"}
    ) == TlsTerminationSettings(cert_file="/c", key_file="/k", reload_interval_s=0.1)
