"""The chart's ``networkPolicy`` values hold for the gateways the operator runs, end to end: values →
rendered container args → ``igw operator``'s own parsing → the operator on the fake API server under
the rendered RBAC.

Before session s41 the operator's gateway NetworkPolicy admitted every source on the inference port
(``networkPolicy.ingressCidrs`` was refused in operator mode), and ``networkPolicy.enabled: false``
removed only the operator's own NetworkPolicy: every gateway still got one."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from igw.addon import chart, configuration, pins
from igw.cli import operator as operator_cli
from igw.operator.dataplane import DEFAULT_INGRESS_CIDRS, GATEWAY_PORT, DataPlaneSettings
from igw.operator.runner import OperatorOptions
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import OperatorThread, find, igwc, wait_condition, wait_for


def _rendered_operator(values: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    rendered = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    return rendered, deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def _parser() -> argparse.ArgumentParser:
    """A parser of ``igw operator``'s own arguments, as the CLI builds it."""
    parser = argparse.ArgumentParser()
    operator_cli.add_arguments(parser)
    return parser


def _options(args: list[str], kubeconfig: Path) -> OperatorOptions:
    assert args[0] == "operator"
    options = operator_cli.operator_options(_parser().parse_args(args[1:]))
    return dataclasses.replace(
        options, kubeconfig=str(kubeconfig), identity="igw-operator-0", health_port=None
    )


def _inference_sources(policy: dict[str, Any]) -> list[Any]:
    """The ``from`` of the ingress rule(s) opening the gateway's inference port."""
    return [
        rule.get("from")
        for rule in policy["spec"]["ingress"]
        if any(port.get("port") == GATEWAY_PORT for port in rule.get("ports") or [])
    ]


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage().lower()]


def _chat_gateway_policy(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture, values: dict[str, Any]
) -> dict[str, Any]:
    """The NetworkPolicy made for a new config ``chat`` by the operator run as the chart rendered
    with ``values`` runs it (its container args), under the RBAC rendered for it; its log captured."""
    rendered, args = _rendered_operator(values)
    caplog.set_level(logging.INFO)
    return _policy_made_for_chat(cluster, kubeconfig, rendered, args)


def _policy_made_for_chat(
    cluster: FakeKubeApiServer, kubeconfig: Path, rendered: list[dict[str, Any]], args: list[str]
) -> dict[str, Any]:
    """The NetworkPolicy made for a new config ``chat`` by the operator run with the container
    ``args`` of ``rendered`` (the chart's objects), under the RBAC rendered there."""
    cluster.enforce_rbac(rendered)
    operator = OperatorThread(_options(args, kubeconfig)).start()
    try:
        cluster.add(igwc("chat", model="mistral", app="mistral"))
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    finally:
        assert operator.stop() == 0
    assert policy is not None
    return policy


