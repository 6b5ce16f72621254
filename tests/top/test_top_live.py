"""``igw top`` against a live ``igw serve`` in front of a simulated fleet, driven headless by textual's
pilot: the cells it draws, the screenshot, and what it shows when the gateway does not answer."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import socket
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable

import igw.top.source
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from igw.top.app import (
    DECISION_COLUMNS,
    MAX_BACKOFF_S,
    MAX_CELL_CHARS,
    MAX_ERROR_CHARS,
    MODEL_COLUMNS,
    POD_COLUMNS,
    POOL_COLUMNS,
    TopApp,
    shown,
)
from igw.top.source import MAX_PAGE_BYTES, GatewaySource
from igw.top.view import (
    POD_GAUGES,
    READ_METRICS,
    RETRIES,
    SIGNAL_MISSING,
    GatewayUnreachable,
    Scrape,
    ScrapeError,
    parse_scrape,
)
from tests.gateway.support import wait_for
from tests.observability.live_gateway import (
    MODEL,
    igw_serve,
    metrics_after_traffic,
    serving_gateway,
    wait_ready,
)

SIZE = (160, 45)


def cells(app: TopApp, table_id: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows a table draws, as column name -> cell text."""
    table = app.query_one(f"#{table_id}", DataTable)
    return [
        {name: str(table.get_cell_at(Coordinate(row, col))) for col, name in enumerate(columns)}
        for row in range(table.row_count)
    ]


@contextlib.asynccontextmanager
async def lora_fleet_gateway(tmp_path: Path) -> AsyncIterator[str]:
    """``igw serve`` routing ``llama`` to two simulated vLLM pods that serve a LoRA adapter."""
    pods = [
        {
            "name": f"p{i}",
            "preset": "llama-3.1-8b/h100",
            "served_model_name": MODEL,
            "lora_adapters": ["sql-lora"],
        }
        for i in (0, 1)
    ]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 3, "pods": pods})
    async with (
        run_fleet(spec, admin=False) as fleet,
        igw_serve(tmp_path, [p.key for p in fleet.pods], lora_adapters=["sql-lora"]) as url,
    ):
        yield url


@contextlib.asynccontextmanager
async def streaming_traffic(url: str) -> AsyncIterator[None]:
    """Streamed completions one after another until the block ends."""

    async def loop(http: aiohttp.ClientSession) -> None:
        body = {"model": MODEL, "prompt": "hello world", "max_tokens": 8, "stream": True}
        while True:
            async with http.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()

    async with aiohttp.ClientSession() as http:
        await wait_ready(http, url)
        task = asyncio.create_task(loop(http))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_top_draws_pools_pods_and_models_of_a_live_gateway(tmp_path: Path) -> None:
    async with lora_fleet_gateway(tmp_path) as url, streaming_traffic(url):
        app = TopApp(GatewaySource(url), interval_s=0.3)
        async with app.run_test(size=SIZE) as pilot:

            def models_drawn() -> bool:
                rows = cells(app, "models", MODEL_COLUMNS)
                return bool(rows) and rows[0]["TTFT p50"] != "-" and rows[0]["req/s"] != "0.0"

            await wait_for(models_drawn, within=60, what="a models row with rates and TTFT")
            # A pod publishes its LoRA series once it has run a request: wait until both have.
            await wait_for(
                lambda: (
                    len(cells(app, "pods", POD_COLUMNS)) == 2
                    and all(r["KV"] != "-" and r["adapters"] != "-" for r in cells(app, "pods", POD_COLUMNS))
                ),
                within=60,
                what="both pods with KV and LoRA residency",
            )
            await pilot.pause()
            (pool,) = cells(app, "pools", POOL_COLUMNS)
            pods = cells(app, "pods", POD_COLUMNS)
            (model,) = cells(app, "models", MODEL_COLUMNS)
            svg = app.export_screenshot()
    assert (pool["pool"], pool["model"], pool["ready"], pool["pods"]) == (MODEL, MODEL, "2", "2")
    assert re.fullmatch(r"\d+\.\d%", pool["avg KV"])
    for pod in pods:
        assert pod["pool"] == MODEL
        assert re.fullmatch(r"127\.0\.0\.1:\d+", pod["pod"])
        assert re.fullmatch(r"\d+\.\d%", pod["KV"])
        assert pod["adapters"] == "none"  # the pods report LoRA residency; no adapter request is running
        assert pod["flags"] == "ok"
        assert re.fullmatch(r"\d+\.\d\d s", pod["scrape age"])
    shares = [pod["pick share"] for pod in pods if pod["pick share"] != "-"]
    assert shares, pods
    assert abs(sum(float(s.rstrip("%")) for s in shares) - 100.0) <= 0.1 * len(shares)
    assert model["model"] == MODEL
    assert float(model["req/s"]) > 0
    assert model["5xx"] == "0.0%"
    assert re.fullmatch(r"\d+ ms", model["TTFT p50"])
    assert re.fullmatch(r"\d+ ms", model["TTFT p99"])
    text = svg.replace("&#160;", " ")
    assert "igw top" in text
    assert "TTFT p99" in text
    assert pods[0]["pod"] in text


