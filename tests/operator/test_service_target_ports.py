"""The gateway NetworkPolicy opens the pod ports behind a config's in-cluster Services, end to end:
the chart's rendered RBAC and args, ``igw operator`` on the fake API server.

A NetworkPolicy sees a connection after the Service's DNAT: the pod's IP and ``targetPort``. Before
session s42 the operator opened the Service port a config names (the JWKS URL's 443, the default
backend's 80), so with pods listening on 8443 / 9000 an enforcing CNI dropped every key fetch (every
token refused) and every request for the default backend (502), and nothing said why."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes_validate

from igw.addon import chart, pins
from igw.cli import operator as operator_cli
from igw.gateway.emf_sink import AgentEndpoint
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import PORTS_REASON, Reconciler
from igw.operator.runner import OperatorOptions
from igw.operator.service_ports import READ_TTL_S
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.dataplane_support import K8S_VERSION
from tests.operator.harness import OperatorThread, find, igwc, jwt_provider, wait_condition, wait_for


def _operator(values: dict[str, Any], cluster: FakeKubeApiServer, kubeconfig: Path) -> OperatorOptions:
    rendered = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    cluster.enforce_rbac(rendered)
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parser = argparse.ArgumentParser()
    operator_cli.add_arguments(parser)
    options = operator_cli.operator_options(parser.parse_args(args[1:]))
    return dataclasses.replace(
        options, kubeconfig=str(kubeconfig), identity="igw-operator-0", health_port=None
    )


def _service(namespace: str, name: str, port: int, target: int | str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "main", "port": port, "targetPort": target}]},
    }


def _pod(namespace: str, app: str, port_name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app}-0", "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "ports": [{"name": port_name, "containerPort": port}]}]
        },
    }


def _config() -> dict[str, Any]:
    obj = igwc("chat", model="mistral", app="mistral")
    obj["spec"]["auth"] = jwt_provider("https://jwks.auth.svc.cluster.local/keys")
    obj["spec"]["bbr"]["defaultBackend"] = {"name": "fallback", "port": 80}
    return obj


MODEL_PODS: dict[str, Any] = {"matchLabels": {"app": "mistral"}}
"""The ``modelSelector`` of :func:`_config`'s scheduler: its rule (:mod:`igw.operator.model_egress`)
is no Service's."""


