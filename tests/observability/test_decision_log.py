""" "Why this pod": the scheduler names what excluded each endpoint, the ring buffer keeps the last N
decisions, and ``igw serve --debug-decisions`` serves them only to the operator token."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from igw.cli.main import main
from igw.errors import IgwGatewayError
from igw.gateway.debug_api import DEBUG_DECISIONS_PATH, DEBUG_TOKEN_ENV, DecisionDebug, add_debug_routes
from igw.gateway.decision_log import (
    DEBUG_TOKEN_HEADER,
    DECISION_HEADER,
    ENTRY_TOP_N,
    HEADER_TOP_N,
    DecisionLog,
    decision_header,
)
from igw.scheduling.factory import scheduler_from_picker_config, scheduler_from_weights
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import DecisionKind
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_all_fresh
from tests.observability.live_gateway import MODEL, igw_serve, serving_gateway, wait_ready
from tests.scheduling.helpers import ep, req

TOKEN = "operator-debug-token-0123456789"


def test_scheduler_names_what_excluded_each_endpoint() -> None:
    s = scheduler_from_weights(
        {"queue": 2, "kvCache": 2}, routing=RoutingSettings(stale_threshold_s=1.0), rng=random.Random(1)
    )
    views = [ep("stale", scraped_at=-5.0), ep("failing", failing=True), ep("a", waiting=3), ep("b", kv=0.9)]
    d = s.pick(req(), views, now=0.0)
    assert d.kind is DecisionKind.PICKED
    assert d.removed == {"stale": "stale or failing metrics", "failing": "stale or failing metrics"}
    assert set(d.scores) == {"a", "b"}
    all_fresh = s.pick(req(), views[2:], now=0.0)
    assert all_fresh.removed == {}


def test_ring_buffer_keeps_the_newest_decisions_with_every_score() -> None:
    s = scheduler_from_weights(
        {"queue": 2, "kvCache": 2}, routing=RoutingSettings(stale_threshold_s=1.0), rng=random.Random(1)
    )
    log = DecisionLog(2, token=TOKEN)
    views = [ep("stale", scraped_at=-5.0), ep("a", waiting=3), ep("b", waiting=0)]
    for i in range(3):
        d = s.pick(req(request_id=f"r{i}"), views, now=0.0)
        log.record(request_id=f"r{i}", scheduler="p", model="m", candidates=3, decision=d, elapsed_s=1e-5)
    entries = log.latest()
    assert [e["request_id"] for e in entries] == ["r2", "r1"]
    newest = entries[0]
    assert newest["chosen"] == "b"
    assert newest["fallbacks"] == ["a"]
    assert [c["endpoint"] for c in newest["scored"]] == ["b", "a"]
    assert set(newest["scored"][0]["scores"]) >= {"total"}
    assert len(newest["scored"][0]["scores"]) >= 3  # both scorers and the total
    assert newest["removed"] == [{"endpoint": "stale", "by": "stale or failing metrics"}]
    assert log.latest(1) == entries[:1]
    assert log.opens(TOKEN)
    assert not log.opens(None)
    assert not log.opens(TOKEN[:-1])
    # A header of bytes that are not UTF-8 reaches the handler as surrogates (aiohttp decodes with
    # ``surrogateescape``): refused, where encoding it raised and the request got a 500 and a traceback.
    assert not log.opens("\udcff\udcfe(abc")


def test_an_entry_of_a_large_pool_lists_its_best_endpoints_and_counts_the_rest() -> None:
    """A pick over 1,000 endpoints of which 300 are stale lists :data:`ENTRY_TOP_N` of the removed
    ones, and every count. Until session s42 an entry listed all of them: with half of such a pool
    stale, 98 MB per 1,000 entries (1 GB for a full ring), copied on the request path."""
    s = scheduler_from_weights(
        {"queue": 2, "kvCache": 2}, routing=RoutingSettings(stale_threshold_s=1.0), rng=random.Random(1)
    )
    views = [ep(f"10.0.{i // 250}.{i % 250}:8000", waiting=i % 7, kv=(i % 10) / 10) for i in range(700)]
    views += [ep(f"10.9.{i // 250}.{i % 250}:8000", scraped_at=-5.0) for i in range(300)]
    d = s.pick(req(), views, now=0.0)
    log = DecisionLog(1, token=TOKEN)
    log.record(request_id="r", scheduler="p", model="m", candidates=1000, decision=d, elapsed_s=None)
    (entry,) = log.latest()
    assert entry["removed_total"] == len(d.removed) == 300
    assert [r["endpoint"] for r in entry["removed"]] == list(d.removed)[:ENTRY_TOP_N]
    assert (entry["scored_total"], entry["fallbacks_total"]) == (len(d.scores), len(d.fallbacks))
    assert [c["endpoint"] for c in entry["scored"]] == list(d.scores)[:ENTRY_TOP_N]
    assert entry["scored"][0]["endpoint"] == entry["chosen"] == d.endpoint
    assert entry["fallbacks"] == list(d.fallbacks[:ENTRY_TOP_N])
    assert len(orjson.dumps(entry)) < 5_000


def test_the_decision_header_stays_small_when_many_endpoints_are_stale() -> None:
    """With 500 of 1,000 endpoints stale the header names :data:`HEADER_TOP_N` removed ones and
    counts them all; until session s42 it named all 500 (22 KB, over aiohttp's 8,190-byte header
    line: the client's request failed)."""
    s = scheduler_from_weights(
        {"queue": 2, "kvCache": 2}, routing=RoutingSettings(stale_threshold_s=1.0), rng=random.Random(1)
    )
    views = [
        ep(f"10.0.{i // 250}.{i % 250}:8000", waiting=i % 7, scraped_at=-5.0 if i % 2 else 0.0)
        for i in range(1000)
    ]
    d = s.pick(req(), views, now=0.0)
    header = decision_header(d)
    summary = orjson.loads(header)
    assert summary["removed_total"] == len(d.removed) == 500
    assert summary["removed"] == dict(list(d.removed.items())[:HEADER_TOP_N])
    assert summary["chosen"] == d.endpoint
    assert len(header) < 1_000


def test_bad_settings_are_refused() -> None:
    with pytest.raises(IgwGatewayError, match="capacity"):
        DecisionLog(0, token=TOKEN)
    with pytest.raises(IgwGatewayError, match=DEBUG_TOKEN_ENV):
        DecisionDebug(10, "short")
    assert TOKEN not in repr(DecisionDebug(10, TOKEN))


def test_serve_refuses_the_decision_log_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DEBUG_TOKEN_ENV, raising=False)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler(MODEL, MODEL)])))
    (tmp_path / "e.yaml").write_text("schedulers: {}\n")
    code = main(
        [
            "serve",
            "--config",
            str(tmp_path / "c.yaml"),
            "--endpoints",
            str(tmp_path / "e.yaml"),
            "--debug-decisions",
            "5",
        ]
    )
    assert code == 2
    assert DEBUG_TOKEN_ENV in capsys.readouterr().err


