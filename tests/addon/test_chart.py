"""The chart, rendered and linted by Helm's own SDK, every object validated; the EKS add-on rules scan."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import kubernetes_validate
import pytest
import yaml

from igw.addon import chart, configuration, pins, schemas
from igw.config.documents import DocumentReadError
from igw.config.validate import validate_document
from igw.operator.placement import OFF_HYPERPOD_NODES

K8S_VERSION = "1.34.0"
GATEWAY_VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "lb-tls": {
        "service": {"tls": {"certificateArn": "arn:aws:acm:us-west-2:111111111111:certificate/abc-123"}}
    },
    "plain-http-clusterip": {"certManager": {"enabled": False}, "service": {"type": "ClusterIP"}},
    "monitoring-hard-affinity": {
        "serviceMonitor": {"enabled": True},
        "podAntiAffinity": "hard",
        "replicaCount": 3,
        "rbac": {"namespaces": ["models-a", "models-b"]},
    },
    "irsa-external-issuer": {
        "serviceAccount": {"roleArn": "arn:aws:iam::111111111111:role/igw-gateway"},
        "certManager": {"selfSigned": False, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
        "crds": {"enabled": False},
    },
}
OPERATOR_VALUE_SETS: dict[str, dict[str, Any]] = {
    "operator-defaults": {},
    "operator-namespaces": {"operator": {"namespaces": ["models-a", "models-b"], "replicaCount": 3}},
    "operator-no-crd": {"crds": {"enabled": False}},
    "operator-own-crd-only": {"crds": {"inferenceExtension": {"enabled": False}}},
}
VALUE_SETS = {
    **{name: {"mode": "gateway", **values} for name, values in GATEWAY_VALUE_SETS.items()},
    **OPERATOR_VALUE_SETS,
}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, chart.render(
        VALUE_SETS[request.param], release="igw", namespace=pins.ADDON_NAMESPACE
    )


def _kinds(objects: list[dict[str, Any]]) -> list[str]:
    return [o["kind"] for o in objects]


def test_every_rendered_object_is_valid(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    for obj in objects:
        if obj["apiVersion"].startswith(("cert-manager.io", "monitoring.coreos.com")):
            assert obj["metadata"]["name"], obj  # third-party CRs: shape only
            assert obj["spec"], obj
            continue
        if obj["kind"] == "CustomResourceDefinition":
            assert obj["spec"]["names"]["kind"] in {
                "InferenceGatewayConfig",
                "InferenceObjective",
                "InferenceModelRewrite",
            }
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        if obj["kind"] == "ConfigMap":
            document = yaml.safe_load(obj["data"]["inferencegatewayconfig.yaml"])
            assert validate_document(document) == []


def test_deployment_is_hardened(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] >= 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    assert {"livenessProbe", "readinessProbe", "startupProbe"} <= set(container)
    assert pod["affinity"]["podAntiAffinity"]
    if "lifecycle" in container:
        assert pod["terminationGracePeriodSeconds"] > container["lifecycle"]["preStop"]["sleep"]["seconds"]


def test_defaults_are_secure_and_complete(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, objects = rendered
    if name in OPERATOR_VALUE_SETS:
        pytest.skip("operator mode renders no data plane (see the operator-mode tests)")
    kinds = _kinds(objects)
    for kind in (
        "Deployment",
        "Service",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ):
        assert kind in kinds, (name, kind)
    services = [o for o in objects if o["kind"] == "Service"]
    (service,) = [o for o in services if not o["metadata"]["name"].endswith("-management")]
    (management,) = [o for o in services if o["metadata"]["name"].endswith("-management")]
    assert management["spec"]["type"] == "ClusterIP"  # /metrics and pod detail stay in the cluster
    if service["spec"]["type"] == "LoadBalancer":
        annotations = service["metadata"]["annotations"]
        assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
        if "service.beta.kubernetes.io/aws-load-balancer-ssl-cert" in annotations:
            policy = annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy"]
            assert policy == "ELBSecurityPolicy-TLS13-1-2-2021-06"


def test_rbac_is_least_privilege(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, objects = rendered
    if name in OPERATOR_VALUE_SETS:
        pytest.skip(
            "the operator's RBAC is checked verb by verb in test_operator_rbac_grants_exactly_what_it_uses"
        )
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert all(o["kind"] == "Role" for o in roles)
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"]
            assert "*" not in rule["resources"]
            assert "secrets" not in rule["resources"]
            if rule["resources"] != ["inferencegatewayconfigs/status"]:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_default_render_has_crd_tls_and_no_servicemonitor() -> None:
    kinds = _kinds(chart.render({"mode": "gateway"}))
    assert "CustomResourceDefinition" in kinds
    assert "Certificate" in kinds
    assert "Issuer" in kinds
    assert "ServiceMonitor" not in kinds


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 1}, "/replicaCount"),
        ({"service": {"tls": {"sslPolicy": "ELBSecurityPolicy-2016-08"}}}, "/service/tls/sslPolicy"),
        ({"image": {"tag": "latest"}}, "/image/tag"),
        ({"bogus": 1}, "bogus"),
        ({"podDisruptionBudget": {"minAvailable": 2}}, "podDisruptionBudget.minAvailable"),
        ({"certManager": {"selfSigned": False}}, "certManager.issuerRef.name is required"),
    ],
    ids=["one-replica", "tls10-policy", "latest-tag", "unknown-key", "pdb-blocks-drain", "issuer-missing"],
)
def test_bad_values_fail_with_the_field(values: dict[str, Any], message: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError) as caught:
        chart.render(values)
    assert message in str(caught.value)


INJECTED = "a\n      injectedKey: true"
"""A free-text value carrying a line break and a deeper indent: where a template writes it unquoted,
the YAML Helm renders gains a field of the attacker's choosing (``hostNetwork: true``, say)."""
INJECTIONS: dict[str, dict[str, Any]] = {
    "priorityClassName": {"priorityClassName": INJECTED},
    "nameOverride": {"nameOverride": "a\ninjectedKey: true"},
    "issuerRef.name": {
        "certManager": {"selfSigned": False, "issuerRef": {"name": INJECTED, "kind": "Issuer"}}
    },
    "issuerRef.group": {
        "certManager": {
            "selfSigned": False,
            "issuerRef": {"name": "corp-ca", "kind": "Issuer", "group": "a\n    injectedKey: true"},
        }
    },
    "grafanaDashboards.labelValue": {
        "grafanaDashboards": {"enabled": True, "labelValue": 'a"\n    injectedKey: true'}
    },
    "imagePullSecrets": {"imagePullSecrets": [{"name": INJECTED}]},
    "gateway.extraArgs": {"gateway": {"extraArgs": [INJECTED]}},
    "podLabels": {"podLabels": {"a": INJECTED}},
}


