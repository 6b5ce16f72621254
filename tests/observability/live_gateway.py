"""A real ``igw serve`` process in front of a simulated vLLM fleet, driven with mixed traffic, and its
``/metrics`` page: what the observability tests check names against."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.support import config_doc, scheduler, serving_url

MODEL = "llama"


@contextlib.asynccontextmanager
async def serving_gateway(
    tmp_path: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    stdout: list[str] | None = None,
    stderr: list[str] | None = None,
) -> AsyncIterator[str]:
    """Yield the URL of ``igw serve`` routing ``llama`` to two simulated pods; stop both on exit.

    ``extra_args`` are appended to the command line; ``env`` is added to the process environment.
    """
    pods = [{"name": f"p{i}", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL} for i in (0, 1)]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 3, "pods": pods})
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        async with igw_serve(tmp_path, keys, *extra_args, env=env, stdout=stdout, stderr=stderr) as url:
            yield url


@contextlib.asynccontextmanager
async def igw_serve(
    tmp_path: Path,
    keys: list[str],
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    stdout: list[str] | None = None,
    stderr: list[str] | None = None,
    lora_adapters: Sequence[str] = (),
) -> AsyncIterator[str]:
    """Yield the URL of an ``igw serve`` process routing ``llama`` to ``keys``; SIGTERM it on exit.

    ``stdout``: collects the process's stdout lines (access log, EMF) as they arrive; ``stderr``: its
    log lines after the one that says where it serves;
    ``lora_adapters``: the scheduler's ``loraAdapters`` (the gateway reads pods' adapter residency
    only for schedulers that can receive adapter requests).
    """
    extra = {"loraAdapters": list(lora_adapters)} if lora_adapters else {}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler(MODEL, MODEL, **extra)])))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {MODEL: keys}}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
        "--endpoints", str(tmp_path / "e.yaml"), "--host", "127.0.0.1", "--port", "0",
        "--drain-seconds", "0", *extra_args,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL if stdout is None else asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    try:
        url = await serving_url(proc.stderr)
        assert proc.stderr is not None
        drains = [asyncio.create_task(_drain(proc.stderr, stderr))]
        if proc.stdout is not None and stdout is not None:
            drains.append(asyncio.create_task(_drain(proc.stdout, stdout)))
        yield url
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), timeout=30)
        await asyncio.gather(*drains)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _drain(stream: asyncio.StreamReader, into: list[str] | None = None) -> None:
    while line := await stream.readline():
        if into is not None:
            into.append(line.decode())


async def wait_ready(http: aiohttp.ClientSession, url: str) -> None:
    for _ in range(200):
        ready = await http.get(url + "/readyz")
        ready.release()
        if ready.status == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never became ready")


async def metrics_after_traffic(url: str) -> dict[str, Metric]:
    """Send streamed, plain and failing requests, wait for fresh pod metrics, then scrape.

    Returns every exported family by name (a declared family may have no samples yet).
    """
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, url)
        for stream in (False, True, True):
            body = {"model": MODEL, "prompt": "hello world", "max_tokens": 4, "stream": stream}
            resp = await http.post(url + "/v1/completions", json=body)
            assert resp.status == 200, await resp.text()
            await resp.read()
        unknown = await http.post(url + "/v1/completions", json={"model": "nope", "prompt": "x"})
        assert unknown.status >= 400
        unknown.release()
        families: dict[str, Metric] = {}
        for _ in range(200):  # the pool gauges need a completed scrape of every pod
            text = await (await http.get(url + "/metrics")).text()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            pool_kv = families.get("inference_pool_average_kv_cache_utilization")
            if pool_kv is not None and pool_kv.samples:
                break
            await asyncio.sleep(0.05)
        return families
