"""The chart's PodMonitor for the model server pods: rendered from values, refused without a selector."""

from __future__ import annotations

from collections.abc import Mapping

import helm_python as helm
import pytest

from igw.addon import chart, pins


def _render(values: Mapping[str, object]) -> list[dict[str, object]]:
    return chart.render({"mode": "gateway", **values}, release="igw", namespace=pins.ADDON_NAMESPACE)


def test_pod_monitor_scrapes_the_selected_model_pods() -> None:
    assert "PodMonitor" not in [o["kind"] for o in _render({})]
    values = {
        "podMonitor": {
            "enabled": True,
            "selector": {"app": "vllm"},
            "namespaces": ["models-a", "models-b"],
            "port": "metrics",
            "labels": {"release": "kps"},
        }
    }
    (monitor,) = [o for o in _render(values) if o["kind"] == "PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert isinstance(spec, dict)
    assert spec["selector"] == {"matchLabels": {"app": "vllm"}}
    assert spec["namespaceSelector"] == {"matchNames": ["models-a", "models-b"]}
    assert spec["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]


def test_pod_monitor_defaults_to_the_release_namespace() -> None:
    values = {"podMonitor": {"enabled": True, "selector": {"app": "vllm"}}}
    (monitor,) = [o for o in _render(values) if o["kind"] == "PodMonitor"]
    spec = monitor["spec"]
    assert isinstance(spec, dict)
    assert spec["namespaceSelector"] == {"matchNames": [pins.ADDON_NAMESPACE]}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"podMonitor": {"enabled": True}}, "podMonitor.selector is required"),
        ({"podMonitor": {"enabled": True, "selector": {"a": "b"}, "path": "metrics"}}, "/podMonitor/path"),
        ({"grafanaDashboards": {"label": "bad label"}}, "/grafanaDashboards/label"),
        ({"prometheusRule": {"enabled": "yes"}}, "/prometheusRule/enabled"),
    ],
    ids=["no-selector", "relative-path", "bad-sidecar-label", "non-boolean"],
)
def test_bad_monitoring_values_fail_with_the_field(values: dict[str, object], message: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        _render(values)
    assert message in str(caught.value)
