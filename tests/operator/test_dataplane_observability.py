"""Operator-rendered data planes with the operator's observability settings: CloudWatch EMF to the
agent's listener and OTLP traces, with the NetworkPolicy egress each needs."""

from __future__ import annotations

import argparse
from typing import Any

import kubernetes_validate

from igw.cli import serve
from igw.gateway.emf_sink import AgentEndpoint
from igw.gateway.worker_count import CPU_REQUEST_ENV
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from tests.operator.dataplane_support import K8S_VERSION, by_kind, igwc_object

AGENT = AgentEndpoint.parse("udp://cloudwatch-agent.amazon-cloudwatch:25888")
OTLP = "http://otel-collector.observability:4318"


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return container


def _egress_ports(objects: list[dict[str, Any]]) -> list[tuple[int, str]]:
    policy = by_kind(objects)["NetworkPolicy"]
    return [(p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"]]


def _serve_args(container: dict[str, Any]) -> argparse.Namespace:
    """The container's arguments as the real ``igw serve`` parser reads them."""
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert container["args"][0] == "serve"
    return parser.parse_args(container["args"][1:])


def test_emf_settings_send_to_the_agent_and_open_its_port() -> None:
    settings = DataPlaneSettings(emf_interval_s=60, emf_endpoint=AGENT, otlp_endpoint=OTLP)
    objects = desired_objects(igwc_object(), settings)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    args = _serve_args(_container(objects))
    assert args.emf_interval == 60
    assert AgentEndpoint.parse(args.emf_endpoint) == AGENT
    assert (25888, "UDP") in _egress_ports(objects)
    assert (4318, "TCP") in _egress_ports(objects)
    assert _container(objects)["env"][1:] == [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": OTLP}]


def test_without_settings_nothing_is_sent_and_no_port_is_opened() -> None:
    objects = desired_objects(igwc_object(), DataPlaneSettings())
    args = _serve_args(_container(objects))
    assert args.emf_interval == 0
    assert args.emf_endpoint is None
    assert [e["name"] for e in _container(objects)["env"]] == [CPU_REQUEST_ENV]  # --workers auto's
    ports = _egress_ports(objects)
    assert (25888, "UDP") not in ports
    assert (25888, "TCP") not in ports
    # An endpoint without an interval sends nothing, so it opens nothing either.
    idle = desired_objects(igwc_object(), DataPlaneSettings(emf_endpoint=AGENT))
    assert _serve_args(_container(idle)).emf_endpoint is None
    assert (25888, "UDP") not in _egress_ports(idle)


def test_stdout_emf_needs_no_egress_and_pod_defaults_env_follows_ours() -> None:
    settings = DataPlaneSettings(emf_interval_s=30, otlp_endpoint="https://collector.example:4318")
    mine = [{"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.1"}]
    objects = desired_objects(igwc_object(podDefaults={"env": mine}), settings)
    args = _serve_args(_container(objects))
    assert (args.emf_interval, args.emf_endpoint) == (30, None)
    assert [e["name"] for e in _container(objects)["env"]] == [
        CPU_REQUEST_ENV,
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_TRACES_SAMPLER_ARG",
    ]
    assert (4318, "TCP") in _egress_ports(objects)