REFUSED_INJECTIONS = (
    "priorityClassName",
    "nameOverride",
    "issuerRef.name",
    "issuerRef.group",
    "podLabels",
    "imagePullSecrets",
)
"""Names and labels Kubernetes checks anyway: the values schema now refuses what is not a DNS name or
a label value."""


@pytest.mark.parametrize(
    "values",
    [{"priorityClassName": "high\n"}, {"nameOverride": "igw\n"}, {"podLabels": {"team": "a\n"}}],
    ids=["priorityClassName", "nameOverride", "podLabels"],
)
def test_a_final_newline_is_refused_by_the_values_check_as_by_helm(values: dict[str, Any]) -> None:
    """Helm matches the values schema's patterns with Go's regexp, where ``$`` is the end of the
    text. Before session s38 ``configuration.problems`` (``igw addon`` and the CDK app's values
    check) matched them with Python's ``re``, whose ``$`` also matches before a final newline: it
    passed values Helm, and so the install, then refused."""
    import helm_python as helm

    assert configuration.problems(values)
    with pytest.raises(helm.HelmError, match="does not match pattern"):
        chart.render({"mode": "gateway", **values})


@pytest.mark.parametrize("field", sorted(INJECTIONS))
def test_free_text_values_cannot_inject_fields_into_rendered_manifests(field: str) -> None:
    """Values reach the manifests as data, never as YAML structure: a name is refused unless it is a
    DNS name (Helm's schema check, and EKS's configurationValues check from the same schema), free
    text is rendered quoted. ``priorityClassName``, ``nameOverride`` and ``certManager.issuerRef``'s
    name and group were written unquoted with no pattern: ``priorityClassName: "high\\n
    hostNetwork: true"`` gave the gateway pods the node's network."""
    import helm_python as helm

    values = {"mode": "gateway", **INJECTIONS[field]}
    if field in REFUSED_INJECTIONS:
        with pytest.raises(helm.HelmError, match="schema"):
            chart.render(values)
        assert configuration.problems(INJECTIONS[field])
        return
    objects = chart.render(values)
    assert '"injectedKey"' not in json.dumps(objects)


LABEL_MAPS: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
    "/podLabels": lambda labels: {"podLabels": labels},
    "/nodeSelector": lambda labels: {"nodeSelector": labels},
    "/serviceMonitor/labels": lambda labels: {"serviceMonitor": {"labels": labels}},
    "/prometheusRule/labels": lambda labels: {"prometheusRule": {"labels": labels}},
    "/podMonitor/selector": lambda labels: {"podMonitor": {"selector": labels}},
    "/podMonitor/labels": lambda labels: {"podMonitor": {"labels": labels}},
}


@pytest.mark.parametrize("where", sorted(LABEL_MAPS))
@pytest.mark.parametrize("labels", [{"app": "has space"}, {"app": "v" * 64}, {"a/b/c": "v"}, {"-app": "v"}])
def test_label_maps_the_api_server_would_refuse_are_refused_by_the_values_schema(
    where: str, labels: dict[str, str]
) -> None:
    """They were plain string maps: Helm and EKS accepted them and the install failed only at the API
    server (``spec.template.metadata.labels: Invalid value``), the add-on left CREATE_FAILED."""
    import helm_python as helm

    values = {"mode": "gateway", **LABEL_MAPS[where](labels)}
    with pytest.raises(helm.HelmError) as refused:
        chart.render(values)
    (key,) = labels
    # Helm names a bad value's path; for a bad key it names only the key ("at '': invalid propertyName")
    assert f"at '{where}/{key}'" in str(refused.value) or f"invalid propertyName '{key}'" in str(
        refused.value
    )
    assert configuration.problems(LABEL_MAPS[where](labels))


def test_label_maps_take_every_label_the_api_server_takes() -> None:
    labels = {"app.kubernetes.io/part-of": "llm", "team": "", "a_b.c-d": "X_y.z-1"}
    objects = chart.render({"mode": "gateway", "podLabels": labels, "nodeSelector": labels})
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert configuration.problems({"podLabels": labels, "nodeSelector": labels}) == []


@pytest.mark.parametrize("kube_version", [f"{v}.0" for v in pins.SUPPORTED_KUBERNETES_VERSIONS])
def test_helm_lint_strict_passes(kube_version: str) -> None:
    ci_values = yaml.safe_load((chart.chart_dir() / "ci" / "values.yaml").read_text())
    result = chart.lint(ci_values, kube_version=kube_version)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []


def test_chart_obeys_eks_addon_rules() -> None:
    assert chart.addon_rule_violations() == []


def test_rules_scan_catches_violations(tmp_path: Path) -> None:
    import shutil

    copy_dir = tmp_path / "chart"
    shutil.copytree(chart.chart_dir(), copy_dir)
    (copy_dir / "templates" / "bad.yaml").write_text(
        "metadata:\n  annotations:\n    helm.sh/hook: pre-install\n"
        '  x: {{ lookup "v1" "Secret" "" "" }}\n  y: {{ .Release.Service }} {{ .Capabilities.KubeVersion }}\n'
    )
    metadata = yaml.safe_load((copy_dir / "Chart.yaml").read_text())
    metadata["dependencies"] = [{"name": "x", "version": "1.0.0", "repository": "https://charts.example.com"}]
    (copy_dir / "Chart.yaml").write_text(yaml.safe_dump(metadata))
    rules = {v.rule for v in chart.addon_rule_violations(copy_dir)}
    assert rules == {
        "helm hook (helm.sh/hook)",
        "lookup function",
        ".Capabilities",
        ".Release field other than Name/Namespace",
        "unvendored dependency",
    }


def test_generated_files_are_fresh() -> None:
    from igw.config import paths

    root = paths.REPO_ROOT
    for relative, target in schemas.GENERATORS:
        generate = getattr(schemas, target.split(":")[1])
        assert (root / relative).read_text(encoding="utf-8") == generate(root), (
            f"{relative} is stale: run igw generate"
        )


def test_configuration_schema_is_draft06_and_closed() -> None:
    schema = schemas.addon_configuration_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-06/schema#"
    assert schema["definitions"]["InferenceGateway"]["additionalProperties"] is False
    assert configuration.problems(yaml.safe_load((chart.chart_dir() / "values.yaml").read_text())) == []


