"""``flowControl.enginePriority`` over real loopback HTTP: the forwarded body carries the band's
engine priority only where configured (byte-exact elsewhere), a saturated Critical request goes to
the pod whose engine will preempt a lower band for it, and on the simulated SGLang fleet the
Critical request does preempt a running lower-band one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from igw.scheduling.dispatch_ledger import LEDGER_NOTES
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

BANDS = {"Critical": 1, "Standard": 0, "Sheddable": -1}


def doc(engine_priority: list[dict[str, Any]] | None, *schedulers: dict[str, Any]) -> dict[str, Any]:
    d = config_doc(list(schedulers))
    flow: dict[str, Any] = {"pollInterval": "10ms"}
    if engine_priority is not None:
        flow["enginePriority"] = engine_priority
    d["spec"]["extensions"]["flowControl"] = flow
    return d


def headers(band: str) -> dict[str, str]:
    return {"x-gateway-inference-objective": band, "x-gateway-inference-fairness-id": "t1"}


async def test_the_forwarded_body_carries_the_mapped_priority_only_where_configured(gateway: Any) -> None:
    config = doc(
        [{"scheduler": "sg"}, {"scheduler": "vl"}],
        scheduler("sg", "m-sg", engineType="sglang"),
        scheduler("vl", "m-vl"),
        scheduler("plain", "m-plain"),
    )
    async with (
        running(FakeModelServer("sg", engine="sglang"), FakeModelServer("vl"), FakeModelServer("plain")) as (
            sg,
            vl,
            plain,
        ),
        gateway(config, {"sg": [sg.key], "vl": [vl.key], "plain": [plain.key]}) as gw,
    ):
        for band in BANDS:
            for model in ("m-sg", "m-vl", "m-plain"):
                # the client's own priority is replaced where the gateway owns it, kept elsewhere
                raw = orjson.dumps({"model": model, "prompt": "hi", "max_tokens": 2, "priority": 7})
                resp = await gw.post("/v1/completions", raw, headers=headers(band))
                assert resp.status == 200, await resp.text()
        sent = orjson.dumps({"model": "m-plain", "prompt": "hi", "max_tokens": 2, "priority": 7})
        assert [orjson.loads(r.body)["priority"] for r in sg.received] == [11, 0, -11]  # threshold 10 + 1
        assert [orjson.loads(r.body)["priority"] for r in vl.received] == [-1, 0, 1]  # lower value first
        assert [r.body for r in plain.received] == [sent] * 3  # byte for byte as the client sent it


async def test_no_priority_is_written_into_an_anthropic_message(gateway: Any) -> None:
    """vLLM's Anthropic request models drop fields outside Anthropic's API but their own, so a band's
    priority written into a ``/v1/messages`` body would silently not apply: the body is sent as the
    client wrote it, while a chat completion to the same pool carries the band's priority."""
    config = doc([{"scheduler": "vl"}], scheduler("vl", "m-vl"))
    async with running(FakeModelServer("vl")) as (vl,), gateway(config, {"vl": [vl.key]}) as gw:
        message = orjson.dumps(
            {"model": "m-vl", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        )
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            resp = await gw.post(path, message, headers=headers("Critical"))
            assert resp.status == 200, await resp.text()
        chat = {"model": "m-vl", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        resp = await gw.post("/v1/chat/completions", chat, headers=headers("Critical"))
        assert resp.status == 200
        assert [r.body for r in vl.received[:2]] == [message, message]
        assert orjson.loads(vl.received[2].body)["priority"] == -1


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"scheduler": "sg", "scale": 100}, [100, 0, -100]),
        ({"scheduler": "sg", "lowValuesFirst": True}, [-11, 0, 11]),
        ({"scheduler": "sg", "values": [{"priority": 1, "value": 5000}]}, [5000, 0, -11]),
        ({"scheduler": "sg", "engine": "vllm", "scale": 10}, [-10, 0, 10]),
    ],
)
async def test_the_mapping_is_configurable(gateway: Any, entry: dict[str, Any], expected: list[int]) -> None:
    config = doc([entry], scheduler("sg", "m", engineType="sglang"))
    async with (
        running(FakeModelServer("sg", engine="sglang")) as (sg,),
        gateway(config, {"sg": [sg.key]}) as gw,
    ):
        for band in BANDS:
            resp = await gw.post("/v1/completions", {"model": "m", "prompt": "hi"}, headers=headers(band))
            assert resp.status == 200
        assert [orjson.loads(r.body)["priority"] for r in sg.received] == expected