def test_the_charts_ingress_cidrs_restrict_the_inference_port_of_every_operator_gateway(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``networkPolicy.ingressCidrs`` reaches the operator (``--gateway-ingress-cidr``) and becomes the
    only sources of the inference port in the NetworkPolicy of the gateway it makes; the add-on
    configuration check no longer calls the value ineffective in operator mode."""
    values = {"networkPolicy": {"ingressCidrs": ["10.20.0.0/16", "fd00:10::/56"]}}
    policy = _chat_gateway_policy(cluster, kubeconfig, caplog, values)
    assert _inference_sources(policy) == [
        [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "fd00:10::/56"}}]
    ]
    assert _refusals(caplog) == []
    assert "networkPolicy.ingressCidrs" not in chart.gateway_mode_only_paths(values)


def test_by_default_the_inference_port_admits_the_charts_default_sources_only() -> None:
    """Without ``--gateway-ingress-cidr`` the operator uses the chart's default sources (private IPv4
    ranges and IPv6), never a rule without ``from`` (which admits every source)."""
    _, args = _rendered_operator({})
    default_chart = tuple(args[i + 1] for i, arg in enumerate(args) if arg == "--gateway-ingress-cidr")
    assert default_chart == DEFAULT_INGRESS_CIDRS
    assert (
        operator_cli.operator_options(_parser().parse_args([])).data_plane.ingress_cidrs
        == DEFAULT_INGRESS_CIDRS
    )
    with pytest.raises(ValueError, match="ingress_cidrs"):
        DataPlaneSettings(ingress_cidrs=())


def test_network_policy_disabled_in_the_chart_gives_gateways_none_and_deletes_the_old_one(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``networkPolicy.enabled: false``: the operator (``--no-gateway-network-policy``), under the
    RBAC rendered for it, deletes the NetworkPolicy it made while they were on, makes none for a new
    config, says so in GatewayProgrammed, and leaves a NetworkPolicy of the same name it did not make."""
    rendered_on, args_on = _rendered_operator({})
    cluster.enforce_rbac(rendered_on)
    operator = OperatorThread(_options(args_on, kubeconfig)).start()
    try:
        cluster.add(igwc("chat", model="mistral", app="mistral"))
        wait_for(
            lambda: find(cluster, "NetworkPolicy", "inference", "chat-gateway"), what="the NetworkPolicy"
        )
    finally:
        assert operator.stop() == 0
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "hand-gateway", "namespace": "inference"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    cluster.add(foreign)

    rendered_off, args_off = _rendered_operator({"networkPolicy": {"enabled": False}})
    assert "--no-gateway-network-policy" in args_off
    assert not [o for o in rendered_off if o["kind"] == "NetworkPolicy"]
    cluster.enforce_rbac(rendered_off)
    caplog.set_level(logging.INFO)
    operator = OperatorThread(_options(args_off, kubeconfig)).start()
    try:
        wait_for(
            lambda: find(cluster, "NetworkPolicy", "inference", "chat-gateway") is None,
            what="the gateway's NetworkPolicy deleted",
        )
        cluster.add(igwc("hand", model="llama", app="llama"))
        programmed = wait_condition(cluster, "hand", "GatewayProgrammed", "True")
    finally:
        assert operator.stop() == 0
    assert find(cluster, "NetworkPolicy", "inference", "hand-gateway") is not None  # not ours: left
    assert "NetworkPolicies are off" in programmed["message"]
    assert _refusals(caplog) == []


NODE_LOCAL_DNS = {
    "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
}
"""A NodeLocal DNSCache: the pods' resolver is a link-local address, not the kube-dns pods the
operator's NetworkPolicy opens DNS to."""


def test_the_charts_extra_egress_reaches_the_network_policy_of_every_operator_gateway(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``networkPolicy.extraEgress`` in operator mode: refused (``has no effect with the chart's mode
    operator``) and rendered nowhere, so a destination of the cluster's rather than of a config (here a
    NodeLocal DNSCache) could not be opened for the gateways the operator runs. Now it reaches the
    operator (``--gateway-extra-egress``) and is added, as given, to each gateway's NetworkPolicy."""
    values = {"networkPolicy": {"extraEgress": [NODE_LOCAL_DNS]}}
    assert configuration.problems(values) == []
    policy = _chat_gateway_policy(cluster, kubeconfig, caplog, values)
    assert policy["spec"]["egress"][-1] == NODE_LOCAL_DNS
    assert _refusals(caplog) == []


