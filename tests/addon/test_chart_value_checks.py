"""Chart values Kubernetes or cert-manager would refuse only at install (the add-on went CREATE_FAILED)
are refused at render time by Helm's SDK, with a message naming the value's path: the Certificate's
duration and renewBefore (cert-manager's webhook limits), limits below requests (the API server), and
image pull secret names that are not Secret names."""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest

from igw.addon import chart, configuration, pins

TLS = {"mode": "gateway", "certManager": {"enabled": True}}


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)


def _certificate(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == "Certificate"]
    return found


@pytest.mark.parametrize(
    ("duration", "renew_before", "refused"),
    [
        ("2h", "2h", r"certManager\.renewBefore \(2h\) must be shorter than certManager\.duration \(2h\)"),
        ("1h30m", "5400s", r"certManager\.renewBefore \(5400s\) must be shorter than certManager\.duration"),
        ("720h", "2160h", r"certManager\.renewBefore \(2160h\) must be shorter"),
        ("30m", "10m", r"certManager\.duration \(30m\) must be at least 1h"),
        ("0.5h", "10m", r"certManager\.duration \(0\.5h\) must be at least 1h"),
        ("24h", "4m59s", r"certManager\.renewBefore \(4m59s\) must be at least 5m"),
    ],
)
def test_a_certificate_cert_manager_would_refuse_is_refused_at_render_time(
    duration: str, renew_before: str, refused: str
) -> None:
    with pytest.raises(helm.HelmError, match=refused):
        _render({**TLS, "certManager": {"enabled": True, "duration": duration, "renewBefore": renew_before}})


@pytest.mark.parametrize(
    ("duration", "renew_before"), [("2160h", "720h"), ("90m", "89m59.5s"), ("1h", "5m"), ("1.5h", "3600s")]
)
def test_go_durations_cert_manager_takes_render(duration: str, renew_before: str) -> None:
    values = {**TLS, "certManager": {"enabled": True, "duration": duration, "renewBefore": renew_before}}
    spec = _certificate(_render(values))["spec"]
    assert (spec["duration"], spec["renewBefore"]) == (duration, renew_before)


def test_a_duration_that_is_not_go_syntax_is_refused_by_the_schema_naming_its_path() -> None:
    with pytest.raises(helm.HelmError, match=r"/certManager/duration"):
        _render({**TLS, "certManager": {"enabled": True, "duration": "90 days"}})
    (problem,) = configuration.problems({"certManager": {"duration": "90 days"}})
    assert problem.startswith("certManager.duration: ")


@pytest.mark.parametrize(
    ("values", "refused"),
    [
        (
            {"mode": "gateway", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "500m"}}},
            r"resources\.limits\.cpu \(500m\) is below resources\.requests\.cpu \(1\)",
        ),
        (
            {"mode": "gateway", "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}}},
            r"resources\.limits\.memory \(1000Mi\) is below resources\.requests\.memory \(1Gi\)",
        ),
        (
            {"mode": "gateway", "resources": {"requests": {"memory": "1.1G"}, "limits": {"memory": "1Gi"}}},
            r"resources\.limits\.memory \(1Gi\) is below resources\.requests\.memory \(1\.1G\)",
        ),
        (
            {
                "operator": {
                    "resources": {
                        "requests": {"ephemeral-storage": "2Gi"},
                        "limits": {"ephemeral-storage": 1},
                    }
                }
            },
            r"operator\.resources\.limits\.ephemeral-storage \(1\) is below operator\.resources\.requests",
        ),
    ],
)
def test_limits_below_requests_are_refused_at_render_time(values: dict[str, Any], refused: str) -> None:
    with pytest.raises(helm.HelmError, match=refused):
        _render(values)


def test_limits_equal_to_or_above_requests_in_other_units_render() -> None:
    resources = {"requests": {"cpu": "1", "memory": "1G"}, "limits": {"cpu": "1000m", "memory": "1Gi"}}
    (deployment,) = [
        o for o in _render({"mode": "gateway", "resources": resources}) if o["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    for kind in ("requests", "limits"):
        assert resources[kind].items() <= container["resources"][kind].items()


def test_operator_resources_have_the_requests_and_limits_shape() -> None:
    (problem,) = configuration.problems({"operator": {"resources": {"request": {"cpu": "1"}}}})
    assert problem.startswith("operator.resources.request: unknown field"), problem


@pytest.mark.parametrize("name", ["Regcred", "my_registry", "-pull", "a" * 254, "registry secret"])
def test_an_image_pull_secret_that_is_not_a_secret_name_is_refused_naming_its_path(name: str) -> None:
    with pytest.raises(helm.HelmError, match=r"/imagePullSecrets/0/name"):
        _render({"imagePullSecrets": [{"name": name}]})
    (problem,) = configuration.problems({"imagePullSecrets": [{"name": name}]})
    assert problem.startswith("imagePullSecrets[0].name: "), problem


def test_an_image_pull_secret_name_renders_in_both_modes() -> None:
    for mode in ("operator", "gateway"):
        objects = _render({"mode": mode, "imagePullSecrets": [{"name": "ecr.pull-secret-1"}]})
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "ecr.pull-secret-1"}]


