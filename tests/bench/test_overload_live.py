"""``igw bench overload-priority --mode live`` at a small scale: real routers in front of one simulated
pod offered more than its measured rate."""

from __future__ import annotations

from pathlib import Path

from igw.bench.overload_live import live_requests, run_live_overload
from igw.bench.overload_report import live_items, live_markdown, rows_for


def test_requests_carry_band_and_tenant_headers() -> None:
    requests = live_requests(40.0, 10.0, seed=1)
    assert requests == sorted(requests, key=lambda r: r.at_s)
    objectives = {dict(r.headers)["x-gateway-inference-objective"] for r in requests}
    assert objectives == {"Critical", "Standard", "Sheddable"}
    critical = sum(dict(r.headers)["x-gateway-inference-objective"] == "Critical" for r in requests)
    assert 0.1 < critical / len(requests) < 0.3  # 20 % of the mix


async def test_small_live_run_accounts_for_every_request(tmp_path: Path) -> None:
    rate, arms = await run_live_overload(
        tmp_path, duration_s=5.0, seed=2, routers=("flow-control", "round-robin"), unloaded=False
    )
    assert rate > 0
    assert [a.name for a in arms] == ["flow-control", "round-robin"]
    for arm in arms:
        assert len(arm.samples) == len(arm.requests) > 0
    flow = {r.band: r for r in rows_for("flow-control", live_items(arms[0]))}
    assert flow["Critical"].served == flow["Critical"].offered  # never shed: nothing ranks above it
    proxy = rows_for("round-robin", live_items(arms[1]))
    assert all(r.served == r.offered for r in proxy)  # no admission: the pod queues everything
    calm = arms[0].__class__(
        name="flow-control", load=0.5, requests=arms[0].requests, samples=arms[0].samples
    )
    assert "| flow-control | Critical |" in live_markdown(rate, [*arms, calm], "igw bench", 5.0)
