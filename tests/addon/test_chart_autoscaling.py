"""CPU autoscaling of the chart's gateway Deployment (``mode: gateway``, ``autoscaling.*``), rendered by
Helm's SDK: an autoscaling/v2 HorizontalPodAutoscaler on the Deployment, which then renders no
``replicas`` (the HPA owns the count; ``helm upgrade`` must not reset it), and every bad value refused
at render time naming its path: by the values schema (which EKS's configurationValues check shares)
and by ``templates/_validations.tpl`` for what no schema can say (maxReplicas below minReplicas, no CPU
request to measure utilization against, a PDB the HPA's floor could never satisfy)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from igw.addon import chart, configuration, pins

K8S_VERSION = "1.34.0"
AUTOSCALED: dict[str, Any] = {"mode": "gateway", "autoscaling": {"enabled": True}}


def _render(values: dict[str, Any], *, directory: Path | None = None) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE, directory=directory)


def _autoscaled(**autoscaling: Any) -> dict[str, Any]:
    return {"mode": "gateway", "autoscaling": {"enabled": True, **autoscaling}}


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _hpas(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]


@pytest.mark.parametrize("mode", ["gateway", "operator"])
def test_disabled_by_default_the_deployment_keeps_its_replica_count(mode: str) -> None:
    objects = _render({"mode": mode, "replicaCount": 3})
    assert _hpas(objects) == []
    if mode == "gateway":
        assert _one(objects, "Deployment")["spec"]["replicas"] == 3


def test_enabled_renders_a_valid_hpa_on_the_deployment_which_renders_no_replicas() -> None:
    objects = _render(AUTOSCALED)
    hpa, deployment = _one(objects, "HorizontalPodAutoscaler"), _one(objects, "Deployment")
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["metadata"] == {
        "name": deployment["metadata"]["name"],
        "namespace": pins.ADDON_NAMESPACE,
        "labels": deployment["metadata"]["labels"],
    }
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": deployment["apiVersion"],
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
        }
    ]
    assert hpa["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 300}}
    assert "replicas" not in deployment["spec"]
    # The utilization the HPA measures is relative to this request.
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "500m"


def test_min_max_and_target_follow_the_values() -> None:
    values = _autoscaled(minReplicas=3, maxReplicas=3, targetCPUUtilizationPercentage=55)
    spec = _one(_render(values), "HorizontalPodAutoscaler")["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (3, 3)
    assert spec["metrics"][0]["resource"]["target"]["averageUtilization"] == 55


def test_a_custom_behavior_is_passed_through_as_is() -> None:
    behavior = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }
    hpa = _one(_render(_autoscaled(behavior=behavior)), "HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    assert hpa["spec"]["behavior"] == behavior
    # Only scaleUp given: no default scaleDown is merged in (Kubernetes' own default, 300 s, applies).
    only_up = {"scaleUp": {"selectPolicy": "Disabled"}}
    assert (
        _one(_render(_autoscaled(behavior=only_up)), "HorizontalPodAutoscaler")["spec"]["behavior"] == only_up
    )


@pytest.mark.parametrize(
    ("autoscaling", "path"),
    [
        ({"minReplicas": 0}, "/autoscaling/minReplicas"),
        ({"targetCPUUtilizationPercentage": 0}, "/autoscaling/targetCPUUtilizationPercentage"),
        ({"targetCPUUtilizationPercentage": 101}, "/autoscaling/targetCPUUtilizationPercentage"),
        ({"minReplicas": "2"}, "/autoscaling/minReplicas"),
        ({"enable": True}, "enable"),
        (
            {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 3601}}},
            "/autoscaling/behavior/scaleDown",
        ),
        (
            {"behavior": {"scaleUp": {"policies": [{"type": "Nodes", "value": 1, "periodSeconds": 15}]}}},
            "/type",
        ),
        ({"behavior": {"scaleUp": {"tolerance": "0.05"}}}, "tolerance"),
    ],
    ids=[
        "min-0",
        "target-0",
        "target-101",
        "min-string",
        "unknown-key",
        "window-over-1h",
        "policy-type",
        "alpha",
    ],
)
def test_out_of_range_values_are_refused_by_the_schema_naming_the_path(
    autoscaling: dict[str, Any], path: str
) -> None:
    with pytest.raises(helm.HelmError, match="schema") as refused:
        _render(_autoscaled(**autoscaling))
    assert path in str(refused.value)
    # EKS's configurationValues check (the same schema, draft-06) names the value too.
    (problem,) = configuration.problems({"autoscaling": autoscaling})
    assert problem.startswith(f"autoscaling.{next(iter(autoscaling))}"), problem


def test_max_below_min_is_refused_naming_both_fields_and_values() -> None:
    message = "autoscaling.maxReplicas (2) must be at least autoscaling.minReplicas (3)"
    with pytest.raises(helm.HelmError) as refused:
        _render(_autoscaled(minReplicas=3, maxReplicas=2))
    assert message in str(refused.value)
    # The schema takes both (each alone is in range); `igw addon create/update` reports the rule.
    assert configuration.problems({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}) == []
    assert configuration.render_problems(_autoscaled(minReplicas=3, maxReplicas=2)) == [message]


@pytest.mark.parametrize("requests", [{"cpu": None}, {"cpu": "0"}, {"cpu": "0m"}])
def test_autoscaling_without_a_cpu_request_is_refused(requests: dict[str, Any]) -> None:
    values = {**AUTOSCALED, "resources": {"requests": requests}}
    with pytest.raises(helm.HelmError) as refused:
        _render(values)
    assert "resources.requests.cpu is required when autoscaling.enabled is true" in str(refused.value)
    # Without autoscaling the same resources render.
    assert _render({**values, "autoscaling": {"enabled": False}})


def test_the_pdb_must_stay_below_the_hpa_floor_not_the_ignored_replica_count() -> None:
    with pytest.raises(helm.HelmError) as refused:
        _render({**_autoscaled(minReplicas=2), "podDisruptionBudget": {"minAvailable": 2}, "replicaCount": 5})
    assert "podDisruptionBudget.minAvailable (2) must be below autoscaling.minReplicas (2)" in str(
        refused.value
    )
    # A single-replica floor needs the PDB off (it would block every drain at one pod).
    with pytest.raises(helm.HelmError, match=r"must be below autoscaling\.minReplicas \(1\)"):
        _render(_autoscaled(minReplicas=1))
    objects = _render({**_autoscaled(minReplicas=1), "podDisruptionBudget": {"enabled": False}})
    assert _one(objects, "HorizontalPodAutoscaler")["spec"]["minReplicas"] == 1
    # The PDB still applies under the HPA.
    objects = _render({**_autoscaled(minReplicas=4), "podDisruptionBudget": {"minAvailable": 3}})
    assert _one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 3


@pytest.fixture(scope="module")
def chart_without_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart without values.schema.json: what ``helm install --skip-schema-validation`` sees."""
    directory = tmp_path_factory.mktemp("chart") / pins.CHART_NAME
    shutil.copytree(chart.chart_dir(), directory)
    (directory / "values.schema.json").unlink()
    return directory