async def test_every_series_top_reads_is_on_a_live_gateways_page(tmp_path: Path) -> None:
    async with serving_gateway(tmp_path) as url:
        families = await metrics_after_traffic(url)
    exported = {s.name for f in families.values() for s in f.samples}
    # Healthy pods miss no signal, none is ejected and nothing is retried: those families are
    # declared, with no series.
    ejected = POD_GAUGES["ejected"]
    assert READ_METRICS - exported == {SIGNAL_MISSING, ejected, RETRIES}
    assert families[SIGNAL_MISSING].type == "gauge"
    assert families[ejected].type == "gauge"
    assert families[RETRIES.removesuffix("_total")].type == "counter"


DEBUG_TOKEN = "debug-token-for-igw-top-0123"


async def test_with_the_debug_token_top_shows_why_each_pod_was_picked(tmp_path: Path) -> None:
    env = {"IGW_DEBUG_TOKEN": DEBUG_TOKEN}
    async with (
        serving_gateway(tmp_path, "--debug-decisions", "50", env=env) as url,
        streaming_traffic(url),
    ):
        app = TopApp(GatewaySource(url, token=DEBUG_TOKEN, decisions=5), interval_s=0.3, show_decisions=True)
        async with app.run_test(size=SIZE):
            await wait_for(
                lambda: len(cells(app, "decisions", DECISION_COLUMNS)) == 5, within=60, what="five decisions"
            )
            decisions = cells(app, "decisions", DECISION_COLUMNS)
            pods = {row["pod"] for row in cells(app, "pods", POD_COLUMNS)}
    for row in decisions:
        assert (row["pool"], row["model"], row["outcome"]) == (MODEL, MODEL, "picked")
        assert row["chosen"] in pods
        assert row["candidates"] == "2"
        assert row["leading scorer"] not in ("-", "total")
        assert re.fullmatch(r"\d+ µs", row["decision"])


async def test_a_wrong_debug_token_is_reported_not_printed(tmp_path: Path) -> None:
    async with serving_gateway(
        tmp_path, "--debug-decisions", "5", env={"IGW_DEBUG_TOKEN": DEBUG_TOKEN}
    ) as url:
        wrong = "not-the-debug-token-0123456"
        app = TopApp(GatewaySource(url, token=wrong, decisions=5), interval_s=0.2, show_decisions=True)
        async with app.run_test(size=SIZE):
            await wait_for(lambda: app.last_error is not None, within=30, what="a refused scrape")
            await wait_for(lambda: app.refreshes > 0, within=30, what="a drawn view")
            status = str(app.query_one("#status").render())
            pods = cells(app, "pods", POD_COLUMNS)
    assert "decisions not shown" in status
    assert "/debug/decisions?limit=5: HTTP 401 (--token-env must name" in status
    assert wrong not in status
    assert len(pods) == 2  # the refused decisions hid the pools and pods too (before session s40)


async def test_unreachable_gateway_is_named_in_the_status_line() -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    app = TopApp(GatewaySource(url), interval_s=0.2)
    async with app.run_test(size=SIZE):
        await wait_for(lambda: app.last_error is not None, within=30, what="a failed scrape")
        assert app.refreshes == 0
        assert cells(app, "pods", POD_COLUMNS) == []
        status = str(app.query_one("#status").render())
    assert f"{url}/metrics" in status
    assert "scrape failed" in status
    assert "(no view yet; retrying in 0.4 s)" in status  # no "last good view": there never was one