def test_configuration_values_errors_name_the_field() -> None:
    assert configuration.problems({"service": {"scheme": "public"}})[0].startswith("service.scheme:")
    spec = copy.deepcopy(
        yaml.safe_load((chart.chart_dir() / "values.yaml").read_text())["gateway"]["config"]["spec"]
    )
    spec["schedulers"].append(dict(spec["schedulers"][0], name="second"))
    found = configuration.problems({"gateway": {"config": {"name": "x", "spec": spec}}})
    assert any(p.startswith("gateway.config.spec.schedulers[1].modelName") for p in found), found


def test_package_produces_a_chart_archive(tmp_path: Path) -> None:
    archive = chart.package(destination=tmp_path)
    assert archive.name == f"{pins.CHART_NAME}-{pins.CHART_VERSION}.tgz"
    assert archive.stat().st_size > 1000


def _checkout(root: Path, mtime: int) -> Path:
    """A copy of the chart as another checkout leaves it: its own file times, and strays beside it."""
    copy = root / pins.CHART_NAME
    shutil.copytree(chart.chart_dir(), copy)
    for path in copy.rglob("*"):
        os.utime(path, (mtime, mtime))
    (copy / "values-prod.yaml").write_text("redis:\n  password: hunter2\n", encoding="utf-8")
    (copy / "files" / "__pycache__").mkdir()
    (copy / "files" / "__pycache__" / "render.cpython-311.pyc").write_bytes(b"\x00")
    (copy / "templates" / "gateway-deployment.yaml.bak").write_text("kind: Secret\n", encoding="utf-8")
    return copy


def test_package_is_the_same_bytes_from_any_checkout_and_only_the_chart(tmp_path: Path) -> None:
    """Helm wrote each file's modification time into the archive, so two checkouts of one commit made
    two archives (two OCI digests for one chart version); and whatever lay in the chart folder went in
    (a values file with a password, __pycache__)."""
    archives = [
        chart.package(
            destination=tmp_path / f"out{n}",
            directory=_checkout(tmp_path / f"checkout{n}", 1_700_000_000 + n),
        )
        for n in range(2)
    ]
    assert archives[0].read_bytes() == archives[1].read_bytes()
    with tarfile.open(archives[0]) as archive:
        names = {name.removeprefix(f"{pins.CHART_NAME}/") for name in archive.getnames()}
        assert {member.mtime for member in archive.getmembers()} == {chart.ARCHIVE_FILE_TIME}
    tracked = {
        str(path.relative_to(chart.chart_dir()))
        for path in chart.chart_dir().rglob("*")
        if path.is_file() and "ci" not in path.relative_to(chart.chart_dir()).parts
    }
    assert names == tracked


def test_chart_metadata_matches_pins() -> None:
    metadata = yaml.safe_load((chart.chart_dir() / "Chart.yaml").read_text())
    assert metadata["version"] == pins.CHART_VERSION
    assert metadata["appVersion"] == pins.APP_VERSION


def test_the_addon_version_igw_addon_installs_is_the_charts_version() -> None:
    """``igw addon create`` installs ``pins.IGW_ADDON_VERSION``, the add-on version the chart is
    published under: its ``X.Y.Z`` must be the chart's own ``version`` (what ``igw addon package``
    names the archive), or a chart bump would install, and report, the previous chart's add-on.
    Nothing tied the two before."""
    from igw.addon.addon_version import AddonVersion

    metadata = yaml.safe_load((chart.chart_dir() / "Chart.yaml").read_text())
    version = AddonVersion.parse(pins.IGW_ADDON_VERSION)
    assert re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.[1-9]\d*", pins.IGW_ADDON_VERSION)
    assert f"{version.major}.{version.minor}.{version.patch}" == metadata["version"] == pins.CHART_VERSION


def test_helm_lint_reports_schema_violations() -> None:
    result = chart.lint({"replicaCount": 1}, kube_version="1.34.0")
    assert any("/replicaCount" in error for error in result["errors"])


def _served_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    served: dict[str, Any] = yaml.safe_load(config_map["data"]["inferencegatewayconfig.yaml"])
    return served


def test_pod_tls_is_configured_through_the_served_config() -> None:
    served = _served_config(chart.render({"mode": "gateway"}))
    assert served["spec"]["extensions"]["tlsTermination"] == {
        "certFile": "/etc/igw/tls/tls.crt",
        "keyFile": "/etc/igw/tls/tls.key",
    }
    plain = _served_config(chart.render({"mode": "gateway", "certManager": {"enabled": False}}))
    assert "extensions" not in plain["spec"]


def test_rbac_covers_the_served_config_namespace() -> None:
    objects = chart.render(
        {
            "mode": "gateway",
            "gateway": {"config": {"namespace": "models"}},
            "rbac": {"namespaces": ["models", "x"]},
        }
    )
    assert _served_config(objects)["metadata"]["namespace"] == "models"
    assert sorted(o["metadata"]["namespace"] for o in objects if o["kind"] == "Role") == ["models", "x"]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert {b["subjects"][0]["namespace"] for b in bindings} == {pins.ADDON_NAMESPACE}


def test_generators_are_registered_for_igw_generate() -> None:
    from igw.config.generated_files import GENERATED_FILES

    assert set(schemas.GENERATORS) <= set(GENERATED_FILES)


def rendered_shutdown(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], float, float]:
    """(pod spec, gateway container, --drain-seconds, --stream-grace-seconds) of the gateway-mode chart."""
    objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "gateway"]
    args = container["args"]
    drain = float(args[args.index("--drain-seconds") + 1])
    return pod, container, drain, float(args[args.index("--stream-grace-seconds") + 1])


@pytest.mark.parametrize(("grace", "pre_stop"), [(60, 15), (120, 30), (30, 15)])
def test_termination_grace_covers_the_gateway_shutdown(grace: int, pre_stop: int) -> None:
    """preStop sleep + drain + stream grace + the final cut (SSE error events) fit the grace period."""
    from igw.gateway.shutdown import CUT_WAIT_S

    values = {"mode": "gateway", "terminationGracePeriodSeconds": grace, "preStopSleepSeconds": pre_stop}
    pod, container, drain, stream_grace = rendered_shutdown(values)
    sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] == grace
    assert sleep == pre_stop
    assert stream_grace >= 0
    assert sleep + drain + stream_grace + CUT_WAIT_S + 5 <= grace


