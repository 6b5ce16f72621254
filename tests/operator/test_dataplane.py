"""The data-plane objects the operator renders: valid Kubernetes, least privilege, owned, TLS."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from igw.checks.audit.spread import spread_by
from igw.config.model import LabelSelector, LabelSelectorRequirement
from igw.config.validate import validate_document
from igw.operator.dataplane import (
    CONFIG_KEY,
    DataPlaneSettings,
    base_name,
    desired_objects,
    gateway_replicas,
    label_value,
    served_document,
)
from igw.operator.placement import OFF_HYPERPOD_NODES
from igw.operator.service_ports import OpenedPods, ServiceEgress
from tests.fakes.kube_validation import object_problems
from tests.operator.dataplane_support import K8S_VERSION, by_kind, igwc_object

ARN = "arn:aws:acm:us-west-2:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"tls": {"acmArn": ARN}},
        {"extensions": {"dataPlane": {"serviceType": "ClusterIP"}}},
        {"podDefaults": {"nodeSelector": {"pool": "cpu"}, "resources": {"requests": {"cpu": "500m"}}}},
    ],
    ids=["default", "tls", "cluster-ip", "pod-defaults"],
)
def test_every_object_is_strictly_valid_and_owned(spec: dict[str, Any]) -> None:
    for obj in desired_objects(igwc_object(**spec), DataPlaneSettings()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "InferenceGatewayConfig",
            "chat",
            "1234",
            True,
        )
        assert obj["metadata"]["namespace"] == "inference"


def test_role_only_reads_pods_and_config_maps() -> None:
    role = by_kind(desired_objects(igwc_object(), DataPlaneSettings()))["Role"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
    ]


def test_tls_puts_the_acm_certificate_on_an_internal_nlb_listener() -> None:
    service = by_kind(desired_objects(igwc_object(tls={"acmArn": ARN}), DataPlaneSettings()))["Service"]
    annotations = service["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer"
    assert annotations[f"{prefix}-ssl-cert"] == ARN
    assert annotations[f"{prefix}-ssl-ports"] == "https"
    assert annotations[f"{prefix}-scheme"] == "internal"
    assert annotations[f"{prefix}-ssl-negotiation-policy"].startswith("ELBSecurityPolicy-TLS13")
    assert service["spec"]["ports"][0]["port"] == 443
    plain = by_kind(desired_objects(igwc_object(), DataPlaneSettings()))["Service"]
    assert f"{prefix}-ssl-cert" not in plain["metadata"]["annotations"]
    assert plain["spec"]["ports"][0]["port"] == 80


def test_cluster_ip_service_has_no_load_balancer_annotations() -> None:
    objects = desired_objects(
        igwc_object(extensions={"dataPlane": {"serviceType": "ClusterIP"}}), DataPlaneSettings()
    )
    service = by_kind(objects)["Service"]
    assert service["spec"]["type"] == "ClusterIP"
    assert "annotations" not in service["metadata"]


def test_config_map_carries_exactly_the_objects_spec() -> None:
    igwc = igwc_object(
        auth={"jwt": {"provider": {"issuer": "https://issuer.example.com", "audiences": ["a"]}}}
    )
    config_map = by_kind(desired_objects(igwc, DataPlaneSettings()))["ConfigMap"]
    served = yaml.safe_load(config_map["data"][CONFIG_KEY])
    assert served["spec"] == igwc["spec"]
    assert served["metadata"] == {"name": "chat", "namespace": "inference"}


def test_replicas_follow_the_largest_scheduler() -> None:
    assert gateway_replicas({"schedulers": [{"replicas": 1}, {"replicas": 4}]}) == 4
    assert gateway_replicas({"schedulers": [{}]}) == 2


def test_network_policy_allows_the_model_server_ports() -> None:
    igwc = igwc_object()
    igwc["spec"]["schedulers"][0]["targetPort"] = 9000
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    egress_ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert 9000 in egress_ports
    assert 8000 not in egress_ports


def test_gateway_container_has_requests_and_limits_unless_the_spec_sets_them() -> None:
    (deployment,) = [
        o for o in desired_objects(igwc_object(), DataPlaneSettings()) if o["kind"] == "Deployment"
    ]
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert set(resources) == {"requests", "limits"}
    mine = {"requests": {"cpu": "1"}}
    (custom,) = [
        o
        for o in desired_objects(igwc_object(podDefaults={"resources": mine}), DataPlaneSettings())
        if o["kind"] == "Deployment"
    ]
    assert custom["spec"]["template"]["spec"]["containers"][0]["resources"] == mine


def test_network_policy_lets_shared_rate_limits_reach_redis() -> None:
    limits = {"backend": "redis", "redis": {"url": "rediss://cache.example.internal:6380/0"}}
    igwc = igwc_object(extensions={"rateLimits": limits})
    assert validate_document(served_document(igwc)) == []
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    egress_ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert 6380 in egress_ports
    plain = by_kind(desired_objects(igwc_object(), DataPlaneSettings()))["NetworkPolicy"]
    assert 6380 not in [p["port"] for rule in plain["spec"]["egress"] for p in rule["ports"]]


def _egress_ports(igwc: dict[str, Any]) -> list[int]:
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    return [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]


def test_network_policy_lets_global_heartbeats_reach_their_store() -> None:
    # Only the rate limits' Redis was opened: the VPC CNI dropped every heartbeat to the global
    # router's store (the global router stack's ElastiCache listens on 6380), so tier 2 never saw
    # the cluster of a gateway the operator runs.
    heartbeat = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": "rediss://hb.example.internal:6380/0"},
    }
    igwc = igwc_object(extensions={"globalHeartbeat": heartbeat})
    assert validate_document(served_document(igwc)) == []
    assert 6380 in _egress_ports(igwc)
    default_store = igwc_object(extensions={"globalHeartbeat": {"cluster": "east-a", "region": "east"}})
    assert 6379 in _egress_ports(default_store)
    limits = {"backend": "redis", "redis": {"url": "redis://limits.example.internal:6390/0"}}
    both = igwc_object(extensions={"globalHeartbeat": heartbeat, "rateLimits": limits})
    assert {6380, 6390} <= set(_egress_ports(both))


def _egress_rule_ports(igwc: dict[str, Any], destination: dict[str, Any]) -> list[int]:
    """The ports of the egress rule whose first destination is ``destination``."""
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    (rule,) = [r for r in policy["spec"]["egress"] if (r.get("to") or [None])[0] == destination]
    return [p["port"] for p in rule["ports"]]


HTTPS_DESTINATION: dict[str, Any] = {"ipBlock": {"cidr": "0.0.0.0/0"}}


def test_network_policy_lets_the_gateway_fetch_keys_from_a_jwks_on_another_port() -> None:
    """An in-cluster identity provider (Keycloak on 8443): only 443 was opened, so the gateway could
    fetch no key and refused every token, and nothing (``extraEgress`` was refused in operator mode)
    could open the port. The JWKS URL's port is opened to the HTTPS destinations, and with OIDC
    discovery the issuer's too."""
    provider = {
        "name": "keycloak",
        "issuer": "https://sso.example.com:9443/realms/llm",
        "remoteJWKS": {"uri": "https://keycloak.auth.svc.cluster.local:8443/realms/llm/certs"},
        "audiences": ["inference"],
    }
    igwc = igwc_object(auth={"jwt": {"provider": provider}})
    assert validate_document(served_document(igwc)) == []
    assert _egress_rule_ports(igwc, HTTPS_DESTINATION) == [443, 8443]
    discovery = igwc_object(
        auth={"jwt": {"provider": provider}}, extensions={"authorization": {"oidcDiscovery": True}}
    )
    assert validate_document(served_document(discovery)) == []
    assert _egress_rule_ports(discovery, HTTPS_DESTINATION) == [443, 8443, 9443]
    provider["remoteJWKS"] = {"uri": "https://idp.example.com/keys"}
    assert _egress_rule_ports(igwc_object(auth={"jwt": {"provider": provider}}), HTTPS_DESTINATION) == [443]


