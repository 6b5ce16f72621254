"""The gateway NetworkPolicy opens the pod ports behind a config's in-cluster Services, end to end:
the chart's rendered RBAC and args, ``igw operator`` on the fake API server.

A NetworkPolicy sees a connection after the Service's DNAT: the pod's IP and ``targetPort``. Before
session s42 the operator opened the Service port a config names (the JWKS URL's 443, the default
backend's 80), so with pods listening on 8443 / 9000 an enforcing CNI dropped every key fetch (every
token refused) and every request for the default backend (502), and nothing said why."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from igw.addon import chart, pins
from igw.cli import operator as operator_cli
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import PORTS_REASON, Reconciler
from igw.operator.runner import OperatorOptions
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import OperatorThread, find, igwc, jwt_provider, wait_condition, wait_for


def _operator(values: dict[str, Any], cluster: FakeKubeApiServer, kubeconfig: Path) -> OperatorOptions:
    rendered = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    cluster.enforce_rbac(rendered)
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parser = argparse.ArgumentParser()
    operator_cli.add_arguments(parser)
    options = operator_cli.operator_options(parser.parse_args(args[1:]))
    return dataclasses.replace(
        options, kubeconfig=str(kubeconfig), identity="igw-operator-0", health_port=None
    )


def _service(namespace: str, name: str, port: int, target: int | str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "main", "port": port, "targetPort": target}]},
    }


def _pod(namespace: str, app: str, port_name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app}-0", "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "ports": [{"name": port_name, "containerPort": port}]}]
        },
    }


def _config() -> dict[str, Any]:
    obj = igwc("chat", model="mistral", app="mistral")
    obj["spec"]["auth"] = jwt_provider("https://jwks.auth.svc.cluster.local/keys")
    obj["spec"]["bbr"]["defaultBackend"] = {"name": "fallback", "port": 80}
    return obj


def _egress_ports(policy: dict[str, Any], namespace: str) -> list[int]:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    return [p["port"] for rule in policy["spec"]["egress"] if rule.get("to") == [peer] for p in rule["ports"]]


def _unresolved_events(cluster: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [e for e in cluster.store.iter_all() if e["kind"] == "Event" and e.get("reason") == PORTS_REASON]


def test_the_pods_ports_behind_the_jwks_and_default_backend_services_are_opened(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """JWKS at ``https://jwks.auth.svc.cluster.local`` (Service 443 -> pod 8443, numeric), the
    default backend ``fallback:80`` (-> the named port ``http``, 9000 on its pods) and shared rate limits
    in ``redis.cache.svc`` (6379 -> 7000): each pod port is opened, to its Service's namespace only,
    and no ServicePortUnresolved Event is posted."""
    cluster.add(_service("cache", "redis", 6379, 7000))
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, "http"))
    cluster.add(_pod("inference", "fallback", "http", 9000))
    operator = OperatorThread(_operator({}, cluster, kubeconfig)).start()
    try:
        config = _config()
        config["spec"]["extensions"] = {
            "rateLimits": {"backend": "redis", "redis": {"url": "redis://redis.cache.svc/0"}}
        }
        cluster.add(config)
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    finally:
        assert operator.stop() == 0
    assert policy is not None
    assert _egress_ports(policy, "cache") == [7000]
    assert _egress_ports(policy, "auth") == [8443]
    assert _egress_ports(policy, "inference") == [9000]
    assert _unresolved_events(cluster) == []


def test_a_service_the_narrowed_operator_may_not_read_is_reported_with_the_rule_to_add(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """With ``operator.namespaces: [inference]`` the operator may not read Services in ``auth``: the
    JWKS port stays the URL's, and one Warning Event says so, naming the field and the
    ``networkPolicy.extraEgress`` rule that opens the pods (where nothing was said before)."""
    for namespace in ("inference", "auth"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, 9000))
    values = {"operator": {"namespaces": ["inference"]}}
    operator = OperatorThread(_operator(values, cluster, kubeconfig)).start()
    try:
        cluster.add(_config())
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        (event,) = wait_for(lambda: _unresolved_events(cluster) or None, what="ServicePortUnresolved")
        policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    finally:
        assert operator.stop() == 0
    assert policy is not None
    assert _egress_ports(policy, "inference") == [9000]
    assert _egress_ports(policy, "auth") == []
    assert event["type"] == "Warning"
    assert "spec.auth.jwt.provider.remoteJWKS.uri (jwks.auth.svc:443)" in event["message"]
    assert "networkPolicy.extraEgress" in event["message"]
    assert '"kubernetes.io/metadata.name": "auth"' in event["message"]


def test_a_service_made_after_the_config_is_resolved_at_the_next_pass_and_reported_per_change(
    cluster: FakeKubeApiServer,
) -> None:
    """A default backend and a Redis store whose Services do not exist yet: one Warning Event while
    that holds (not one per resync pass), naming no password of the Redis URL. Once the backend's
    Service and pods are there, the next pass opens the pods' port and one more Event names what is
    still unresolved. An ExternalName JWKS Service (no DNAT to pods) opens nothing and is no problem."""
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "jwks", "namespace": "auth"},
            "spec": {"type": "ExternalName", "externalName": "idp.example.com"},
        }
    )
    config = _config()
    config["spec"]["extensions"] = {
        "rateLimits": {"backend": "redis", "redis": {"url": "rediss://:s3cr3t-token@redis.cache.svc:6380/0"}}
    }
    cluster.add(config)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    (event,) = _unresolved_events(cluster)
    assert event["message"].startswith(
        "spec.extensions.rateLimits.redis.url (redis.cache.svc:6380): Service cache/redis does not exist"
    )
    backend = "spec.bbr.defaultBackend (fallback.inference.svc:80): Service inference/fallback does not"
    assert backend in event["message"]
    assert "s3cr3t" not in event["message"]
    cluster.add(_service("inference", "fallback", 80, "http"))
    cluster.add(_pod("inference", "fallback", "http", 9000))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    assert policy is not None
    assert _egress_ports(policy, "inference") == [9000]
    assert _egress_ports(policy, "auth") == []
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    first, second = _unresolved_events(cluster)
    assert first == event
    assert second["message"].startswith("spec.extensions.rateLimits.redis.url (redis.cache.svc:6380)")
    assert "defaultBackend" not in second["message"]