@pytest.mark.parametrize(
    ("limits", "want_drain", "want_stream_grace", "want_termination"),
    [
        pytest.param({"drainPeriod": "10s"}, 10, 25, 60, id="drain-only-fits"),
        pytest.param({"streamGrace": "20s"}, 5, 20, 60, id="grace-only-fits"),
        pytest.param({"drainPeriod": "500ms", "streamGrace": "1m"}, 0.5, 60, 86, id="grace-raises-deadline"),
        pytest.param({"drainPeriod": "1m"}, 60, 0, 85, id="long-drain-raises-deadline"),
        pytest.param({"streamGrace": "1m30s"}, 5, 90, 120, id="minutes-and-seconds"),
    ],
)
def test_drain_and_stream_grace_come_from_server_limits_like_the_operator(
    limits: dict[str, str], want_drain: float, want_stream_grace: float, want_termination: int
) -> None:
    """The chart passes ``serverLimits.drainPeriod`` / ``streamGrace`` to ``igw serve`` and raises the
    grace period to cover them, with the operator's numbers for the same config."""
    from igw.gateway.shutdown import CUT_WAIT_S
    from igw.operator.shutdown_timing import shutdown_timing

    spec = {
        "bbr": {"enabled": True},
        "schedulers": [{"name": "d", "modelName": "d", "modelSelector": {"matchLabels": {"app": "d"}}}],
        "extensions": {"serverLimits": limits},
    }
    values = {
        "mode": "gateway",
        "terminationGracePeriodSeconds": 60,
        "preStopSleepSeconds": 15,
        "gateway": {"config": {"spec": spec}},
    }
    pod, _, drain, stream_grace = rendered_shutdown(values)
    assert (drain, stream_grace, pod["terminationGracePeriodSeconds"]) == (
        want_drain,
        want_stream_grace,
        want_termination,
    )
    assert 15 + drain + stream_grace + CUT_WAIT_S + 5 <= pod["terminationGracePeriodSeconds"]
    operator = shutdown_timing(spec, termination_grace_s=60, pre_stop_s=15)
    assert (operator.drain_s, operator.stream_grace_s, operator.termination_grace_s) == (
        drain,
        stream_grace,
        pod["terminationGracePeriodSeconds"],
    )


def test_a_grace_period_too_short_for_the_shutdown_fails_with_the_field() -> None:
    import helm_python as helm

    values = {"mode": "gateway", "terminationGracePeriodSeconds": 20, "preStopSleepSeconds": 15}
    with pytest.raises(helm.HelmError) as caught:
        chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    assert "terminationGracePeriodSeconds" in str(caught.value)


def _scheduler_selecting(selector: dict[str, Any], *, namespace: str = "") -> dict[str, Any]:
    """Gateway-mode values whose one scheduler discovers model servers with ``selector``."""
    scheduler = {"name": "default", "modelName": "default", "modelSelector": selector}
    return {
        "gateway": {
            "config": {"name": "default", "namespace": namespace, "spec": {"schedulers": [scheduler]}}
        }
    }


SELF_SELECTING: dict[str, dict[str, Any]] = {
    "podLabels-equal-matchLabels": {
        "podLabels": {"serving": "llm"},
        **_scheduler_selecting({"matchLabels": {"serving": "llm"}}),
    },
    "chart-component-label": _scheduler_selecting(
        {"matchLabels": {"app.kubernetes.io/component": "gateway"}}
    ),
    "expressions-exists-and-in": {
        "podLabels": {"team": "a"},
        **_scheduler_selecting(
            {
                "matchExpressions": [
                    {"key": "team", "operator": "Exists"},
                    {"key": "team", "operator": "In", "values": ["a", "b"]},
                    {"key": "gpu", "operator": "DoesNotExist"},
                    {"key": "app.kubernetes.io/name", "operator": "NotIn", "values": ["vllm"]},
                ]
            }
        ),
    },
}
NOT_SELF_SELECTING: dict[str, dict[str, Any]] = {
    "another-label-value": {
        "podLabels": {"serving": "llm"},
        **_scheduler_selecting({"matchLabels": {"serving": "llm", "role": "model-server"}}),
    },
    "excluded-by-notin": {
        "podLabels": {"team": "a"},
        **_scheduler_selecting({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}),
    },
    "model-servers-in-another-namespace": {
        "podLabels": {"serving": "llm"},
        **_scheduler_selecting({"matchLabels": {"serving": "llm"}}, namespace="models"),
    },
}


@pytest.mark.parametrize("case", sorted(SELF_SELECTING))
def test_a_scheduler_selecting_the_gateways_own_pods_fails_at_render_time(case: str) -> None:
    """In gateway mode the chart's pods carry its selector labels plus ``podLabels``; a scheduler's
    ``modelSelector`` they satisfy made the gateway discover its own pods as model servers and route
    requests to itself. The operator path refused it (gateway-pods-not-model-servers); the chart did not."""
    import helm_python as helm

    with pytest.raises(helm.HelmError) as refused:
        chart.render(
            {"mode": "gateway", **SELF_SELECTING[case]}, release="igw", namespace=pins.ADDON_NAMESPACE
        )
    assert "gateway.config.spec.schedulers[0].modelSelector selects the gateway's own pods" in str(
        refused.value
    )


@pytest.mark.parametrize("case", sorted(NOT_SELF_SELECTING))
def test_a_scheduler_the_gateways_pods_do_not_satisfy_renders(case: str) -> None:
    objects = chart.render(
        {"mode": "gateway", **NOT_SELF_SELECTING[case]}, release="igw", namespace=pins.ADDON_NAMESPACE
    )
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert (
        NOT_SELF_SELECTING[case]["podLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    "key", ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"]
)
def test_pod_labels_may_not_set_the_charts_selector_labels(key: str) -> None:
    """``podLabels: {app.kubernetes.io/component: model-server}`` rendered the key twice in the pod
    template (the Deployment's selector then no longer matched its own pods, or, with the last value
    kept, the gateway pods looked like model servers)."""
    import helm_python as helm

    with pytest.raises(helm.HelmError) as refused:
        chart.render({"mode": "gateway", "podLabels": {key: "model-server"}})
    assert f"podLabels.{key}: the chart sets this label on the gateway's pods itself" in str(refused.value)
    chart.render({"mode": "operator", "podLabels": {key: "model-server"}})  # not the operator's pods' labels


ANNOTATION_MAPS: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
    "/podAnnotations": lambda annotations: {"podAnnotations": annotations},
    "/service/annotations": lambda annotations: {"service": {"annotations": annotations}},
    "/serviceAccount/annotations": lambda annotations: {"serviceAccount": {"annotations": annotations}},
}


