"""The chart's gateway mode follows the served configuration: a pod-template annotation holds the
digest of what ``igw serve`` reads only at start (:mod:`igw.config.restart_only`), so a ``helm
upgrade`` that changes it rolls the pods (before, it reached the ConfigMap only, and the pods' hot
reload kept the limits they started with), and the NetworkPolicy opens the Redis ports it uses."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml

from igw.addon import chart, pins
from igw.config.restart_only import LIVE_SERVER_LIMITS, RESTART_ONLY, restart_digest
from igw.operator.model_egress import model_server_rules
from tests.operator.dataplane_support import K8S_VERSION

ANNOTATION = "inference.sagemaker.aws.amazon.com/restart-config"
VALUES = {
    "serverLimits": {"headerTimeout": "3s"},
    "tlsTermination": {"certFile": "/etc/custom/tls.crt", "keyFile": "/etc/custom/tls.key"},
    "management": {"port": 9191},
    "globalHeartbeat": {"cluster": "east-a", "region": "east"},
}


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((chart.chart_dir() / "values.yaml").read_text())["gateway"][
        "config"
    ]
    return copy.deepcopy(config)


def _annotation(config: dict[str, Any]) -> str | None:
    objects = chart.render(
        {"mode": "gateway", "gateway": {"config": config}}, release="igw", namespace=pins.ADDON_NAMESPACE
    )
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    value = annotations.get(ANNOTATION)
    return None if value is None else str(value)


def test_the_chart_lists_every_extension_read_only_at_start() -> None:
    assert set(VALUES) == set(RESTART_ONLY)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_setting_or_changing_a_start_only_extension_changes_the_pod_template(name: str) -> None:
    plain = _annotation(_config())  # the chart's own TLS termination (cert-manager) is one of them
    with_it = _config()
    with_it["spec"].setdefault("extensions", {})[name] = VALUES[name]
    first = _annotation(with_it)
    assert first not in (None, plain)
    changed = copy.deepcopy(with_it)
    entry = changed["spec"]["extensions"][name]
    key = next(iter(entry))
    entry[key] = 9292 if isinstance(entry[key], int) else f"{entry[key]}-changed".replace("s-changed", "9s")
    assert _annotation(changed) not in (None, first)


def test_without_any_of_them_the_pod_template_has_no_digest() -> None:
    config = _config()
    assert _annotation(config) is not None  # cert-manager TLS by default: tlsTermination is served
    objects = chart.render(
        {"mode": "gateway", "certManager": {"enabled": False}, "gateway": {"config": config}},
        release="igw",
        namespace=pins.ADDON_NAMESPACE,
    )
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    assert ANNOTATION not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})


def test_a_change_the_hot_reload_applies_leaves_the_pod_template_alone() -> None:
    config = _config()
    config["spec"].setdefault("extensions", {})["serverLimits"] = VALUES["serverLimits"]
    before = _annotation(config)
    config["spec"]["schedulers"][0]["modelName"] = "another-model"
    assert _annotation(config) == before


def test_a_body_budget_the_hot_reload_applies_leaves_the_pod_template_alone() -> None:
    """``serverLimits.maxBodyBytesHeld`` is applied by the hot reload (since session s50): setting or
    changing it rolls no pod, while the other ``serverLimits`` fields still do (as the operator's
    :func:`restart_digest`)."""
    config = _config()
    plain = _annotation(config)
    limits = config["spec"].setdefault("extensions", {}).setdefault("serverLimits", {})
    limits["maxBodyBytesHeld"] = 2**20
    assert _annotation(config) == plain
    limits["maxBodyBytesHeld"] = 2**22
    assert _annotation(config) == plain
    limits["headerTimeout"] = "3s"
    assert _annotation(config) not in (None, plain)
    assert {"maxBodyBytesHeld"} == LIVE_SERVER_LIMITS  # the chart's helper omits this one
    plain_limits = {"headerTimeout": "3s"}
    assert restart_digest({"serverLimits": {**plain_limits, "maxBodyBytesHeld": 1}}) == restart_digest(
        {"serverLimits": plain_limits}
    )
    assert restart_digest({"serverLimits": {"maxBodyBytesHeld": 1}}) is None


def _egress_ports(config: dict[str, Any]) -> list[int]:
    objects = chart.render(
        {"mode": "gateway", "gateway": {"config": config}}, release="igw", namespace=pins.ADDON_NAMESPACE
    )
    [policy] = [o for o in objects if o["kind"] == "NetworkPolicy"]
    return [p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]


def test_the_network_policy_opens_the_redis_ports_the_served_configuration_uses() -> None:
    """As igw operator's policy does: the rate limits' and the global heartbeat store's ports (before,
    only ``networkPolicy.extraEgress`` could open them, and heartbeats were dropped unnoticed)."""
    config = _config()
    assert 6379 not in _egress_ports(config)
    config["spec"].setdefault("extensions", {})["globalHeartbeat"] = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": "rediss://:token@hb.example.internal:6380/0"},
    }
    assert 6380 in _egress_ports(config)
    config["spec"]["extensions"]["rateLimits"] = {
        "backend": "redis",
        "redis": {"url": "redis://limits:6390/1"},
    }
    assert {6380, 6390} <= set(_egress_ports(config))
    del config["spec"]["extensions"]["globalHeartbeat"]["redis"]
    assert {6379, 6390} <= set(_egress_ports(config))


def _policy(values: dict[str, Any]) -> dict[str, Any]:
    objects = chart.render({"mode": "gateway", **values})
    [policy] = [o for o in objects if o["kind"] == "NetworkPolicy"]
    return policy


def _rule_ports(config: dict[str, Any], peer: dict[str, Any]) -> list[int]:
    rules: list[dict[str, Any]] = _policy({"gateway": {"config": config}})["spec"]["egress"]
    return [p["port"] for rule in rules if peer in rule.get("to", []) for p in rule["ports"]]


def _model_rules(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The egress rules to pods that are neither DNS nor a CIDR: the model servers' and the backend's."""
    return [
        rule
        for rule in policy["spec"]["egress"]
        if rule.get("to")
        and all("ipBlock" not in peer for peer in rule["to"])
        and rule["to"][0].get("podSelector") != {"matchLabels": {"k8s-app": "kube-dns"}}
    ]


