"""The chart's observability values, rendered by Helm's SDK: CloudWatch EMF delivery to the agent
(gateway pods' arguments and NetworkPolicy egress, in both modes), ``--workers`` and the operator's
OTLP endpoint; the rendered arguments are read back by the real ``igw serve``/``igw operator`` parsers."""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

import kubernetes_validate
import pytest

from igw.addon import chart, pins
from igw.cli import operator, serve
from igw.gateway.emf_sink import AgentEndpoint
from igw.gateway.worker_count import CPU_REQUEST_ENV
from igw.gateway.worker_heartbeat import STUCK_AFTER_S
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from tests.operator.dataplane_support import igwc_object

K8S_VERSION = "1.34.0"
CLOUDWATCH_ON = {"gateway": {"cloudWatch": {"enabled": True}}}


def _objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _args(objects: list[dict[str, Any]], add_arguments: Any) -> argparse.Namespace:
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(container["args"][1:])


def _egress(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = _one(objects, "NetworkPolicy")["spec"]["egress"]
    return rules


def test_cloudwatch_is_off_by_default_in_both_modes() -> None:
    gateway = _objects({"mode": "gateway"})
    args = _args(gateway, serve.add_arguments)
    assert (args.emf_interval, args.emf_endpoint) == (0, None)
    assert not [r for r in _egress(gateway) if any(p["port"] == 25888 for p in r["ports"])]
    operator_args = _args(_objects({}), operator.add_arguments)
    assert operator_args.gateway_emf_interval == 0
    assert operator_args.gateway_emf_endpoint is None
    assert operator_args.gateway_otlp_endpoint is None


def test_gateway_mode_sends_emf_to_the_agent_service_and_may_reach_it() -> None:
    objects = _objects({"mode": "gateway", **CLOUDWATCH_ON})
    for obj in objects:
        if obj["kind"] in {"Deployment", "NetworkPolicy"}:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    args = _args(objects, serve.add_arguments)
    assert args.emf_interval == 60
    assert AgentEndpoint.parse(args.emf_endpoint) == AgentEndpoint(
        "tcp", "cloudwatch-agent.amazon-cloudwatch", 25888
    )
    (rule,) = [r for r in _egress(objects) if any(p["port"] == 25888 for p in r["ports"])]
    assert rule["ports"] == [{"port": 25888, "protocol": "TCP"}]
    assert rule["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "amazon-cloudwatch"}}}
    ]


def test_agent_protocol_interval_and_workers_follow_the_values() -> None:
    cloudwatch = {"enabled": True, "emfIntervalSeconds": 15, "agent": {"protocol": "udp", "port": 2000}}
    objects = _objects({"mode": "gateway", "gateway": {"cloudWatch": cloudwatch, "workers": 4}})
    args = _args(objects, serve.add_arguments)
    assert (args.emf_interval, args.workers) == (15, 4)
    assert AgentEndpoint.parse(args.emf_endpoint).protocol == "udp"
    assert any(r["ports"] == [{"port": 2000, "protocol": "UDP"}] for r in _egress(objects))


def _gateway_env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {entry["name"]: entry for entry in container.get("env", [])}


def test_workers_default_to_auto_with_the_cpu_request_in_both_modes() -> None:
    """``auto`` reads the CPU request from the downward API: without the variable a pod with no CPU
    limit would start a worker per CPU of its node."""
    gateway = _objects({"mode": "gateway"})
    assert _args(gateway, serve.add_arguments).workers == "auto"
    request = _gateway_env(gateway)[CPU_REQUEST_ENV]["valueFrom"]["resourceFieldRef"]
    assert request == {"containerName": "gateway", "resource": "requests.cpu", "divisor": "1m"}
    (container,) = _one(gateway, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["name"] == request["containerName"]
    assert _args(_objects({}), operator.add_arguments).gateway_workers == "auto"


@pytest.mark.parametrize(("workers", "serve_workers"), [(1, 1), (3, 3), ("auto", "auto")])
def test_a_worker_count_reaches_both_modes(workers: int | str, serve_workers: int | str) -> None:
    gateway = _objects({"mode": "gateway", "gateway": {"workers": workers}})
    assert _args(gateway, serve.add_arguments).workers == serve_workers
    operator_args = _args(_objects({"gateway": {"workers": workers}}), operator.add_arguments)
    assert operator_args.gateway_workers == serve_workers


def test_the_worker_timeout_defaults_to_the_gateways_own_in_both_modes() -> None:
    assert _args(_objects({"mode": "gateway"}), serve.add_arguments).worker_timeout == STUCK_AFTER_S
    assert _args(_objects({}), operator.add_arguments).gateway_worker_timeout == STUCK_AFTER_S


@pytest.mark.parametrize("timeout", [12.5, 0, 600])
def test_a_worker_timeout_reaches_the_gateway_pods_in_both_modes(timeout: float) -> None:
    """Gateway mode: the chart's own pods; operator mode: the operator's option, then the pods the
    operator renders from it (read back by ``igw serve``'s parser at each step)."""
    values = {"gateway": {"workers": 3, "workerTimeoutSeconds": timeout}}
    gateway_args = _args(_objects({"mode": "gateway", **values}), serve.add_arguments)
    assert (gateway_args.workers, gateway_args.worker_timeout) == (3, timeout)
    operator_args = _args(_objects(values), operator.add_arguments)
    assert operator_args.gateway_worker_timeout == timeout
    settings = DataPlaneSettings(
        workers=operator_args.gateway_workers, worker_timeout_s=operator_args.gateway_worker_timeout
    )
    pod_args = _args(desired_objects(igwc_object(), settings), serve.add_arguments)
    assert (pod_args.workers, pod_args.worker_timeout) == (3, timeout)


def test_one_worker_gets_no_worker_timeout() -> None:
    """The timeout is a worker group's check: one process has no parent watching it."""
    (container,) = _one(
        _objects({"mode": "gateway", "gateway": {"workers": 1, "workerTimeoutSeconds": 5}}), "Deployment"
    )["spec"]["template"]["spec"]["containers"]
    assert "--worker-timeout" not in container["args"]
    assert "--workers" not in container["args"]


def test_operator_mode_passes_the_settings_to_the_operator() -> None:
    otlp = "http://otel-collector.observability:4318"
    args = _args(
        _objects({**CLOUDWATCH_ON, "operator": {"gatewayOtlpEndpoint": otlp}}), operator.add_arguments
    )
    assert args.gateway_emf_interval == 60
    assert AgentEndpoint.parse(args.gateway_emf_endpoint).port == 25888
    assert args.gateway_otlp_endpoint == otlp


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "gateway", "gateway": {"workers": 0}}, "workers"),
        ({"gateway": {"workers": "all"}}, "workers"),
        ({"gateway": {"workers": 65}}, "workers"),
        ({"gateway": {"workerTimeoutSeconds": -1}}, "workerTimeoutSeconds"),
        ({"mode": "gateway", "gateway": {"workerTimeoutSeconds": 3601}}, "workerTimeoutSeconds"),
        ({"mode": "gateway", "gateway": {"workerTimeoutSeconds": 1}}, "workerTimeoutSeconds"),
        ({"gateway": {"workerTimeoutSeconds": "30s"}}, "workerTimeoutSeconds"),
        ({"gateway": {"cloudWatch": {"agent": {"protocol": "http"}}}}, "protocol"),
        ({"gateway": {"cloudWatch": {"emfIntervalSeconds": 0}}}, "emfIntervalSeconds"),
        ({"operator": {"gatewayOtlpEndpoint": "collector:4318"}}, "gatewayOtlpEndpoint"),
    ],
    ids=[
        "no-workers",
        "workers-word",
        "too-many-workers",
        "negative-worker-timeout",
        "worker-timeout-over-an-hour",
        "worker-timeout-under-two-beats",
        "worker-timeout-with-unit",
        "agent-protocol",
        "zero-interval",
        "otlp-not-a-url",
    ],
)
def test_bad_observability_values_fail_with_the_field(values: dict[str, Any], message: str) -> None:
    import helm_python as helm  # deferred: the SDK's error type, as tests/addon/test_chart.py does

    with pytest.raises(helm.HelmError) as caught:
        chart.render(values)
    assert message in str(caught.value)


