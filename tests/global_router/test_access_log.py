"""The global router's access log (:mod:`igw.global_router.access_log`): one JSON line per inference
request naming the cluster that answered and every cluster tried with its outcome, written when the
request ends (a stream at its end, a client leaving mid-stream too), through tier 1's writer and
redaction. Real HTTP: a router replica in front of fake model servers standing in for clusters."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from igw.config.errors import ConfigError
from igw.gateway.log_buffer import BatchedLineHandler, line_sink
from igw.gateway.redaction import RedactingFormatter
from igw.gateway.response_ids import response_ref
from igw.gateway.serving import serve_app
from igw.gateway.upstream_client import MAX_RESPONSE_FIELDS
from igw.global_router.access_log import RouterAccessRecord, router_access_log
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_for
from tests.global_router.support import MODEL, global_doc, global_serve
from tests.log_capture import written_line

LOGGER = "igw.global_router.access"
SECRET = "sk-live-abcdefgh12345678"


@contextlib.asynccontextmanager
async def router(*servers: FakeModelServer, **spec: Any) -> AsyncIterator[str]:
    """A router (open, region ``east``) whose clusters are ``servers`` in order (``c0``, ``c1``...;
    the first in ``east``, the rest in ``west``, so tried in that order); yields its URL."""
    clusters = [
        {
            "name": f"c{index}",
            "region": "east" if index == 0 else "west",
            "endpoint": f"http://{server.key}",
            "models": [MODEL],
        }
        for index, server in enumerate(servers)
    ]
    app = create_global_app(
        parse_global_config(global_doc(clusters, heartbeats={"required": False}, **spec)),
        read_heartbeats=False,
    )
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        yield url


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [orjson.loads(r.getMessage()) for r in caplog.records if r.name == LOGGER]


COMPLETION = {"model": MODEL, "prompt": "x", "max_tokens": 2}
JSON = {"Content-Type": "application/json"}


async def test_a_failed_over_request_names_both_clusters_and_their_outcomes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east", infer_status=503), FakeModelServer("west")) as (east, west),
        router(east, west) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", data=orjson.dumps(COMPLETION), headers=JSON) as resp,
    ):
        body = await resp.read()
        answered_id = resp.headers["x-request-id"]
    assert resp.status == 200
    [line] = lines(caplog)
    assert line["tried"] == [{"cluster": "c0", "outcome": "503"}, {"cluster": "c1", "outcome": "200"}]
    assert (line["status"], line["cluster"], line["region"], line["model"]) == (200, "c1", "west", MODEL)
    assert line["request_id"] == answered_id
    assert line["bytes_in"] == len(orjson.dumps(COMPLETION))
    assert line["bytes_out"] == len(body)
    assert line["stream"] is False
    assert line["client"] == "127.0.0.1"
    assert 0 < line["ttfb_ms"] <= line["duration_ms"]
    assert "error" not in line
    assert "tenant" not in line


async def test_a_clusters_broken_answer_logs_its_cause(caplog: pytest.LogCaptureFixture) -> None:
    """A cluster's answer the router refuses (more header fields than it takes: a 502
    ``upstream_error``) is logged with its cause in its ``tried`` entry's ``error``, as tier 1's line
    gives a failed exchange's cause (until session s49 only the outcome, 502); the next cluster
    answers, its entry without one."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    many = tuple((f"X-F{i}", "1") for i in range(MAX_RESPONSE_FIELDS + 1))
    async with (
        running(FakeModelServer("east", answer_fields=many), FakeModelServer("west")) as (east, west),
        router(east, west) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", data=orjson.dumps(COMPLETION), headers=JSON) as resp,
    ):
        assert resp.status == 200
    [line] = lines(caplog)
    assert line["tried"] == [
        {
            "cluster": "c0",
            "outcome": "502",
            "error": "UpstreamBroken: the cluster's response has more than "
            f"{MAX_RESPONSE_FIELDS} header fields",
        },
        {"cluster": "c1", "outcome": "200"},
    ]
    assert "error" not in line  # the answer relayed is c1's


