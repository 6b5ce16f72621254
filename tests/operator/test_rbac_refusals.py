"""Reads and writes the API server refuses the operator (a narrowed ClusterRole, a policy), under the
chart's own RBAC with one grant taken away.

A refused read of what runs (the model-server pods, the served ConfigMap) ended the pass before its
status write: the object kept no status at all, not even the ``ApplyFailed`` the pass had found, and
the resync logged ``resync pass failed: ForbiddenError(ApiException())`` every pass, naming nothing.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest

from igw.addon import chart, pins
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.handlers import Resync
from igw.operator.kube import Kube
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc


def _chart_rbac_without(resource: str) -> list[dict[str, Any]]:
    """The chart's Roles and ClusterRoles with every grant on ``resource`` taken away."""
    roles = [
        copy.deepcopy(o)
        for o in chart.render({}, release="igw", namespace=pins.ADDON_NAMESPACE)
        if o["kind"] in ("Role", "ClusterRole")
    ]
    for role in roles:
        for rule in role.get("rules") or []:
            rule["resources"] = [r for r in rule.get("resources") or [] if r != resource]
    return roles


def test_a_refused_read_of_the_model_server_pods_is_reported_on_the_object(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.add(igwc("chat"))
    cluster.enforce_rbac(_chart_rbac_without("pods"))
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    with caplog.at_level(logging.WARNING, logger="igw.operator"):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    cluster.allow_all()
    stored = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    programmed = condition(stored, "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("False", "ObserveFailed"), programmed
    assert 'cannot list resource "pods"' in programmed["message"]
    assert condition(stored, "Ready")["status"] == "False"
    assert condition(stored, "Accepted")["reason"] == "Valid"
    said = [r.getMessage() for r in caplog.records]
    assert any("reading the data plane failed" in m and "403" in m for m in said), said


def test_a_refused_configmap_read_keeps_the_apply_failure_on_the_object(cluster: FakeKubeApiServer) -> None:
    cluster.add(igwc("chat"))
    cluster.enforce_rbac(_chart_rbac_without("configmaps"))
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    cluster.allow_all()
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("False", "ApplyFailed"), programmed
    assert 'cannot get resource "configmaps"' in programmed["message"]


def test_a_failed_resync_pass_is_logged_with_the_api_server_s_answer(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Nowhere on the object to report a refused status write: the log says what was refused."""
    cluster.add(igwc("chat"))
    cluster.enforce_rbac(_chart_rbac_without("inferencegatewayconfigs/status"))
    resync = Resync(Reconciler(Kube(cluster.api_client()), DataPlaneSettings()), 1.0)
    resync.saw("ADDED", {"metadata": {"namespace": "inference", "name": "chat"}})
    with caplog.at_level(logging.ERROR, logger="igw.operator"):
        asyncio.run(resync.pass_all())
    (failed,) = [r.getMessage() for r in caplog.records if "resync pass failed" in r.getMessage()]
    assert 'cannot patch resource "inferencegatewayconfigs/status"' in failed, failed
