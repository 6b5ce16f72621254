"""The discrete-event model of tier 2: the router's own policy and health code in virtual time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from igw.bench import global_des
from igw.bench.global_des import DesOptions, run_global_des, run_global_des_command

SMALL = DesOptions(
    regions=3,
    clusters_per_region=3,
    rate_per_region=15.0,
    kill_at_s=10.0,
    return_at_s=20.0,
    region_down_at_s=40.0,
    end_s=50.0,
    slow_start_s=10.0,
)


def test_failover_in_virtual_time_loses_no_request_and_redirects_within_the_staleness() -> None:
    result = run_global_des(SMALL)
    assert result["failed"] == 0
    assert result["retried_after_crash"] > 0  # in-flight requests of the killed cluster went elsewhere
    # the killed cluster's own region notices by failed connects at once; the others by staleness (3 s)
    assert result["redirect_cluster_s"] is not None
    assert 3.0 <= result["redirect_cluster_s"] <= 3.0 + SMALL.poll_s + 1.0
    assert result["redirect_region_s"] is not None
    assert result["region0_p50_region_down_s"] > result["region0_p50_before_s"]


def test_same_seed_same_result_and_cost_first_is_cheaper() -> None:
    assert run_global_des(SMALL) == run_global_des(SMALL)
    cheap = run_global_des(replace(SMALL, policy="cost-first-within-slo", slo_s=5.0))
    assert cheap["cost_per_1k_requests_usd"] < run_global_des(SMALL)["cost_per_1k_requests_usd"]


def test_command_writes_the_report(tmp_path: Path) -> None:
    said: list[str] = []
    command = "igw bench global-des --quick"
    run = run_global_des_command(out=tmp_path, quick=True, seed=1, command=command, progress=said.append)
    assert run == 0
    # a minute without a line before the report (session s43): each run is told as it starts
    assert said == [
        "latency-first: 5 regions x 10 clusters, failover script",
        "cost-first-within-slo: 5 regions x 10 clusters, failover script",
        "latency-first: model pools, routed on the cluster's figures",
        "latency-first: model pools, routed on each pool's figures",
        "cost-first-within-slo: model pools, routed on the cluster's figures",
        "cost-first-within-slo: model pools, routed on each pool's figures",
    ]
    report = (tmp_path / "global-des-report.md").read_text()
    assert "| latency-first |" in report
    assert "| cost-first-within-slo |" in report
    assert (tmp_path / "global-des-results.json").is_file()


POOLS = replace(global_des.POOLS, end_s=30.0)
"""Two models on every cluster, its 4 pods split 3/1 or 1/3 in turn: each cluster as busy as the
next, but one of its two pools far busier than the other."""


def test_routing_on_each_models_pool_figures_refuses_fewer_requests() -> None:
    """Heartbeats carrying each model's pool figures (as tier 1's do) let the routers keep a model's
    requests off the clusters whose pool of it is full. Before session s39 the routers read only the
    cluster-wide figures, the same as heartbeats without pools: here 1925 answers 429 and 60 failed
    requests (every attempt refused), against 772 and none."""
    cluster_only = run_global_des(replace(POOLS, pool_figures=False))
    pools = run_global_des(POOLS)
    assert pools["refused_429"] < cluster_only["refused_429"] / 2
    assert pools["failed"] < cluster_only["failed"]
    assert pools["p99_latency_s"] < cluster_only["p99_latency_s"]


def test_cost_first_spreads_over_the_slo_instead_of_piling_onto_the_last_clusters_under_it() -> None:
    """12 clusters at 59 % load, cost-first with the model's 1 s SLO. As the cheap clusters' TTFT
    passes the SLO they are weighted without cost preference, not put after every cluster under it.
    Until session s40 they went last: each such cluster moved its traffic onto fewer clusters still
    under the SLO, until every router piled onto the last one or two. In this run 1530 of 12525
    requests were answered 429 on the way (12 %); now 215 (2 %). Over 60 s: 8151 against 2238,
    latency-first 12."""
    loaded = replace(
        global_des.POOLS, pod_splits=(), rate_per_region=150.0, end_s=30.0, policy="cost-first-within-slo"
    )
    result = run_global_des(loaded)
    assert result["failed"] == 0
    assert result["refused_429"] < 0.05 * result["requests"]