async def test_a_password_in_the_gateways_url_is_never_shown() -> None:
    """``igw top http://user:password@host`` printed the password in the status line and in the
    screenshot's error; the URL is shown with its user-info masked, the request still carries it."""
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = "S3cretPassw0rd9XYZqq"
    app = TopApp(GatewaySource(f"http://admin:{password}@127.0.0.1:{port}"), interval_s=0.2)
    async with app.run_test(size=SIZE):
        await wait_for(lambda: app.last_error is not None, within=30, what="a failed scrape")
        status = str(app.query_one("#status").render())
    assert f"http://[REDACTED]@127.0.0.1:{port}/metrics" in status
    assert password not in status
    assert password not in (app.last_error or "")
    assert password not in repr(app.source)


async def test_cells_are_drawn_as_text_never_read_as_markup() -> None:
    """Cells come from the gateway's pages (pod names, label values, decision reasons); a string cell
    was read as markup, so ``[link=...]`` drew a link and ``[b]...[/b]`` vanished into a style."""
    app = TopApp(GatewaySource("http://127.0.0.1:9"), interval_s=30.0)
    hostile = "[link=http://evil.example]pod[/link][b]x[/b]"
    async with app.run_test(size=SIZE):
        app._fill("pools", [(hostile, *("-" for _ in POOL_COLUMNS[1:]))])
        cell = app.query_one("#pools", DataTable).get_cell_at(Coordinate(0, 0))
    assert isinstance(cell, Text)
    assert cell.plain == hostile
    assert not cell.spans  # no style or link taken from the brackets


OSC52 = "\x1b]52;c;SGVsbG8=\x07"
"""An OSC 52 sequence: a terminal that honours it puts "Hello" on the operator's clipboard."""


@pytest.mark.parametrize(
    ("text", "drawn"),
    [
        ("10.0.0.7:8000", "10.0.0.7:8000"),
        ("Qwen/Qwen3-32B ünïcode 模型", "Qwen/Qwen3-32B ünïcode 模型"),  # printable: untouched
        (OSC52 + "pod", "\\x1b]52;c;SGVsbG8=\\x07pod"),
        ("a\x1b[2Jb\rc\x08d\x00e\x9bf\tg\n", "a\\x1b[2Jb\\rc\\x08d\\x00e\\x9bf\\tg\\n"),
        ("safe\u202eexe.txt", "safe\\u202eexe.txt"),  # a bidi override
        ("x\u200by\u2028z", "x\\u200by\\u2028z"),  # zero-width space, line separator
    ],
)
def test_shown_writes_control_and_bidi_characters_as_visible_escapes(text: str, drawn: str) -> None:
    assert shown(text) == drawn


def test_shown_cuts_a_long_name_with_an_ellipsis_escapes_counted() -> None:
    assert shown("p" * 10240) == "p" * (MAX_CELL_CHARS - 1) + "…"
    assert shown("p" * MAX_CELL_CHARS) == "p" * MAX_CELL_CHARS
    escaped = shown("\x1b" * 10240)  # each ESC is four characters drawn
    assert len(escaped) == MAX_CELL_CHARS
    assert escaped.endswith("…")
    assert shown("e" * 500, MAX_ERROR_CHARS) == "e" * (MAX_ERROR_CHARS - 1) + "…"


def drawn_characters(app: TopApp) -> str:
    """Every character the screen's tables and status line would write to the terminal."""
    out: list[str] = []
    for widget in [*app.query(DataTable), app.query_one("#status")]:
        for y in range(widget.size.height):
            out.extend(segment.text for segment in widget.render_line(y))
    return "".join(out)