@pytest.mark.parametrize("configured", [True, False])
async def test_a_saturated_critical_request_goes_to_the_pod_running_a_lower_band(
    gateway: Any, configured: bool
) -> None:
    """The pod's scrape says saturated (9 waiting): without engine preemption the Critical request
    waits in the gateway's queue; with it, the gateway sends it where its own Sheddable request is
    in flight, for the engine to preempt."""
    config = doc([{"scheduler": "sg"}] if configured else None, scheduler("sg", "m", engineType="sglang"))
    pod = FakeModelServer("sg", engine="sglang", first_token_delay_s=3.0)
    async with running(pod) as (sg,), gateway(config, {"sg": [sg.key]}) as gw:
        # As a worker of `igw serve --workers N`: the scheduler's notes go to an outbox.
        outbox = gw.state.runtime.schedulers["sg"].scheduler.share_picks()
        alive = asyncio.create_task(_moving_page(sg))  # a page that never changes reads as frozen
        batch = asyncio.create_task(
            gw.post("/v1/completions", {"model": "m", "prompt": "x"}, headers=headers("Sheddable"))
        )
        await wait_for(lambda: len(sg.received) == 1, what="the Sheddable request at the pod")
        sg.waiting = 9
        views = gw.state.runtime.schedulers["sg"].pool.states
        await wait_for(
            lambda: (views[sg.key].metrics or object()).__getattribute__("waiting") == 9, what="scrape"
        )
        sg.first_token_delay_s = 0.0
        critical = asyncio.create_task(
            gw.post("/v1/completions", {"model": "m", "prompt": "y"}, headers=headers("Critical"))
        )
        if configured:
            await wait_for(lambda: len(sg.received) == 2, what="the Critical request sent at once")
            assert orjson.loads(sg.received[1].body)["priority"] == 11
            assert (await asyncio.wait_for(critical, timeout=5)).status == 200
            assert gw.state.flow.depths("sg") == {}
            # The preempting dispatch is in this worker's ledger and noted for the other workers'.
            assert [n[1:3] for n in outbox.drain()] == [(LEDGER_NOTES, sg.key)]
        else:
            await wait_for(lambda: gw.state.flow.depths("sg") == {1: 1}, what="the Critical request queued")
            assert len(sg.received) == 1
            assert outbox.drain() == []  # a one-endpoint pool's picks are not noted (pick_notes)
            critical.cancel()
        for task in (batch, critical, alive):
            task.cancel()
        await asyncio.gather(batch, critical, alive, return_exceptions=True)


async def _moving_page(server: FakeModelServer) -> None:
    """Move the pod's KV gauge a little every 50 ms, as a busy engine's page moves."""
    while True:
        server.kv = 0.1 if server.kv != 0.1 else 0.11
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("configured", [True, False])
async def test_on_the_simulated_sglang_pod_critical_preempts_a_running_sheddable_stream(
    gateway: Any, configured: bool
) -> None:
    """One batch slot, SGLang with --enable-priority-scheduling: a long Sheddable stream is running
    when a Critical request arrives. With enginePriority the Critical answer comes back while the
    stream is still going (the engine preempted it), and the stream still delivers every token;
    without it both carry no priority, and the Critical request waits for the stream to finish."""
    pod = {
        "name": "p",
        "preset": "llama-3.1-8b/h100",
        "served_model_name": "m",
        "engine": "sglang",
        "max_num_seqs": 1,
        "enable_priority_scheduling": True,
    }
    spec = FleetSpec.from_mapping({"time_scale": 1.0, "seed": 3, "pods": [pod]})
    config = doc([{"scheduler": "sg"}] if configured else None, scheduler("sg", "m", engineType="sglang"))
    async with run_fleet(spec, admin=False) as fleet, gateway(config, {"sg": [fleet.pods[0].key]}) as gw:
        long = {"model": "m", "prompt": "a long batch job", "max_tokens": 150, "stream": True}
        done: dict[str, float] = {}

        async def stream() -> int:
            resp = await gw.post("/v1/completions", long, headers=headers("Sheddable"))
            events = [line async for line in resp.content if line.startswith(b"data: {")]
            done["stream"] = time.monotonic()
            return len(events)

        task = asyncio.create_task(stream())
        engine = fleet.pod(fleet.pods[0].key).engine
        await wait_for(
            lambda: engine.num_running == 1 and engine.running[0].output_tokens > 5, what="stream running"
        )
        resp = await gw.post(
            "/v1/completions", {"model": "m", "prompt": "chat", "max_tokens": 2}, headers=headers("Critical")
        )
        done["critical"] = time.monotonic()
        assert resp.status == 200
        tokens = await asyncio.wait_for(task, timeout=20)
    assert tokens == 150
    assert engine.counters.preemptions == (1 if configured else 0)
    assert (done["critical"] < done["stream"]) is configured