@pytest.mark.parametrize("where", sorted(ANNOTATION_MAPS))
@pytest.mark.parametrize("annotations", [{"a b": "x"}, {"/x": "y"}, {"a/b/c": "v"}, {"a": "x" * 262_145}])
def test_annotation_maps_the_api_server_would_refuse_are_refused_by_the_values_schema(
    where: str, annotations: dict[str, str]
) -> None:
    """Annotation maps took any string key and value: Helm and EKS accepted ``podAnnotations: {"a b":
    x}`` and the install failed at the API server ("name part must consist of alphanumeric
    characters"), the add-on left CREATE_FAILED."""
    import helm_python as helm

    values = {"mode": "gateway", **ANNOTATION_MAPS[where](annotations)}
    with pytest.raises(helm.HelmError, match="schema"):
        chart.render(values)
    assert configuration.problems(ANNOTATION_MAPS[where](annotations))


def test_annotation_maps_take_every_annotation_the_api_server_takes() -> None:
    annotations = {
        "prometheus.io/scrape": "true",
        "note": "free text:\nany {characters} at all",
        "a_b.c-d": "",
    }
    objects = chart.render({"mode": "gateway", "podAnnotations": annotations})
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert annotations.items() <= deployment["spec"]["template"]["metadata"]["annotations"].items()


LB = "service.beta.kubernetes.io/aws-load-balancer-"
TLS_LB = {"tls": {"certificateArn": "arn:aws:acm:us-west-2:111111111111:certificate/abc-123"}}
CHART_SET_ANNOTATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "scheme": (
        {"service": {"annotations": {f"{LB}scheme": "internet-facing"}}},
        rf"service\.annotations\.{LB}scheme: the chart sets this annotation itself \(set service\.scheme",
    ),
    "tls-policy": (
        {"service": {**TLS_LB, "annotations": {f"{LB}ssl-negotiation-policy": "ELBSecurityPolicy-2016-08"}}},
        r"ssl-negotiation-policy: the chart sets this annotation itself \(set service\.tls\.sslPolicy",
    ),
    "target-type": (
        {"service": {"annotations": {f"{LB}nlb-target-type": "instance"}}},
        r"nlb-target-type: the chart sets this annotation itself \(from service\.type",
    ),
    "deregistration-delay": (
        {
            "service": {
                "annotations": {f"{LB}target-group-attributes": "a=b, deregistration_delay.timeout_seconds=0"}
            }
        },
        r"deregistration_delay\.timeout_seconds is set by the chart from preStopSleepSeconds",
    ),
    "irsa-role": (
        {
            "serviceAccount": {
                "roleArn": "arn:aws:iam::111111111111:role/igw-gateway",
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111111111111:role/other"},
            }
        },
        r"serviceAccount\.annotations\.eks\.amazonaws\.com/role-arn: the chart sets this annotation "
        r"from serviceAccount\.roleArn",
    ),
    "restart-digest": (
        {"podAnnotations": {"inference.sagemaker.aws.amazon.com/restart-config": "0"}},
        r"podAnnotations\.inference\.sagemaker\.aws\.amazon\.com/restart-config: the chart sets this "
        r"annotation itself",
    ),
}


@pytest.mark.parametrize("case", sorted(CHART_SET_ANNOTATIONS))
def test_an_annotation_the_chart_sets_may_not_be_given_again(case: str) -> None:
    """An annotation map repeating a key the chart writes on the same object rendered the key twice,
    and Kubernetes' YAML decoding (Helm's and kubectl's) keeps the last: ``service.annotations``
    silently made an ``internal`` NLB internet-facing or gave its TLS listener a TLS 1.0 policy the
    ``service.tls.sslPolicy`` allow-list refuses; ``serviceAccount.annotations`` replaced the IRSA role
    of ``serviceAccount.roleArn``. Refused at render time now, naming the value to set instead, and by
    ``igw addon create/update`` before any AWS call."""
    import helm_python as helm

    values, refused = CHART_SET_ANNOTATIONS[case]
    with pytest.raises(helm.HelmError, match=refused):
        chart.render({"mode": "gateway", **values})
    (problem,) = configuration.render_problems({"mode": "gateway", **values})
    assert re.search(refused, problem)


def test_other_service_annotations_and_target_group_attributes_are_kept_beside_the_charts() -> None:
    """What the chart does not set renders as given, and target-group attributes join the chart's
    deregistration delay rather than replacing it; no key is written twice."""
    given = {f"{LB}target-group-attributes": "preserve_client_ip.enabled=true", "example.com/team": "ml"}
    objects = chart.render({"mode": "gateway", "service": {**TLS_LB, "annotations": given}})
    (service,) = [o for o in objects if o["kind"] == "Service" and o["spec"]["type"] == "LoadBalancer"]
    annotations = service["metadata"]["annotations"]
    assert annotations[f"{LB}target-group-attributes"] == (
        "deregistration_delay.timeout_seconds=15,preserve_client_ip.enabled=true"
    )
    assert annotations["example.com/team"] == "ml"
    assert annotations[f"{LB}scheme"] == "internal"
    assert annotations[f"{LB}ssl-negotiation-policy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    clusterip = chart.render(
        {
            "mode": "gateway",
            "certManager": {"enabled": False},
            "service": {"type": "ClusterIP", "annotations": given},
        }
    )
    (plain,) = [
        o
        for o in clusterip
        if o["kind"] == "Service"
        and o["spec"]["type"] == "ClusterIP"
        and not o["metadata"]["name"].endswith("-management")
    ]
    assert plain["metadata"]["annotations"] == given


def test_a_rendered_manifest_with_a_key_written_twice_is_refused() -> None:
    """The backstop: ``chart.render`` (the tests and ``igw addon``'s local render) read manifests
    last-one-wins, so a value repeating a key the chart sets was never seen. A label map repeating
    one of the chart's labels on a ServiceMonitor is now refused with the template and the key."""
    with pytest.raises(
        DocumentReadError, match=r"gateway-servicemonitor\.yaml: .*duplicate key 'app\.kubernetes\.io/name'"
    ):
        chart.render(
            {
                "mode": "gateway",
                "serviceMonitor": {"enabled": True, "labels": {"app.kubernetes.io/name": "x"}},
            }
        )
    (problem,) = configuration.render_problems(
        {"mode": "gateway", "serviceMonitor": {"enabled": True, "labels": {"app.kubernetes.io/name": "x"}}}
    )
    assert problem.startswith("a value repeats a key the chart sets: ")


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "300.1.2.3/8", "10.0.0/8", "::/129", "10.0.0.0/08x"])
def test_a_source_range_that_is_not_a_cidr_is_refused(cidr: str) -> None:
    """``10.0.0.0/33`` and ``300.1.2.3/8`` matched the old pattern: the AWS Load Balancer Controller
    refuses them and the Service's load balancer is never provisioned."""
    import helm_python as helm

    values = {"service": {"loadBalancerSourceRanges": [cidr]}}
    with pytest.raises(helm.HelmError, match="loadBalancerSourceRanges/0"):
        chart.render({"mode": "gateway", **values})
    assert configuration.problems(values)


