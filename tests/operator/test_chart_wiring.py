"""The chart's operator settings, end to end: values → rendered container args → ``igw operator``'s
own argument parsing → the operator acting on the fake API server under the rendered RBAC.

The chart tests checked the args and the RBAC apart, and the operator tests built their options by
hand: nothing showed that ``operator.autoTls: false`` gives an operator that makes no call its
narrower RBAC refuses, nor that the default RBAC covers every call of auto-issued TLS."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from igw.addon import chart, configuration, pins
from igw.cli import operator as operator_cli
from igw.operator import election
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import IGWC_API_VERSION, Kube
from igw.operator.reconcile import Reconciler
from igw.operator.runner import OperatorOptions
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import (
    DATA_PLANE_KINDS,
    OperatorThread,
    condition,
    find,
    igwc,
    owned_by,
    tls_igwc,
    wait_condition,
    wait_for,
    write_tls_secret,
)


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _container_args(objects: list[dict[str, Any]]) -> list[str]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _options(args: list[str], kubeconfig: Path) -> OperatorOptions:
    """What ``igw operator`` makes of the rendered args, pointed at the fake cluster (the pod's
    account becomes the kubeconfig; the kubelet's ``$(POD_NAME)`` a fixed identity; no probe port)."""
    assert args[0] == "operator"
    parser = argparse.ArgumentParser()
    operator_cli.add_arguments(parser)
    options = operator_cli.operator_options(parser.parse_args(args[1:]))
    return dataclasses.replace(
        options, kubeconfig=str(kubeconfig), identity="igw-operator-0", health_port=None
    )


@pytest.fixture
def acm() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("acm", region_name="us-east-1")


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage().lower()]


def test_auto_tls_off_from_the_chart_gives_an_operator_that_needs_no_secret_access(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``operator.autoTls: false``: the args carry ``--no-auto-tls``, the RBAC grants no Secret,
    Certificate or Namespace access, and the operator so started (leader election included) programs
    a plain config, reports a ``tls: {}`` one ``AutoTlsDisabled``, runs no sweep, never builds an ACM
    client and never asks for what its RBAC refuses."""
    rendered = _render({"operator": {"autoTls": False}})
    options = _options(_container_args(rendered), kubeconfig)
    assert (options.auto_tls.enabled, options.leader_election) == (False, True)

    def no_acm() -> Any:
        raise AssertionError("the operator built an ACM client with auto-issued TLS off")

    options = dataclasses.replace(
        options, auto_tls=dataclasses.replace(options.auto_tls, acm_client_factory=no_acm)
    )
    cluster.enforce_rbac(rendered)
    caplog.set_level(logging.INFO)
    operator = OperatorThread(options).start()
    try:
        cluster.add(igwc("plain", model="mistral", app="mistral"))
        cluster.add(tls_igwc("chat"))
        disabled = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
        wait_for(
            lambda: wait_condition(cluster, "chat", "GatewayProgrammed")["reason"] == "AutoTlsDisabled",
            what="AutoTlsDisabled",
        )
        wait_condition(cluster, "plain", "GatewayProgrammed", "True")
        assert disabled
    finally:
        assert operator.stop() == 0
    touched = [path for _, path, _ in cluster.requests if "/secrets" in path or "/certificates" in path]
    assert touched == []
    assert not [path for _, path, _ in cluster.requests if path.endswith("/namespaces/kube-system")]
    assert _refusals(caplog) == []
    assert find(cluster, "Lease", pins.ADDON_NAMESPACE, "igw-operator") is not None


@pytest.mark.usefixtures("cert_manager")
def test_the_default_chart_rbac_covers_auto_issued_tls_and_its_sweep(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Default values plus ``operator.tlsSweepSeconds``: the rendered args set the sweep interval,
    and under the rendered RBAC the operator issues, imports and serves a ``tls: {}`` config and
    sweeps (Secrets listed cluster-wide, the kube-system Namespace read) with no call refused."""
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    rendered = _render({"operator": {"tlsSweepSeconds": 30}})
    options = _options(_container_args(rendered), kubeconfig)
    assert (options.auto_tls.enabled, options.tls_sweep_s) == (True, 30.0)
    options = dataclasses.replace(
        options, auto_tls=dataclasses.replace(options.auto_tls, acm_client_factory=lambda: acm)
    )
    cluster.enforce_rbac(rendered)
    caplog.set_level(logging.INFO)
    operator = OperatorThread(options).start()
    try:
        cluster.add(tls_igwc("chat"))
        wait_for(lambda: find(cluster, "Certificate", "inference", "chat-gateway"), what="the Certificate")
        write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        wait_for(
            lambda: any(
                method == "GET" and path == "/api/v1/secrets" for method, path, _ in cluster.requests
            ),
            what="the sweep's cluster-wide Secret listing",
        )
    finally:
        assert operator.stop() == 0
    assert (
        len(
            acm.list_certificates(Includes={"keyTypes": ["EC_prime256v1", "RSA_2048"]})[
                "CertificateSummaryList"
            ]
        )
        == 1
    )
    assert _refusals(caplog) == []


def test_the_chart_rbac_lets_the_operator_adopt_the_orphans_of_a_config_applied_again(
    cluster: FakeKubeApiServer,
) -> None:
    """``kubectl delete igwc chat --cascade=orphan``, then the same manifest applied again, on a cluster
    with the ``OwnerReferencesPermissionEnforcement`` admission plugin: adopting an orphan replaces its
    owner references, which the plugin admits only from a caller that may delete the object. Under the
    chart's RBAC (no ``delete`` on the data-plane kinds) the pass was refused for every object
    (``cannot set an ownerRef on a resource you can't delete``) and the gateway stayed unowned, its
    config ``ApplyFailed``, for good. Now the same objects (same uids: no new pods) carry the new
    owner."""
    cluster.enforce_rbac(_render({}))
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    first = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert first is not None
    before = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in owned_by(cluster, first["metadata"]["uid"])
    }
    assert {kind for kind, _ in before} >= DATA_PLANE_KINDS
    igwc_kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(igwc_kind, "inference", "chat", propagation="Orphan")

    reborn = cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert programmed["status"] == "True", programmed.get("message")
    after = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["uid"]
        for o in owned_by(cluster, reborn["metadata"]["uid"])
    }
    assert after == before