def _reaches(policy: dict[str, Any], namespace: str, labels: dict[str, str], port: int) -> bool:
    """Whether ``policy``'s egress lets the gateway open TCP ``port`` on a pod of ``namespace`` with
    ``labels`` (Kubernetes NetworkPolicy semantics for pod peers; ``ipBlock`` peers are not pods)."""

    def selects(selector: dict[str, Any] | None, object_labels: dict[str, str]) -> bool:
        if selector is None:
            return True
        return LabelSelector(
            match_labels=selector.get("matchLabels") or {},
            match_expressions=tuple(
                LabelSelectorRequirement(e["key"], e["operator"], tuple(e.get("values") or ()))
                for e in selector.get("matchExpressions") or []
            ),
        ).matches(object_labels)

    namespace_labels = {"kubernetes.io/metadata.name": namespace}
    for rule in policy["spec"]["egress"]:
        ports = rule.get("ports")
        if ports and not any(p["port"] == port and p.get("protocol", "TCP") == "TCP" for p in ports):
            continue
        peers = rule.get("to")
        if not peers:
            return True
        for peer in peers:
            if "ipBlock" in peer:
                continue
            if "namespaceSelector" not in peer:
                raise AssertionError(f"a peer of the gateway's own namespace only: {peer}")
            if selects(peer["namespaceSelector"], namespace_labels) and selects(
                peer.get("podSelector"), labels
            ):
                return True
    return False