def test_every_cidr_form_is_taken() -> None:
    ranges = ["0.0.0.0/0", "10.0.0.0/8", "192.168.1.255/32", "::/0", "2001:db8::/32", "fd00::1/128"]
    objects = chart.render({"mode": "gateway", "service": {"loadBalancerSourceRanges": ranges}})
    service = next(o for o in objects if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer")
    assert service["spec"]["loadBalancerSourceRanges"] == ranges


@pytest.mark.parametrize("mode", ["gateway", "operator"])
def test_an_empty_https_egress_list_is_refused_not_rendered_as_allow_all(mode: str) -> None:
    """``networkPolicy.httpsEgressCidrs: []`` rendered the 443 egress rule as ``to: null``, which a
    NetworkPolicy reads as every destination (pods included): asking for no HTTPS egress opened it to
    everything, in both modes' policies. At least one CIDR now, checked by the values schema."""
    import helm_python as helm

    values: dict[str, Any] = {"networkPolicy": {"httpsEgressCidrs": []}}
    with pytest.raises(helm.HelmError, match="/networkPolicy/httpsEgressCidrs"):
        chart.render({"mode": mode, **values})
    (problem,) = configuration.problems(values)
    assert problem.startswith("networkPolicy.httpsEgressCidrs: ")
    objects = chart.render({"mode": mode, "networkPolicy": {"httpsEgressCidrs": ["10.0.0.0/16"]}})
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    (https,) = [
        rule for rule in policy["spec"]["egress"] if {"port": 443, "protocol": "TCP"} in rule["ports"]
    ]
    assert https["to"] == [{"ipBlock": {"cidr": "10.0.0.0/16"}}]


@pytest.mark.parametrize(
    ("toleration", "where"),
    [
        ({"operator": "Sideways"}, "/tolerations/0/operator"),
        ({"key": "gpu", "effect": "NoWhere"}, "/tolerations/0/effect"),
        ({"key": "gpu", "tolerationSeconds": "soon"}, "/tolerations/0/tolerationSeconds"),
        ({"key": "gpu", "opertor": "Exists"}, "opertor"),
    ],
)
def test_a_toleration_the_api_server_would_refuse_is_refused(toleration: dict[str, Any], where: str) -> None:
    """Tolerations were any objects: a misspelt field was dropped silently, a bad operator failed the
    install at the API server."""
    import helm_python as helm

    with pytest.raises(helm.HelmError) as refused:
        chart.render({"mode": "gateway", "tolerations": [toleration]})
    assert where in str(refused.value)
    assert configuration.problems({"tolerations": [toleration]})


def _required_node_term(expression: dict[str, Any]) -> dict[str, Any]:
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]
        }
    }


_TERM = "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0"


@pytest.mark.parametrize(
    ("affinity", "where"),
    [
        ({"requiredDuringScheduling": {}}, "requiredDuringScheduling"),
        (_required_node_term({"key": "pool", "operator": "In", "values": [1, True]}), f"{_TERM}/"),
        (_required_node_term({"key": "pool", "operator": "Like", "values": ["cpu"]}), f"{_TERM}/"),
        (_required_node_term({"key": "pool", "operator": "In"}), f"{_TERM}/"),
        (_required_node_term({"key": "cores", "operator": "Gt", "values": ["many"]}), f"{_TERM}/"),
        (_required_node_term({"key": "pool", "operator": "Exists", "values": ["cpu"]}), f"{_TERM}/"),
        (
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
        ),
        (
            {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]},
            "/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight",
        ),
    ],
    ids=[
        "unknown-field",
        "values-not-strings",
        "operator",
        "in-no-values",
        "gt-not-integer",
        "exists-with-values",
        "no-terms",
        "weight-0",
    ],
)
@pytest.mark.parametrize("mode", ["gateway", "operator"])
def test_a_node_affinity_the_api_server_would_refuse_is_refused_naming_the_path(
    affinity: dict[str, Any], where: str, mode: str
) -> None:
    """``nodeAffinity`` was any object: EKS's check and Helm's passed it, and the Deployment it was
    copied into failed at the API server (a misspelt field, an operator ``Like``, a value ``1`` that
    YAML read as a number) - after ``create-addon`` had returned."""
    import helm_python as helm

    values = {"mode": mode, "nodeAffinity": affinity}
    with pytest.raises(helm.HelmError) as refused:
        chart.render(values)
    assert where in str(refused.value)
    found = configuration.problems(values)
    assert found
    assert all(problem.startswith("nodeAffinity.") for problem in found), found


def test_every_node_affinity_form_the_api_server_takes_is_taken() -> None:
    """The schema is no narrower than Kubernetes: every operator, matchFields, and null to drop the
    chart's own preference; each renders a Deployment the API server's schema takes."""
    term = {
        "matchExpressions": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.xlarge"]},
            {"key": "pool", "operator": "NotIn", "values": ["gpu", "true"]},
            {"key": "igw.example.com/cores", "operator": "Gt", "values": ["3"]},
            {"key": "igw.example.com/gpus", "operator": "Lt", "values": ["1"]},
            {"key": "spot", "operator": "DoesNotExist"},
            {"key": "zone", "operator": "Exists", "values": []},
        ],
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["ip-10-0-0-1"]}],
    }
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}],
    }
    for mode in ("gateway", "operator"):
        for given in (affinity, {**affinity, "preferredDuringSchedulingIgnoredDuringExecution": None}):
            values = {"mode": mode, "nodeAffinity": given}
            assert configuration.problems(values) == []
            (deployment,) = [o for o in chart.render(values) if o["kind"] == "Deployment"]
            kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
            rendered = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            assert rendered["requiredDuringSchedulingIgnoredDuringExecution"] == {"nodeSelectorTerms": [term]}


