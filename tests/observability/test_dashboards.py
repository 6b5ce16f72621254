"""The dashboards: generated files fresh, valid Grafana models, shipped by the chart for the sidecar."""

from __future__ import annotations

import json
import re

import kubernetes_validate

from igw.addon import chart, pins
from igw.addon.dashboards import DASHBOARDS, DASHBOARDS_DIR, render_dashboard
from igw.config import paths
from igw.gateway.epp_compat import POOL_FAMILIES
from igw.gateway.telemetry import SCRAPED_ENDPOINT_FAMILIES


def test_generated_dashboards_are_fresh() -> None:
    for board in DASHBOARDS:
        path = paths.REPO_ROOT / DASHBOARDS_DIR / f"{board.uid}.json"
        assert path.read_text(encoding="utf-8") == render_dashboard(board), f"{path} stale: igw generate"


def test_every_panel_has_unique_id_and_ref_ids_and_a_datasource() -> None:
    for board in DASHBOARDS:
        model = json.loads(render_dashboard(board))
        assert model["uid"] == board.uid
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids))
        queries = [p for p in model["panels"] if p["type"] != "row"]
        assert len(queries) == sum(len(panels) for _, panels in board.rows)
        for panel in queries:
            refs = [t["refId"] for t in panel["targets"]]
            assert refs == [chr(ord("A") + i) for i in range(len(refs))], panel["title"]
            assert refs, panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        names = {v["name"] for v in model["templating"]["list"]}
        assert "datasource" in names
        assert ("pool" in names) == board.pool_variable


def test_chart_ships_dashboards_for_the_sidecar_only_when_enabled() -> None:
    default = chart.render({"mode": "gateway"}, release="igw", namespace=pins.ADDON_NAMESPACE)
    assert not [o for o in default if "dashboard" in o["metadata"]["name"]]
    values = {
        "mode": "gateway",
        "grafanaDashboards": {"enabled": True, "annotations": {"grafana_folder": "Inference"}},
    }
    objects = chart.render(values, release="igw", namespace=pins.ADDON_NAMESPACE)
    maps = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard")
    ]
    assert len(maps) == len(DASHBOARDS)
    for config_map in maps:
        kubernetes_validate.validate(config_map, "1.34.0", strict=True)
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "Inference"}
        ((filename, text),) = config_map["data"].items()
        uid = filename.removesuffix(".json")
        board = next(b for b in DASHBOARDS if b.uid == uid)
        assert json.loads(text) == json.loads(render_dashboard(board))
    assert chart.addon_rule_violations() == []


def test_requests_in_flight_are_summed_over_gateway_processes() -> None:
    """Every gateway replica and every worker of ``igw serve --workers N`` counts only its own
    requests in flight to a pod, so a panel of a pod's in-flight requests sums them (``max`` showed
    one worker's share)."""
    found = 0
    for board in DASHBOARDS:
        for _, panels in board.rows:
            for panel in panels:
                for query in panel.queries:
                    for aggregation in re.findall(
                        r"(\w+) by \([^)]*\) \(igw_endpoint_inflight_requests", query.expr
                    ):
                        assert aggregation == "sum", (board.uid, panel.title, query.expr)
                        found += 1
    assert found


def test_a_pod_s_or_pool_s_state_is_never_summed_over_gateway_processes() -> None:
    """Every gateway replica reports the same scraped state of a pod and the same pool gauges (ready
    pods, averages), so a panel over several replicas takes their maximum or average: a sum showed
    every ready pod once per replica, and a failing pod's flag as the count of replicas."""
    alike = (*SCRAPED_ENDPOINT_FAMILIES, *POOL_FAMILIES)
    found = 0
    for board in DASHBOARDS:
        for _, panels in board.rows:
            for panel in panels:
                for query in panel.queries:
                    for family in alike:
                        pattern = rf"(\w+)(?: by \([^)]*\) )?\({family}\b"
                        for aggregation in re.findall(pattern, query.expr):
                            assert aggregation in {"max", "min", "avg"}, (board.uid, panel.title, query.expr)
                            found += 1
    assert found >= 10