async def test_a_cluster_that_refuses_connections_is_named_as_such(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    dead = FakeModelServer("dead")
    with socket.socket() as closed:  # a port nothing listens on once closed: connections refused
        closed.bind(("127.0.0.1", 0))
        dead.port = closed.getsockname()[1]
    async with (
        running(FakeModelServer("west")) as (west,),
        router(dead, west) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", data=orjson.dumps(COMPLETION), headers=JSON) as resp,
    ):
        assert resp.status == 200
    [line] = lines(caplog)
    assert line["tried"] == [
        {"cluster": "c0", "outcome": "connect-failed"},
        {"cluster": "c1", "outcome": "200"},
    ]


async def test_a_refused_request_logs_its_error_code(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east", infer_status=503)) as (east,),
        router(east) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", json={**COMPLETION, "model": "nope"}) as resp,
    ):
        await resp.read()
    [line] = lines(caplog)
    assert (line["status"], line["error"], line["tried"]) == (404, "model_not_found", [])


async def test_a_streamed_request_is_logged_at_its_end_with_its_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east", tokens=4, token_delay_s=0.1)) as (east,),
        router(east) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", json={**COMPLETION, "stream": True}) as resp,
    ):
        first = await resp.content.readany()
        assert first
        assert lines(caplog) == []
        rest = await resp.read()
        # the handler returns just after the stream's last bytes (seconds later on a loaded box)
        await wait_for(lambda: bool(lines(caplog)), within=10, what="the access line")
    [line] = lines(caplog)
    assert b"[DONE]" in first + rest
    assert (line["status"], line["stream"], line["tried"]) == (
        200,
        True,
        [{"cluster": "c0", "outcome": "200"}],
    )
    assert line["bytes_out"] == len(first + rest)  # the body: no head, no chunk framing
    assert line["ttfb_ms"] < line["duration_ms"]
    assert line["duration_ms"] >= 300  # four events 0.1 s apart: written at the end


