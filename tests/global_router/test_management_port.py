"""``igw global serve --management-port``: ``/metrics`` and the detailed ``/readyz`` (every cluster's
name, state and heartbeat) leave the traffic port, the one the load balancer exposes."""

from __future__ import annotations

import random
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import yaml

from igw.gateway.serving import serve_app
from igw.global_router.config import GlobalConfigError, parse_global_config
from igw.global_router.server import create_global_app, global_management_app
from tests.global_router.support import global_doc
from tests.reliability.harness import end_process


async def test_metrics_and_cluster_detail_only_on_the_management_listener() -> None:
    config = parse_global_config(global_doc())
    app = create_global_app(config, rng=random.Random(1), read_heartbeats=False, management_listener=True)
    async with (
        serve_app(global_management_app(app), host="127.0.0.1", port=0) as management,
        serve_app(app, host="127.0.0.1", port=0) as traffic,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(traffic + "/metrics") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "not_found"
        async with http.get(traffic + "/readyz") as resp:
            assert await resp.json() == {"ready": resp.status == 200}  # nothing but the verdict
        async with http.get(traffic + "/healthz") as resp:
            assert resp.status == 200
        async with http.get(management + "/metrics") as resp:
            assert resp.status == 200
            assert "igw_global" in await resp.text()
        async with http.get(management + "/readyz") as resp:
            detail = await resp.json()
            assert set(detail["clusters"]) == {"east-a", "east-b", "west-a"}


async def test_without_a_management_port_one_port_serves_everything() -> None:
    app = create_global_app(parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False)
    async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
        async with http.get(url + "/metrics") as resp:
            assert resp.status == 200
        async with http.get(url + "/readyz") as resp:
            assert "clusters" in await resp.json()


def test_the_management_port_must_differ_from_the_traffic_port(tmp_path: Path) -> None:
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(global_doc()))
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
         "--port", "8090", "--management-port", "8090"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--management-port: 8090 is also the inference port (--port)" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_field_equal_to_the_traffic_port_is_refused_naming_the_field(tmp_path: Path) -> None:
    doc = global_doc()
    doc["spec"]["management"] = {"port": 8090}
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config), "--port", "8090"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "spec.management.port: 8090 is also the inference port (--port)" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_config_field_is_read_and_the_flag_overrides_it() -> None:
    doc = global_doc()
    doc["spec"]["management"] = {"port": 9191}
    config = parse_global_config(doc)
    assert config.management == {"port": 9191}
    assert parse_global_config(global_doc()).management is None
    with pytest.raises(GlobalConfigError, match=r"spec\.management\.port"):
        parse_global_config({**doc, "spec": {**doc["spec"], "management": {"port": 80}}})


@pytest.mark.parametrize("where", ["flag", "config"])
def test_igw_global_serve_opens_the_management_listener(tmp_path: Path, where: str) -> None:
    doc = global_doc()
    flag = ["--management-port", "0"] if where == "flag" else []
    if where == "config":
        # A fixed port from the config file (no flag): the one the listener must be on.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        doc["spec"]["management"] = {"port": free}
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0", *flag, "--drain-seconds", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        urls: dict[str, str] = {}
        for line in proc.stderr:
            if found := re.search(r"management listener \(/metrics, /readyz\) at (http://\S+)", line):
                urls["management"] = found.group(1)
            if found := re.search(r"serving \d+ cluster\(s\) at (http://\S+)", line):
                urls["traffic"] = found.group(1)
                break
        assert set(urls) == {"management", "traffic"}, urls
        if where == "config":
            assert urls["management"].endswith(f":{free}"), urls
        with urllib.request.urlopen(urls["management"] + "/metrics", timeout=10) as resp:
            assert b"igw_global" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urls["traffic"] + "/metrics", timeout=10)
        assert refused.value.code == 404
        refused.value.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        end_process(proc)