def test_model_server_ports_are_opened_only_to_the_pods_each_scheduler_selects() -> None:
    """The gateway proxies to and scrapes only the pods its schedulers' ``modelSelector`` select, in
    the config's namespace (discovery lists pods there only). The rule was ``to: [{namespaceSelector:
    {}}]`` on every scheduler's ``targetPort``: the gateway could connect to any pod of the cluster on
    8000 or 9000 (another team's model server, any web app). Each scheduler's pods are now the only
    peers of its port, ``matchLabels`` and ``matchExpressions`` as the API server evaluates them."""
    mistral = {
        "matchLabels": {"app": "mistral"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gpu", "gpu-large"]},
            {"key": "draining", "operator": "DoesNotExist"},
        ],
    }
    igwc = igwc_object(
        schedulers=[
            {"name": "main", "modelName": "llama", "modelSelector": {"matchLabels": {"app": "llama"}}},
            {"name": "m", "modelName": "mistral", "modelSelector": mistral, "targetPort": 9000},
        ]
    )
    assert validate_document(served_document(igwc)) == []
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert _reaches(policy, "inference", {"app": "llama"}, 8000)
    assert _reaches(policy, "inference", {"app": "mistral", "tier": "gpu"}, 9000)
    assert not _reaches(policy, "team-b", {"app": "llama"}, 8000)  # another namespace
    assert not _reaches(policy, "inference", {"app": "web"}, 8000)  # not a model server
    assert not _reaches(policy, "inference", {"app": "llama"}, 9000)  # not its scheduler's port
    assert not _reaches(policy, "inference", {"app": "mistral", "tier": "cpu"}, 9000)
    assert not _reaches(policy, "inference", {"app": "mistral", "tier": "gpu", "draining": "1"}, 9000)
    peers = [peer for rule in policy["spec"]["egress"] for peer in rule.get("to", [])]
    assert {"namespaceSelector": {}} not in peers


def test_network_policy_lets_requests_for_no_served_model_reach_the_default_backend() -> None:
    """``bbr.defaultBackend`` on a port no scheduler uses: requests naming no served model got a 502
    from the gateway (its connection dropped by the NetworkPolicy). Its Service's pods are opened by
    the Service resolution (``service_egress``); where that did not open them, its port is opened to
    the pods of the config's namespace (its Service's), not to every pod of the cluster as before."""
    igwc = igwc_object(bbr={"enabled": True, "defaultBackend": {"name": "fallback", "port": 9000}})
    assert validate_document(served_document(igwc)) == []
    policy = by_kind(desired_objects(igwc, DataPlaneSettings()))["NetworkPolicy"]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert _reaches(policy, "inference", {"app": "fallback"}, 9000)
    assert not _reaches(policy, "team-b", {"app": "fallback"}, 9000)
    resolved = ServiceEgress(
        opened=(OpenedPods("inference", (("app", "fallback"),), ((9100, "TCP"),)),),
        opened_sources=frozenset({"spec.bbr.defaultBackend"}),
    )
    policy = by_kind(desired_objects(igwc, DataPlaneSettings(), service_egress=resolved))["NetworkPolicy"]
    assert _reaches(policy, "inference", {"app": "fallback"}, 9100)
    assert not _reaches(policy, "inference", {"app": "web"}, 9000)  # only the Service's pods now
    assert not _reaches(policy, "inference", {"app": "web"}, 9100)
    default_port = igwc_object(bbr={"enabled": True, "defaultBackend": {"name": "fallback"}})
    policy = by_kind(desired_objects(default_port, DataPlaneSettings()))["NetworkPolicy"]
    assert _reaches(policy, "inference", {"app": "fallback"}, 8000)