@pytest.mark.parametrize("tokens", [8, 1_200_000], ids=["sent-whole", "relayed-as-it-came"])
async def test_bytes_out_is_the_body_sent_whether_whole_or_relayed(
    caplog: pytest.LogCaptureFixture, tokens: int
) -> None:
    """One definition for both kinds of answer: the body bytes the client got. An answer over the
    router's buffer (1 MiB) is relayed as it arrives; until session s49 its line counted the wire
    bytes (head and framing) while a smaller answer's counted its body."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east", tokens=tokens)) as (east,),
        router(east) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", json=COMPLETION) as resp,
    ):
        body = await resp.read()
        # a relayed answer's handler returns just after its last bytes (seconds left to a loaded box)
        await wait_for(lambda: bool(lines(caplog)), within=10, what="the access line")
    assert resp.status == 200
    assert len(body) > tokens
    [line] = lines(caplog)
    assert line["bytes_out"] == len(body)


async def test_a_client_leaving_mid_stream_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east", tokens=50, token_delay_s=0.1)) as (east,),
        router(east) as url,
    ):
        async with (
            aiohttp.ClientSession() as http,
            http.post(url + "/v1/completions", json={**COMPLETION, "stream": True}) as resp,
        ):
            assert await resp.content.readany()
        # the session closed: the router notices at its next write
        await wait_for(lambda: bool(lines(caplog)), within=10, what="the access line")
    [line] = lines(caplog)
    assert (line["status"], line["error"]) == (499, "client disconnected")
    assert [t["cluster"] for t in line["tried"]] == ["c0"]
    assert line["tried"][0]["outcome"] in ("client-gone", "cancelled")
    assert line["bytes_out"] > 0
    assert line["stream"] is True
    assert line["duration_ms"] < 4000  # not the whole 5 s stream


async def test_a_stored_response_search_is_logged_with_each_cluster_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A retrieval the router searches for (no cluster remembered): its line names each cluster
    asked with its outcome - a 404, an answer about another response withheld - and the one that
    answered. Until session s49 the stored-response routes wrote no line at all."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    stored = {"id": "resp_kept", "object": "response", "status": "completed", "output": []}
    east, middle, west = FakeModelServer("east"), FakeModelServer("middle"), FakeModelServer("west")
    middle.stored_answer = (200, orjson.dumps({**stored, "id": "resp_other"}))  # not relayed
    west.stored_responses["resp_kept"] = stored
    async with (
        running(east, middle, west),
        router(east, middle, west) as url,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(url + "/v1/responses/resp_kept?include=x") as resp:
            body = await resp.read()
            answered_id = resp.headers["x-request-id"]
        async with http.delete(url + "/v1/responses/resp_nowhere") as gone:
            await gone.read()
        async with http.get(url + "/v1/responses/resp_nowhere") as unfound:
            await unfound.read()
    assert (resp.status, gone.status, unfound.status) == (200, 404, 404)
    found, missing, again = lines(caplog)
    assert found["tried"] == [
        {"cluster": "c0", "outcome": "404"},
        {"cluster": "c1", "outcome": "another-response"},
        {"cluster": "c2", "outcome": "200"},
    ]
    assert (found["method"], found["path"], found["request_id"]) == (
        "GET",
        f"/v1/responses/{{response_id:{response_ref('resp_kept')}}}",  # the id left out (s50)
        answered_id,
    )
    assert not [
        r for r in caplog.records if "resp_kept" in r.getMessage() or "resp_nowhere" in r.getMessage()
    ]
    assert found["model"] == missing["model"] == MODEL  # the answering cluster's one model (s50)
    assert "model" not in again  # no cluster answered
    assert (found["status"], found["cluster"], found["region"]) == (200, "c2", "west")
    assert found["bytes_out"] == len(body)
    assert (found["bytes_in"], found["stream"]) == (0, False)
    assert 0 < found["ttfb_ms"] <= found["duration_ms"]
    assert (missing["method"], missing["status"], missing["cluster"]) == ("DELETE", 404, "c2")
    assert [t["outcome"] for t in missing["tried"]] == ["404", "another-response", "404"]
    assert (again["status"], again["error"], again["tried"]) == (404, "response_not_found", [])
    assert "cluster" not in again  # found nowhere moments ago: no cluster asked


async def test_the_log_can_be_turned_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    async with (
        running(FakeModelServer("east")) as (east,),
        router(east, accessLog={"enabled": False}) as url,
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", json=COMPLETION) as resp,
    ):
        assert resp.status == 200
    assert lines(caplog) == []


@pytest.mark.parametrize(
    ("access_log", "path"),
    [
        ({"destination": "file"}, "spec.accessLog.destination"),
        ({"enabled": "yes"}, "spec.accessLog.enabled"),
        ({"level": "debug"}, "spec.accessLog"),
    ],
)
def test_a_bad_access_log_setting_is_refused_by_path(access_log: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_global_config(global_doc(accessLog=access_log))
    assert path in str(refused.value)


def test_the_settings_are_read() -> None:
    config = parse_global_config(global_doc(accessLog={"destination": "stderr"}))
    assert (config.access_log.enabled, config.access_log.destination) == (True, "stderr")
    assert parse_global_config(global_doc()).access_log.destination == "stdout"


# Redaction: the real writer (igw global serve's set-up: the batched handler, the redacting formatter)


@pytest.fixture
def served_logger() -> Iterator[tuple[io.StringIO, BatchedLineHandler]]:
    saved = (router_access_log.handlers[:], router_access_log.propagate, router_access_log.level)
    stream = io.StringIO()
    handler = BatchedLineHandler(stream, interval_s=3600.0)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    try:
        yield stream, handler
    finally:
        handler.close()
        router_access_log.handlers[:], router_access_log.propagate, level = saved
        router_access_log.setLevel(level)


def _written(stream: io.StringIO, handler: BatchedLineHandler, record: RouterAccessRecord) -> str:
    router_access_log.handlers[:] = [handler]
    router_access_log.propagate = False
    router_access_log.setLevel(logging.INFO)
    assert line_sink(router_access_log) is handler  # the deferred path: built on the writer thread
    return written_line(handler, stream, record.emit)


TEXT_FIELDS = [
    f.name
    for f in dataclasses.fields(RouterAccessRecord)
    if f.type in ("str | None", "str") and f.name != "request_id"
]
CREDENTIALS = [
    f"Authorization: Bearer {SECRET}",
    f"x-api-key={SECRET}",
    f"/v1/completions?api_key={SECRET}",
    f"rediss://user:{SECRET}@cache.example:6379",
]


def test_every_text_field_is_listed() -> None:
    assert set(TEXT_FIELDS) == {
        "method",
        "path",
        "client",
        "model",
        "tenant",
        "error",
        "cluster",
        "region",
        "trace_id",
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.sampled_from([*TEXT_FIELDS, "tried-cluster", "tried-outcome", "tried-error", "request_id"]),
    credential=st.sampled_from(CREDENTIALS),
    prefix=st.sampled_from(["", " ", "a b ", "x="]),
)
def test_no_credential_reaches_a_line(
    served_logger: tuple[io.StringIO, BatchedLineHandler], where: str, credential: str, prefix: str
) -> None:
    stream, handler = served_logger
    value = prefix + credential
    record = RouterAccessRecord("0123456789abcdef" * 2, "POST", "/v1/completions", status=200)
    record.attempt("c0", 503)
    if where == "tried-cluster":
        record.attempt(value, 200)
    elif where == "tried-outcome":
        record.attempt("c1", value)
    elif where == "tried-error":
        record.attempt("c1", 502, f"cluster 'c1' answered a redirect to {value}")
    else:
        setattr(record, where, value)
    line = _written(stream, handler, record)
    assert SECRET not in line, (where, line)
    orjson.loads(line)  # still one JSON object


def test_a_clean_line_is_written_as_built(served_logger: tuple[io.StringIO, BatchedLineHandler]) -> None:
    stream, handler = served_logger
    record = RouterAccessRecord("0123456789abcdef" * 2, "POST", "/v1/completions", model=MODEL, status=200)
    record.attempt("c0", 200)
    assert record.redaction_free()
    assert _written(stream, handler, record) == record.render_line()[0]


async def test_igw_global_serve_writes_the_line_redacted(tmp_path: Path) -> None:
    """The real command (its writer thread, its redacting formatter), the lines on stderr
    (``destination: stderr``): the router's line is written, and neither the client's
    ``Authorization`` nor an api key in the query string is in any line it wrote."""
    printed: list[str] = []
    async with running(FakeModelServer("east")) as (east,):
        clusters = [{"name": "c0", "region": "east", "endpoint": f"http://{east.key}", "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False}, accessLog={"destination": "stderr"})
        async with global_serve(tmp_path, doc, stderr_lines=printed) as url, aiohttp.ClientSession() as http:
            headers = {**JSON, "Authorization": f"Bearer {SECRET}", "x-api-key": SECRET}
            target = f"{url}/v1/completions?api_key={SECRET}"
            async with http.post(target, data=orjson.dumps(COMPLETION), headers=headers) as resp:
                assert resp.status == 200
    logged = [orjson.loads(line) for line in printed if line.startswith('{"request_id"')]
    assert [(line["path"], line["status"], line["cluster"]) for line in logged] == [
        ("/v1/completions", 200, "c0")
    ]
    assert not any(SECRET in line for line in printed)
