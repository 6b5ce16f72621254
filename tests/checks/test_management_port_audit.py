"""IGW-AU306 on real renderings: the operator's and the chart's gateways keep ``/metrics`` and the pod
detail off the load balancer's port; an ``igw serve`` without a management port behind an
internet-facing load balancer is HIGH, behind an internal one LOW; a management port the load balancer
forwards to is graded the same way."""

from __future__ import annotations

import copy
from typing import Any

from igw.addon import chart
from igw.checks.model import Command, Severity, Status
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from tests.checks.helpers import run
from tests.operator.dataplane_support import igwc_object

Docs = list[dict[str, Any]]
DEPLOYMENT = "Deployment inference/chat-gateway (gateway)"


def _au306(docs: Docs) -> list[tuple[str, Status, Severity, str]]:
    return [
        (r.resource, r.status, r.severity, r.message)
        for r in run(docs, Command.AUDIT)
        if r.check_id == "IGW-AU306"
    ]


def _operator_docs(scheme: str) -> Docs:
    igwc = igwc_object(extensions={"dataPlane": {"scheme": scheme}})
    return [igwc, *desired_objects(igwc, DataPlaneSettings())]


def _container(docs: Docs) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _without_management_port(docs: Docs) -> Docs:
    docs = copy.deepcopy(docs)
    args = _container(docs)["args"]
    at = args.index("--management-port")
    del args[at : at + 2]
    return docs


def test_the_operators_gateway_passes_even_internet_facing() -> None:
    [(resource, status, _, message)] = _au306(_operator_docs("internet-facing"))
    assert (resource, status) == (DEPLOYMENT, Status.PASS)
    assert "management port 9090" in message


def test_no_management_port_is_graded_by_the_load_balancers_scheme() -> None:
    [(_, status, severity, message)] = _au306(_without_management_port(_operator_docs("internet-facing")))
    assert (status, severity) == (Status.FAIL, Severity.HIGH)
    assert "internet-facing Service inference/chat-gateway" in message
    assert "/metrics" in message
    assert "port 8080" in message
    [(_, status, severity, _)] = _au306(_without_management_port(_operator_docs("internal")))
    assert (status, severity) == (Status.FAIL, Severity.LOW)


def test_the_config_extension_counts_as_a_management_port() -> None:
    docs = _without_management_port(_operator_docs("internet-facing"))
    docs[0]["spec"].setdefault("extensions", {})["management"] = {"port": 9090}
    [(_, status, _, _)] = _au306(docs)
    assert status == Status.PASS


def test_a_load_balancer_forwarding_to_the_management_port_fails() -> None:
    docs = _operator_docs("internet-facing")
    (service,) = [d for d in docs if d["kind"] == "Service"]
    service["spec"]["ports"].append(
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    )
    [(_, status, severity, message)] = _au306(docs)
    assert (status, severity) == (Status.FAIL, Severity.HIGH)
    assert "management port 9090 is forwarded by the internet-facing" in message


def test_an_alb_ingress_backend_is_a_load_balancer_too() -> None:
    docs = _without_management_port(_operator_docs("internal"))
    (service,) = [d for d in docs if d["kind"] == "Service"]
    service["spec"] = {**service["spec"], "type": "ClusterIP"}
    service["metadata"].pop("annotations", None)
    docs.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {
                "name": "public",
                "namespace": "inference",
                "annotations": {"alb.ingress.kubernetes.io/scheme": "internet-facing"},
            },
            "spec": {
                "ingressClassName": "alb",
                "defaultBackend": {
                    "service": {"name": service["metadata"]["name"], "port": {"name": "http"}}
                },
            },
        }
    )
    [(_, status, severity, message)] = _au306(docs)
    assert (status, severity) == (Status.FAIL, Severity.HIGH)
    assert "Ingress inference/public" in message


def test_the_charts_gateway_passes_internet_facing() -> None:
    rendered = chart.render({"mode": "gateway", "service": {"scheme": "internet-facing"}})
    [(resource, status, _, _)] = _au306(rendered)
    assert status == Status.PASS, resource