@pytest.mark.usefixtures("cert_manager")
@pytest.mark.parametrize("namespaces", [[], ["inference"]])
def test_the_chart_rbac_lets_the_operator_report_a_missing_issuer(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any, namespaces: list[str]
) -> None:
    """The default chart names ``ClusterIssuer/igw-selfsigned`` and creates it only with
    ``operator.selfSignedClusterIssuer``: under the rendered RBAC (all namespaces, or a namespace
    list, whose Roles cannot grant a cluster-scoped kind) the operator reads the issuer and says it
    is missing (``IssuerNotFound``), rather than ``CertificatePending`` for good."""
    rendered = _render({"operator": {"namespaces": namespaces}})
    options = _options(_container_args(rendered), kubeconfig)
    cluster.enforce_rbac(rendered)
    settings = dataclasses.replace(options.auto_tls, acm_client_factory=lambda: acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert found is not None
    assert (found["status"], found["reason"]) == ("False", "IssuerNotFound"), found
    assert "ClusterIssuer igw-selfsigned does not exist" in found["message"]


def test_the_charts_leader_election_durations_reach_the_operators_settings() -> None:
    """``operator.leaderElection.*`` render ``--lease-duration`` / ``--renew-deadline`` /
    ``--retry-period``, which ``igw operator`` parses into the options its election is built from; the
    defaults render the operator's own defaults."""
    rendered = _render(
        {
            "operator": {
                "leaderElection": {
                    "leaseDurationSeconds": 30,
                    "renewDeadlineSeconds": 20,
                    "retryPeriodSeconds": 5,
                }
            }
        }
    )
    args = _container_args(rendered)
    assert [
        args[args.index(flag) + 1] for flag in ("--lease-duration", "--renew-deadline", "--retry-period")
    ] == [
        "30",
        "20",
        "5",
    ]
    options = _options(args, Path("/dev/null"))
    assert (options.lease_duration_s, options.renew_deadline_s, options.retry_period_s) == (30, 20, 5)
    default = _options(_container_args(_render({})), Path("/dev/null"))
    assert (default.lease_duration_s, default.renew_deadline_s, default.retry_period_s) == (
        election.DEFAULT_LEASE_DURATION_S,
        election.DEFAULT_RENEW_DEADLINE_S,
        election.DEFAULT_RETRY_PERIOD_S,
    )


@pytest.mark.parametrize(
    ("durations", "named"),
    [
        (
            {"leaseDurationSeconds": 5, "renewDeadlineSeconds": 5},
            "renewDeadlineSeconds (5) must be below operator.leaderElection.leaseDurationSeconds (5)",
        ),
        (
            {"renewDeadlineSeconds": 6, "retryPeriodSeconds": 5},
            "renewDeadlineSeconds (6) must exceed 1.2 x operator.leaderElection.retryPeriodSeconds (5)",
        ),
    ],
)
def test_the_chart_refuses_leader_election_durations_the_operator_would_refuse(
    durations: dict[str, int], named: str
) -> None:
    """Rendered, they were args ``igw operator`` refuses (exit 2): every operator pod crash-looped."""
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=re.escape(named)):
        _render({"operator": {"leaderElection": durations}})
    for bad in ({"leaseDurationSeconds": 2}, {"retryPeriodSeconds": 61}, {"renewDeadlineSeconds": 300}):
        (problem,) = configuration.problems({"operator": {"leaderElection": bad}})
        assert problem.startswith("operator.leaderElection."), problem
