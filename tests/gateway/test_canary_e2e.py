"""Canary splitting over real loopback HTTP: the split, stickiness, /v1/models and a live weight
change by hot reload with no failed request."""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from typing import Any

import orjson
import pytest
import yaml

from igw.gateway.decision_log import DecisionLog
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.response_ids import minted_for
from tests.gateway.fake_model_server import FakeModelServer, closed_port, running
from tests.gateway.support import config_doc, prefix_blocks, scheduler, unreflected_dispatches, wait_for


def doc(v1: int, v2: int, **rule: Any) -> dict[str, Any]:
    d = config_doc([scheduler("old", "llama-v1"), scheduler("new", "llama-v2")])
    targets = [{"model": "llama-v1", "weight": v1}, {"model": "llama-v2", "weight": v2}]
    d["spec"]["extensions"]["modelRewrites"] = {"rules": [{"model": "llama", "targets": targets, **rule}]}
    return d


async def served(gw: Any, n: int, headers: dict[str, str] | None = None) -> Counter[str]:
    async def one() -> str:
        resp = await gw.post(
            "/v1/completions", {"model": "llama", "prompt": "hi", "max_tokens": 2}, headers=headers
        )
        assert resp.status == 200, await resp.text()
        return str((await resp.json())["server"])

    got: Counter[str] = Counter()
    for _ in range(n // 20):
        got.update(await asyncio.gather(*(one() for _ in range(20))))
    return got


async def test_split_follows_the_weights_and_the_target_sees_its_own_model(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(70, 30), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        n = 400
        got = await served(gw, n)
        assert abs(got["v2"] - 0.3 * n) <= 4 * math.sqrt(n * 0.3 * 0.7)
        assert got["v1"] + got["v2"] == n
        assert {orjson.loads(r.body)["model"] for r in v2.received} == {"llama-v2"}
        entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        assert {(e["requested_model"], e["model"]) for e in entries} == {
            ("llama", "llama-v1"),
            ("llama", "llama-v2"),
        }
        models = await (await gw.http.get(gw.url + "/v1/models")).json()
        assert {"llama", "llama-v1", "llama-v2"} <= {m["id"] for m in models["data"]}


async def test_sticky_tenant_and_live_weight_change_without_failures(gateway: Any) -> None:
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50, stickyBy="tenant"), {"old": [v1.key], "new": [v2.key]}, reload=True) as gw,
    ):
        for tenant in ("alice", "bob", "carol"):
            assert len(await served(gw, 20, {"x-gateway-inference-fairness-id": tenant})) == 1
        load = asyncio.create_task(served(gw, 200))  # runs across the reload; every request must succeed
        gw.config_path.write_text(yaml.safe_dump(doc(0, 100, stickyBy="tenant")))
        await wait_for(
            lambda: gw.state.runtime.rewrites.rules["llama"][0].cumulative[0] == 0.0, within=15, what="reload"
        )
        before = await load
        assert sum(before.values()) == 200
        after = await served(gw, 40, {"x-gateway-inference-fairness-id": "alice"})
        assert after == Counter({"v2": 40})


