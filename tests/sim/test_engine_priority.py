"""The engines' priority scheduling (vLLM ``--scheduling-policy priority``, SGLang
``--enable-priority-scheduling``), table-tested on a tiny batch: who runs, who is preempted, and
that a preempted request still finishes its whole answer."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import pytest

from igw.sim.engine import Engine, EngineRequest, PriorityScheduling
from igw.sim.kv_cache import BlockPool
from igw.sim.live import run_fleet
from igw.sim.presets import get_preset
from igw.sim.spec import FleetSpec, SpecError
from tests.sim.support import make_request

PROMPT = "x" * 400  # 100 tokens


def engine(policy: PriorityScheduling | None, *, batch: int = 2, blocks: int | None = None) -> Engine:
    preset = get_preset("llama-3.1-8b/h100").with_overrides(max_num_seqs=batch)
    e = Engine(preset=preset, rng=random.Random(0), jitter_sigma=0.0, priority=policy)
    if blocks is not None:
        e.pool = BlockPool(num_blocks=blocks)
    return e


def req(rid: str, priority: int, *, out: int = 8) -> EngineRequest:
    r = make_request(rid, text=f"{rid}:{PROMPT}", out=out)
    r.priority = priority
    return r


def step(e: Engine, t: float) -> float:
    batch = e.schedule(t)
    assert batch is not None
    t += batch.duration
    e.complete(batch, t)
    return t


def drain(e: Engine, t: float = 0.0) -> float:
    while e.has_work():
        t = step(e, t)
    return t


SGLANG = PriorityScheduling.sglang()
SGLANG_NO_PREEMPT = PriorityScheduling.sglang(preemption=False)
SGLANG_LOW_FIRST = PriorityScheduling.sglang(low_values_first=True)


@pytest.mark.parametrize(
    ("policy", "running", "arriving", "preempted", "comment"),
    [
        (None, (0, 0), 100, set(), "FCFS: a full batch is never emptied"),
        (
            PriorityScheduling.vllm(),
            (0, 0),
            -100,
            set(),
            "vLLM: priority orders the queue, no slot preemption",
        ),
        (SGLANG, (0, 0), 100, {"r1"}, "SGLang: outranks by 100 > 10: the newest of the least important goes"),
        (SGLANG, (0, 50), 100, {"r0"}, "SGLang: the least important running request goes"),
        (SGLANG, (0, 0), 10, set(), "SGLang: outranks by exactly the threshold: no preemption"),
        (SGLANG, (0, 0), 11, {"r1"}, "SGLang: by more than the threshold"),
        (SGLANG, (0, 0), -100, set(), "SGLang: a less important arrival preempts nothing"),
        (SGLANG_NO_PREEMPT, (0, 0), 100, set(), "SGLang --disable-priority-preemption"),
        (SGLANG_LOW_FIRST, (0, 0), -100, {"r1"}, "SGLang --schedule-low-priority-values-first"),
        (SGLANG_LOW_FIRST, (0, 0), 100, set(), "SGLang low values first: a high value is unimportant"),
    ],
)
def test_who_a_waiting_request_preempts_when_the_batch_is_full(
    policy: PriorityScheduling | None,
    running: tuple[int, int],
    arriving: int,
    preempted: set[str],
    comment: str,
) -> None:
    e = engine(policy)
    first = [req(f"r{i}", p, out=40) for i, p in enumerate(running)]
    for r in first:
        e.add(r)
    t = step(e, 0.0)  # both running (prefill done, first token out)
    assert e.num_running == 2
    hot = req("hot", arriving, out=4)
    e.add(hot)
    t = step(e, t)
    assert {r.request_id for r in first if r.preemptions} == preempted, comment
    assert e.counters.preemptions == len(preempted)
    if preempted:
        assert hot.output_tokens == 1  # admitted in the preempted request's slot: first token out
    else:
        assert hot.first_token_at is None
    drain(e, t)
    for r in (*first, hot):
        assert r.finish_reason == "length", r.request_id
        assert r.output_tokens == r.max_output_tokens, r.request_id


def test_a_preempted_request_keeps_its_streamed_tokens_and_resumes_after_recompute() -> None:
    e = engine(SGLANG)
    low = [req("low-0", 0, out=20), req("low-1", 0, out=20)]
    for r in low:
        e.add(r)
    t = 0.0
    for _ in range(5):
        t = step(e, t)
    produced = low[1].output_tokens
    first_at = low[1].first_token_at
    e.add(req("hot", 100, out=3))
    t = step(e, t)
    assert low[1].preemptions == 1
    assert low[1] in e.waiting
    assert low[1].output_tokens == produced
    assert low[1].num_computed == 0
    drain(e, t)
    assert low[1].output_tokens == 20
    assert low[1].first_token_at == first_at


@pytest.mark.parametrize(
    ("policy", "order"),
    [
        (None, ["a", "b", "c", "d"]),
        (PriorityScheduling.vllm(), ["c", "a", "d", "b"]),  # lower value first, then arrival
        (SGLANG_NO_PREEMPT, ["b", "d", "a", "c"]),  # higher value first, then arrival
    ],
)
def test_the_waiting_queue_order(policy: PriorityScheduling | None, order: list[str]) -> None:
    e = engine(policy, batch=1)
    e.add(req("blocker", 0, out=3))
    t = step(e, 0.0)
    waiting = [
        req(rid, p, out=1)
        for rid, p in (("a", 0), ("b", 5), ("c", -5), ("d", 5 if policy is SGLANG_NO_PREEMPT else 0))
    ]
    for r in waiting:
        e.add(r)
    drain(e, t)
    assert [r.request_id for r in sorted(waiting, key=lambda r: r.first_token_at or 0.0)] == order


def test_vllm_preempts_the_least_important_request_on_a_kv_shortage_not_the_newest() -> None:
    """Three requests whose KV blocks outgrow the cache: FCFS preempts the newest running request,
    the priority policy the least important one (here the oldest)."""
    outcomes: dict[str, set[str]] = {}
    for name, policy in (("fcfs", None), ("priority", PriorityScheduling.vllm())):
        e = engine(policy, batch=3, blocks=24)  # 16-token blocks: 7 for a prompt, 12 with 80 out
        reqs = [req("old-unimportant", 5, out=80), req("mid", 0, out=80), req("new-important", -5, out=80)]
        for r in reqs:
            e.add(r)
            step(e, 0.0)
        drain(e, 1.0)
        assert all(r.output_tokens == 80 for r in reqs)
        outcomes[name] = {r.request_id for r in reqs if r.preemptions}
    assert "new-important" in outcomes["fcfs"]
    assert "new-important" not in outcomes["priority"]
    assert "old-unimportant" in outcomes["priority"]


def test_without_a_policy_the_request_priority_is_ignored() -> None:
    plain = engine(None)
    tagged = engine(None)
    for e, p in ((plain, 0), (tagged, 100)):
        for i in range(3):
            e.add(req(f"r{i}", p if i == 2 else 0, out=5))
        drain(e)
    assert plain.counters.steps == tagged.counters.steps
    assert tagged.counters.preemptions == 0


# ---------------------------------------------------------------------- the pod's flags and HTTP surface
POD = {"name": "p", "preset": "llama-3.1-8b/h100", "served_model_name": "m", "max_num_seqs": 1}


@pytest.mark.parametrize(
    ("extra", "policy"),
    [
        ({}, None),
        ({"scheduling_policy": "priority"}, PriorityScheduling.vllm()),
        ({"engine": "sglang", "enable_priority_scheduling": True}, SGLANG),
        (
            {
                "engine": "sglang",
                "enable_priority_scheduling": True,
                "disable_priority_preemption": True,
                "priority_scheduling_preemption_threshold": 3,
                "schedule_low_priority_values_first": True,
            },
            PriorityScheduling.sglang(preemption=False, threshold=3, low_values_first=True),
        ),
        ({"engine": "sglang", "disable_priority_preemption": True}, None),  # without enable: FCFS
    ],
)
def test_pod_flags_set_the_engines_priority_scheduling(extra: dict[str, object], policy: object) -> None:
    spec = FleetSpec.from_mapping({"pods": [{**POD, **extra}]})
    assert spec.pods[0].priority_scheduling() == policy


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"enable_priority_scheduling": True}, "spec.pods[0].enable_priority_scheduling"),
        ({"engine": "sglang", "scheduling_policy": "priority"}, "spec.pods[0].scheduling_policy"),
        ({"scheduling_policy": "lifo"}, "spec.pods[0].scheduling_policy"),
        (
            {"engine": "sglang", "priority_scheduling_preemption_threshold": -1},
            "spec.pods[0].priority_scheduling_preemption_threshold",
        ),
    ],
)
def test_a_flag_of_the_other_engine_or_a_bad_value_is_refused_by_path(
    extra: dict[str, object], path: str
) -> None:
    with pytest.raises(SpecError) as caught:
        FleetSpec.from_mapping({"pods": [{**POD, **extra}]})
    assert caught.value.path == path


async def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, object]
) -> tuple[int, dict[str, object]]:
    async with http.post(url + "/v1/completions", json=body) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("extra", "priority", "status", "message"),
    [
        ({}, 0, 200, None),
        ({}, 5, 400, "Got priority 5 but Priority scheduling is not enabled."),
        ({"scheduling_policy": "priority"}, -5, 200, None),
        ({"engine": "sglang"}, None, 200, None),
        ({"engine": "sglang"}, 0, 503, "Using priority is disabled for this server."),
        ({"engine": "sglang", "enable_priority_scheduling": True}, 7, 200, None),
        ({}, "high", 400, "'priority' must be an integer"),
    ],
)
async def test_the_servers_answer_to_a_body_priority(
    extra: dict[str, object], priority: object, status: int, message: str | None
) -> None:
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "pods": [{**POD, **extra}]})
    body: dict[str, object] = {"model": "m", "prompt": "hello", "max_tokens": 2}
    if priority is not None:
        body["priority"] = priority
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as http:
        got, answer = await _post(http, fleet.pods[0].url, body)
    assert got == status, answer
    if message is not None:
        assert str(answer["message"]).startswith(message)


async def test_an_sglang_pod_preempts_a_running_request_for_a_more_important_one_over_http() -> None:
    """One batch slot: a long low-priority stream is running when an important request arrives; the
    important one is answered first, the preempted stream still completes in full, and the pod's
    preemption counter moved."""
    pod = {**POD, "engine": "sglang", "enable_priority_scheduling": True}
    spec = FleetSpec.from_mapping({"time_scale": 0.2, "pods": [pod]})
    long = {"model": "m", "prompt": "slow batch job", "max_tokens": 200, "priority": 0, "stream": True}
    hot = {"model": "m", "prompt": "chat", "max_tokens": 2, "priority": 100}
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as http:
        url = fleet.pods[0].url
        done: dict[str, float] = {}

        async def stream() -> int:
            async with http.post(url + "/v1/completions", json=long) as resp:
                events = [raw async for raw in resp.content if raw.startswith(b"data: {")]
            done["long"] = time.monotonic()
            return len(events)

        task = asyncio.create_task(stream())
        await asyncio.sleep(0.1)
        status, _ = await _post(http, url, hot)
        done["hot"] = time.monotonic()
        tokens = await task
        pod_engine = fleet.pod(fleet.pods[0].key).engine
    assert status == 200
    assert tokens == 200
    assert done["hot"] < done["long"]
    assert pod_engine.counters.preemptions == 1
