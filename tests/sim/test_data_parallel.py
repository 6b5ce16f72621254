"""SGLang pods with data parallelism (``dp_size`` > 1): one scheduler per rank over real HTTP.

A real SGLang server started with ``--dp-size N`` runs N schedulers behind its DP controller (round
robin by default), each with its own waiting queue, running batch and KV pool, and labels every
scheduler series ``dp_rank="0"`` ... ``"N-1"``; the gateway sums the ranks' queues. These tests drive
such a pod over loopback and read its page as Prometheus and as the gateway does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw import engines
from igw.gateway.metrics_parser import parse_page
from igw.sim.des import SimulationError, simulate
from igw.sim.live import run_fleet
from igw.sim.spec import EngineKind, FleetSpec, PodSpec, SpecError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def dp_pod(**extra: Any) -> dict[str, Any]:
    """An SGLang 0.5.12 pod of two data-parallel ranks, each running one request at a time."""
    return {
        "name": "dp",
        "preset": "llama-3.1-8b/a10g",
        "engine": "sglang",
        "engine_version": "0.5.12",
        "dp_size": 2,
        "max_num_seqs": 1,
        **extra,
    }


def by_rank(text: str, family: str) -> dict[str | None, float]:
    """``family``'s samples on ``text`` keyed by their ``dp_rank`` label (``None`` when absent)."""
    for fam in text_string_to_metric_families(text):
        if fam.name == family:
            return {s.labels.get("dp_rank"): s.value for s in fam.samples}
    raise AssertionError(f"{family} not on the page")


async def _page(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as r:
        assert r.status == 200
        return await r.text()


async def _send_long(session: aiohttp.ClientSession, url: str) -> None:
    body = {"model": MODEL, "prompt": "hello " * 50, "max_tokens": 2000}
    async with session.post(url + "/v1/completions", json=body) as r:
        await r.read()


async def _wait_page(
    session: aiohttp.ClientSession, url: str, want: Mapping[str, Mapping[str | None, float]]
) -> str:
    """Poll the page until every family in ``want`` shows those per-rank values (fail after 5 s)."""
    for _ in range(500):
        text = await _page(session, url)
        if all(by_rank(text, f) == v for f, v in want.items()):
            return text
        await asyncio.sleep(0.01)
    pytest.fail(f"page never showed {want}; last: " + str({f: by_rank(text, f) for f in want}))


async def test_each_rank_schedules_its_own_share_and_the_page_labels_dp_rank() -> None:
    spec = FleetSpec.from_mapping({"time_scale": 1.0, "seed": 3, "pods": [dp_pod()]})
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url
        sends = [asyncio.create_task(_send_long(s, url)) for _ in range(4)]
        try:
            # round robin: two requests per rank; one slot per rank runs one, queues the other
            text = await _wait_page(
                s,
                url,
                {
                    "sglang:num_running_reqs": {"0": 1.0, "1": 1.0},
                    "sglang:num_queue_reqs": {"0": 1.0, "1": 1.0},
                },
            )
            usage = by_rank(text, "sglang:token_usage")
            assert set(usage) == {"0", "1"}  # two KV pools, both holding their requests' blocks
            assert all(u > 0 for u in usage.values())
            pages = by_rank(text, "sglang:num_pages")
            assert set(pages) == {"0", "1"}
            assert len(set(pages.values())) == 1  # every rank is the same preset
            # the gateway's reading of the same page: the ranks' queues and batches summed
            parsed = parse_page(text, engines.SGLANG.families)
            assert (parsed.metrics.waiting, parsed.metrics.running) == (2, 2)
            assert parsed.missing == frozenset()
        finally:
            for task in sends:
                task.cancel()
            await asyncio.gather(*sends, return_exceptions=True)


async def test_a_pod_without_data_parallelism_has_no_dp_rank_label() -> None:
    spec = FleetSpec.from_mapping({"time_scale": 1.0, "seed": 3, "pods": [dp_pod(dp_size=1)]})
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url
        send = asyncio.create_task(_send_long(s, url))
        try:
            await _wait_page(s, url, {"sglang:num_running_reqs": {None: 1.0}})
        finally:
            send.cancel()
            await asyncio.gather(send, return_exceptions=True)


async def test_a_finished_request_frees_only_its_own_rank() -> None:
    """Requests finish on the rank that ran them: the tokenizer counters add up across ranks and
    each rank's queue-time histogram counts the requests it scheduled."""
    spec = FleetSpec.from_mapping({"time_scale": 0.01, "seed": 3, "pods": [dp_pod(max_num_seqs=4)]})
    async with run_fleet(spec, admin=False) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 5}
        for _ in range(3):
            async with s.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200
        text = await _page(s, url)
        assert by_rank(text, "sglang:generation_tokens") == {None: 15.0}
        queued = {
            s.labels["dp_rank"]: s.value
            for fam in text_string_to_metric_families(text)
            if fam.name == "sglang:queue_time_seconds"
            for s in fam.samples
            if s.name.endswith("_count")
        }
        assert queued == {"0": 2.0, "1": 1.0}


@pytest.mark.parametrize(
    ("extra", "path", "message"),
    [
        ({"engine": "vllm", "engine_version": "0.12.0"}, "spec.pods[0].dp_size", "not a flag of engine vllm"),
        ({"dp_size": 0}, "spec.pods[0].dp_size", "must be >= 1"),
        ({"dp_size": "2"}, "spec.pods[0].dp_size", "expected an integer"),
    ],
)
def test_bad_dp_size_names_the_field(extra: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        FleetSpec.from_mapping({"pods": [dp_pod(**extra)]})
    assert info.value.path == path
    assert message in str(info.value)


def test_the_des_refuses_a_data_parallel_pod_rather_than_run_one_rank() -> None:
    pod = PodSpec(preset="llama-3.1-8b/a10g", engine=EngineKind.SGLANG, engine_version="0.5.12", dp_size=2)
    with pytest.raises(SimulationError, match=r"pods\[0\]\.dp_size"):
        simulate(pods=[pod], requests=[], policy=object(), seed=1)  # type: ignore[arg-type]