async def test_hostile_names_on_the_gateways_pages_never_reach_the_terminal_raw() -> None:
    """A pod (or whoever can label one) names itself with an escape sequence: the endpoint label on
    ``/metrics``, the model and the adapter names on ``/readyz``. rich and textual pass ESC, NUL, C1
    controls and bidi overrides through, so until session s49 ``igw top`` wrote them to the terminal
    raw (an OSC 52 in an endpoint label set the operator's clipboard); now each is drawn as its
    escape, and a 10 KiB adapter name is cut instead of widening its column by 10 KiB."""
    endpoint = f"{OSC52}e\x1b[2J\u202e:1"
    label = endpoint.replace("\\", "\\\\")
    metrics = f'igw_endpoint_queue_depth{{scheduler="s",endpoint="{label}"}} 4\n'.encode()
    readyz = orjson.dumps(
        {
            "schedulers": {
                "s": {
                    "model": f"m\r{OSC52}\x00",
                    "endpoints": {endpoint: {"fresh": True, "adapters": ["\x9b31m", "a" * 10240]}},
                }
            }
        }
    )
    async with garbage_gateway(metrics, readyz) as url:
        app = TopApp(GatewaySource(url), interval_s=30)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(lambda: app.refreshes >= 1, within=30, what="a drawn view")
            await pilot.pause()
            pods = cells(app, "pods", POD_COLUMNS)
            pools = cells(app, "pools", POOL_COLUMNS)
            drawn = drawn_characters(app)
    assert pods[0]["pod"] == "\\x1b]52;c;SGVsbG8=\\x07e\\x1b[2J\\u202e:1"
    assert pools[0]["model"] == "m\\r\\x1b]52;c;SGVsbG8=\\x07\\x00"
    assert pods[0]["adapters"].startswith("\\x9b31m,aaa")
    assert len(pods[0]["adapters"]) == MAX_CELL_CHARS
    assert "SGVsbG8=" in drawn  # the cells were drawn, escaped
    assert all(ch.isprintable() for ch in drawn), sorted({ch for ch in drawn if not ch.isprintable()})


async def test_an_error_quoting_a_hostile_page_is_drawn_escaped_and_cut() -> None:
    """The status line (and ``--screenshot``'s message, which prints the same error) quotes what
    the page said: the Prometheus parser names the line it could not read. A first line of an OSC
    52 sequence and 10 KiB reached the terminal raw and whole (before session s49)."""
    async with garbage_gateway(f"{OSC52}{'x' * 10240}\n".encode(), b"{}") as url:
        app = TopApp(GatewaySource(url), interval_s=30)
        async with app.run_test(size=SIZE):
            await wait_for(lambda: app.last_error is not None, within=30, what="a refused page")
            status = str(app.query_one("#status").render())
            drawn = drawn_characters(app)
    error = app.last_error or ""
    assert "/metrics: not a Prometheus text page" in error
    assert "\\x1b]52;c;SGVsbG8=\\x07xxx" in error
    assert len(error) <= MAX_ERROR_CHARS  # since session s50 the error quotes 80 characters of the line
    assert error in status
    assert all(ch.isprintable() for ch in status + drawn)


