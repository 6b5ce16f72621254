"""Operator-rendered gateway pods run as many ``igw serve`` workers as the operator is told: ``auto``
(the default) with the container's CPU request from the downward API, a number as it is."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from igw.cli import serve
from igw.gateway.worker_count import CPU_REQUEST_ENV, auto_workers
from igw.gateway.worker_heartbeat import STUCK_AFTER_S
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from tests.operator.dataplane_support import K8S_VERSION, by_kind, igwc_object
from tests.operator.harness import kubelet_env


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return container


def _serve_args(container: dict[str, Any]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(container["args"][1:])


def _workers(container: dict[str, Any]) -> int | str:
    workers: int | str = _serve_args(container).workers
    return workers


def test_auto_by_default_reads_the_gateway_containers_cpu_request() -> None:
    objects = desired_objects(igwc_object(), DataPlaneSettings())
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    container = _container(objects)
    assert _workers(container) == "auto"
    (entry,) = [e for e in container["env"] if e["name"] == CPU_REQUEST_ENV]
    field = entry["valueFrom"]["resourceFieldRef"]
    assert field == {"containerName": container["name"], "resource": "requests.cpu", "divisor": "1m"}


@pytest.mark.parametrize(("workers", "expected"), [(1, 1), (4, 4)])
def test_a_number_is_passed_as_it_is_without_the_request(workers: int, expected: int) -> None:
    container = _container(desired_objects(igwc_object(), DataPlaneSettings(workers=workers)))
    assert _workers(container) == expected
    assert CPU_REQUEST_ENV not in [e["name"] for e in container.get("env", [])]
    if workers == 1:
        assert "--workers" not in container["args"]
        assert "--worker-timeout" not in container["args"]


@pytest.mark.parametrize(("workers", "timeout"), [("auto", STUCK_AFTER_S), (4, 7.25), (2, 0.0)])
def test_a_worker_group_gets_the_worker_timeout(workers: int | str, timeout: float) -> None:
    container = _container(
        desired_objects(igwc_object(), DataPlaneSettings(workers=workers, worker_timeout_s=timeout))
    )
    assert _serve_args(container).worker_timeout == timeout


def test_pod_defaults_env_may_override_the_request() -> None:
    """podDefaults.env comes after ours, so an object can pin the variable (a later entry wins)."""
    mine = [{"name": CPU_REQUEST_ENV, "value": "2000"}]
    container = _container(desired_objects(igwc_object(podDefaults={"env": mine}), DataPlaneSettings()))
    assert [e["name"] for e in container["env"]] == [CPU_REQUEST_ENV, CPU_REQUEST_ENV]
    assert container["env"][-1] == mine[0]


@pytest.mark.parametrize(("cpu", "expected"), [("500m", 1), ("1", 1), ("1500m", 2), ("4", 4)])
def test_the_pods_request_sets_the_count(cpu: str, expected: int) -> None:
    """What the pod's process reads (the kubelet's rounding of ``requests.cpu`` to millicores) and
    what ``auto`` makes of it, with CPUs and memory to spare."""
    resources = {"requests": {"cpu": cpu, "memory": "512Mi"}, "limits": {"cpu": "8", "memory": "8Gi"}}
    objects = desired_objects(igwc_object(podDefaults={"resources": resources}), DataPlaneSettings())
    env = kubelet_env(_container(objects), pod_name="p", namespace="inference")
    budget = auto_workers(root=Path("/nonexistent"), environ=env, affinity=lambda: 16)
    assert budget.workers == expected


def test_the_default_resources_keep_one_worker() -> None:
    objects = desired_objects(igwc_object(), DataPlaneSettings())
    env = kubelet_env(_container(objects), pod_name="p", namespace="inference")
    assert env[CPU_REQUEST_ENV] == "500"
    assert auto_workers(root=Path("/nonexistent"), environ=env, affinity=lambda: 16).workers == 1