@pytest.mark.parametrize(("grace", "pre_stop"), [(60, 15), (120, 30), (30, 15)])
def test_termination_grace_covers_the_gateway_shutdown(grace: int, pre_stop: int) -> None:
    """preStop sleep + drain + stream grace + the final cut (SSE error events) fit the grace period,
    as in the chart's gateway mode."""
    from igw.gateway.shutdown import CUT_WAIT_S

    settings = DataPlaneSettings(termination_grace_s=grace, pre_stop_s=pre_stop)
    (deployment,) = [o for o in desired_objects(igwc_object(), settings) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    drain = float(args[args.index("--drain-seconds") + 1])
    stream_grace = float(args[args.index("--stream-grace-seconds") + 1])
    assert pod["terminationGracePeriodSeconds"] == grace
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == pre_stop
    assert stream_grace >= 0
    assert pre_stop + drain + stream_grace + CUT_WAIT_S + 5 <= grace


@pytest.mark.parametrize(
    ("limits", "grace", "want_drain", "want_stream_grace", "want_termination"),
    [
        pytest.param({"drainPeriod": "10s"}, 60, 10, 25, 60, id="drain-only-fits"),
        pytest.param({"streamGrace": "20s"}, 60, 5, 20, 60, id="grace-only-fits"),
        pytest.param(
            {"drainPeriod": "500ms", "streamGrace": "1m"}, 60, 0.5, 60, 86, id="grace-raises-deadline"
        ),
        pytest.param({"drainPeriod": "1m"}, 60, 60, 0, 85, id="long-drain-raises-deadline"),
    ],
)
def test_drain_and_stream_grace_come_from_server_limits_and_the_deadline_covers_them(
    limits: dict[str, str], grace: int, want_drain: float, want_stream_grace: float, want_termination: int
) -> None:
    """``spec.extensions.serverLimits.drainPeriod`` / ``streamGrace`` reach ``igw serve``, and the
    pod's grace period is raised where it would cut the shutdown they ask for."""
    from igw.gateway.shutdown import CUT_WAIT_S

    settings = DataPlaneSettings(termination_grace_s=grace, pre_stop_s=15)
    igwc = igwc_object(extensions={"serverLimits": limits})
    (deployment,) = [o for o in desired_objects(igwc, settings) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    drain = float(args[args.index("--drain-seconds") + 1])
    stream_grace = float(args[args.index("--stream-grace-seconds") + 1])
    assert (drain, stream_grace) == (want_drain, want_stream_grace)
    assert pod["terminationGracePeriodSeconds"] == want_termination
    assert 15 + drain + stream_grace + CUT_WAIT_S + 5 <= pod["terminationGracePeriodSeconds"]


def test_a_grace_period_too_short_for_the_shutdown_is_refused() -> None:
    with pytest.raises(ValueError, match="termination grace 20s must be at least"):
        desired_objects(igwc_object(), DataPlaneSettings(termination_grace_s=20, pre_stop_s=15))


LONG_DOTTED = "team-a.prod." + "llama-3-1-70b-instruct." * 10 + "chat"


@pytest.mark.parametrize(
    "name",
    ["chat", "a" * 55, "a" * 56, "1st-gateway", "gw.prod.example", LONG_DOTTED],
    ids=["short", "longest-plain", "one-too-long", "leading-digit", "dotted", "253-char-subdomain"],
)
def test_every_object_name_and_label_is_one_the_api_server_accepts(name: str) -> None:
    """An InferenceGatewayConfig may be named with any DNS subdomain (253 characters, dots, a leading
    digit); its Service must be an RFC 1035 label and its label values 63 characters at most."""
    igwc = igwc_object()
    igwc["metadata"]["name"] = name
    objects = desired_objects(igwc, DataPlaneSettings())
    for obj in objects:
        assert object_problems(obj["kind"], obj) == [], obj["kind"]
    kinds = by_kind(objects)
    selector = kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= kinds["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    assert kinds["Service"]["spec"]["selector"] == selector
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    assert kinds["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"] == selector


def test_names_that_fit_are_kept_and_long_ones_stay_apart() -> None:
    assert base_name("chat") == "chat-gateway"
    assert base_name("a" * 55) == "a" * 55 + "-gateway"
    first, second = base_name("x" * 80 + "-blue"), base_name("x" * 80 + "-green")
    assert first != second
    assert len(first) == len(second) == 63
    assert label_value("y" * 63) == "y" * 63
    assert label_value("y" * 70 + "1") != label_value("y" * 70 + "2")


def test_gateway_pods_spread_over_zones_and_nodes_and_prefer_nodes_other_than_hyperpod() -> None:
    """Before session s29 the operator set neither: every replica could land on one node (IGW-AU410),
    and on the GPU nodes."""
    pod = by_kind(desired_objects(igwc_object(), DataPlaneSettings()))["Deployment"]["spec"]["template"]
    selector = pod["metadata"]["labels"]
    spec = pod["spec"]
    assert spec["affinity"] == OFF_HYPERPOD_NODES
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread.values():
        assert (constraint["maxSkew"], constraint["whenUnsatisfiable"]) == (1, "ScheduleAnyway")
        assert constraint["labelSelector"]["matchLabels"].items() <= selector.items()
    assert spread_by(spec, selector) == "topology spread on topology.kubernetes.io/zone"


def _required_apart(selector: dict[str, Any], **term: Any) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector, **term}
            ]
        }
    }


