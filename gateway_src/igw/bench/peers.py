"""Peer routers (sglang-router, vllm-router) installed on demand into ``.peers/`` and run as processes.

``igw bench --mode live --peers`` installs them with pip into their own virtual environment
(``.peers/venv``, git-ignored), printing what it installs; without ``--peers`` an absent install is
reported as "not installed" in the results, never faked. Command lines are the peers' documented
``launch`` flags, bound to loopback. Known limits of the comparison, stated in the report:

* sglang-router 0.3.2 adds ~40 ms to streaming TTFT on keep-alive connections (Nagle x delayed ACK),
  which inflates its TTFT in wall time (less after conversion to GPU time at a time scale > 1);
* vllm-router's cache_aware asks each backend for ``/v1/completions/render`` token ids; the simulated
  pods do not serve it, so vllm-router degrades to least-load routing without prefix affinity.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final

import aiohttp

from igw.bench.processes import RouterStartError, free_port, router_process
from igw.bench.router_context import RouterContext

PEERS_DIR: Final = Path(os.environ.get("IGW_PEERS_DIR", ".peers"))
PACKAGES: Final[dict[str, str]] = {"sglang": "sglang-router", "vllm": "vllm-router"}
BINARIES: Final[dict[str, str]] = {"sglang": "smg", "vllm": "vllm-router"}


def venv_bin(name: str) -> Path:
    return PEERS_DIR / "venv" / "bin" / name


def installed(router: str) -> bool:
    return venv_bin(BINARIES[router]).exists()


def install(routers: list[str], *, say: object = print) -> dict[str, str]:
    """pip-install the peers into ``.peers/venv``; returns router -> error for those that failed."""
    tell = say if callable(say) else print
    failures: dict[str, str] = {}
    python = venv_bin("python")
    if not python.exists():
        tell(f"creating {PEERS_DIR / 'venv'} (python -m venv)")
        done = subprocess.run(
            [sys.executable, "-m", "venv", str(PEERS_DIR / "venv")], capture_output=True, text=True
        )
        if done.returncode != 0:
            return {r: f"venv creation failed: {done.stderr.strip()[-300:]}" for r in routers}
    for router in routers:
        if installed(router):
            continue
        tell(f"installing {PACKAGES[router]} into {PEERS_DIR / 'venv'} (pip install {PACKAGES[router]})")
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", PACKAGES[router]], capture_output=True, text=True
        )
        if done.returncode != 0 or not installed(router):
            failures[router] = f"pip install {PACKAGES[router]} failed: {done.stderr.strip()[-300:]}"
    return failures


def peer_argv(
    *,
    router: str,
    executable: str,
    port: int,
    metrics_port: int,
    worker_urls: Sequence[str],
    policy: str,
) -> list[str]:
    """The peer's command line (its documented flags, bound to loopback). The Prometheus
    port is explicit because both peers default to 29000 and would collide."""
    argv = [executable, "launch"] if router == "sglang" else [executable]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls, "--policy", policy]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)]
    argv += ["--log-level", "warn" if router == "sglang" else "warning"]
    return argv


@contextlib.asynccontextmanager
async def peer_router(*, router: str, policy: str, ctx: RouterContext) -> AsyncIterator[str]:
    if not installed(router):
        raise RouterStartError(f"{PACKAGES[router]} is not installed (run with --peers to install it)")
    port, metrics_port = free_port(), free_port()
    argv = peer_argv(
        router=router,
        executable=str(venv_bin(BINARIES[router])),
        port=port,
        metrics_port=metrics_port,
        worker_urls=ctx.pod_urls,
        policy=policy,
    )
    url = f"http://127.0.0.1:{port}"
    async with router_process(
        name=PACKAGES[router],
        argv=argv,
        log_path=ctx.workdir / PACKAGES[router] / "router.log",
        url=url,
        ready_probe="/health",
        timeout_s=90.0,
    ) as ready:
        await _wait_for_workers(ready, model=ctx.model, timeout_s=60.0)
        yield ready


async def _wait_for_workers(url: str, *, model: str, timeout_s: float) -> None:
    """Both peers answer 503 until their workers are registered: wait for one real completion."""

    deadline = time.monotonic() + timeout_s
    body = {"model": model, "prompt": "ready?", "max_tokens": 1}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.post(url + "/v1/completions", json=body) as resp:
                    await resp.read()
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.25)
    raise RouterStartError(
        f"{url}: no successful completion within {timeout_s:.0f}s (workers not registered)"
    )
