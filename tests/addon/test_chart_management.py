"""The chart's gateway keeps ``/metrics``, the detailed ``/readyz`` and the debug API on its management
port, rendered by Helm's SDK: ``igw serve --management-port`` (read back by the real parser), the
container port ``metrics``, the liveness probe, a ClusterIP Service the ServiceMonitor scrapes, the
NetworkPolicy, and a load-balancer Service that exposes the inference port alone."""

from __future__ import annotations

import argparse
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from igw.addon import chart, pins
from igw.cli import serve

K8S_VERSION = "1.34.0"
GATEWAY = {"mode": "gateway", "serviceMonitor": {"enabled": True}}


def _objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def _services(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}


@pytest.mark.parametrize("pod_tls", [True, False], ids=["pod-tls", "plain"])
def test_operations_are_served_on_the_management_port_only(pod_tls: bool) -> None:
    objects = _objects({**GATEWAY, "certManager": {"enabled": pod_tls}})
    for obj in objects:
        if obj["kind"] in {"Deployment", "Service", "NetworkPolicy"}:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    scheme = "https" if pod_tls else "http"
    container = _container(objects)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(container["args"][1:])
    assert (args.port, args.management_port) == (8443, 9090)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {scheme: 8443, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "metrics",
        "scheme": scheme.upper(),
    }
    assert container["readinessProbe"]["httpGet"]["port"] == scheme  # what the NLB checks

    services = _services(objects)
    assert sorted(services) == ["igw", "igw-management"]
    balancer, management = services["igw"], services["igw-management"]
    assert balancer["spec"]["type"] == "LoadBalancer"
    assert [p["targetPort"] for p in balancer["spec"]["ports"]] == [scheme]  # never the metrics port
    assert management["spec"]["type"] == "ClusterIP"
    assert management["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]

    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= management["metadata"]["labels"].items()
    assert not selected.items() <= balancer["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("metrics", "/metrics", scheme)
    assert ("tlsConfig" in endpoint) is pod_tls

    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    ingress = policy["spec"]["ingress"]
    by_port = {rule["ports"][0]["port"]: rule["from"] for rule in ingress}
    assert by_port[9090] == [{"namespaceSelector": {}}]  # pods of the cluster, not the CIDRs of clients
    assert all("ipBlock" in peer for peer in by_port[8443])


def test_the_management_port_follows_the_value_and_must_differ_from_the_gateway_port() -> None:
    objects = _objects({**GATEWAY, "gateway": {"managementPort": 9555}})
    assert {"name": "metrics", "containerPort": 9555, "protocol": "TCP"} in _container(objects)["ports"]
    assert _services(objects)["igw-management"]["spec"]["ports"][0]["port"] == 9555
    with pytest.raises(
        helm.HelmError, match=r"gateway\.managementPort \(8443\) must differ from gateway\.port"
    ):
        _objects({"mode": "gateway", "gateway": {"managementPort": 8443}})
