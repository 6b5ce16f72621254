"""A streamed response's first token reaches the scheduler while the response is still streaming, so
``backlog-ttft-scorer`` learns a pod's speed in one TTFT instead of one whole response."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from igw.scheduling.plugins.backlog_ttft_scorer import TYPE, BacklogTtftScorer
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.support import config_doc, scheduler, wait_for


async def test_the_backlog_scorer_learns_the_ttft_before_the_stream_ends(gateway: Any) -> None:
    spec = FleetSpec.from_mapping(
        {
            "time_scale": 1.0,
            "seed": 7,
            "pods": [{"name": "a", "preset": "llama-3.1-8b/h100", "served_model_name": "llama"}],
        }
    )
    async with run_fleet(spec, admin=False) as f:
        live = f.pod("a")
        key = f.pods[0].key
        async with gateway(config_doc([scheduler("llama", "llama")]), {"llama": [key]}) as gw:
            sched = gw.state.runtime.schedulers["llama"].scheduler
            scorer = next(ws.scorer for ws in sched.profile.scorers if ws.scorer.type_name == TYPE)
            assert isinstance(scorer, BacklogTtftScorer)
            body = {"model": "llama", "prompt": "write a long story", "max_tokens": 4000, "stream": True}
            resp = await gw.post("/v1/completions", body)
            try:
                assert resp.status == 200
                await resp.content.readany()  # the first token is out; 4,000 more take far longer
                await wait_for(lambda: key in scorer.fits, within=5.0, what="first-token feedback")
                assert scorer.fits[key].count == 1
                assert live.engine.num_running == 1  # learnt while the response is still streaming
            finally:
                resp.close()


async def test_a_non_streamed_dispatch_stays_out_of_the_pending_floor(gateway: Any) -> None:
    """Its first token is never reported, only its completion: the gateway tells the scheduler the
    request is not streamed, so its prompt does not floor the pod's backlog until the answer ends."""
    spec = FleetSpec.from_mapping(
        {
            "time_scale": 1.0,
            "seed": 7,
            "pods": [{"name": "a", "preset": "llama-3.1-8b/h100", "served_model_name": "llama"}],
        }
    )
    async with run_fleet(spec, admin=False) as f:
        key = f.pods[0].key
        async with gateway(config_doc([scheduler("llama", "llama")]), {"llama": [key]}) as gw:
            sched = gw.state.runtime.schedulers["llama"].scheduler
            scorer = next(ws.scorer for ws in sched.profile.scorers if ws.scorer.type_name == TYPE)
            assert isinstance(scorer, BacklogTtftScorer)
            body = {"model": "llama", "prompt": "write a long story " * 50, "max_tokens": 4000}
            answer = asyncio.ensure_future(gw.post("/v1/completions", body))
            try:
                # The pick's bookkeeping waits for the answer or the scheduler's next call
                # (Scheduler.pick's settle_later): settled here, as that call would.
                await wait_for(
                    lambda: sched.settle() or scorer.pending.get(key) == 1, within=5.0, what="the dispatch"
                )
                assert scorer.pending_tokens[key] == 0.0
            finally:
                answer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    resp = await answer
                    resp.close()
