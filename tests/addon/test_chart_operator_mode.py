"""The chart's default mode: the CRD, the operator (HA) and its exact RBAC; nothing per config."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from igw.addon import chart, configuration, pins
from igw.cli.main import build_parser
from igw.cli.operator import refuse_ignored_options
from igw.operator import runner
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from igw.operator.tls import CLUSTER_ACCESS, KUBE_ACCESS

DATA_PLANE_VERBS = {"get", "create", "update", "delete"}
"""``delete``: adopting an orphan (``kubectl delete --cascade=orphan``, the config applied again) sets
its owner reference, which the ``OwnerReferencesPermissionEnforcement`` admission plugin admits only
from a caller that may delete the object (tests/fakes/kube_owner_refs.py); the operator also deletes
the HorizontalPodAutoscaler it made once a spec stops asking for one."""


def _objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def _plural(kind: str) -> str:
    return {"NetworkPolicy": "networkpolicies", "PodDisruptionBudget": "poddisruptionbudgets"}.get(
        kind, kind.lower() + "s"
    )


def _expected_namespaced_grants() -> dict[tuple[str, str], set[str]]:
    """What the operator calls: CRUD-less apply of every data-plane kind, plus reads and status."""
    igwc = {"metadata": {"name": "x", "namespace": "n", "uid": "u"}, "spec": {"schedulers": []}}
    autoscaled = {
        **igwc,
        "spec": {"extensions": {"dataPlane": {"autoscaling": {"minReplicas": 2, "maxReplicas": 4}}}},
    }
    expected: dict[tuple[str, str], set[str]] = {}
    for obj in [
        *desired_objects(igwc, DataPlaneSettings()),
        *desired_objects(autoscaled, DataPlaneSettings()),
    ]:
        group = obj["apiVersion"].rpartition("/")[0]
        expected.setdefault((group, _plural(obj["kind"])), set()).update(DATA_PLANE_VERBS)
        # An owner reference with blockOwnerDeletion: the OwnerReferencesPermissionEnforcement
        # admission plugin wants update on the owner's finalizers (tests/fakes/kube_owner_refs.py).
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("blockOwnerDeletion"):
                owner_group = ref["apiVersion"].rpartition("/")[0]
                expected[(owner_group, f"{_plural(ref['kind'])}/finalizers")] = {"update"}
    group = "inference.sagemaker.aws.amazon.com"
    expected[(group, "inferencegatewayconfigs")] = {"get", "list", "watch", "patch"}
    expected[(group, "inferencegatewayconfigs/status")] = {"patch"}
    for plural in ("inferenceobjectives", "inferencemodelrewrites"):  # bound to a config, status written
        expected[("inference.networking.x-k8s.io", plural)] = {"get", "list", "watch"}
        expected[("inference.networking.x-k8s.io", f"{plural}/status")] = {"patch"}
    expected[("", "events")] = {"create"}
    expected[("", "pods")] = {"get", "list", "watch"}
    # The gateway pods' Role grants list/watch on ConfigMaps; the operator must hold it to grant it.
    expected[("", "configmaps")] |= {"list", "watch"}
    for key, verbs in KUBE_ACCESS.items():
        expected.setdefault(key, set()).update(verbs)
    return expected


def test_default_mode_installs_the_operator_and_nothing_per_config() -> None:
    objects = _objects({})
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted(
        {
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ServiceAccount",
        }
    )
    names = {o["metadata"]["name"] for o in objects if o["kind"] not in ("CustomResourceDefinition",)}
    assert all(name.startswith("igw-operator") for name in names), names
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["metadata"]["name"] == "igw-operator"
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "operator"
    assert args[args.index("--lease-namespace") + 1] == pins.ADDON_NAMESPACE
    assert args[args.index("--identity") + 1] == "$(POD_NAME)"
    assert args[args.index("--gateway-image") + 1] == container["image"]
    assert "--namespace" not in args


def test_operator_rbac_grants_exactly_what_it_uses() -> None:
    objects = _objects({})
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    grants = _grants(cluster_role["rules"])
    expected = _expected_namespaced_grants()
    expected[("apiextensions.k8s.io", "customresourcedefinitions")] = {"get", "list", "watch"}
    for key, verbs in CLUSTER_ACCESS.items():
        expected[key] = set(verbs)
    assert grants == expected
    # The cluster's identity (tls_sweep.ClusterIdentity): the kube-system Namespace only.
    (namespaces,) = [r for r in cluster_role["rules"] if "namespaces" in r["resources"]]
    assert namespaces["resourceNames"] == ["kube-system"]
    (lease_role,) = [o for o in objects if o["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == pins.ADDON_NAMESPACE
    assert _grants(lease_role["rules"]) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    assert all("*" not in verbs for verbs in grants.values())
    # Secrets: read (the cert-manager Secret of an auto-issued certificate), deleted with their
    # Certificate once unused, listed (by the operator's labels) by the orphan sweep; never written.
    assert grants[("", "secrets")] == {"get", "list", "delete"}


def _without_auto_tls(expected: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    return {key: verbs for key, verbs in expected.items() if key not in KUBE_ACCESS}


def test_auto_tls_off_drops_secret_and_certificate_access_from_the_rbac() -> None:
    """RBAC cannot narrow Secrets to the operator's own: in all-namespaces mode auto-issued TLS meant
    ``get`` on every Secret of the cluster. ``operator.autoTls: false`` takes it away (and Certificate
    access), in the ClusterRole and in each namespaced Role, and tells the operator (``--no-auto-tls``),
    which then never makes those calls (tests/operator/test_tls_auto_issue.py)."""
    objects = _objects({"operator": {"autoTls": False}})
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    expected = _without_auto_tls(_expected_namespaced_grants())
    expected[("apiextensions.k8s.io", "customresourcedefinitions")] = {"get", "list", "watch"}
    assert _grants(cluster_role["rules"]) == expected
    assert not any(key in KUBE_ACCESS or key in CLUSTER_ACCESS for key in _grants(cluster_role["rules"]))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-auto-tls" in args
    assert "--tls-issuer" not in args
    assert (
        "--no-auto-tls"
        not in next(o for o in _objects({}) if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
    )

    namespaced = _objects({"operator": {"autoTls": False, "namespaces": ["models-a"]}})
    (role,) = [o for o in namespaced if o["kind"] == "Role" and "leader" not in o["metadata"]["name"]]
    assert _grants(role["rules"]) == _without_auto_tls(_expected_namespaced_grants())
    assert configuration.problems({"operator": {"autoTls": False}}) == []
    (problem,) = configuration.problems({"operator": {"autoTls": "no"}})
    assert problem.startswith("operator.autoTls:")


def test_roles_and_rolebindings_are_granted_only_the_verbs_the_operator_writes_them_with() -> None:
    """The operator creates one Role and one RoleBinding per config, named after it (no fixed name, so
    no ``resourceNames``; RBAC cannot restrict ``create`` by name anyway): ``get`` to compare, ``create``,
    ``update`` to put back an edited one, and ``delete``, which the ``OwnerReferencesPermissionEnforcement``
    admission plugin wants of whoever sets an orphan's owner reference (adoption). Never ``patch``,
    ``list``, ``bind`` or ``escalate``: without the last two it can only grant what it holds itself."""
    (cluster_role,) = [o for o in _objects({}) if o["kind"] == "ClusterRole"]
    grants = _grants(cluster_role["rules"])
    for resource in ("roles", "rolebindings"):
        assert grants[("rbac.authorization.k8s.io", resource)] == {"get", "create", "update", "delete"}
    assert not any(resource in {"clusterroles", "clusterrolebindings"} for _, resource in grants)


def test_namespace_list_gives_namespaced_roles_and_a_read_only_cluster_role() -> None:
    objects = _objects({"operator": {"namespaces": ["models-a", "models-b"]}})
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert _grants(cluster_role["rules"]) == {
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
        ("", "namespaces"): {"get", "list", "watch"},
        # cluster-scoped: a namespaced Role cannot grant it
        ("cert-manager.io", "clusterissuers"): {"get"},
    }
    roles = {
        o["metadata"]["namespace"]: o
        for o in objects
        if o["kind"] == "Role" and "leader" not in o["metadata"]["name"]
    }
    assert sorted(roles) == ["models-a", "models-b"]
    for role in roles.values():
        assert _grants(role["rules"]) == _expected_namespaced_grants()
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--namespace"] == ["models-a", "models-b"]


def test_crd_install_is_skippable() -> None:
    kinds = {o["kind"] for o in _objects({"crds": {"enabled": False}})}
    assert "CustomResourceDefinition" not in kinds
    assert "Deployment" in kinds


IGWC_CRD = "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"
REFERENCE_CRDS = {
    "inferenceobjectives.inference.networking.x-k8s.io",
    "inferencemodelrewrites.inference.networking.x-k8s.io",
}


def _crds(values: dict[str, Any]) -> set[str]:
    return {o["metadata"]["name"] for o in _objects(values) if o["kind"] == "CustomResourceDefinition"}


def test_the_reference_crds_have_their_own_switch() -> None:
    assert _crds({}) == {IGWC_CRD, *REFERENCE_CRDS}
    # a cluster that has them from the reference's own install keeps installing ours
    assert _crds({"crds": {"inferenceExtension": {"enabled": False}}}) == {IGWC_CRD}
    assert _crds({"crds": {"enabled": False, "inferenceExtension": {"enabled": True}}}) == set()
    assert _crds({"mode": "gateway"}) == {IGWC_CRD}  # no operator, no objects to read


def test_the_reference_crd_switch_is_an_addon_configuration_value() -> None:
    assert configuration.problems({"crds": {"inferenceExtension": {"enabled": False}}}) == []
    (problem,) = configuration.problems({"crds": {"inferenceExtension": {"enabled": "no"}}})
    assert problem.startswith("crds.inferenceExtension.enabled:")


def test_gateway_mode_stays_available_and_renders_no_operator() -> None:
    objects = _objects({"mode": "gateway"})
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Deployment", "igw") in names
    assert ("ConfigMap", "igw-config") in names
    assert not any(name.endswith("-operator") for _, name in names)


GATEWAY_MODE_SETTINGS: dict[str, Any] = {
    "replicaCount": 5,
    "autoscaling": {"enabled": True},
    "gateway.port": 9443,
    "gateway.managementPort": 9191,
    "gateway.logLevel": "debug",
    "gateway.extraArgs": ["--access-log"],
    "gateway.extraEnv": [{"name": "TEAM", "value": "a"}],
    "gateway.config": {"name": "other", "spec": {"bbr": {"enabled": False}}},
    "service": {"scheme": "internet-facing", "port": 8443},
    "certManager": {"enabled": False},
    "serviceAccount": {"name": "custom", "roleArn": "arn:aws:iam::111111111111:role/gateway"},
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
    "terminationGracePeriodSeconds": 120,
    "preStopSleepSeconds": 30,
    "podAntiAffinity": "hard",
    "priorityClassName": "system-cluster-critical",
    "podAnnotations": {"team": "a"},
    "podLabels": {"team": "a"},
    "podDisruptionBudget": {"enabled": False},
    "rbac": {"namespaces": ["models"]},
    "networkPolicy.modelServerPorts": [30000],
}
"""A changed setting for every path of ``chart.GATEWAY_MODE_ONLY_VALUES``."""

OPERATOR_MODE_SETTINGS: dict[str, Any] = {
    "nameOverride": "igw2",
    "fullnameOverride": "igw2",
    "operator": {"logLevel": "debug"},
    "image": {"tag": "0.2.0"},
    "imagePullSecrets": [{"name": "pull"}],
    "gateway.workers": 3,
    "gateway.workerTimeoutSeconds": 10,
    "gateway.cloudWatch": {"enabled": True},
    "runAsUser": 20000,
    "nodeAffinity": None,
    "nodeSelector": {"pool": "system"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "networkPolicy.enabled": False,
    "networkPolicy.httpsEgressCidrs": ["10.0.0.0/8"],
    "networkPolicy.dnsCidrs": ["169.254.20.10/32"],
    "networkPolicy.ingressCidrs": ["10.1.0.0/16"],
    "networkPolicy.extraEgress": [{"ports": [{"port": 4318, "protocol": "TCP"}]}],
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "podMonitor": {"enabled": True, "selector": {"app": "vllm"}},
    "grafanaDashboards": {"enabled": True},
    "crds": {"enabled": False},
}
"""A changed setting for every other value: each changes what operator mode renders."""


def _nested(path: str, setting: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: _nested(rest, setting) if rest else setting}


def test_every_value_is_either_read_in_operator_mode_or_refused_there() -> None:
    """Every key of values.yaml (and of its gateway / networkPolicy sections) has a side: a value
    neither side names was accepted by ``igw addon create`` and the CDK app and changed nothing."""
    defaults = yaml.safe_load((chart.chart_dir() / "values.yaml").read_text(encoding="utf-8"))
    paths = {f"{top}.{key}" for top in ("gateway", "networkPolicy") for key in defaults[top]}
    paths |= set(defaults) - {"gateway", "networkPolicy", "mode"}
    assert paths == set(GATEWAY_MODE_SETTINGS) | set(OPERATOR_MODE_SETTINGS)


def test_gateway_mode_only_values_change_nothing_in_operator_mode() -> None:
    """The deployment config and ``igw addon`` refuse these in operator mode; this is why: they are
    inert there (and each changes what gateway mode renders, so the list names no path by mistake)."""
    assert set(GATEWAY_MODE_SETTINGS) == set(chart.GATEWAY_MODE_ONLY_VALUES)
    baseline = _objects({})
    gateway_baseline = _objects({"mode": "gateway"})
    for path, setting in GATEWAY_MODE_SETTINGS.items():
        values = _nested(path, setting)
        assert _objects(values) == baseline, path
        assert _objects({"mode": "gateway", **values}) != gateway_baseline, path
        (problem,) = configuration.operator_mode_problems(values)
        assert problem.startswith(f"{path}: has no effect with the chart's mode operator"), problem


def test_values_operator_mode_reads_are_accepted_there() -> None:
    """``gateway.workers``, ``gateway.workerTimeoutSeconds`` and ``gateway.cloudWatch`` reach the
    operator's gateways: they were refused with the rest of ``gateway`` as having no effect."""
    baseline = _objects({})
    for path, setting in OPERATOR_MODE_SETTINGS.items():
        values = _nested(path, setting)
        assert _objects(values) != baseline, path
        assert configuration.operator_mode_problems(values) == [], path
        assert configuration.problems(values) == [], path