async def test_serve_shows_recent_decisions_only_to_the_operator_token(tmp_path: Path) -> None:
    args = ("--debug-decisions", "2")
    printed: list[str] = []
    gateway = serving_gateway(tmp_path, *args, env={DEBUG_TOKEN_ENV: TOKEN}, stderr=printed)
    async with gateway as url, aiohttp.ClientSession() as http:
        await wait_ready(http, url)
        ids = []
        for _ in range(3):
            resp = await http.post(
                url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}
            )
            assert resp.status == 200
            ids.append(resp.headers["X-Request-Id"])
            await resp.read()
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
            denied = await http.get(url + DEBUG_DECISIONS_PATH, headers=headers)
            assert denied.status == 401
            assert (await denied.json())["error"]["param"] == "Authorization"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        page = await http.get(url + DEBUG_DECISIONS_PATH, headers=auth)
        assert page.status == 200
        text = await page.text()
        assert TOKEN not in text
        body = await page.json()
        assert body["capacity"] == 2
        decisions = body["decisions"]
        assert [d["request_id"] for d in decisions] == [ids[2], ids[1]]
        for d in decisions:
            assert d["scheduler"] == MODEL
            assert d["outcome"] == "picked"
            assert d["candidates"] == 2
            assert d["scored"][0]["endpoint"] == d["chosen"]
            assert "total" in d["scored"][0]["scores"]
        one = await (await http.get(url + DEBUG_DECISIONS_PATH + "?limit=1", headers=auth)).json()
        assert [d["request_id"] for d in one["decisions"]] == [ids[2]]
        bad = await http.get(url + DEBUG_DECISIONS_PATH + "?limit=0", headers=auth)
        assert bad.status == 400
        assert (await bad.json())["error"]["param"] == "limit"
        # a token of bytes that are not UTF-8: refused like any wrong token, not a 500
        host, port = url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"GET {DEBUG_DECISIONS_PATH} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
            + b"Authorization: Bearer \xff\xfe\xc3(abc\r\n\r\n"
        )
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    # each refused call left one WARNING naming the client, none what it presented
    refused = [line for line in printed if f"refused {DEBUG_DECISIONS_PATH} from 127.0.0.1" in line]
    assert len(refused) == 4, printed
    assert all(" WARNING " in line for line in refused)
    assert not any("wrong-token" in line or TOKEN in line for line in printed)
    assert not any("Traceback" in line for line in printed)