@pytest.mark.parametrize(
    ("rule", "named"),
    [
        ('{"to": [{"ipBlock": {"cidr": "169.254.20.10"}}]}', "to[0].ipBlock.cidr"),
        ('{"ports": [{"port": 70000}]}', "ports[0].port"),
        ('{"ports": [{"port": 53, "protocol": "udp"}]}', "ports[0].protocol"),
        ('{"to": [{"podSelector": {}, "ipBlock": {"cidr": "10.0.0.0/8"}}]}', "to[0]"),
        ('{"from": []}', "unknown field 'from'"),
        ("[]", "rule: expected an object"),
        ("{", "not JSON"),
        ('{"to": [{"podSelector": {"matchLabels": "app=x"}}]}', "to[0].podSelector.matchLabels"),
        ('{"to": [{"namespaceSelector": {"matchLabels": {"a b": "x"}}}]}', "'a b' is not a label key"),
        (
            '{"to": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}]}',
            "to[0].podSelector.matchExpressions[0].values: In needs at least one value",
        ),
        (
            '{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]}',
            "to[0].ipBlock.except[0]: '192.168.0.0/16' is not a strict subset of '10.0.0.0/8'",
        ),
        ('{"to": [{"ipBlock": {"cidr": "::/0", "except": ["::/0"]}}]}', "is not a strict subset"),
        ("{}", "allows all egress"),
        ('{"to": [], "ports": []}', "allows all egress"),
        ('{"ports": [{"port": 53}, {"protocol": "UDP"}]}', "allows all egress"),
    ],
)
def test_a_malformed_extra_egress_rule_is_refused_naming_the_field(
    rule: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Passed on as it was, the API server would refuse the NetworkPolicy of every config, each pass.
    A rule naming no destination and no port (``{}``) was accepted and turned every gateway's
    default-deny egress into allow-all; it is refused too (naming the destinations means it). So is a
    selector the API server refuses (only its field names were checked before s42)."""
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--gateway-extra-egress", rule])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--gateway-extra-egress: not a NetworkPolicy egress rule" in error
    assert named in error


def _dns_rule(policy: dict[str, Any]) -> dict[str, Any]:
    rules: list[dict[str, Any]] = policy["spec"]["egress"]
    (rule,) = [r for r in rules if {"port": 53, "protocol": "UDP"} in r.get("ports", [])]
    return rule


def test_the_charts_dns_cidrs_open_a_node_local_dns_cache_for_the_operator_and_every_gateway(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With a NodeLocal DNSCache (169.254.20.10, host network, so no pod selector matches it) the
    operator's own NetworkPolicy opened DNS to the kube-dns pods only and ``extraEgress`` does not
    reach it: under an enforcing CNI the operator resolved nothing, and no value could change that.
    ``networkPolicy.dnsCidrs`` adds the resolver to the DNS rule of the operator, of gateway mode's
    NetworkPolicy and (``--gateway-dns-cidr``) of every gateway the operator runs."""
    cache = {"ipBlock": {"cidr": "169.254.20.10/32"}}
    values = {"networkPolicy": {"dnsCidrs": ["169.254.20.10/32"]}}
    assert configuration.problems(values) == []
    rendered, args = _rendered_operator(values)
    (own,) = [o for o in rendered if o["kind"] == "NetworkPolicy"]
    assert cache in _dns_rule(own)["to"]
    gateway_mode = chart.render({"mode": "gateway", **values})
    (gateway_policy,) = [o for o in gateway_mode if o["kind"] == "NetworkPolicy"]
    assert cache in _dns_rule(gateway_policy)["to"]
    policy = _policy_made_for_chat(cluster, kubeconfig, rendered, args)
    rule = _dns_rule(policy)
    assert cache in rule["to"]
    assert rule["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert _refusals(caplog) == []


def test_a_well_formed_extra_egress_rule_is_taken_as_given() -> None:
    """The checks above refuse only what the API server would: an exception inside the block, a
    selector with expressions and a rule naming its ports only are taken, unchanged."""
    rules = [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]},
        {"to": [{"podSelector": {"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}}]},
        {"ports": [{"port": 3128, "protocol": "TCP"}]},
    ]
    flags = [item for rule in rules for item in ("--gateway-extra-egress", json.dumps(rule))]
    args = _parser().parse_args(flags)
    assert args.gateway_extra_egress == rules