def test_auto_issued_tls_settings_reach_the_operator() -> None:
    role_arn = "arn:aws:iam::123456789012:role/igw-operator-acm"
    objects = _objects(
        {
            "operator": {
                "tlsIssuer": "Issuer/team-ca",
                "selfSignedClusterIssuer": True,
                "roleArn": role_arn,
            }
        }
    )
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--tls-issuer") + 1] == "Issuer/team-ca"
    assert args[args.index("--tls-sweep-seconds") + 1] == "600"
    swept = _objects({"operator": {"tlsSweepSeconds": 60}})
    (deployment,) = [o for o in swept if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--tls-sweep-seconds") + 1] == "60"
    assert configuration.problems({"operator": {"tlsSweepSeconds": 5}})[0].startswith(
        "operator.tlsSweepSeconds"
    )
    off = _objects({"operator": {"autoTls": False, "tlsSweepSeconds": 60}})
    assert (
        "--tls-sweep-seconds"
        not in next(o for o in off if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
            "args"
        ]
    )
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == role_arn
    (issuer,) = [o for o in objects if o["kind"] == "ClusterIssuer"]
    assert (issuer["metadata"]["name"], issuer["spec"]) == ("igw-selfsigned", {"selfSigned": {}})
    default_args = next(o for o in _objects({}) if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "--tls-issuer" in default_args["containers"][0]["args"]


@pytest.mark.parametrize("rule", [{}, {"to": []}, {"ports": [{"protocol": "TCP"}]}])
def test_an_extra_egress_rule_that_allows_all_egress_is_refused(rule: dict[str, Any]) -> None:
    """A rule naming no destination and no port (``{}``) is every destination on every port to
    Kubernetes: the schema took it and the chart rendered it into the NetworkPolicy (gateway mode) or
    the operator's ``--gateway-extra-egress`` (operator mode), so default-deny egress became allow-all
    with no word. The schema refuses it, naming the rule and how to mean it; Helm refuses to render it."""
    (problem,) = configuration.problems({"networkPolicy": {"extraEgress": [rule]}})
    assert problem.startswith("networkPolicy.extraEgress[0]: "), problem
    assert "allows all egress" in problem
    assert "0.0.0.0/0" in problem
    explicit = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]}
    assert configuration.problems({"networkPolicy": {"extraEgress": [explicit]}}) == []
    import helm_python as helm

    for mode in ("gateway", "operator"):
        with pytest.raises(helm.HelmError, match="extraEgress/0"):
            chart.render({"mode": mode, "networkPolicy": {"extraEgress": [rule]}})