async def test_a_gateway_that_accepts_and_never_answers_is_named_with_the_wait() -> None:
    """The whole-request timeout's error has no text: the status line read ``/metrics: TimeoutError: ``
    (before session s49); now it says how long ``igw top`` waited."""
    release = asyncio.Event()

    async def hang(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    source = GatewaySource(url, timeout_s=0.3)
    async with server:
        try:
            with pytest.raises(GatewayUnreachable) as caught:
                await source.scrape()
        finally:
            release.set()
            await source.close()
    assert str(caught.value) == f"{url}/metrics: no answer within 0.3 s"


async def test_top_backs_off_while_the_gateway_does_not_answer_and_says_so() -> None:
    """A listener that accepts and drops every connection at once (a port-forward with nothing
    behind it): at a 50 ms interval ``igw top`` tried ~40 times in 2 s; with the backoff (100, 200,
    400, 800 ms ...) a handful of times, and the status line says when it tries next."""
    accepted: list[float] = []

    async def drop(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(asyncio.get_running_loop().time())
        writer.transport.abort()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        app = TopApp(GatewaySource(url), interval_s=0.05)
        async with app.run_test(size=SIZE):
            await wait_for(lambda: len(accepted) >= 1, within=30, what="the first attempt")
            await asyncio.sleep(2.0)
            attempts = len(accepted)
            status = str(app.query_one("#status").render())
            assert app.unreachable >= 3
    # aiohttp repeats an idempotent request once on a fresh connection when one is dropped: the
    # connections of one attempt come within a few milliseconds of each other
    starts = [t for i, t in enumerate(accepted[:attempts]) if i == 0 or t - accepted[i - 1] > 0.03]
    assert 3 <= len(starts) <= 7, accepted
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Growing, not each gap 1.5x the one before: on a loaded machine one attempt's connections can
    # come more than 30 ms apart and read as two attempts (CI saw 0.11, 0.16, 0.21, 0.40, 0.80 s).
    assert gaps[-1] > 3 * gaps[0], gaps
    assert "scrape failed" in status
    assert re.search(r"retrying in \d+\.\d s", status), status


def test_the_backoff_doubles_up_to_its_bound_and_resets_on_an_answer() -> None:
    app = TopApp(GatewaySource("http://127.0.0.1:9"), interval_s=1.0)
    delays = []
    for failures in range(7):
        app.unreachable = failures
        delays.append(app.next_delay_s())
    assert delays == [1.0, 2.0, 4.0, 8.0, MAX_BACKOFF_S, MAX_BACKOFF_S, MAX_BACKOFF_S]
    slow = TopApp(GatewaySource("http://127.0.0.1:9"), interval_s=30.0)
    slow.unreachable = 3
    assert slow.next_delay_s() == 30.0  # never shorter than the interval asked for


@contextlib.asynccontextmanager
async def garbage_gateway(metrics: bytes, readyz: bytes) -> AsyncIterator[str]:
    """A loopback HTTP server answering ``/metrics`` and ``/readyz`` with the given bodies (200)."""

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics, content_type="text/plain")

    async def readyz_page(_: web.Request) -> web.Response:
        return web.Response(body=readyz, content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/readyz", readyz_page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


GOOD_POD = b'igw_endpoint_queue_depth{scheduler="s",endpoint="e:1"} 4\n'


@pytest.mark.parametrize(
    ("metrics", "readyz", "named"),
    [
        (GOOD_POD, b'{"schedulers": ["s"]}', "/readyz: 'schedulers' is not an object"),
        (
            GOOD_POD,
            b'{"schedulers": {"s": {"endpoints": {"e:1": {"adapters": 3}}}}}',
            "adapters is not a list",
        ),
        (GOOD_POD, b'{"schedulers": {"s": {"model": 7}}}', "schedulers.s.model is not a string"),
        (b"# HELP x caf\xe9\n", b"{}", "/metrics: not text in its charset"),
        (b'inference_pool_ready_pods{name="s"} NaN\n', b"{}", "inference_pool_ready_pods is nan"),
        (b'igw_requests_total{code="200"} 3\n', b"{}", "igw_requests_total sample has no 'model' label"),
        (
            b'igw_request_duration_seconds_bucket{model="m",le="fast"} 1\n',
            b"{}",
            "le='fast', not a number",
        ),
    ],
)
async def test_a_page_top_cannot_draw_is_named_in_the_status_line(
    metrics: bytes, readyz: bytes, named: str
) -> None:
    """A ``/readyz`` or ``/metrics`` not shaped as a gateway writes them (another service behind the
    port-forward, a proxy's page) ended ``igw top`` with a traceback; now the status line names the
    part and the screen keeps trying."""
    async with garbage_gateway(metrics, readyz) as url:
        app = TopApp(GatewaySource(url), interval_s=0.1)
        async with app.run_test(size=SIZE):
            await wait_for(lambda: app.last_error is not None, within=30, what="a refused page")
            assert app.is_running
            status = str(app.query_one("#status").render())
    assert named in status, status
    assert "scrape failed" in status


@contextlib.asynccontextmanager
async def endless_gateway(*, declare: int | None = None) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server whose ``/metrics`` streams 1 MiB chunks (up to twice :data:`MAX_PAGE_BYTES`)
    or, with ``declare``, announces that many bytes and sends one chunk; yields its URL and the bytes
    it managed to send per request."""
    chunk = b"# filler\n" * (1024 * 1024 // 9)
    sent: list[int] = []

    async def metrics_page(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        if declare is not None:
            response.content_length = declare
        await response.prepare(request)
        sent.append(0)
        with contextlib.suppress(ConnectionError):
            while sent[-1] < 2 * MAX_PAGE_BYTES:
                await response.write(chunk)
                sent[-1] += len(chunk)
                if declare is not None:
                    await asyncio.sleep(30)  # the rest never comes
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), sent
    finally:
        await server.close()


async def test_the_screen_s_event_loop_runs_while_a_page_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of many series ``igw top`` reads (or one 10 MB label value) takes the pure-Python parser
    up to seconds; until session s50 it ran on the screen's event loop, which froze keys (``q``,
    Ctrl-C) and drawing meanwhile. The parse here waits for the loop to run a callback: on the loop
    it could not, and the scrape failed."""
    loop_ran = threading.Event()

    def parse_waiting_for_the_loop(metrics: str, readiness: Mapping[str, object], **kwargs: object) -> Scrape:
        loop.call_soon_threadsafe(loop_ran.set)
        assert loop_ran.wait(timeout=5), "the event loop did not run while the page was parsed"
        return parse_scrape(metrics, readiness, **kwargs)  # type: ignore[arg-type]

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(igw.top.source, "parse_scrape", parse_waiting_for_the_loop)
    async with garbage_gateway(GOOD_POD, b"{}") as url:
        source = GatewaySource(url)
        try:
            page = await source.scrape()
        finally:
            await source.close()
    assert page.samples == {("igw_endpoint_queue_depth", (("endpoint", "e:1"), ("scheduler", "s"))): 4.0}


async def test_a_page_past_the_size_bound_is_refused_and_named_in_the_status_line() -> None:
    """A broken or hostile endpoint that sends without end: ``igw top`` kept every byte until the
    5 s timeout (1.9 GB of memory for a 600 MiB stream, before session s39); now it stops reading at
    :data:`MAX_PAGE_BYTES` and the status line says why."""
    async with endless_gateway() as (url, sent):
        app = TopApp(GatewaySource(url), interval_s=30)
        async with app.run_test(size=SIZE):
            await wait_for(lambda: app.last_error is not None, within=30, what="a refused page")
            assert app.is_running
            status = str(app.query_one("#status").render())
    assert f"{url}/metrics: page larger than 64 MiB, not read" in status, status
    assert sent
    assert sent[0] < 2 * MAX_PAGE_BYTES  # it stopped reading; the server could not finish


async def test_a_declared_length_past_the_bound_is_refused_before_reading() -> None:
    async with endless_gateway(declare=MAX_PAGE_BYTES + 1) as (url, _):
        source = GatewaySource(url)
        try:
            with pytest.raises(ScrapeError, match="page larger than 64 MiB") as caught:
                await asyncio.wait_for(source.scrape(), timeout=4)  # not the 5 s read timeout
        finally:
            await source.close()
    assert not isinstance(caught.value, GatewayUnreachable)


ASKED_ALONE_ENTRY = {
    "time": 1.0,
    "request_id": "r1",
    "scheduler": "llama-canary",
    "model": "llama",
    "outcome": "saturated",
    "chosen": None,
    "fallbacks": [],
    "fallbacks_total": 0,
    "candidates": 1,
    "scored": [],
    "scored_total": 0,
    "removed": [],
    "removed_total": 0,
    "reason": "every endpoint saturated",
    "decision_us": None,
    "asked_alone": "10.0.0.9:8000",
}
"""A decision-log entry as the gateway writes a canary continuation's pick among the pod its search
sent the request to (``asked_alone``, untimed: ``decision_us`` null; session s50)."""


async def test_a_pod_asked_alone_is_shown_as_where_the_request_went() -> None:
    """Found by probing (session s50): an ``asked_alone`` entry (its ``decision_us`` null) was
    refused as malformed (``an entry lacks or mistypes``), the decisions table and the whole view
    with it; and nothing said that the pod was asked alone. Now the ``chosen`` cell names that pod
    with a mark, the untimed decision a dash, beside an ordinary timed entry."""
    timed = {**ASKED_ALONE_ENTRY, "outcome": "picked", "chosen": "a:1", "decision_us": 41.5}
    del timed["asked_alone"]

    async def decisions_page(_: web.Request) -> web.Response:
        return web.json_response({"decisions": [timed, ASKED_ALONE_ENTRY]})

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=GOOD_POD, content_type="text/plain")

    async def readyz_page(_: web.Request) -> web.Response:
        return web.json_response({"schedulers": {}})

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/readyz", readyz_page)
    app.router.add_get("/debug/decisions", decisions_page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        top = TopApp(GatewaySource(url, token="t", decisions=5), interval_s=30, show_decisions=True)
        async with top.run_test(size=SIZE) as pilot:
            await wait_for(lambda: top.refreshes >= 1, within=30, what="a drawn view")
            await pilot.pause()
            decisions = cells(top, "decisions", DECISION_COLUMNS)
            status = str(top.query_one("#status").render())
    finally:
        await server.close()
    assert "mistypes" not in status, status
    assert [(row["chosen"], row["decision"]) for row in decisions] == [
        ("a:1", "42 µs"),
        ("10.0.0.9:8000 (asked alone)", "-"),
    ], decisions
