"""``igw serve`` with a management listener, as real processes on loopback: ``/metrics``, the detailed
``/readyz`` and ``/debug/decisions`` answer only on the management port; the inference port keeps
``/healthz`` and a ``/readyz`` without detail; ``--workers 2`` still shows the whole host there."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from igw.cli.main import main
from igw.gateway.management import ManagementPortError, management_port
from igw.top.source import GatewaySource
from igw.top.view import ScrapeError
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_all_fresh
from tests.reliability.harness import MODEL, ServedGateway, gateway_doc, igw_serve, wait_until
from tests.reliability.test_http_errors import raw_exchange

TOKEN = "operator-debug-token-0123456789"
PUBLIC_PORT_TARGETS = [
    f"{prefix}{path}"
    for path in ("metrics", "debug/decisions")
    for prefix in ("/v1/%2e%2e/", "/v1/../", "/./", "//", "//evil/", "/%2f", "http://evil/")
]
"""Targets that name a management path on the inference port in a form other than its own."""
_MANAGEMENT = re.compile(r"management listener at (http://\S+)")


def _management_url(gw: ServedGateway) -> str:
    found = _MANAGEMENT.search(gw.output)
    assert found, gw.output
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _get(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, str]:
    async with http.get(url, **kwargs) as resp:
        return resp.status, await resp.text()


async def test_operational_paths_move_to_the_management_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IGW_DEBUG_TOKEN", TOKEN)
    args = ("--management-port", "0", "--debug-decisions", "8", "--drain-seconds", "2")
    async with (
        running(FakeModelServer("pod")) as (pod,),
        igw_serve(tmp_path, gateway_doc(), [pod.key], *args) as gw,
        aiohttp.ClientSession() as http,
    ):
        management = _management_url(gw)
        assert management != gw.url
        await wait_all_fresh(http, management)
        resp = await http.post(gw.url + "/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert resp.status == 200  # inference is where it was
        await resp.read()
        bearer = {"Authorization": f"Bearer {TOKEN}"}

        # the inference port: liveness, a readiness without detail, nothing else operational
        assert await _get(http, gw.url + "/healthz") == (200, "ok")
        status, body = await _get(http, gw.url + "/readyz")
        assert (status, yaml.safe_load(body)) == (200, {"ready": True})
        assert pod.key not in body  # no pod address, error or pid: exactly {"ready": true}
        for path in ("/metrics", "/debug/decisions"):
            status, body = await _get(http, gw.url + path, headers=bearer)
            assert status == 404, path
            assert yaml.safe_load(body)["error"]["code"] == "not_found"  # OpenAI-shaped
        # nor by a spelling that a client library would normalise away (sent as raw bytes)
        for target in PUBLIC_PORT_TARGETS:
            request = f"GET {target} HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer {TOKEN}\r\n"
            status, _, raw = await raw_exchange(gw.url, f"{request}Connection: close\r\n\r\n".encode())
            assert status in (400, 404), (target, raw[:200])
            assert b"igw_" not in raw  # no metrics page
            assert b'"decisions"' not in raw  # no decisions page

        # the management port: the same gateway's metrics, pod detail and decisions
        status, body = await _get(http, management + "/metrics")
        assert status == 200
        samples = [s for f in text_string_to_metric_families(body) for s in f.samples]
        assert any(s.name == "igw_requests_total" and s.value >= 1 for s in samples)
        status, body = await _get(http, management + "/readyz")
        assert status == 200
        detail = yaml.safe_load(body)
        assert pod.key in detail["schedulers"][MODEL]["endpoints"]
        status, body = await _get(http, management + "/debug/decisions", headers=bearer)
        assert status == 200
        assert len(yaml.safe_load(body)["decisions"]) == 1
        assert (await _get(http, management + "/healthz"))[0] == 200
        # igw top reads the management port; pointed at the inference port it says where to look
        source = GatewaySource(management, token=TOKEN, decisions=4)
        try:
            scrape = await source.scrape()
        finally:
            await source.close()
        assert scrape.decisions
        wrong = GatewaySource(gw.url)
        try:
            with pytest.raises(ScrapeError, match="--management-port"):
                await wrong.scrape()
        finally:
            await wrong.close()
        # and no inference there
        resp = await http.post(management + "/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert resp.status in (404, 405)
        await resp.read()

        # SIGTERM: the load balancer's check on the inference port sees the drain, and so does the
        # management port (which closes after the inference listener)
        gw.proc.send_signal(signal.SIGTERM)
        draining: tuple[int, str] = (0, "")
        for _ in range(200):
            draining = await _get(http, gw.url + "/readyz")
            if draining[0] == 503:
                break
            await asyncio.sleep(0.02)
        assert (draining[0], yaml.safe_load(draining[1])) == (503, {"ready": False})
        status, body = await _get(http, management + "/readyz")
        assert (status, yaml.safe_load(body)["draining"]) == (503, True)


async def test_the_config_extension_sets_the_port(tmp_path: Path) -> None:
    port = _free_port()
    doc = gateway_doc()
    doc["spec"]["extensions"]["management"] = {"port": port}
    async with (
        running(FakeModelServer("pod")) as (pod,),
        igw_serve(tmp_path, doc, [pod.key]) as gw,
        aiohttp.ClientSession() as http,
    ):
        assert _management_url(gw) == f"http://127.0.0.1:{port}"
        assert (await _get(http, gw.url + "/metrics"))[0] == 404
        assert (await _get(http, f"http://127.0.0.1:{port}/metrics"))[0] == 200


async def test_two_workers_answer_for_the_whole_host_on_the_management_port(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("p0")) as (pod,),
        igw_serve(tmp_path, gateway_doc(), [pod.key], "--workers", "2", "--management-port", "0") as gw,
    ):
        # the parent names the port once worker 0 serves (workers start one after the other)
        await wait_until(
            lambda: re.search(r"management port (\d+)", gw.output) is not None, within=60, what="the port"
        )
        found = re.search(r"management port (\d+)", gw.output)
        assert found, gw.output  # the parent reserved one port for both workers
        management = f"http://127.0.0.1:{found.group(1)}"
        await wait_until(lambda: gw.output.count("management listener at") == 2, within=60, what="workers")
        assert set(_MANAGEMENT.findall(gw.output)) == {management}
        # A worker's listeners open a moment before the other worker reads its metrics socket (a CI run
        # on a loaded machine, 2026-12-06, read one worker's series alone): both are in before the checks.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            for _ in range(300):
                body = (await _get(http, management + "/metrics"))[1]
                families = text_string_to_metric_families(body)
                if {s.labels.get("worker") for f in families for s in f.samples} == {"0", "1"}:
                    break
                await asyncio.sleep(0.1)
        seen: set[int] = set()
        for _ in range(200):
            if len(seen) == 2:
                break
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
                status, body = await _get(http, management + "/metrics")
                assert status == 200
                workers = {
                    s.labels.get("worker") for f in text_string_to_metric_families(body) for s in f.samples
                }
                assert workers == {"0", "1"}  # whichever worker answers, it answers for both
                status, body = await _get(http, management + "/readyz")
                seen.add(yaml.safe_load(body)["worker"]["index"])  # the detail is the answering worker's
                assert (await _get(http, gw.url + "/metrics"))[0] == 404
        assert seen == {0, 1}


def test_the_management_port_must_differ_from_the_inference_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(gateway_doc()))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {MODEL: ["127.0.0.1:9"]}}))
    code = main(
        ["serve", "--config", str(tmp_path / "c.yaml"), "--endpoints", str(tmp_path / "e.yaml"),
         "--port", "9100", "--management-port", "9100"]
    )  # fmt: skip
    assert code == 2
    assert "--management-port: 9100 is also the inference port" in capsys.readouterr().err


def test_the_option_wins_over_the_extension() -> None:
    assert management_port(None, None, serving_port=8080) is None
    assert management_port({"port": 9091}, None, serving_port=8080) == 9091
    assert management_port({"port": 9091}, 9092, serving_port=8080) == 9092
    assert management_port(None, 0, serving_port=0) == 0  # two free ports, picked apart
    with pytest.raises(ManagementPortError, match=r"spec\.extensions\.management\.port: 8080"):
        management_port({"port": 8080}, None, serving_port=8080)