@pytest.mark.parametrize("mode", ["gateway", "operator"])
def test_the_charts_pods_prefer_nodes_other_than_hyperpod_by_default(mode: str) -> None:
    """The label is the one the operator's gateways and the CDK app's controllers avoid
    (``igw.operator.placement``, one statement of it); a user's own terms are added to it."""

    def affinity(values: dict[str, Any]) -> dict[str, Any]:
        objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        found: dict[str, Any] = deployment["spec"]["template"]["spec"]["affinity"]
        return found

    assert affinity({"mode": mode})["nodeAffinity"] == OFF_HYPERPOD_NODES["nodeAffinity"]
    required = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]
    }
    mine = affinity(
        {"mode": mode, "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    )
    assert mine["nodeAffinity"] == {
        **OFF_HYPERPOD_NODES["nodeAffinity"],
        "requiredDuringSchedulingIgnoredDuringExecution": required,
    }
    assert "nodeAffinity" not in affinity({"mode": mode, "nodeAffinity": None})
    # ...and EKS's configurationValues check (the add-on schema) lets the documented null through: it
    # refused it ("expected object, got null"), so no add-on install could drop the default
    assert configuration.problems({"mode": mode, "nodeAffinity": None}) == []


@pytest.mark.parametrize(
    ("release", "values"), [("igw", {"fullnameOverride": "1gw"}), ("1gw", {}), ("igw.prod", {})]
)
def test_a_gateway_service_name_the_api_server_refuses_fails_at_render_time(
    release: str, values: dict[str, Any]
) -> None:
    """The gateway's Services are named after ``fullnameOverride`` or the release, and a Service name
    must be a DNS-1035 label; the values schema took ``fullnameOverride: 1gw`` and Helm takes release
    names such as ``1gw`` or ``igw.prod``, so the Service failed only at the API server (the add-on
    CREATE_FAILED). The schema now wants a letter first, and the render names the source otherwise."""
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=r"fullnameOverride"):
        chart.render({"mode": "gateway", **values}, release=release)
    if values:
        (problem,) = configuration.problems(values)
        assert problem.startswith("fullnameOverride: ")
    renamed = chart.render({"mode": "gateway", "fullnameOverride": "gw-prod"}, release=release)
    assert {o["metadata"]["name"] for o in renamed if o["kind"] == "Service"} == {
        "gw-prod",
        "gw-prod-management",
    }


def _strings_expected(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every value under a key that Kubernetes types as a string (names, namespaces, arguments, DNS
    names, label values) that is not one, as ``(path, value)``."""
    found: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            inner = f"{path}.{key}"
            if key in ("name", "namespace", "serviceAccountName") and not isinstance(
                value, (str, dict, list)
            ):
                found.append((inner, value))
            elif key in ("args", "dnsNames", "matchNames") and isinstance(value, list):
                found += [
                    (f"{inner}[{n}]", item) for n, item in enumerate(value) if not isinstance(item, str)
                ]
            elif key == "matchLabels" and isinstance(value, dict):
                found += [(f"{inner}.{k}", v) for k, v in value.items() if not isinstance(v, str)]
            else:
                found += _strings_expected(value, inner)
    elif isinstance(obj, list):
        for n, item in enumerate(obj):
            found += _strings_expected(item, f"{path}[{n}]")
    return found


YAML_LOOKALIKES = ["on", "2024", "null", "true"]
"""Valid DNS labels (namespace and object names) that plain YAML reads as a boolean, a number or null."""


@pytest.mark.parametrize("namespace", YAML_LOOKALIKES)
@pytest.mark.parametrize(
    "values",
    [
        {
            "operator": {"namespaces": YAML_LOOKALIKES},
            "podMonitor": {"enabled": True, "selector": {"a": "b"}},
        },
        {
            "mode": "gateway",
            "rbac": {"namespaces": YAML_LOOKALIKES},
            "gateway": {
                "config": {"name": "true", "namespace": "null"},
                "cloudWatch": {"enabled": True, "agent": {"namespace": "on"}},
            },
            "serviceAccount": {"name": "null"},
            "certManager": {"dnsNames": ["*.example.com", "2024.example.com"]},
            "serviceMonitor": {"enabled": True},
        },
    ],
    ids=["operator", "gateway"],
)
def test_names_and_namespaces_render_as_strings(namespace: str, values: dict[str, Any]) -> None:
    """Every namespace and name the add-on takes (``--namespace-config``, operator.namespaces,
    rbac.namespaces, gateway.config, serviceAccount.name) and certManager.dnsNames' wildcard, which the
    schema allows: they were written unquoted, so a namespace ``2024`` or ``on`` reached the API server
    as a number or ``true`` (refused: metadata.namespace is a string) and ``*.example.com`` failed the
    render as a YAML alias."""
    assert configuration.problems(values) == []
    objects = chart.render(values, release="igw", namespace=namespace)
    for obj in objects:
        if obj["kind"] != "CustomResourceDefinition":
            assert _strings_expected(obj) == [], (obj["kind"], obj["metadata"]["name"])
    served = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "igw-config"]
    for config_map in served:
        (document,) = yaml.safe_load_all(config_map["data"]["inferencegatewayconfig.yaml"])
        assert document["metadata"] == {"name": "true", "namespace": "null"}


class _GoYamlV2Loader(yaml.SafeLoader):
    """PyYAML's YAML 1.1 reading plus ``y``/``Y``/``n``/``N`` as booleans: how go-yaml v2 (Helm's and
    kubectl's ``sigs.k8s.io/yaml``) reads a plain scalar. PyYAML alone takes ``yes``/``no``/``on``/
    ``off`` (any case spelling YAML 1.1 lists) as booleans but keeps ``y`` and ``n`` as strings."""

    bool_values: ClassVar[dict[str, bool]] = {**yaml.SafeLoader.bool_values, "y": True, "n": False}


_GoYamlV2Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))

YAML_BOOLEAN_WORDS = ["y", "n", "yes", "no", "on", "off"]
"""Lower-case words the values schema takes as names, label keys and label values, that go-yaml v2
reads as booleans when written plain."""


def test_pyyaml_reads_the_yaml_1_1_booleans_but_y_and_n_only_with_the_go_yaml_resolver() -> None:
    """Which spellings the test's reading treats as booleans, checked rather than assumed."""
    plain = {word: yaml.safe_load(f"k: {word}")["k"] for word in YAML_BOOLEAN_WORDS}
    assert plain == {"y": "y", "n": "n", "yes": True, "no": False, "on": True, "off": False}
    go = {word: yaml.load(f"k: {word}", Loader=_GoYamlV2Loader)["k"] for word in YAML_BOOLEAN_WORDS}
    assert go == {"y": True, "n": False, "yes": True, "no": False, "on": True, "off": False}


def _render_read_as_go_yaml(values: dict[str, Any], release: str) -> list[dict[str, Any]]:
    """The chart rendered by Helm's SDK, each manifest read as Helm and kubectl read it (go-yaml v2)."""
    import helm_python as helm

    loaded = helm.Chart.load(str(chart.chart_dir()))
    try:
        rendered = loaded.render(values, name=release, namespace=pins.ADDON_NAMESPACE)
    finally:
        loaded.close()
    return [
        document
        for path, text in sorted(rendered.items())
        if path.endswith(".yaml")
        for document in yaml.load_all(text, Loader=_GoYamlV2Loader)
        if isinstance(document, dict) and document.get("kind") != "CustomResourceDefinition"
    ]


def _label_like_not_strings(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every key and scalar value of a label map, selector or annotation map, and every image, TLS
    server name, Secret name and kind, that is not a string (each a string in the Kubernetes API)."""
    found: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            inner = f"{path}.{key}"
            if key in ("labels", "matchLabels", "selector", "annotations") and isinstance(value, dict):
                found += [
                    (f"{inner}.{k}", v)
                    for k, v in value.items()
                    if not isinstance(k, str) or not isinstance(v, (str, dict, list))
                ]
            elif key in ("image", "serverName", "secretName", "kind") and not isinstance(value, str):
                found.append((inner, value))
            found += _label_like_not_strings(value, inner)
    elif isinstance(obj, list):
        for n, item in enumerate(obj):
            found += _label_like_not_strings(item, f"{path}[{n}]")
    return found


@pytest.mark.parametrize("word", YAML_BOOLEAN_WORDS)
@pytest.mark.parametrize("mode", ["operator", "gateway"])
def test_names_and_labels_spelt_as_yaml_booleans_stay_strings(word: str, mode: str) -> None:
    """A release, ``nameOverride``, ``fullnameOverride`` or Grafana label called ``on``, ``no``, ``y``
    (valid DNS labels the schema takes) was written plain: go-yaml v2 read every object's name and its
    ``app.kubernetes.io/name``/``instance`` labels and selectors as booleans, which the API server
    refuses (the install fails), and the Grafana label key ``on`` became the label ``true``. The
    values that reach the manifests through ``toYaml`` (labels, tolerations, env, annotations) were
    already quoted by Helm's encoder; they are here so that stays so."""
    values: dict[str, Any] = {
        "mode": mode,
        "nameOverride": word,
        "fullnameOverride": word,
        "grafanaDashboards": {"enabled": True, "label": word, "labelValue": word, "annotations": {"a": word}},
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True, "selector": {"app": word}, "port": word},
        "tolerations": [{"key": word, "operator": "Equal", "value": word, "effect": "NoSchedule"}],
        "nodeSelector": {"pool": word},
        "image": {"tag": word},
    }
    if mode == "gateway":
        values |= {
            "podLabels": {"tier": word},
            "podAnnotations": {"note": word},
            "certManager": {"issuerRef": {"name": word, "kind": "ClusterIssuer"}},
            "gateway": {"extraArgs": [word], "extraEnv": [{"name": "X", "value": word}]},
            "service": {"annotations": {"note": word}},
        }
    else:
        values["operator"] = {"gatewayEnv": [{"name": "X", "value": word}], "namespaces": [word]}
    assert configuration.problems(values) == []
    objects = _render_read_as_go_yaml(values, release=word)
    assert len(objects) > 5
    for obj in objects:
        assert _strings_expected(obj) + _label_like_not_strings(obj) == [], (
            obj["kind"],
            obj["metadata"]["name"],
        )
    dashboards = [o for o in objects if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]]
    assert dashboards
    for dashboard in dashboards:
        assert dashboard["metadata"]["labels"][word] == word


@pytest.mark.parametrize(
    ("anti_affinity", "rollout"),
    [("soft", {"maxUnavailable": 0, "maxSurge": 1}), ("hard", {"maxUnavailable": 1, "maxSurge": 0})],
)
def test_hard_anti_affinity_rolls_one_pod_at_a_time_without_a_surge(
    anti_affinity: str, rollout: dict[str, int]
) -> None:
    """``podAntiAffinity: hard`` requires one gateway pod per node; with ``maxUnavailable: 0`` and
    ``maxSurge: 1`` a cluster of exactly as many nodes as replicas had no node for the surge pod and
    stopped no old pod to make one: every rollout stalled. Hard anti-affinity replaces one pod at a
    time now; soft keeps the surge (the endpoint stays at full capacity)."""
    objects = chart.render({"mode": "gateway", "podAntiAffinity": anti_affinity, "replicaCount": 3})
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": rollout}
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    required = "requiredDuringSchedulingIgnoredDuringExecution" in anti
    assert required == (anti_affinity == "hard")
    # with one pod per node required, a surge pod needs a node more than the replicas: none is assumed
    assert not required or rollout["maxSurge"] == 0 < rollout["maxUnavailable"]


def test_the_operator_spreads_over_zones_and_requests_ephemeral_storage_as_the_gateway_pods() -> None:
    """The operator's Deployment spread its replicas over nodes only (both could run in one zone and
    stop every reconcile with it) and requested no ephemeral storage, so under disk pressure the
    kubelet evicted it before any pod with a request; the gateway pods had both."""
    from igw.checks.audit.spread import spread_by

    operator = chart.render({"mode": "operator"}, release="igw", namespace=pins.ADDON_NAMESPACE)
    gateway = chart.render({"mode": "gateway"}, release="igw", namespace=pins.ADDON_NAMESPACE)
    for objects in (operator, gateway):
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        template = deployment["spec"]["template"]
        pod = template["spec"]
        zone = [
            c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "topology.kubernetes.io/zone"
        ]
        assert len(zone) == 1, deployment["metadata"]["name"]
        assert (zone[0]["maxSkew"], zone[0]["whenUnsatisfiable"]) == (1, "ScheduleAnyway")
        assert zone[0]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        only_zone = {**pod, "topologySpreadConstraints": zone, "affinity": {}}
        assert (
            spread_by(only_zone, template["metadata"]["labels"])
            == "topology spread on topology.kubernetes.io/zone"
        )
        (container,) = pod["containers"]
        resources = container["resources"]
        (tmp,) = [v for v in pod["volumes"] if v["name"] == "tmp"]
        assert chart_quantity(tmp["emptyDir"]["sizeLimit"]) <= chart_quantity(
            resources["requests"]["ephemeral-storage"]
        )
        assert chart_quantity(resources["requests"]["ephemeral-storage"]) < chart_quantity(
            resources["limits"]["ephemeral-storage"]
        )


def chart_quantity(text: str) -> int:
    """A binary-suffixed Kubernetes quantity (``16Mi``) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return int(text[:-2]) * units[text[-2:]]