GATEWAY = {"mode": "gateway"}


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        (
            [{"name": "POD_NAME", "value": "x"}],
            r"gateway\.extraEnv\[0\]\.name: POD_NAME is already set by the chart",
        ),
        (
            [{"name": "IGW_CPU_REQUEST_MILLICORES", "value": "4000"}],
            r"gateway\.extraEnv\[0\]\.name: IGW_CPU_REQUEST_MILLICORES is already set by the chart",
        ),
        (
            [{"name": "TOKEN_FILE", "value": "a"}, {"name": "TOKEN_FILE", "value": "b"}],
            r"gateway\.extraEnv\[1\]\.name: TOKEN_FILE is already set by gateway\.extraEnv\[0\]",
        ),
    ],
)
def test_an_environment_variable_given_twice_is_refused_at_render_time(
    env: list[dict[str, Any]], refused: str
) -> None:
    """A container's ``env`` is a list keyed by name: the server-side apply an EKS add-on installs with
    refuses a name given twice ("duplicate entries for key"), and a client-side apply ran with the
    last. ``gateway.extraEnv`` repeating the chart's ``POD_NAME`` (or itself) rendered, and every
    object passed the OpenAPI check. Refused at render time now, naming the entry."""
    with pytest.raises(helm.HelmError, match=refused):
        _render({**GATEWAY, "gateway": {"extraEnv": env}})
    (problem,) = configuration.render_problems({**GATEWAY, "gateway": {"extraEnv": env}})
    assert re.search(refused, problem)


@pytest.mark.parametrize(
    ("variable", "path", "problem"),
    [
        (
            {"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            "/gateway/extraEnv/0",
            "gateway.extraEnv[0]: may not set both value and valueFrom",
        ),
        ({"name": "A", "valueFrom": {}}, "/gateway/extraEnv/0/valueFrom", "gateway.extraEnv[0].valueFrom: "),
        (
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "redis-auth"}}},
            "/gateway/extraEnv/0/valueFrom",
            "gateway.extraEnv[0].valueFrom: ",
        ),
        (
            {
                "name": "A",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "x"}},
            },
            "/gateway/extraEnv/0/valueFrom",
            "gateway.extraEnv[0].valueFrom: ",
        ),
    ],
)
def test_an_environment_variable_the_api_server_would_refuse_is_refused_naming_its_path(
    variable: dict[str, Any], path: str, problem: str
) -> None:
    """``valueFrom`` was any object and could sit beside ``value``: the API server refuses both
    ("may not be specified when `value` is not empty"), an empty ``valueFrom`` or one with two
    sources, and the add-on went CREATE_FAILED. The values schema (so EKS's own check) refuses them."""
    values = {"gateway": {"extraEnv": [variable]}}
    with pytest.raises(helm.HelmError, match=path):
        _render({**GATEWAY, **values})
    (found,) = configuration.problems(values)
    assert found.startswith(problem)


def test_every_environment_variable_source_renders_as_given() -> None:
    env = [
        {"name": "PLAIN", "value": "1"},
        {"name": "EMPTY"},
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}}},
        {
            "name": "REGION",
            "valueFrom": {"configMapKeyRef": {"name": "aws", "key": "region", "optional": True}},
        },
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "MEMORY_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
    ]
    (deployment,) = [
        o for o in _render({**GATEWAY, "gateway": {"extraEnv": env}}) if o["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["env"][-len(env) :] == env
    assert configuration.problems({"gateway": {"extraEnv": env}}) == []


@pytest.mark.parametrize("mode", ["gateway", "operator"])
def test_an_image_pull_secret_given_twice_is_refused(mode: str) -> None:
    """``imagePullSecrets`` is a list keyed by name too: a Secret named twice failed server-side apply."""
    values = {"imagePullSecrets": [{"name": "regcred"}, {"name": "regcred"}]}
    with pytest.raises(helm.HelmError, match="/imagePullSecrets"):
        _render({"mode": mode, **values})
    (problem,) = configuration.problems(values)
    assert problem.startswith("imagePullSecrets[1]: duplicates imagePullSecrets[0]")
