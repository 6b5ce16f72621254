"""A tiny live run: real fleet, real ``igw serve`` and round-robin proxy processes, real HTTP."""

from __future__ import annotations

from pathlib import Path

from igw.bench.live_runner import LiveOptions, run_live
from igw.bench.scenarios import LengthMix, PodGroup, Scenario, SteadyLoad

TINY = Scenario(
    name="tiny-live",
    summary="1 H100 + 1 A10G, short answers",
    fleet=(PodGroup("llama-3.1-8b/h100", 1), PodGroup("llama-3.1-8b/a10g", 1)),
    workload=LengthMix("sharegpt", max_prompt_tokens=256, max_output_tokens=8),
    load=SteadyLoad(0.5),
    duration_s=1.0,
    ttft_slo_s=1.0,
    seeds=(1,),
)


async def test_round_robin_and_gateway_serve_the_same_requests_live(tmp_path: Path) -> None:
    from igw.bench.capacity import fleet_capacity

    cap = fleet_capacity(TINY, seed=1)
    # About 24 requests offered at 40 req/s wall.
    scale = (24 / (0.5 * cap.requests_per_s)) / TINY.duration_s
    options = LiveOptions(
        routers=["round-robin", "gateway-default"],
        seeds=[1],
        workdir=tmp_path,
        duration_scale=scale,
        target_wall_rps=40.0,
        drain_s=8.0,
    )
    run = await run_live(TINY, options=options, capacity=cap)
    rr, gw = run.policies["round-robin"], run.policies["gateway-default"]
    assert rr.unavailable is None, rr.unavailable
    assert gw.unavailable is None, gw.unavailable
    assert rr.summaries[0].requests == gw.summaries[0].requests >= 18
    assert rr.summaries[0].errors == 0
    assert gw.summaries[0].errors == 0
    assert set(rr.mean_load_share()) == {"a10g-0", "h100-0"}
    assert abs(rr.mean_load_share()["h100-0"] - 0.5) < 0.05  # strict alternation, +-1 request
    assert abs(sum(gw.mean_load_share().values()) - 1.0) < 1e-9
    assert gw.summaries[0].ttft_p50_s is not None
    assert rr.queue_series
    assert "time_scale" in run.parameters
    assert (tmp_path / "gateway-default" / "igwc.yaml").exists()