def _namespace_rules(policy: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The egress rules whose one peer is (some of) ``namespace``'s pods, but the model servers'."""
    peer = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return [
        rule
        for rule in policy["spec"]["egress"]
        if len(rule.get("to") or []) == 1
        and rule["to"][0].get("namespaceSelector") == peer
        and rule["to"][0].get("podSelector") != MODEL_PODS
    ]


def _egress_ports(policy: dict[str, Any], namespace: str) -> list[int]:
    return [p["port"] for rule in _namespace_rules(policy, namespace) for p in rule["ports"]]


def _unresolved_events(cluster: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [e for e in cluster.store.iter_all() if e["kind"] == "Event" and e.get("reason") == PORTS_REASON]


def test_the_pods_ports_behind_the_jwks_and_default_backend_services_are_opened(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """JWKS at ``https://jwks.auth.svc.cluster.local`` (Service 443 -> pod 8443, numeric), the
    default backend ``fallback:80`` (-> the named port ``http``, 9000 on its pods) and shared rate limits
    in ``redis.cache.svc`` (6379 -> 7000): each pod port is opened, to its Service's namespace only,
    and no ServicePortUnresolved Event is posted."""
    cluster.add(_service("cache", "redis", 6379, 7000))
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, "http"))
    cluster.add(_pod("inference", "fallback", "http", 9000))
    operator = OperatorThread(_operator({}, cluster, kubeconfig)).start()
    try:
        config = _config()
        config["spec"]["extensions"] = {
            "rateLimits": {"backend": "redis", "redis": {"url": "redis://redis.cache.svc/0"}}
        }
        cluster.add(config)
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    finally:
        assert operator.stop() == 0
    assert policy is not None
    assert _egress_ports(policy, "cache") == [7000]
    assert _egress_ports(policy, "auth") == [8443]
    assert _egress_ports(policy, "inference") == [9000]
    assert _unresolved_events(cluster) == []


def test_a_service_the_narrowed_operator_may_not_read_is_reported_with_the_rule_to_add(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """With ``operator.namespaces: [inference]`` the operator may not read Services in ``auth``: the
    JWKS port stays the URL's, and one Warning Event says so, naming the field and the
    ``networkPolicy.extraEgress`` rule that opens the pods (where nothing was said before)."""
    for namespace in ("inference", "auth"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, 9000))
    values = {"operator": {"namespaces": ["inference"]}}
    operator = OperatorThread(_operator(values, cluster, kubeconfig)).start()
    try:
        cluster.add(_config())
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        (event,) = wait_for(lambda: _unresolved_events(cluster) or None, what="ServicePortUnresolved")
        policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    finally:
        assert operator.stop() == 0
    assert policy is not None
    assert _egress_ports(policy, "inference") == [9000]
    assert _egress_ports(policy, "auth") == []
    assert event["type"] == "Warning"
    assert "spec.auth.jwt.provider.remoteJWKS.uri (jwks.auth.svc:443)" in event["message"]
    assert "networkPolicy.extraEgress" in event["message"]
    assert '"kubernetes.io/metadata.name": "auth"' in event["message"]


def test_a_service_made_after_the_config_is_resolved_at_the_next_pass_and_reported_per_change(
    cluster: FakeKubeApiServer,
) -> None:
    """A default backend and a Redis store whose Services do not exist yet: one Warning Event while
    that holds (not one per resync pass), naming no password of the Redis URL. Once the backend's
    Service and pods are there, the next pass opens the pods' port and one more Event names what is
    still unresolved. An ExternalName JWKS Service (no DNAT to pods) opens nothing and is no problem."""
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "jwks", "namespace": "auth"},
            "spec": {"type": "ExternalName", "externalName": "idp.example.com"},
        }
    )
    config = _config()
    config["spec"]["extensions"] = {
        "rateLimits": {"backend": "redis", "redis": {"url": "rediss://:s3cr3t-token@redis.cache.svc:6380/0"}}
    }
    cluster.add(config)
    now, ticks = [datetime(2026, 12, 7, tzinfo=UTC)], [0.0]
    reconciler = Reconciler(
        Kube(cluster.api_client()), DataPlaneSettings(), clock=lambda: now[0], monotonic=lambda: ticks[0]
    )
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        now[0] += timedelta(seconds=5)  # the operator's default resync
        ticks[0] += 5
    (event,) = _unresolved_events(cluster)
    assert event["message"].startswith(
        "spec.extensions.rateLimits.redis.url (redis.cache.svc:6380): Service cache/redis does not exist"
    )
    backend = "spec.bbr.defaultBackend (fallback.inference.svc:80): Service inference/fallback does not"
    assert backend in event["message"]
    assert "s3cr3t" not in event["message"]
    cluster.add(_service("inference", "fallback", 80, "http"))
    cluster.add(_pod("inference", "fallback", "http", 9000))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    assert policy is not None
    assert _egress_ports(policy, "inference") == [9000]
    assert _egress_ports(policy, "auth") == []
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    first, second = _unresolved_events(cluster)
    assert first == event
    assert second["message"].startswith("spec.extensions.rateLimits.redis.url (redis.cache.svc:6380)")
    assert "defaultBackend" not in second["message"]


def _egress_pairs(policy: dict[str, Any], namespace: str) -> list[tuple[int, str]]:
    return [(p["port"], p["protocol"]) for rule in _namespace_rules(policy, namespace) for p in rule["ports"]]


def _reconciled_policy(cluster: FakeKubeApiServer, config: dict[str, Any], **settings: Any) -> dict[str, Any]:
    cluster.add(config)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(**settings))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    policy = find(cluster, "NetworkPolicy", "inference", "chat-gateway")
    assert policy is not None
    return policy


def test_short_service_names_reached_through_the_pods_search_path_are_resolved(
    cluster: FakeKubeApiServer,
) -> None:
    """``https://jwks.auth/keys`` (``<name>.<namespace>``) and ``redis://redis:6379`` (a bare name in
    the config's namespace) reach Services through the pods' DNS search path, as ``jwks.auth.svc`` does:
    their pod ports (8443, 7000) are opened. Before, only ``<name>.<namespace>.svc[...]`` was taken for
    a Service, and an enforcing CNI dropped every key fetch and every Redis call, with nothing said. A
    short name that is no Service (``idp.corp``, a host outside the cluster) is no problem to report."""
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "redis", 6379, 7000))
    cluster.add(_service("inference", "fallback", 80, 9000))
    config = _config()
    config["spec"]["auth"] = jwt_provider("https://jwks.auth/keys")
    config["spec"]["auth"]["jwt"]["provider"]["issuer"] = "https://idp.corp"
    config["spec"]["extensions"] = {
        "rateLimits": {"backend": "redis", "redis": {"url": "redis://redis:6379/0"}},
        "authorization": {"oidcDiscovery": True},
    }
    policy = _reconciled_policy(cluster, config)
    assert _egress_ports(policy, "auth") == [8443]
    assert sorted(_egress_ports(policy, "inference")) == [7000, 9000]
    assert _egress_ports(policy, "corp") == []
    assert _unresolved_events(cluster) == []


def test_a_service_whose_pods_listen_on_its_own_port_is_opened_to_its_namespaces_pods(
    cluster: FakeKubeApiServer,
) -> None:
    """JWKS at ``https://jwks.auth.svc`` with pods on 443 too: the config's HTTPS rule opens 443 to
    ``ipBlock`` CIDRs only, which some CNIs (Cilium) never match with a pod's address. The resolved pod
    port is opened to namespace ``auth``'s pods as well; before, only a pod port differing from the
    Service port was, and such a CNI dropped every key fetch."""
    cluster.add(_service("auth", "jwks", 443, 443))
    cluster.add(_service("inference", "fallback", 80, 80))
    policy = _reconciled_policy(cluster, _config())
    assert _egress_ports(policy, "auth") == [443]
    assert _egress_ports(policy, "inference") == [80]
    assert _unresolved_events(cluster) == []


def test_the_pod_ports_behind_the_otlp_collector_and_cloudwatch_agent_services_are_opened(
    cluster: FakeKubeApiServer,
) -> None:
    """``--gateway-otlp-endpoint http://collector.observability.svc:4318`` in front of pods on 14318
    and ``--gateway-emf-endpoint udp://cwagent.amazon-cloudwatch:25888`` in front of the named UDP port
    ``emf`` (25889): both pod ports are opened, with their protocols. Before, only the Service ports
    were, so an enforcing CNI dropped every span and every EMF document."""
    cluster.add(_service("observability", "collector", 4318, 14318))
    agent = _service("amazon-cloudwatch", "cwagent", 25888, "emf")
    agent["spec"]["ports"][0]["protocol"] = "UDP"
    cluster.add(agent)
    pod = _pod("amazon-cloudwatch", "cwagent", "emf", 25889)
    pod["spec"]["containers"][0]["ports"][0]["protocol"] = "UDP"
    cluster.add(pod)
    policy = _reconciled_policy(
        cluster,
        igwc("chat", model="mistral", app="mistral"),
        otlp_endpoint="http://collector.observability.svc:4318",
        emf_interval_s=60,
        emf_endpoint=AgentEndpoint.parse("udp://cwagent.amazon-cloudwatch:25888"),
    )
    assert _egress_pairs(policy, "observability") == [(14318, "TCP")]
    assert _egress_pairs(policy, "amazon-cloudwatch") == [(25889, "UDP")]
    assert _unresolved_events(cluster) == []


def test_the_configs_of_one_resync_share_their_service_reads(cluster: FakeKubeApiServer) -> None:
    """Three configs with one JWKS Service behind a named port: one resync reads the Service and lists
    its pods once, not once per config (before: 3 reads and 3 lists per resync, 150 of a 50-config
    resync's 851 requests). Once :data:`READ_TTL_S` has passed, the next pass reads again and picks up
    a changed Service."""
    cluster.add(_service("auth", "jwks", 443, "https"))
    cluster.add(_pod("auth", "jwks", "https", 8443))
    now = [datetime(2026, 12, 7, tzinfo=UTC)]
    names = [f"chat{index}" for index in range(3)]
    for index, name in enumerate(names):
        config = igwc(name, model=f"m{index}", app=f"m{index}")
        config["spec"]["auth"] = jwt_provider("https://jwks.auth.svc/keys")
        cluster.add(config)
    ticks = [0.0]
    reconciler = Reconciler(
        Kube(cluster.api_client()), DataPlaneSettings(), clock=lambda: now[0], monotonic=lambda: ticks[0]
    )

    def resync() -> list[str]:
        cluster.requests.clear()
        for name in names:
            assert asyncio.run(reconciler.reconcile("inference", name)) is True
        return [path for _, path, _ in cluster.requests if path.startswith("/api/v1/namespaces/auth/")]

    def opened() -> list[list[int]]:
        policies = [find(cluster, "NetworkPolicy", "inference", f"{name}-gateway") for name in names]
        return [_egress_ports(policy or {}, "auth") for policy in policies]

    reads = ["/api/v1/namespaces/auth/services/jwks", "/api/v1/namespaces/auth/pods"]
    assert resync() == reads
    assert opened() == [[8443]] * 3
    second = _pod("auth", "jwks", "https", 9443)
    second["metadata"]["name"] = "jwks-1"
    cluster.add(second)
    assert resync() == []
    now[0] -= timedelta(hours=1)  # the wall clock stepped back (NTP): the reads' ages do not
    assert resync() == []
    ticks[0] += READ_TTL_S
    assert resync() == reads
    assert opened() == [[8443, 9443]] * 3


def test_only_the_pods_each_service_selects_are_opened_not_its_whole_namespace(
    cluster: FakeKubeApiServer,
) -> None:
    """JWKS (``app: jwks``, 443 -> 8443) and Redis (``app: redis``, 6379 -> 7000) in namespace
    ``shared``: each pod port is opened to the pods its Service selects (``podSelector`` with the
    ``namespaceSelector``), one rule per Service. Before, both were opened to every pod of ``shared``,
    so a gateway could reach any pod there listening on 8443 or 7000. A Service without a selector (its
    endpoints managed by hand) names no pods: it is reported with the rule to add, and only its own port
    is opened, to the pods of its namespace."""
    cluster.add(_service("shared", "jwks", 443, 8443))
    cluster.add(_service("shared", "redis", 6379, 7000))
    manual = _service("inference", "fallback", 80, 9000)
    del manual["spec"]["selector"]
    cluster.add(manual)
    config = _config()
    config["spec"]["auth"] = jwt_provider("https://jwks.shared.svc/keys")
    config["spec"]["extensions"] = {
        "rateLimits": {"backend": "redis", "redis": {"url": "redis://redis.shared.svc:6379/0"}}
    }
    policy = _reconciled_policy(cluster, config)
    rules = [
        (rule["to"][0].get("podSelector"), [p["port"] for p in rule["ports"]])
        for rule in _namespace_rules(policy, "shared")
    ]
    assert rules == [({"matchLabels": {"app": "jwks"}}, [8443]), ({"matchLabels": {"app": "redis"}}, [7000])]
    # unresolved: only the default backend's own port, to its namespace's pods (igw.operator.model_egress)
    assert _egress_ports(policy, "inference") == [80]
    (event,) = _unresolved_events(cluster)
    assert (
        "spec.bbr.defaultBackend (fallback.inference.svc:80): Service inference/fallback selects no pods"
        in (event["message"])
    )


def test_a_short_name_of_no_namespace_is_not_reported_by_an_operator_narrowed_to_some(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """With ``operator.namespaces: [inference]``, the issuer ``https://idp.corp`` (a host outside the
    cluster: there is no namespace ``corp``) is read as Service ``idp`` in ``corp``, and refused (403).
    Before, that refusal was reported as a ServicePortUnresolved Warning telling the operator to open
    pods of ``corp``; now the operator sees no namespace ``corp`` and says nothing of it. The short name
    ``jwks.auth``, whose namespace exists, may be a Service the operator cannot read: still reported."""
    for namespace in ("inference", "auth"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, 9000))
    config = _config()
    config["spec"]["auth"] = jwt_provider("https://jwks.auth/keys")
    config["spec"]["auth"]["jwt"]["provider"]["issuer"] = "https://idp.corp"
    config["spec"]["extensions"] = {"authorization": {"oidcDiscovery": True}}
    operator = OperatorThread(
        _operator({"operator": {"namespaces": ["inference"]}}, cluster, kubeconfig)
    ).start()
    try:
        cluster.add(config)
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        (event,) = wait_for(lambda: _unresolved_events(cluster) or None, what="ServicePortUnresolved")
    finally:
        assert operator.stop() == 0
    assert "spec.auth.jwt.provider.remoteJWKS.uri (jwks.auth.svc:443)" in event["message"]
    assert "corp" not in event["message"]


def test_the_network_policy_with_resolved_services_is_valid_for_the_api_server(
    cluster: FakeKubeApiServer,
) -> None:
    """The whole NetworkPolicy, with pod ports resolved behind TCP and UDP Services (numeric and named
    ``targetPort``, selectors of several labels) and an unresolved one, passes the API server's schema
    (kubernetes-validate, strict: no unknown field, ports and protocols and selectors in their shapes)."""
    jwks = _service("auth", "jwks", 443, "https")
    jwks["spec"]["selector"] = {"app.kubernetes.io/name": "keycloak", "app.kubernetes.io/instance": "sso"}
    cluster.add(jwks)
    pod = _pod("auth", "keycloak", "https", 8443)
    pod["metadata"]["labels"] = dict(jwks["spec"]["selector"])
    cluster.add(pod)
    agent = _service("amazon-cloudwatch", "cwagent", 25888, 25889)
    agent["spec"]["ports"][0]["protocol"] = "UDP"
    cluster.add(agent)
    config = _config()
    config["spec"]["auth"] = jwt_provider("https://jwks.auth.svc/keys")
    policy = _reconciled_policy(
        cluster,
        config,
        emf_interval_s=60,
        emf_endpoint=AgentEndpoint.parse("udp://cwagent.amazon-cloudwatch:25888"),
    )
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert _egress_pairs(policy, "auth") == [(8443, "TCP")]
    assert _egress_pairs(policy, "amazon-cloudwatch") == [(25889, "UDP")]
    (rule,) = _namespace_rules(policy, "auth")
    assert rule["to"][0]["podSelector"] == {"matchLabels": jwks["spec"]["selector"]}
    assert len(_unresolved_events(cluster)) == 1  # the default backend's Service does not exist


def test_a_host_under_svc_of_another_domain_is_reported_only_when_it_is_a_service(
    cluster: FakeKubeApiServer,
) -> None:
    """``https://auth.payments.svc.corp.example.com`` (a host outside the cluster whose third label
    happens to be ``svc``) as the issuer, with no Service ``payments/auth``: nothing is reported. Before,
    any ``<a>.<b>.svc.<anything>`` was taken for a Service for certain, and a Warning said
    ``Service payments/auth does not exist``. A Service under a custom cluster domain
    (``jwks.auth.svc.example.internal``) is still resolved (8443 opened)."""
    cluster.add(_service("auth", "jwks", 443, 8443))
    cluster.add(_service("inference", "fallback", 80, 9000))
    config = _config()
    config["spec"]["auth"] = jwt_provider("https://jwks.auth.svc.example.internal/keys")
    config["spec"]["auth"]["jwt"]["provider"]["issuer"] = "https://auth.payments.svc.corp.example.com"
    config["spec"]["extensions"] = {"authorization": {"oidcDiscovery": True}}
    policy = _reconciled_policy(cluster, config)
    assert _egress_ports(policy, "auth") == [8443]
    assert _egress_ports(policy, "payments") == []
    assert _unresolved_events(cluster) == []