def test_the_network_policy_opens_model_ports_only_to_the_pods_the_served_configuration_selects() -> None:
    """Each scheduler's ``targetPort`` to the pods its ``modelSelector`` selects (``matchLabels`` and
    ``matchExpressions``) in the config's namespace, the default backend's port to that namespace's
    pods: the rules igw operator writes (:func:`igw.operator.model_egress.model_server_rules`). Before,
    gateway mode opened them and ``modelServerPorts`` (8000) to every pod of the cluster; now
    ``modelServerPorts`` (default none) is the only broad rule, when asked for."""
    config = _config()
    config["namespace"] = "models"
    config["spec"]["schedulers"][0]["modelSelector"] = {
        "matchLabels": {"app": "llama"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
    }
    config["spec"]["schedulers"][0]["targetPort"] = 9000
    config["spec"]["bbr"]["defaultBackend"] = {"name": "fallback", "port": 9100}
    policy = _policy({"gateway": {"config": config}})
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert _model_rules(policy) == model_server_rules(config["spec"], "models")
    assert not any(peer == {"namespaceSelector": {}} for r in policy["spec"]["egress"] for peer in r["to"])
    broad = _policy({"gateway": {"config": config}, "networkPolicy": {"modelServerPorts": [8000]}})
    assert _rule_ports(config, {"namespaceSelector": {}}) == []
    everywhere = [r for r in _model_rules(broad) if r["to"] == [{"namespaceSelector": {}}]]
    assert [p["port"] for r in everywhere for p in r["ports"]] == [8000]


def test_the_network_policy_opens_the_model_jwks_and_backend_ports_the_served_configuration_names() -> None:
    """As igw operator's policy does (since s41): each scheduler's ``targetPort``, the default
    backend's port, the JWKS URL's and, with ``oidcDiscovery``, the issuer's. Before s42 gateway mode
    opened only ``networkPolicy.modelServerPorts`` (8000) and 443: a config whose model servers listen
    on 9000, or whose JWKS is an in-cluster Keycloak on 8443, passed every check, and an enforcing CNI
    dropped every request (502) or every key fetch (every token refused)."""
    https: dict[str, Any] = {"ipBlock": {"cidr": "0.0.0.0/0"}}
    config = _config()

    def model_ports() -> list[int]:
        rules = _model_rules(_policy({"gateway": {"config": config}}))
        return sorted(p["port"] for rule in rules for p in rule["ports"])

    assert (model_ports(), _rule_ports(config, https)) == ([8000], [443])
    config["spec"]["schedulers"][0]["targetPort"] = 9000
    config["spec"]["bbr"]["defaultBackend"] = {"name": "fallback", "port": 9100}
    issuer = "https://kc.auth.svc:9443/realms/x"
    config["spec"]["auth"] = {
        "jwt": {
            "provider": {
                "name": "kc",
                "issuer": issuer,
                "remoteJWKS": {"uri": "https://kc.auth.svc:8443/realms/x/certs"},
                "audiences": ["inference"],
            }
        }
    }
    assert model_ports() == [9000, 9100]
    assert _rule_ports(config, https) == [443, 8443]
    config["spec"].setdefault("extensions", {})["authorization"] = {"oidcDiscovery": True}
    assert _rule_ports(config, https) == [443, 8443, 9443]