IPV4_API_SERVER = "10.0.12.7"
IPV6_API_SERVER = "2600:1f14:9a3:c400::7"
"""Addresses of an EKS API server endpoint: in an IPv4 VPC, and in the VPC's (global) IPv6 block."""
IPV6_LOAD_BALANCER = "2600:1f14:9a3:c401::2b"


def _admits(peers: list[dict[str, Any]], address: str) -> bool:
    """Whether a rule's ``to``/``from`` list admits ``address`` through an ipBlock."""
    ip = ipaddress.ip_address(address)
    return any(
        ip in ipaddress.ip_network(peer["ipBlock"]["cidr"], strict=False)
        and not any(ip in ipaddress.ip_network(e, strict=False) for e in peer["ipBlock"].get("except", []))
        for peer in peers
        if "ipBlock" in peer
    )


def _https_peers(policy: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = [r for r in policy["spec"]["egress"] if {"port": 443, "protocol": "TCP"} in r.get("ports", [])]
    peers: list[dict[str, Any]] = rule["to"]
    return peers


@pytest.mark.parametrize("address", [IPV4_API_SERVER, IPV6_API_SERVER])
def test_every_network_policy_reaches_the_api_server_of_an_ipv4_or_ipv6_cluster_by_default(
    address: str,
) -> None:
    """``networkPolicy.httpsEgressCidrs`` defaulted to ``0.0.0.0/0`` and the operator's gateways had
    ``0.0.0.0/0`` alone: on an IPv6 EKS cluster no pod of the add-on reached the API server (the
    operator never reconciled, the gateways never read their config or pods). Both families now: the
    chart's gateway, the operator, and the gateways the operator runs (from the operator's arguments
    as the chart renders them, read back by its own parser)."""
    gateway = _objects({"mode": "gateway"})
    assert _admits(_https_peers(_one(gateway, "NetworkPolicy")), address)
    objects = _objects({})
    assert _admits(_https_peers(_one(objects, "NetworkPolicy")), address)
    settings = operator.operator_options(_args(objects, operator.add_arguments)).data_plane
    (policy,) = [o for o in desired_objects(igwc_object(), settings) if o["kind"] == "NetworkPolicy"]
    assert _admits(_https_peers(policy), address)
    assert _admits(
        _https_peers(_one([*desired_objects(igwc_object(), DataPlaneSettings())], "NetworkPolicy")), address
    )


@pytest.mark.parametrize("address", ["10.1.2.3", "192.168.7.9", IPV6_LOAD_BALANCER])
def test_the_gateway_port_admits_the_load_balancer_of_an_ipv4_or_ipv6_cluster_by_default(
    address: str,
) -> None:
    """``networkPolicy.ingressCidrs`` held the private IPv4 ranges alone, so on an IPv6 cluster the
    load balancer (an address of the VPC's IPv6 block) never reached the gateway port: every health
    check failed and the endpoint served nothing."""
    policy = _one(_objects({"mode": "gateway"}), "NetworkPolicy")
    (rule,) = [r for r in policy["spec"]["ingress"] if {"port": 8443, "protocol": "TCP"} in r["ports"]]
    assert _admits(rule["from"], address)
    assert not _admits(rule["from"], "8.8.8.8")  # public IPv4 sources stay out


def test_the_https_egress_cidrs_reach_the_gateways_the_operator_runs() -> None:
    """In operator mode ``networkPolicy.httpsEgressCidrs`` narrowed the operator's own NetworkPolicy
    only: every gateway it ran kept ``0.0.0.0/0``, the value silently ignored for them."""
    cidrs = ["10.0.0.0/16", "2600:1f14:9a3:c400::/56"]
    objects = _objects({"networkPolicy": {"httpsEgressCidrs": cidrs}})
    args = _args(objects, operator.add_arguments)
    assert args.gateway_https_egress_cidr == cidrs
    settings = operator.operator_options(args).data_plane
    (policy,) = [o for o in desired_objects(igwc_object(), settings) if o["kind"] == "NetworkPolicy"]
    assert _https_peers(policy) == [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)


@pytest.mark.parametrize("cidr", ["10.0.0.1", "10.0.0.0/33", "::/129", "any"])
def test_the_operator_refuses_a_https_egress_cidr_that_is_not_one(
    cidr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    operator.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--gateway-https-egress-cidr", cidr])
    assert (
        f"argument --gateway-https-egress-cidr: {cidr!r} is not an IPv4 or IPv6 CIDR block"
        in capsys.readouterr().err
    )
