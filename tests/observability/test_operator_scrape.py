"""Operator mode (the chart's default) end to end for the SRE: the chart rendered by Helm's SDK, its
``igw operator`` arguments read back by the real parser, the operator run against the fake API server,
and the gateway Deployments it writes there checked against what the chart asked for:

- ``serviceMonitor.enabled`` renders a PodMonitor that selects every gateway pod the operator made
  (labels, namespace, the ``metrics`` port), skipping a config that opted out of scraping. Until
  session s40 the value rendered nothing in this mode, silently: no gateway was scraped.
- ``operator.gatewayEnv`` puts the tracing variables gateway mode sets through ``gateway.extraEnv``
  (``OTEL_BSP_*``, the sampler) into every gateway pod, where the gateway reads them; a config's
  ``spec.podDefaults.env`` entry of the same name wins. Until session s40 there was no such value.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from igw.addon import chart, pins
from igw.cli import operator as operator_cli
from igw.gateway.trace_export import queue_size
from igw.gateway.tracing_options import tracing_options
from igw.operator.dataplane import DataPlaneSettings, base_name
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import find, igwc, install_crd, kubelet_env, running_operator, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as kube:
        install_crd(kube)
        yield kube


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _one(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    return found


def _operator_args(objects: list[dict[str, Any]]) -> argparse.Namespace:
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser()
    operator_cli.add_arguments(parser)
    return parser.parse_args(container["args"][1:])


def _settings(args: argparse.Namespace) -> DataPlaneSettings:
    """What ``igw operator`` builds from its arguments (the parts these tests exercise)."""
    return DataPlaneSettings(
        workers=args.gateway_workers,
        otlp_endpoint=args.gateway_otlp_endpoint or "",
        extra_env=tuple(args.gateway_env),
    )


def _applied(kube: FakeKubeApiServer, namespace: str, name: str) -> dict[str, Any]:
    found = wait_for(
        lambda: find(kube, "Deployment", namespace, base_name(name)), what=f"{namespace}/{name} Deployment"
    )
    return found


def _selects(monitor: dict[str, Any], pod: dict[str, Any], namespace: str) -> bool:
    """Whether Prometheus Operator would scrape ``pod`` (a pod template) in ``namespace`` through
    ``monitor``: its labels match, its namespace is selected, the port exists, no relabelling drops it."""
    spec = monitor["spec"]
    labels = pod["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
        return False
    namespaces = spec["namespaceSelector"]
    if not namespaces.get("any") and namespace not in namespaces.get("matchNames", []):
        return False
    (endpoint,) = spec["podMetricsEndpoints"]
    (container,) = pod["spec"]["containers"]
    if endpoint["port"] not in {p["name"] for p in container["ports"]}:
        return False
    annotations = pod["metadata"].get("annotations") or {}
    for rule in endpoint.get("relabelings", []):
        if rule.get("action") != "drop":
            continue
        (source,) = rule["sourceLabels"]
        key = source.removeprefix("__meta_kubernetes_pod_annotation_")
        value = next((v for k, v in annotations.items() if re.sub(r"[^a-zA-Z0-9_]", "_", k) == key), "")
        if re.fullmatch(rule["regex"], value):
            return False
    return True


def test_operator_mode_scrapes_every_gateway_the_operator_creates(
    cluster: FakeKubeApiServer, tmp_path: Path
) -> None:
    monitor = _one(_render({"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}), "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    # the gateway's per-pod series carry `endpoint`, the target label of the port's name
    assert (endpoint["path"], endpoint["honorLabels"], endpoint["interval"]) == ("/metrics", True, "15s")
    # each config its own model pods: two configs of a namespace may not select the same ones
    moved = igwc("moved", model="m", app="m")
    moved["spec"]["extensions"] = {"management": {"port": 9500}}
    opted_out = igwc("quiet", model="q", app="q")
    opted_out["spec"]["podDefaults"] = {"annotations": {"prometheus.io/scrape": "false"}}
    configs = [("inference", igwc("chat")), ("inference", moved), ("team-b", igwc("other", "team-b"))]
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    with running_operator(kubeconfig):
        for _, config in [*configs, ("inference", opted_out)]:
            cluster.add(config)
        deployments = {
            (ns, config["metadata"]["name"]): _applied(cluster, ns, config["metadata"]["name"])
            for ns, config in configs
        }
        quiet = _applied(cluster, "inference", "quiet")
    for (namespace, name), deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert _selects(monitor, pod, namespace), f"{namespace}/{name} is not scraped"
    assert not _selects(monitor, quiet["spec"]["template"], "inference")
    # Watching some namespaces: only those.
    narrow = _one(
        _render({"serviceMonitor": {"enabled": True}, "operator": {"namespaces": ["inference"]}}),
        "PodMonitor",
    )
    assert _selects(narrow, deployments[("inference", "chat")]["spec"]["template"], "inference")
    assert not _selects(narrow, deployments[("team-b", "other")]["spec"]["template"], "team-b")
    # Off by default.
    assert "PodMonitor" not in [o["kind"] for o in _render({})]


def test_the_model_server_pod_monitor_renders_in_operator_mode_too() -> None:
    values = {"podMonitor": {"enabled": True, "selector": {"app": "vllm"}}}
    monitor = _one(_render(values), "PodMonitor", "-model-servers")
    assert monitor["spec"]["selector"] == {"matchLabels": {"app": "vllm"}}
    # the models run where the configs are, not in the add-on's namespace
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    narrow = _one(
        _render({**values, "operator": {"namespaces": ["inference"]}}), "PodMonitor", "-model-servers"
    )
    assert narrow["spec"]["namespaceSelector"] == {"matchNames": ["inference"]}


def test_gateway_env_reaches_every_operator_made_gateway(cluster: FakeKubeApiServer, tmp_path: Path) -> None:
    env = [
        {"name": "OTEL_BSP_MAX_QUEUE_SIZE", "value": "8192"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.1"},
        {"name": "IGW_OTEL_SAMPLE_RATIO", "value": "0.05"},
    ]
    otlp = "http://otel-collector.observability:4318"
    args = _operator_args(_render({"operator": {"gatewayOtlpEndpoint": otlp, "gatewayEnv": env}}))
    pinned = igwc("pinned", model="p", app="p")
    pinned["spec"]["podDefaults"] = {"env": [{"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1.0"}]}
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    with running_operator(kubeconfig, data_plane=_settings(args)):
        cluster.add(igwc("chat"))
        cluster.add(pinned)
        chat = _applied(cluster, "inference", "chat")
        pinned_deployment = _applied(cluster, "inference", "pinned")
    (container,) = chat["spec"]["template"]["spec"]["containers"]
    seen = kubelet_env(container, pod_name="chat-0", namespace="inference")
    assert {e["name"]: seen[e["name"]] for e in env} == {e["name"]: e["value"] for e in env}
    assert seen["OTEL_EXPORTER_OTLP_ENDPOINT"] == otlp
    assert queue_size(seen) == 8192  # what the gateway's span queue bound reads
    options = tracing_options(None, None, env=seen)  # what igw serve reads, given no flag
    assert options is not None
    assert options.sample_ratio == 0.05  # drawn by the gateway, not steered by the caller's flag
    (container,) = pinned_deployment["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in container["env"]]
    assert names.count("OTEL_TRACES_SAMPLER_ARG") == 1  # one entry a name: server-side apply refuses two
    assert kubelet_env(container, pod_name="p-0", namespace="inference")["OTEL_TRACES_SAMPLER_ARG"] == "1.0"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "operator.gatewayEnv[1].name: A"),
        ([{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://x:4318"}], "gatewayOtlpEndpoint"),
        ([{"name": "IGW_CPU_REQUEST_MILLICORES", "value": "1"}], "operator.gatewayEnv[0].name"),
        ([{"name": "1BAD", "value": "1"}], "/operator/gatewayEnv/0/name"),
        ([{"name": "A"}], "/operator/gatewayEnv/0"),
        # Before session s41 these three were accepted: the traces variable won over
        # gatewayOtlpEndpoint (and the NetworkPolicy opened only that one's port), the EMF one sent
        # past gateway.cloudWatch.agent, and IGW_WORKER made each pod's first process a "worker".
        (
            [{"name": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "value": "http://x:4317/v1/traces"}],
            "operator.gatewayEnv[0].name: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is already set by "
            "operator.gatewayOtlpEndpoint",
        ),
        (
            [{"name": "AWS_EMF_AGENT_ENDPOINT", "value": "tcp://agent:25888"}],
            "operator.gatewayEnv[0].name: AWS_EMF_AGENT_ENDPOINT is already set by gateway.cloudWatch.agent",
        ),
        ([{"name": "IGW_WORKER", "value": "{}"}], "operator.gatewayEnv[0].name: IGW_WORKER"),
    ],
    ids=[
        "twice",
        "otlp-endpoint",
        "cpu-request",
        "bad-name",
        "no-value",
        "traces-endpoint",
        "emf-endpoint",
        "worker-role",
    ],
)
def test_bad_gateway_env_fails_with_the_field(env: list[dict[str, str]], message: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        _render({"operator": {"gatewayEnv": env}})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--gateway-env", "OTEL_BSP_MAX_QUEUE_SIZE=1", "--gateway-env", "OTEL_BSP_MAX_QUEUE_SIZE=2"],
            "more than once",
        ),
        (["--gateway-env", "OTEL_EXPORTER_OTLP_ENDPOINT=http://x:1"], "--gateway-otlp-endpoint"),
        (["--gateway-env", "OTEL_EXPORTER_OTLP_HEADERS"], "NAME=VALUE"),
        (["--gateway-env", "bad name=S3cretPassw0rd9XYZqq"], "NAME=VALUE"),
        (
            ["--gateway-env", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://x:4317/v1/traces"],
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: set by --gateway-otlp-endpoint",
        ),
        (["--gateway-env", "AWS_EMF_AGENT_ENDPOINT=tcp://agent:25888"], "set by --gateway-emf-endpoint"),
        (["--gateway-env", "IGW_WORKER={}"], "IGW_WORKER: set by igw serve itself"),
    ],
    ids=["twice", "reserved", "no-equals", "bad-name", "traces-endpoint", "emf-endpoint", "worker-role"],
)
def test_bad_gateway_env_options_exit_2_without_echoing_values(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    """Refused before the operator touches a cluster (the kubeconfig is no cluster's: it exists, as
    ``--kubeconfig`` is checked while parsing, but is never read), the value never shown."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not a kubeconfig\n")
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "operator", "--kubeconfig", str(kubeconfig), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'gateway_src'}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "S3cret" not in done.stderr + done.stdout
    assert "http://x:1" not in done.stderr + done.stdout