SURGE = {"maxUnavailable": 0, "maxSurge": 1}
REPLACE = {"maxUnavailable": 1, "maxSurge": 0}


@pytest.mark.parametrize(
    ("affinity", "rollout"),
    [
        (None, SURGE),
        (_required_apart({"matchLabels": {"app.kubernetes.io/instance": "chat"}}), REPLACE),
        (_required_apart({"matchLabels": {"team": "a"}}), REPLACE),
        (
            _required_apart({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}),
            REPLACE,
        ),
        (_required_apart({"matchLabels": {"app": "vllm"}}), SURGE),
        (_required_apart({"matchLabels": {"team": "a"}}, namespaces=["models"]), SURGE),
        (_required_apart({"matchLabels": {"team": "a"}}, namespaces=["models", "inference"]), REPLACE),
    ],
    ids=["default", "own-label", "podDefaults-label", "expression", "other-pods", "other-ns", "listed"],
)
def test_pods_required_apart_roll_one_at_a_time_without_a_surge(
    affinity: dict[str, Any] | None, rollout: dict[str, int]
) -> None:
    """``maxUnavailable: 0`` with ``maxSurge: 1`` stalled the rollout of a config whose
    ``podDefaults.affinity`` requires its gateway pods apart (one per node) on exactly as many nodes as
    replicas: the surge pod found no node and no old pod was stopped to make room, for ever."""
    defaults: dict[str, Any] = {"labels": {"team": "a"}}
    if affinity is not None:
        defaults["affinity"] = affinity
    objects = desired_objects(igwc_object(podDefaults=defaults), DataPlaneSettings())
    deployment = by_kind(objects)["Deployment"]
    assert deployment["metadata"]["namespace"] == "inference"
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": rollout}
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_the_users_affinity_replaces_the_default_and_the_spread_stays() -> None:
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}
    ]}}}  # fmt: skip
    objects = desired_objects(igwc_object(podDefaults={"affinity": mine}), DataPlaneSettings())
    spec = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    assert spec["affinity"] == mine
    assert len(spec["topologySpreadConstraints"]) == 2