async def test_the_debug_page_does_not_exist_unless_enabled(tmp_path: Path) -> None:
    async with serving_gateway(tmp_path) as url, aiohttp.ClientSession() as http:
        await wait_ready(http, url)
        resp = await http.get(url + DEBUG_DECISIONS_PATH, headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status == 404
        resp.release()


async def test_a_request_with_the_token_gets_its_decision_and_the_token_stays_here(tmp_path: Path) -> None:
    async with running(FakeModelServer("a", waiting=5), FakeModelServer("b")) as (a, b):
        env = {DEBUG_TOKEN_ENV: TOKEN}
        gateway = igw_serve(tmp_path, [a.key, b.key], "--debug-decisions", "4", env=env)
        async with gateway as url, aiohttp.ClientSession() as http:
            await wait_all_fresh(http, url)  # both pods scored, not only the first one scraped
            body = {"model": MODEL, "prompt": "hi"}
            resp = await http.post(url + "/v1/completions", json=body, headers={DEBUG_TOKEN_HEADER: TOKEN})
            assert resp.status == 200
            served = (await resp.json())["server"]
            summary = orjson.loads(resp.headers[DECISION_HEADER])
            assert summary["chosen"] == {"a": a.key, "b": b.key}[served]
            assert set(summary["scored"]) == {a.key, b.key}
            assert all("total" in scores for scores in summary["scored"].values())
            assert summary["removed"] == {}
            for headers in ({DEBUG_TOKEN_HEADER: "not-the-token-0123456789"}, {}):
                plain = await http.post(url + "/v1/completions", json=body, headers=headers)
                assert plain.status == 200
                assert DECISION_HEADER not in plain.headers
                await plain.read()
        forwarded = [r.headers for r in a.received + b.received if r.path == "/v1/completions"]
        assert len(forwarded) == 3
        assert all(DEBUG_TOKEN_HEADER.lower() not in {h.lower() for h in hs} for hs in forwarded)


def test_a_saturated_decision_from_a_detector_still_names_what_was_excluded() -> None:
    s = scheduler_from_picker_config(
        {
            "plugins": [{"type": "queue-scorer"}, {"name": "sat", "type": "utilization-detector"}],
            "saturationDetector": {"pluginRef": "sat", "queueDepthThreshold": 1},
        },
        routing=RoutingSettings(stale_threshold_s=1.0),
        rng=random.Random(1),
    )
    assert s.profile.detector is not None
    views = [ep("stale", scraped_at=-5.0), ep("a", waiting=9), ep("b", waiting=9)]
    d = s.pick(req(), views, now=0.0)
    assert d.kind is DecisionKind.SATURATED
    assert d.removed == {"stale": "stale or failing metrics"}


@pytest.mark.parametrize(
    ("limit", "status", "entries"),
    [("2", 200, 2), ("0002", 200, 2), ("9" * 5000, 200, 3), ("²", 400, 0), ("٣", 400, 0), ("000", 400, 0)],
)
async def test_a_limit_is_ascii_digits_and_never_a_server_error(
    limit: str, status: int, entries: int, caplog: pytest.LogCaptureFixture
) -> None:
    """``?limit=²`` (``str.isdigit`` says yes, ``int`` says no) and a limit of 5,000 digits (past
    ``int``'s 4,300) were 500s with a logged traceback; a huge limit means every entry kept."""
    decision_log = DecisionLog(3, token=TOKEN)
    scheduler = scheduler_from_weights({"queue": 2}, routing=RoutingSettings(), rng=random.Random(1))
    for i in range(3):
        decision = scheduler.pick(req(request_id=f"r{i}"), [ep("a"), ep("b")], now=0.0)
        decision_log.record(
            request_id=f"r{i}", scheduler="s", model="m", candidates=2, decision=decision, elapsed_s=None
        )
    app = web.Application()
    add_debug_routes(app, decision_log)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            resp = await http.get(
                server.make_url(DEBUG_DECISIONS_PATH),
                params={"limit": limit},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            body = await resp.json()
    finally:
        await server.close()
    assert resp.status == status, body
    if status == 200:
        assert len(body["decisions"]) == entries
    else:
        assert body["error"]["param"] == "limit"
    assert not [r for r in caplog.records if r.exc_info]
