"""The live servers and the DES agree on a small workload (same engine model, same prefix hashing).

Tolerance (simulated time, jitter off on both sides): the mean TTFT within 10 % + 5 ms and the mean
E2E within 5 % + 5 ms; each request's TTFT and E2E within 15 % + 50 ms (an arrival can land on either
side of a step boundary: up to one A10G step); the cached-token counts exactly equal. The live fleet
runs at time_scale 5, so event-loop overhead and a loaded machine's scheduling stalls count a fifth in
simulated time: at 2 (counted half), the CI's two workers beside other load on two cores took a run
past these bounds now and then.
"""

from __future__ import annotations

import asyncio
import random
import statistics

import aiohttp

from igw.sim.des import simulate
from igw.sim.live import run_fleet
from igw.sim.request import SimRequest
from igw.sim.spec import FleetSpec, PodSpec
from igw.sim.workloads import FixedLength, poisson_arrivals, shared_prefix, synthetic, take
from tests.sim.support import RoundRobin

TIME_SCALE = 5.0
POD = {"preset": "llama-3.1-8b/a10g", "jitter_sigma": 0.0}


def _workload() -> list[SimRequest]:
    rng = random.Random(11)
    model = PodSpec(preset="llama-3.1-8b/a10g").model_name
    unique = take(
        synthetic(
            count=6,
            arrivals=poisson_arrivals(rate=8, rng=rng),
            prompt_lengths=FixedLength(300),
            output_lengths=FixedLength(12),
            model=model,
            rng=rng,
        ),
        6,
    )
    shared = take(
        shared_prefix(
            groups=2,
            prompts_per_group=3,
            system_prompt_len=256,
            question_len=32,
            output_len=8,
            arrivals=poisson_arrivals(rate=8, rng=rng, start=1.0),
            model=model,
            rng=rng,
        ),
        6,
    )
    return [*unique, *shared]


async def _live(spec: FleetSpec, reqs: list[SimRequest]) -> list[tuple[float, float, int]]:
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as session:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def one(i: int, r: SimRequest) -> tuple[float, float, int]:
            await asyncio.sleep(max(0.0, t0 + r.arrival * TIME_SCALE - loop.time()))
            sent = loop.time()
            url = fleet.pods[i % len(fleet.pods)].url + "/v1/completions"
            body = {
                "model": r.model,
                "prompt": r.prompt_text,
                "max_tokens": r.output_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            first = None
            cached = -1
            async with session.post(url, json=body) as resp:
                async for raw in resp.content:
                    if not raw.startswith(b"data: "):
                        continue
                    if first is None:
                        first = loop.time()
                    if b'"usage"' in raw:
                        cached = int(raw.split(b'"cached_tokens":')[1].split(b"}")[0])
            end = loop.time()
            assert first is not None
            return ((first - sent) / TIME_SCALE, (end - sent) / TIME_SCALE, cached)

        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs))))


async def test_live_and_des_agree_on_a_small_workload() -> None:
    reqs = _workload()
    spec = FleetSpec.from_mapping({"time_scale": TIME_SCALE, "pods": [POD, POD]})
    des = simulate(pods=spec.pods, requests=reqs, policy=RoundRobin(), seed=0)
    live = await _live(spec, reqs)
    for rec, (ttft, e2e, cached) in zip(des.records, live, strict=True):
        assert rec.ttft is not None
        assert rec.e2e is not None
        assert abs(ttft - rec.ttft) <= 0.15 * rec.ttft + 0.05, (rec.request_id, ttft, rec.ttft)
        assert abs(e2e - rec.e2e) <= 0.15 * rec.e2e + 0.05, (rec.request_id, e2e, rec.e2e)
        assert cached == rec.cached_tokens
    des_ttft = statistics.fmean(r.ttft or 0.0 for r in des.records)
    des_e2e = statistics.fmean(r.e2e or 0.0 for r in des.records)
    live_ttft = statistics.fmean(t for t, _, _ in live)
    live_e2e = statistics.fmean(e for _, e, _ in live)
    assert abs(live_ttft - des_ttft) <= 0.10 * des_ttft + 0.005, (live_ttft, des_ttft)
    assert abs(live_e2e - des_e2e) <= 0.05 * des_e2e + 0.005, (live_e2e, des_e2e)
    assert sum(r.cached_tokens for r in des.records) > 0
