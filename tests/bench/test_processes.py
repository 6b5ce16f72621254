"""Router processes are stopped whatever happens, and start failures say why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from igw.bench.processes import RouterStartError, router_process
from igw.bench.rr_proxy import LISTENING_PREFIX
from tests.bench.procs import alive, children, proc_files


async def test_proxy_process_announces_its_url_and_is_stopped_on_exit(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    argv = [sys.executable, "-m", "igw.cli.rr_proxy_process", "http://127.0.0.1:9"]
    async with router_process(
        name="rr", argv=argv, log_path=log, url_pattern=LISTENING_PREFIX + r"(http://\S+)"
    ) as url:
        assert url.startswith("http://127.0.0.1:")
        pid = int(_pid_of(url, log))
        assert alive(pid)
    assert not alive(pid)


def _pid_of(url: str, log: Path) -> str:
    # The proxy does not print its pid; find it through /proc by the port it listens on.
    port = url.rsplit(":", 1)[1]
    for pid, cmd in proc_files("cmdline"):
        if b"igw.cli.rr_proxy_process" in cmd and b"http://127.0.0.1:9" in cmd:
            return str(pid)
    raise AssertionError(f"proxy for port {port} not found (log: {log.read_text()})")


async def test_exit_before_ready_raises_with_the_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('bad flag --frobnicate'); sys.exit(3)"]
    with pytest.raises(RouterStartError, match=r"exited with 3:\n.*bad flag --frobnicate"):
        async with router_process(name="broken", argv=argv, log_path=tmp_path / "b.log", url_pattern="(x)"):
            pass


async def test_never_ready_times_out_and_the_process_is_killed(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time, os; print(os.getpid(), flush=True); time.sleep(60)"]
    log = tmp_path / "slow.log"
    with pytest.raises(RouterStartError, match="not ready after"):
        async with router_process(
            name="slow", argv=argv, log_path=log, url_pattern="never (x)", timeout_s=1.0
        ):
            pass
    pid = int(log.read_text().split()[0])
    assert not alive(pid)


def test_sigterm_during_the_demo_stops_the_router_process_and_exits_130(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    demo = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "demo", "--out", str(tmp_path / "out"), "--requests", "200"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        routers: list[int] = []
        while not routers and time.monotonic() < deadline:
            time.sleep(0.2)
            routers = [
                p for p in children(demo.pid) if b"rr_proxy" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
        assert routers, "the demo never started its round-robin proxy"
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 130
        for pid in routers:
            assert not alive(pid)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