@pytest.mark.parametrize(
    ("autoscaling", "message"),
    [
        ({"minReplicas": 0, "maxReplicas": 3}, "autoscaling.minReplicas (0) must be at least 1"),
        (
            {"targetCPUUtilizationPercentage": 0},
            "autoscaling.targetCPUUtilizationPercentage (0) must be between 1 and 100",
        ),
        (
            {"targetCPUUtilizationPercentage": 101},
            "autoscaling.targetCPUUtilizationPercentage (101) must be between 1 and 100",
        ),
    ],
    ids=["min-0", "target-0", "target-101"],
)
def test_the_templates_refuse_the_ranges_too_when_the_schema_is_skipped(
    chart_without_schema: Path, autoscaling: dict[str, Any], message: str
) -> None:
    values = {**_autoscaled(**autoscaling), "podDisruptionBudget": {"enabled": False}}
    with pytest.raises(helm.HelmError) as refused:
        _render(values, directory=chart_without_schema)
    assert message in str(refused.value)


def test_autoscaling_is_refused_in_operator_mode_where_it_would_change_nothing() -> None:
    assert _render({"autoscaling": {"enabled": True}}) == _render({})
    (problem,) = configuration.operator_mode_problems({"autoscaling": {"enabled": True}})
    assert problem.startswith("autoscaling: has no effect with the chart's mode operator")
    assert "spec.extensions.dataPlane.autoscaling" in problem  # where an operator's gateway sets it
    assert configuration.operator_mode_problems(AUTOSCALED) == []


@pytest.mark.parametrize("kube_version", [f"{v}.0" for v in pins.SUPPORTED_KUBERNETES_VERSIONS])
def test_helm_lint_strict_passes_with_autoscaling(kube_version: str) -> None:
    result = chart.lint(AUTOSCALED, kube_version=kube_version)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []


def test_the_hpa_template_obeys_the_eks_addon_rules(tmp_path: Path) -> None:
    assert chart.addon_rule_violations() == []
    # The scan covers the HPA's template: a forbidden construct there is reported against it.
    directory = tmp_path / pins.CHART_NAME
    shutil.copytree(chart.chart_dir(), directory)
    template = directory / "templates" / "gateway-hpa.yaml"
    assert template.is_file()
    template.write_text(
        template.read_text() + "# {{ .Capabilities.KubeVersion }}\nx: {{ .Capabilities.KubeVersion }}\n"
    )
    assert [(v.file, v.rule) for v in chart.addon_rule_violations(directory)] == [
        ("templates/gateway-hpa.yaml", ".Capabilities")
    ]
