"""The operator's gateways keep ``/metrics``, the detailed ``/readyz`` and the debug API on a management
port: the container runs ``igw serve --management-port``, names the port, points Prometheus and the
liveness probe at it, and neither the load-balancer Service nor the client-facing ingress rule opens it."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from igw.cli.main import build_parser
from igw.config.restart_only import restart_digest
from igw.operator.dataplane import (
    DEFAULT_INGRESS_CIDRS,
    GATEWAY_PORT,
    MANAGEMENT_PORT,
    RESTART_CONFIG_ANNOTATION,
    DataPlaneSettings,
    desired_objects,
)
from tests.operator.dataplane_support import K8S_VERSION, by_kind, igwc_object


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def test_the_gateway_serves_operations_on_a_port_the_load_balancer_never_reaches() -> None:
    objects = desired_objects(igwc_object(), DataPlaneSettings())
    container = _container(objects)
    args = build_parser().parse_args(container["args"])
    assert (args.port, args.management_port) == (GATEWAY_PORT, MANAGEMENT_PORT)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": GATEWAY_PORT, "metrics": MANAGEMENT_PORT}
    # readiness where the load balancer checks; liveness where clients cannot crowd it out
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    annotations = by_kind(objects)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(MANAGEMENT_PORT),
        "prometheus.io/path": "/metrics",
    }
    service = by_kind(objects)["Service"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    ingress = by_kind(objects)["NetworkPolicy"]["spec"]["ingress"]
    assert ingress == [
        {
            "from": [{"ipBlock": {"cidr": cidr}} for cidr in DEFAULT_INGRESS_CIDRS],
            "ports": [{"port": GATEWAY_PORT, "protocol": "TCP"}],
        },
        {"from": [{"namespaceSelector": {}}], "ports": [{"port": MANAGEMENT_PORT, "protocol": "TCP"}]},
    ]


def test_the_extension_moves_the_port_and_pod_annotations_can_override_the_scrape_hints() -> None:
    spec = {
        "extensions": {"management": {"port": 9500}},
        "podDefaults": {"annotations": {"prometheus.io/scrape": "false", "team": "ml"}},
    }
    objects = desired_objects(igwc_object(**spec), DataPlaneSettings())
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    container = _container(objects)
    assert build_parser().parse_args(container["args"]).management_port == 9500
    assert {"name": "metrics", "containerPort": 9500, "protocol": "TCP"} in container["ports"]
    annotations = by_kind(objects)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    # The management extension is read only at start: its digest rolls the pods on a change.
    assert annotations.pop(RESTART_CONFIG_ANNOTATION) == restart_digest({"management": {"port": 9500}})
    assert annotations == {
        "prometheus.io/scrape": "false",
        "prometheus.io/port": "9500",
        "prometheus.io/path": "/metrics",
        "team": "ml",
    }
    ingress_ports = [
        p["port"] for rule in by_kind(objects)["NetworkPolicy"]["spec"]["ingress"] for p in rule["ports"]
    ]
    assert ingress_ports == [GATEWAY_PORT, 9500]