def test_extra_egress_rules_are_checked_by_the_configuration_schema() -> None:
    """``networkPolicy.extraEgress`` reaches the operator's gateways (``--gateway-extra-egress``): a rule
    that is not a NetworkPolicyEgressRule is refused at ``create-addon`` time, naming the field, instead
    of the operator refusing to start (it checks each rule too)."""
    good = {"to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": [{"port": 53, "protocol": "UDP"}]}
    assert configuration.problems({"networkPolicy": {"extraEgress": [good]}}) == []
    for rule, field in [
        ({"to": "anywhere"}, "networkPolicy.extraEgress[0].to"),
        ({"ports": [{"port": 70000}]}, "networkPolicy.extraEgress[0].ports[0].port"),
        ({"to": [{"ipBlock": {"cidr": "169.254.20.10"}}]}, "networkPolicy.extraEgress[0].to[0].ipBlock.cidr"),
        ({"from": [], "ports": [{"port": 53}]}, "networkPolicy.extraEgress[0]"),
        ({"to": [{"podSelector": {"matchLabels": "x"}}]}, "networkPolicy.extraEgress[0].to[0].podSelector"),
        (
            {"to": [{"namespaceSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}]},
            "networkPolicy.extraEgress[0].to[0].namespaceSelector.matchExpressions[0]",
        ),
    ]:
        (problem,) = configuration.problems({"networkPolicy": {"extraEgress": [rule]}})
        assert problem.startswith(field), problem


def test_the_operator_args_the_chart_renders_are_never_refused_as_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``igw operator`` refuses an option its switches leave without effect (``--no-auto-tls
    --tls-issuer X``); the chart's container args, with each switch on and off, pass that check."""
    for values in (
        {},
        {"operator": {"autoTls": False}},
        {"networkPolicy": {"enabled": False}},
        {"gateway": {"cloudWatch": {"enabled": True, "emfIntervalSeconds": 60}}},
        {"gateway": {"workers": 1}},
        {"gateway": {"workers": 1, "workerTimeoutSeconds": 10}},
        {"gateway": {"workers": 4, "workerTimeoutSeconds": 10}},
        {"operator": {"apiThreads": 8}},
    ):
        (deployment,) = [o for o in _objects(values) if o["kind"] == "Deployment"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        parsed = build_parser().parse_args(args)
        assert not refuse_ignored_options(parsed), (values, capsys.readouterr().err)


def _issuer_rules(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        resource: rule.get("resourceNames")
        for rule in rules
        for resource in rule["resources"]
        if resource in ("issuers", "clusterissuers")
    }


@pytest.mark.parametrize("namespaces", [[], ["models-a", "models-b"]])
def test_the_operator_may_read_only_the_issuer_it_is_configured_with(namespaces: list[str]) -> None:
    """While a Certificate waits, the operator reads the issuer ``operator.tlsIssuer`` names to report
    it missing or not Ready (``IssuerNotFound`` / ``IssuerNotReady``). ``get`` on that name only: the
    ClusterIssuer in the ClusterRole (cluster-scoped, in both modes), the Issuer in each namespace's
    Role (or the ClusterRole with all namespaces); none with ``operator.autoTls: false``."""
    objects = _objects({"operator": {"tlsIssuer": "Issuer/team-ca", "namespaces": namespaces}})
    (cluster_role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    roles = [o for o in objects if o["kind"] == "Role" and "leader" not in o["metadata"]["name"]]
    assert len(roles) == len(namespaces)
    if namespaces:
        assert _issuer_rules(cluster_role["rules"]) == {"clusterissuers": ["team-ca"]}
        for role in roles:
            assert _issuer_rules(role["rules"]) == {"issuers": ["team-ca"]}
    else:
        assert _issuer_rules(cluster_role["rules"]) == {"clusterissuers": ["team-ca"], "issuers": ["team-ca"]}
    for rule in cluster_role["rules"] + [rule for role in roles for rule in role["rules"]]:
        if {"issuers", "clusterissuers"} & set(rule["resources"]):
            assert rule["verbs"] == ["get"]
    off = _objects({"operator": {"autoTls": False, "namespaces": namespaces}})
    assert not any(_issuer_rules(o["rules"]) for o in off if o["kind"] in ("ClusterRole", "Role"))


def _operator_args(values: dict[str, Any]) -> list[str]:
    (deployment,) = [o for o in _objects(values) if o["kind"] == "Deployment"]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_operator_api_threads_reaches_the_operator_only_when_set() -> None:
    """``operator.apiThreads`` renders ``--api-threads``; unset (null), the operator's own default
    (the pod's CPU limit) decides. The schema bounds are the option's (1 to 256), named on refusal."""
    assert "--api-threads" not in _operator_args({})
    args = _operator_args({"operator": {"apiThreads": 12}})
    assert args[args.index("--api-threads") + 1] == "12"
    assert build_parser().parse_args(args).api_threads == 12
    assert configuration.problems({"operator": {"apiThreads": 12}}) == []
    assert configuration.problems({"operator": {"apiThreads": None}}) == []
    for bad in (0, 257, "many"):
        (problem,) = configuration.problems({"operator": {"apiThreads": bad}})
        assert problem.startswith("operator.apiThreads"), problem


@pytest.mark.parametrize(
    ("election", "grace"),
    [
        ({}, 35),  # 15 / 10 / 2: 10 + 5 + 10 + 3 x 1.5 = 29.5 -> 30, + 5
        (  # the slow-API-server example of docs/operating.md: 10 + 5 + 25 + 3 x 3.75 = 51.25 -> 52, + 5
            {"leaseDurationSeconds": 40, "renewDeadlineSeconds": 25, "retryPeriodSeconds": 5},
            57,
        ),
    ],
)
def test_the_operator_pods_grace_period_covers_its_stop(election: dict[str, int], grace: int) -> None:
    """The operator pod's ``terminationGracePeriodSeconds`` is derived from ``operator.leaderElection``
    as the operator computes its longest stop (:func:`runner.stop_bound_s`), so the kubelet never
    kills a stopping leader before it released its Lease. None was set: the Kubernetes default of
    30 s left 0.5 s at the defaults and killed the leader at 40 / 25 / 5, whose standby then waited
    out the whole lease."""
    values: dict[str, Any] = {"operator": {"leaderElection": election}} if election else {}
    (deployment,) = [o for o in _objects(values) if o["kind"] == "Deployment"]
    rendered = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    args = build_parser().parse_args(_operator_args(values))
    assert rendered == grace
    assert rendered == runner.termination_grace_s(args.renew_deadline, args.retry_period)
    assert rendered >= runner.stop_bound_s(args.renew_deadline, args.retry_period) + runner.STOP_RESERVE_S