async def test_header_rule_sends_matching_requests_to_its_own_target(gateway: Any) -> None:
    d = doc(100, 0)
    d["spec"]["extensions"]["modelRewrites"]["rules"].insert(
        0,
        {
            "model": "llama",
            "headers": [{"name": "X-Canary", "value": "always"}],
            "targets": [{"model": "llama-v2", "weight": 1}],
        },
    )
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(d, {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        assert await served(gw, 40, headers={"x-canary": "always"}) == Counter({"v2": 40})
        assert await served(gw, 40, headers={"x-canary": "sometimes"}) == Counter({"v1": 40})
        assert await served(gw, 40) == Counter({"v1": 40})


def _rewrite_series(gw: Any) -> dict[tuple[str, str, str], float]:
    """``igw_model_rewrite_requests_total`` samples by (rule, target, code), from ``/metrics``' registry."""
    out: dict[tuple[str, str, str], float] = {}
    for family in gw.state.metrics.registry.collect():
        for s in family.samples:
            if s.name == "igw_model_rewrite_requests_total":
                out[s.labels["rule"], s.labels["target"], s.labels["code"]] = s.value
    return out


async def test_per_target_series_count_the_split_and_its_latency_by_rule(gateway: Any) -> None:
    d = doc(70, 30, name="llama-canary")
    rules = d["spec"]["extensions"]["modelRewrites"]["rules"]
    rules.append({"targets": [{"model": "llama-v1", "weight": 1}]})  # a fallback: any model name
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(d, {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        got = await served(gw, 200)
        for i in range(20):  # client-chosen model names, all caught by the fallback rule
            resp = await gw.post(
                "/v1/completions", {"model": f"made-up-{i}", "prompt": "hi", "max_tokens": 2}
            )
            assert resp.status == 200, await resp.text()
        series = _rewrite_series(gw)
        assert series == {
            ("llama-canary", "llama-v1", "200"): got["v1"],
            ("llama-canary", "llama-v2", "200"): got["v2"],
            ("rules[1]", "llama-v1", "200"): 20.0,  # one series, however many names the clients sent
        }
        registry = gw.state.metrics.registry
        for target, n in (("llama-v1", got["v1"]), ("llama-v2", got["v2"])):
            labels = {"rule": "llama-canary", "target": target}
            assert registry.get_sample_value("igw_model_rewrite_request_duration_seconds_count", labels) == n
            assert registry.get_sample_value("igw_model_rewrite_request_duration_seconds_sum", labels) > 0
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_model_rewrite_requests_total{code="200",rule="llama-canary",target="llama-v2"}' in text


async def test_an_objective_listing_the_name_clients_send_sets_the_band_of_its_canary_requests(
    gateway: Any,
) -> None:
    """``flowControl.objectives[].models`` naming the rule's model (what clients send) gives the
    rewritten requests that band; an objective listing the target itself wins for that target.
    Matched against the target alone, the first objective had no effect: Standard (0)."""
    d = doc(100, 0)
    d["spec"]["extensions"]["modelRewrites"]["rules"].insert(
        0,
        {
            "model": "llama",
            "headers": [{"name": "X-Canary", "value": "always"}],
            "targets": [{"model": "llama-v2", "weight": 1}],
        },
    )
    d["spec"]["extensions"]["flowControl"] = {
        "pollInterval": "10ms",
        "objectives": [
            {"name": "chat", "priority": 5, "models": ["llama"]},
            {"name": "trial", "priority": -2, "models": ["llama-v2"]},
        ],
    }
    async with (
        running(FakeModelServer("v1", waiting=9), FakeModelServer("v2", waiting=9)) as (v1, v2),
        gateway(d, {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        body = {"model": "llama", "prompt": "hi", "max_tokens": 2}
        canary = {"x-canary": "always"}
        tasks = [asyncio.create_task(gw.post("/v1/completions", body)) for _ in range(3)]
        tasks += [asyncio.create_task(gw.post("/v1/completions", body, headers=canary)) for _ in range(3)]

        def depths() -> dict[str, dict[int, int]]:
            return {name: gw.state.flow.depths(name) for name in ("old", "new")}

        await wait_for(lambda: sum(sum(d.values()) for d in depths().values()) == 6, what="all queued")
        assert depths() == {"old": {5: 3}, "new": {-2: 3}}
        v1.waiting = v2.waiting = 0
        for resp in await asyncio.gather(*tasks):
            assert resp.status == 200


async def test_a_continuation_follows_its_stored_response_to_the_version_that_made_it(gateway: Any) -> None:
    """A 50/50 split without stickiness: each conversation's second turn (``previous_response_id``)
    goes to the version whose pod stored its first, whatever the draw. Drawn like any request, the
    turn went to the other version's pool as often as that version's share, where no pod has the
    response: 57 of 100 continuations answered 404 in the probe over the simulated fleet."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        first: Counter[str] = Counter()
        for i in range(40):
            resp = await gw.post("/v1/responses", {"model": "llama", "input": f"hello {i}"})
            assert resp.status == 200, await resp.text()
            made = await resp.json()
            first[made["server"]] += 1
            body = {"model": "llama", "input": "and then?", "previous_response_id": made["id"]}
            resp = await gw.post("/v1/responses", body)
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["server"] == made["server"]
        assert first["v1"] > 0  # both versions made (and continued) conversations
        assert first["v2"] > 0


async def test_a_version_without_a_usable_endpoint_gives_its_share_to_the_other(gateway: Any) -> None:
    """Canary scaled to zero, then its only pod unreachable: its draws go to the stable version and
    are counted as fallbacks. Before session s48 the canary's whole share was answered 503
    ``no_endpoints`` (no pod) or 502 (a dead pod), 103 and 104 of 200 at 50/50 in the probe."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, _v2),
        gateway(doc(50, 50, name="canary"), {"old": [v1.key], "new": []}) as gw,
    ):
        assert await served(gw, 100) == Counter({"v1": 100})
        registry = gw.state.metrics.registry
        labels = {"rule": "canary", "from": "llama-v2", "to": "llama-v1"}
        moved = registry.get_sample_value("igw_model_rewrite_fallbacks_total", labels)
        assert moved is not None
        assert abs(moved - 50) <= 4 * math.sqrt(100 * 0.25)
        dead = f"127.0.0.1:{closed_port()}"  # a pod no model server answers on: never fresh
        gw.endpoints_path.write_text(yaml.safe_dump({"schedulers": {"old": [v1.key], "new": [dead]}}))
        await wait_for(lambda: len(gw.state.runtime.schedulers["new"].pool.states) == 1, what="discovery")
        assert await served(gw, 100) == Counter({"v1": 100})


async def test_after_a_rollback_to_weight_0_conversations_on_that_version_continue_there(
    gateway: Any,
) -> None:
    """Conversations started at 50/50, then the rule reloaded to 100/0: each next turn of one the
    rolled-back version (weight 0) stored goes on there, since its pod still holds the response,
    while every new conversation goes to the version kept. Before session s48's fix the split
    followed only targets of positive weight: every such turn went to the kept version's pool,
    where no pod has the response, and answered 404 ``response_not_found``."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50), {"old": [v1.key], "new": [v2.key]}, reload=True) as gw,
    ):
        made: list[dict[str, Any]] = []
        for i in range(30):
            resp = await gw.post("/v1/responses", {"model": "llama", "input": f"hello {i}"})
            assert resp.status == 200, await resp.text()
            made.append(await resp.json())
        on = Counter(m["server"] for m in made)
        assert on["v1"] > 0
        assert on["v2"] > 0
        gw.config_path.write_text(yaml.safe_dump(doc(100, 0)))
        await wait_for(
            lambda: gw.state.runtime.rewrites.rules["llama"][0].cumulative[0] == 1.0, within=15, what="reload"
        )
        for m in made:
            body = {"model": "llama", "input": "and then?", "previous_response_id": m["id"]}
            resp = await gw.post("/v1/responses", body)
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["server"] == m["server"]
        fresh: Counter[str] = Counter()
        for i in range(30):
            resp = await gw.post("/v1/responses", {"model": "llama", "input": f"new {i}"})
            assert resp.status == 200, await resp.text()
            fresh[(await resp.json())["server"]] += 1
        assert fresh == Counter({"v1": 30})


async def _stored_by_the_canary(gw: Any) -> dict[str, Any]:
    """A new conversation's first turn, drawn again until the canary's pod (``v2``) stores it."""
    made: dict[str, Any] = {}
    for i in range(60):
        resp = await gw.post("/v1/responses", {"model": "llama", "input": f"hello {i}"})
        assert resp.status == 200, await resp.text()
        made = await resp.json()
        if made["server"] == "v2":
            break
    assert made["server"] == "v2"
    return made


async def test_a_continuation_whose_version_has_no_ready_pod_is_told_so_not_moved(gateway: Any) -> None:
    """A conversation the canary (``llama-v2``) stored, then the canary's only pod down (its scrapes
    fail: no usable endpoint). Its next turn gets 503 ``no_endpoints`` naming the version that holds
    the response, with ``Retry-After``, and is not counted as a fallback; the stable version's pod is
    not asked. Before session s49 the turn was moved to the stable version like a new request's draw,
    where no pod stores the response: a 404 ``response_not_found`` for a conversation that still
    exists, counted in ``igw_model_rewrite_fallbacks_total``."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50, name="canary"), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        made = await _stored_by_the_canary(gw)
        await v2.stop()
        sr = gw.state.runtime.schedulers["new"]
        await wait_for(
            lambda: not any(sr.scheduler.is_fresh(v, gw.state.clock()) for v in sr.pool.views()),
            within=10,
            what="the canary's pod stale",
        )
        asked = len(v1.received)
        body = {"model": "llama", "input": "and then?", "previous_response_id": made["id"]}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 503, await resp.text()
        assert int(resp.headers["Retry-After"]) >= 1
        error = (await resp.json())["error"]
        assert error["code"] == "no_endpoints"
        assert "llama-v2" in error["message"]
        assert made["id"] in error["message"]
        assert len(v1.received) == asked
        registry = gw.state.metrics.registry
        labels = {"rule": "canary", "from": "llama-v2", "to": "llama-v1"}
        assert not registry.get_sample_value("igw_model_rewrite_fallbacks_total", labels)


async def test_a_continuation_unknown_here_is_searched_for_in_every_version_s_pool(gateway: Any) -> None:
    """A conversation the canary (``llama-v2``) stored, then forgotten by this replica (made through
    another, or before a restart), continued 20 times at 50/50: each turn is searched for in the drawn
    version's pool first, then the other's, the other's pod sent its own model; every turn is answered
    by the canary's pod. Before session s49 only the drawn pool was searched: the turns drawn to the
    stable version (about half) answered 404 ``response_not_found``."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        made = await _stored_by_the_canary(gw)
        new = gw.state.runtime.schedulers["new"].scheduler
        drawn_stable = 0
        for _ in range(20):
            new.disown_response(made["id"], v2.key, now=gw.state.clock())  # unknown here
            asked_v1 = len(v1.received)
            body = {"model": "llama", "input": "and then?", "previous_response_id": made["id"]}
            resp = await gw.post("/v1/responses", body)
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["server"] == "v2"
            assert orjson.loads(v2.received[-1].body)["model"] == "llama-v2"
            drawn_stable += len(v1.received) - asked_v1  # v1 asked first when drawn: its 404
        assert 0 < drawn_stable < 20
        assert gw.state.response_searches.in_flight == 0


@pytest.mark.parametrize("denied", [None, "llama-v2"])
async def test_a_continuation_s_search_asks_only_the_versions_the_caller_may_use(
    gateway: Any, denied: str | None
) -> None:
    """The canary rolled back (100/0) and a response its pod stores that this replica does not know:
    the stable pool is searched, then the canary's (200 from its pod) - unless the caller may not use
    the canary's model, whose pod then never sees the request (404 from the stable pod)."""
    from tests.gateway.test_routing_and_guard import RecordingGuard

    auth = {"authorization": "Bearer good"}
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(
            doc(100, 0), {"old": [v1.key], "new": [v2.key]}, guard=RecordingGuard(deny_model=denied)
        ) as gw,
    ):
        v2.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response", "output": []}
        body = {"model": "llama", "input": "and then?", "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", body, headers=auth)
        if denied is None:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["server"] == "v2"
        else:
            assert resp.status == 404, await resp.text()
            assert (await resp.json())["server"] == "v1"
            assert v2.received == []
        assert len(v1.received) == 1


def _engines_doc(stable: str, canary: str) -> dict[str, Any]:
    """``doc(100, 0)`` (rule ``canary``) with each version's engine: ``vllm``, or ``generic`` (read
    through metric specs, an engine the gateway writes no field for); scrapes slow, so a dispatch
    stays unreflected in the ledger while the test reads it."""
    engines = {"old": stable, "new": canary}
    d = config_doc(
        [scheduler("old", "llama-v1"), scheduler("new", "llama-v2")],
        routing={"scrapeInterval": "10s", "staleThreshold": "30s"},
    )
    targets = [{"model": "llama-v1", "weight": 100}, {"model": "llama-v2", "weight": 0}]
    ext = d["spec"]["extensions"]
    ext["modelRewrites"] = {"rules": [{"model": "llama", "name": "canary", "targets": targets}]}
    generic = [
        {"scheduler": name, "queue": "vllm:num_requests_waiting", "running": "vllm:num_requests_running"}
        for name, engine in engines.items()
        if engine == "generic"
    ]
    ext["engines"] = {"generic": generic}
    return d


@pytest.mark.parametrize(("stable", "canary"), [("vllm", "generic"), ("generic", "vllm")])
async def test_another_version_s_pod_gets_the_body_for_its_engine_and_is_named_as_answering(
    gateway: Any, caplog: pytest.LogCaptureFixture, stable: str, canary: str
) -> None:
    """A continuation drawn to the stable version (``stable``'s engine) that only the canary's pod
    (``canary``'s engine) stores: that pod gets the body prepared for its own engine - a minted
    ``request_id`` for vLLM (the answer's id), the client's body with its model alone for an engine
    the gateway writes no field for - while it is in flight its pool's dispatch ledger counts it,
    and the access log, ``igw_requests_total`` and the canary's per-target series name the version
    that answered. Before session s49's follow-up that pod got the drawn engine's body (a
    ``request_id`` a generic engine may refuse; none minted for vLLM), its scheduler saw only the
    endpoint's in-flight count, and the line and series named ``llama-v1``."""
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2", first_token_delay_s=0.5)) as (v1, v2),
        gateway(_engines_doc(stable, canary), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        v2.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response", "output": []}
        body = {"model": "llama", "input": "and then?", "previous_response_id": "resp_elsewhere"}
        answering = asyncio.create_task(gw.post("/v1/responses", body))
        await wait_for(lambda: bool(v2.received), within=10, what="the canary's pod asked")
        assert unreflected_dispatches(gw, v2.key, pool="new") == {v2.key: 1}
        resp = await answering
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        assert answer["server"] == "v2"
        assert len(v1.received) == 1  # drawn, asked first: its 404
        forwarded = orjson.loads(v2.received[-1].body)
        if canary == "generic":
            assert forwarded == {**body, "model": "llama-v2"}
        else:
            assert minted_for(forwarded["request_id"], "") is True
            assert answer["id"] == forwarded["request_id"]
            assert {k: v for k, v in forwarded.items() if k != "request_id"} == {**body, "model": "llama-v2"}
        (entry,) = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        assert (entry["requested_model"], entry["model"], entry["scheduler"]) == ("llama", "llama-v2", "new")
        assert _rewrite_series(gw) == {("canary", "llama-v2", "200"): 1.0}
        registry = gw.state.metrics.registry
        assert (
            registry.get_sample_value(
                "igw_requests_total", {"model": "llama-v2", "requested_model": "llama", "code": "200"}
            )
            == 1.0
        )


def _adapters_doc() -> dict[str, Any]:
    """A canary of LoRA adapters on SGLang pools: rule ``tuned`` -> ``tuned-v1`` (an adapter of the
    stable pool ``old``, weight 100), ``tuned-v2`` (of the canary's pool ``new``, weight 0)."""
    d = config_doc(
        [
            scheduler("old", "llama-v1", engineType="sglang", loraAdapters=["tuned-v1"]),
            scheduler("new", "llama-v2", engineType="sglang", loraAdapters=["tuned-v2"]),
        ]
    )
    targets = [{"model": "tuned-v1", "weight": 100}, {"model": "tuned-v2", "weight": 0}]
    d["spec"]["extensions"]["modelRewrites"] = {"rules": [{"model": "tuned", "targets": targets}]}
    return d


@pytest.mark.parametrize("lora_path", [None, "tuned-v1"])
async def test_another_version_s_pod_is_asked_only_for_the_adapter_checked_for_it(
    gateway: Any, lora_path: str | None
) -> None:
    """A continuation drawn to the stable adapter (``tuned-v1``) that only the canary's pod stores.
    Without a ``lora_path`` of the client's, the canary's SGLang pod is asked for its own adapter
    (``lora_path`` written ``tuned-v2``). A client's ``lora_path: tuned-v1`` passes the drawn route's
    check (it names the drawn adapter) but would be refused for ``tuned-v2``'s: that pool is not
    asked, and the stable pod's 404 is the answer. Before session s49's follow-up the canary's pod got
    ``model: tuned-v2, lora_path: tuned-v1`` - an adapter never checked for that version, which SGLang
    serves by ``lora_path`` - and answered 200."""
    async with (
        running(FakeModelServer("v1", engine="sglang"), FakeModelServer("v2", engine="sglang")) as (v1, v2),
        gateway(_adapters_doc(), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        v2.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response", "output": []}
        body: dict[str, Any] = {
            "model": "tuned",
            "input": "and then?",
            "previous_response_id": "resp_elsewhere",
        }
        if lora_path is not None:
            body["lora_path"] = lora_path
        resp = await gw.post("/v1/responses", body)
        assert len(v1.received) == 1  # drawn, asked first: its 404
        assert orjson.loads(v1.received[0].body)["lora_path"] == "tuned-v1"
        if lora_path is None:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["server"] == "v2"
            forwarded = orjson.loads(v2.received[-1].body)
            assert (forwarded["model"], forwarded["lora_path"]) == ("tuned-v2", "tuned-v2")
        else:
            assert resp.status == 404, await resp.text()
            assert (await resp.json())["server"] == "v1"
            assert v2.received == []


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_another_version_s_pod_is_told_its_own_model_in_the_gateway_s_headers(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """A continuation drawn to the stable version (``llama-v1``) that only the canary's pod stores:
    each pod asked gets ``X-Gateway-Model-Name`` / ``X-Gateway-Base-Model-Name`` naming its own
    version, whichever server side parsed the request (its headers serialised from the fields as
    received, or from aiohttp's). Before session s49's follow-up the headers were built once per
    forward: the canary's pod was told ``llama-v1``, the model it does not serve."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(100, 0), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        v2.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response", "output": []}
        body = {"model": "llama", "input": "and then?", "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "v2"
        for pod, model in ((v1, "llama-v1"), (v2, "llama-v2")):
            (got,) = pod.received
            headers = {k.lower(): v for k, v in got.headers.items()}
            assert (headers["x-gateway-model-name"], headers["x-gateway-base-model-name"]) == (model, model)


async def _canary_pods_fresh(gw: Any) -> None:
    """Wait until each pod of the canary's pool (``new``) has been scraped fresh, so that the pods
    a search tries are the ones its scheduler would pick from."""
    new = gw.state.runtime.schedulers["new"]
    await wait_for(
        lambda: all(new.scheduler.is_fresh(v, gw.state.clock()) for v in new.pool.views()),
        within=10,
        what="the canary's pods fresh",
    )


def _plugins_state(gw: Any, pool: str) -> dict[str, Any]:
    """What scheduler ``pool``'s plugins hold in flight (settled): the backlog's pending picks per
    endpoint (when its profile has the backlog scorer), the lora slots' and prefill's in flight."""
    sch = gw.state.runtime.schedulers[pool].scheduler
    sch.settle()
    held: dict[str, Any] = {}
    for plugin in sch.plugins:
        for attr in ("dispatched", "_inflight", "_recent"):
            value = getattr(plugin, attr, None)
            if isinstance(value, dict) and value:
                held[f"{plugin.name}.{attr}"] = dict(value)
    return held


@pytest.mark.parametrize("stored", [True, False])
async def test_another_version_s_pod_that_answers_a_continuation_is_learnt_by_its_pool_s_prefix_index(
    gateway: Any, stored: bool
) -> None:
    """A continuation drawn to the stable version (``llama-v1``) that this replica does not know,
    searched past it into the canary's pool of two pods. When the second canary pod stores it (200),
    the canary's scheduler learns that request as a pick there: its prefix index places the prompt on
    that pod alone, and the next request with that prompt sent to the canary's pool is picked there.
    When no pod stores it (every pod's 404), nothing stays learnt: no blocks, no dispatch in the
    ledger, no pick held in flight by any plugin. Before session s49's follow-up only the dispatch
    ledger counted the canary pod's attempt, and the prefix index knew nothing of the prompt."""
    prompt = "a long shared conversation prefix " * 40
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2a"), FakeModelServer("v2b")) as (v1, v2a, v2b),
        gateway(doc(100, 0), {"old": [v1.key], "new": [v2a.key, v2b.key]}) as gw,
    ):
        await _canary_pods_fresh(gw)
        if stored:
            v2b.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response"}
        body = {"model": "llama", "input": prompt, "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == (200 if stored else 404), await resp.text()
        assert len(v1.received) == 1  # drawn, asked first: its 404
        if not stored:
            assert len(v2a.received) == len(v2b.received) == 1
            assert prefix_blocks(gw, v2a.key, v2b.key, pool="new") == {v2a.key: 0, v2b.key: 0}
            assert unreflected_dispatches(gw, v2a.key, v2b.key, pool="new") == {v2a.key: 0, v2b.key: 0}
            assert _plugins_state(gw, "new") == {}
            return
        assert (await resp.json())["server"] == "v2b"
        blocks = prefix_blocks(gw, v2a.key, v2b.key, pool="new")
        assert blocks[v2b.key] > 0, blocks
        assert blocks[v2a.key] == 0, blocks  # asked before it: its 404, its pick taken back
        assert len(v2a.received) == 1
        # answered: nothing held in flight (the backlog's pick ended), only the prefix index's
        # record of its pick on v2b, kept for a take-back
        held = _plugins_state(gw, "new")
        assert list(held) == ["prefix-cache-scorer._recent"]
        assert [entry[0] for entry in held["prefix-cache-scorer._recent"].values()] == [v2b.key]
        # the next turn of that prompt sent to the canary's pool: picked where it is cached
        asked = (len(v2a.received), len(v2b.received))
        resp = await gw.post("/v1/responses", {"model": "llama-v2", "input": prompt})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "v2b"
        assert (len(v2a.received), len(v2b.received)) == (asked[0], asked[1] + 1)


async def test_a_drawn_pod_s_404_is_not_left_counted_when_another_version_s_attempt_times_out(
    gateway: Any,
) -> None:
    """A streamed continuation drawn to the stable version that only the canary's pod stores, whose
    prefill outlasts the drawn pool's ``routeTimeout``: the stream ends with a ``route_timeout``
    error event, and the stable pod, which answered 404 and prefilled nothing, is left with neither
    the pick's dispatch in its pool's ledger nor the prompt's blocks in its prefix index. Before
    this fix the drawn pod's pick, kept while another version's pod was asked (only a pod of its own
    pool takes it over), was given back only when the attempts ended normally: a routeTimeout, a
    client gone or a shutdown during the other version's attempt left it counted there."""
    d = _engines_doc("vllm", "vllm")
    d["spec"]["schedulers"][0]["routeTimeout"] = "500ms"
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2", first_token_delay_s=2.0)) as (v1, v2),
        gateway(d, {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        v2.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response", "output": []}
        body = {
            "model": "llama",
            "input": "and then? " * 40,
            "previous_response_id": "resp_elsewhere",
            "stream": True,
        }
        resp = await gw.post("/v1/responses", body)
        assert b"route_timeout" in await resp.read()
        assert len(v1.received) == 1  # drawn, asked first: its 404
        assert len(v2.received) == 1  # then the canary's pod, past the routeTimeout
        assert unreflected_dispatches(gw, v1.key, pool="old") == {v1.key: 0}
        assert prefix_blocks(gw, v1.key, pool="old") == {v1.key: 0}


@pytest.mark.parametrize(
    ("refusal", "cause"), [(503, "unavailable"), (429, "rate-limited"), (404, "response-search")]
)
async def test_another_version_s_refusal_is_counted_as_its_own_pool_s_retry(
    gateway: Any, refusal: int, cause: str
) -> None:
    """A continuation drawn to the stable version (``llama-v1``) that this replica does not know,
    searched past it into the canary's pool of two pods: the first refuses (503, 429) or does not
    store the response (404), the second answers. The refused attempt's retry, or the search's step
    past it, is counted in ``igw_upstream_retries_total`` under the canary's scheduler - the pool
    that refused - not the drawn one, whose only attempt (its pod's 404) is its own step. Before
    this fix every attempt of the search was counted under the drawn pool's scheduler. Each canary
    pod asked counts as a pick of its pool's, and no decision time is observed for that pool."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2a"), FakeModelServer("v2b")) as (v1, v2a, v2b),
        gateway(doc(100, 0), {"old": [v1.key], "new": [v2a.key, v2b.key]}) as gw,
    ):
        await _canary_pods_fresh(gw)
        v2a.infer_status = refusal if refusal != 404 else 200
        v2b.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response"}
        body = {"model": "llama", "input": "and then?", "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "v2b"
        assert (len(v1.received), len(v2a.received), len(v2b.received)) == (1, 1, 1)
        registry = gw.state.metrics.registry

        def retries(pool: str, why: str) -> float:
            labels = {"scheduler": pool, "cause": why}
            return registry.get_sample_value("igw_upstream_retries_total", labels) or 0.0

        assert retries("new", cause) == 1
        assert retries("old", "response-search") == 1  # the drawn pod's 404: the drawn pool's step
        assert retries("old", cause) == (1 if cause == "response-search" else 0)
        # the canary's pool got two requests, each counted as a pick of its pod, but made no
        # scheduling decision (each pod asked alone, Scheduler.pick_sent): its decision-time
        # histogram holds only the drawn pool's one decision
        for pod in (v2a, v2b):
            picks = {"scheduler": "new", "endpoint": pod.key}
            assert registry.get_sample_value("igw_endpoint_picks_total", picks) == 1
        decisions = "igw_scheduler_decision_seconds_count"
        assert registry.get_sample_value(decisions, {"scheduler": "old"}) == 1
        assert not registry.get_sample_value(decisions, {"scheduler": "new"})


async def test_another_version_s_pod_asked_in_a_search_has_its_pick_in_the_decision_log(gateway: Any) -> None:
    """A continuation drawn to the stable version (``llama-v1``) that this replica does not know,
    searched past it into the canary's pool of two pods, the second of which stores it. The decision
    log holds the drawn pool's pick and, for each canary pod asked, that pool's pick among the pod
    alone (``Scheduler.pick_sent``), in the shape of a normal entry, with its model and scheduler,
    and marked ``asked_alone`` with the pod. Before session s50 those picks were in no entry: the log
    did not show that the canary's pods were asked."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2a"), FakeModelServer("v2b")) as (v1, v2a, v2b),
        gateway(doc(100, 0), {"old": [v1.key], "new": [v2a.key, v2b.key]}) as gw,
    ):
        await _canary_pods_fresh(gw)
        gw.state.decision_log = log = DecisionLog(16, token="t" * 32)
        v2b.stored_responses["resp_elsewhere"] = {"id": "resp_elsewhere", "object": "response"}
        body = {"model": "llama", "input": "and then?", "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 200, await resp.text()
        assert (len(v1.received), len(v2a.received), len(v2b.received)) == (1, 1, 1)
        drawn, *asked = reversed(log.latest())
        assert (drawn["scheduler"], drawn["model"], drawn["chosen"]) == ("old", "llama-v1", v1.key)
        assert "asked_alone" not in drawn
        assert [(e["scheduler"], e["model"], e["asked_alone"]) for e in asked] == [
            ("new", "llama-v2", v2a.key),
            ("new", "llama-v2", v2b.key),
        ]
        for entry in asked:
            assert set(entry) == {*drawn, "asked_alone"}
            assert entry["request_id"] == drawn["request_id"]
            assert (entry["outcome"], entry["chosen"], entry["candidates"]) == (
                "picked",
                entry["asked_alone"],
                2,
            )
            assert [row["endpoint"] for row in entry["scored"]] == [entry["asked_alone"]]
            assert entry["decision_us"] is None  # not a decision the request waited for


async def test_a_continuation_of_a_version_removed_from_the_rule_is_told_where_it_is_stored(
    gateway: Any,
) -> None:
    """Conversations started at 50/50, then ``llama-v2`` removed from the rule by a reload (its
    scheduler kept): a next turn sent as ``llama`` is answered 404 ``response_not_found`` by the
    gateway, naming the version that stores it, and that version still continues it when named.
    Until session s50 the turn was forwarded to the stable version's pod, whose bare 404 ("not
    found", 9 of 9 in the probe) did not say the conversation still exists."""
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(doc(50, 50), {"old": [v1.key], "new": [v2.key]}, reload=True) as gw,
    ):
        made: list[dict[str, Any]] = []
        while len(made) < 3:
            resp = await gw.post("/v1/responses", {"model": "llama", "input": f"hello {len(made)}"})
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
            if answer["server"] == "v2":
                made.append(answer)
        removed = doc(100, 0)
        removed["spec"]["extensions"]["modelRewrites"]["rules"][0]["targets"].pop()
        gw.config_path.write_text(yaml.safe_dump(removed))
        await wait_for(
            lambda: len(gw.state.runtime.rewrites.rules["llama"][0].targets) == 1, within=15, what="reload"
        )
        asked = len(v1.received)
        for m in made:
            body = {"model": "llama", "input": "and then?", "previous_response_id": m["id"]}
            resp = await gw.post("/v1/responses", body)
            error = (await resp.json())["error"]
            assert (resp.status, error["code"], error["param"]) == (
                404,
                "response_not_found",
                "previous_response_id",
            )
            assert "stored by model 'llama-v2'" in error["message"]
            assert "continue it by sending model 'llama-v2'" in error["message"]
        assert len(v1.received) == asked  # the stable version's pod was not asked
        body = {"model": "llama-v2", "input": "and then?", "previous_response_id": made[0]["id"]}
        resp = await gw.post("/v1/responses", body)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "v2"
