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
import yaml

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


def _with_management_field(port: int, **gateway: Any) -> dict[str, Any]:
    """Gateway-mode values whose served config sets ``spec.extensions.management.port``."""
    config = yaml.safe_load((chart.chart_dir() / "values.yaml").read_text())["gateway"]["config"]
    config["spec"].setdefault("extensions", {})["management"] = {"port": port}
    return {**GATEWAY, "gateway": {"config": config, **gateway}}


def test_the_config_field_wins_over_the_chart_value_everywhere_the_port_is_named() -> None:
    # Before, gateway.managementPort (9090 by default) was passed as --management-port, which igw serve
    # lets win over the config's field: a config saying 9191 was served on 9090, silently.
    objects = _objects(_with_management_field(9191, managementPort=9555))
    container = _container(objects)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert parser.parse_args(container["args"][1:]).management_port == 9191
    assert {"name": "metrics", "containerPort": 9191, "protocol": "TCP"} in container["ports"]
    assert _services(objects)["igw-management"]["spec"]["ports"][0]["port"] == 9191
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert {rule["ports"][0]["port"] for rule in policy["spec"]["ingress"]} == {8443, 9191}
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "igw-config"]
    served = yaml.safe_load(next(iter(config_map["data"].values())))
    assert served["spec"]["extensions"]["management"] == {"port": 9191}


def test_a_config_field_colliding_with_the_gateway_port_is_refused_naming_the_field() -> None:
    with pytest.raises(
        helm.HelmError,
        match=r"gateway\.config\.spec\.extensions\.management\.port \(8443\) must differ from gateway\.port",
    ):
        _objects(_with_management_field(8443))
    # The chart value alone still collides when the config does not set the field.
    with pytest.raises(
        helm.HelmError, match=r"gateway\.managementPort \(9000\) must differ from gateway\.port"
    ):
        _objects({**GATEWAY, "gateway": {"port": 9000, "managementPort": 9000}})


EVERY_FLAG = {**GATEWAY, "gateway": {"cloudWatch": {"enabled": True}}}
"""Values under which the chart passes ``igw serve`` every flag it can (workers auto, CloudWatch EMF)."""
CHART_FLAGS = sorted({arg for arg in _container(_objects(EVERY_FLAG))["args"] if arg.startswith("--")})
SET_BY = {
    "--config": "the chart (the ConfigMap of gateway.config)",
    "--host": "the chart (0.0.0.0",
    "--in-cluster": "the chart (",
    "--port": "gateway.port;",
    "--management-port": "gateway.managementPort;",
    "--log-level": "gateway.logLevel;",
    "--drain-seconds": "terminationGracePeriodSeconds/preStopSleepSeconds or "
    "gateway.config.spec.extensions.serverLimits.drainPeriod;",
    "--stream-grace-seconds": "terminationGracePeriodSeconds/preStopSleepSeconds or "
    "gateway.config.spec.extensions.serverLimits.streamGrace;",
    "--workers": "gateway.workers;",
    "--worker-timeout": "gateway.workerTimeoutSeconds;",
    "--emf-interval": "gateway.cloudWatch.emfIntervalSeconds;",
    "--emf-endpoint": "gateway.cloudWatch.agent;",
}
"""What each flag the chart passes is set by, as the refusal names it."""


def test_every_flag_the_chart_passes_has_its_source_named() -> None:
    assert sorted(SET_BY) == CHART_FLAGS


@pytest.mark.parametrize("flag", CHART_FLAGS)
@pytest.mark.parametrize("form", ["separate", "joined"])
def test_extra_args_may_not_repeat_a_flag_the_chart_sets_naming_what_sets_it(flag: str, form: str) -> None:
    """argparse takes the last occurrence: an extra ``--management-port`` won over the chart's,
    silently, and so did ``--stream-grace-seconds`` (past the grace period the chart checked it
    against) or ``--log-level``, which were not refused. The refusal named the port values as what set
    ``--config`` and ``--host`` too; it names each flag's own source now."""
    arg = [flag, "9"] if form == "separate" else [f"{flag}=9"]
    with pytest.raises(helm.HelmError) as refused:
        _objects({**GATEWAY, "gateway": {"extraArgs": ["--log-json", *arg]}})
    assert f"gateway.extraArgs[1]: {flag} is set by {SET_BY[flag]}" in str(refused.value)
    if flag not in ("--port", "--management-port"):
        assert "gateway.port" not in str(refused.value).split("is set by")[1]


def test_the_management_port_refusal_names_the_config_field_when_it_is_set() -> None:
    with pytest.raises(helm.HelmError) as refused:
        _objects(_with_management_field(9100, extraArgs=["--management-port=1"]))
    assert "--management-port is set by gateway.config.spec.extensions.management.port;" in str(refused.value)


def test_other_extra_args_are_passed_after_the_charts() -> None:
    args = _container(_objects({**GATEWAY, "gateway": {"extraArgs": ["--max-connections", "2048"]}}))["args"]
    assert args[-2:] == ["--max-connections", "2048"]
