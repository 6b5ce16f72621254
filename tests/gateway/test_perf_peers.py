"""The pure helpers that let ``igw perf gateway`` find and launch the peer routers."""

from __future__ import annotations

from pathlib import Path

import pytest

from igw.bench.processes import RouterStartError
from igw.perf.gateway import _cpu_rows
from igw.perf.gateway_load import PEER_POLICY, peer_command, peer_executable, peer_process


def _no_path(name: str) -> str | None:
    return None


def test_peer_executable_prefers_the_peers_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    local = tmp_path / ".peers" / "venv" / "bin" / "smg"
    local.parent.mkdir(parents=True)
    local.write_text("#!/bin/sh\n")
    found = peer_executable("sglang", which=lambda name: f"/usr/bin/{name}")
    assert found is not None
    assert Path(found).resolve() == local.resolve()


def test_peer_executable_falls_back_to_path_then_package_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert peer_executable("vllm", which=lambda name: f"/opt/bin/{name}") == "/opt/bin/vllm-router"
    only_package = {"sglang-router": "/opt/bin/sglang-router"}
    assert peer_executable("sglang", which=only_package.get) == "/opt/bin/sglang-router"
    assert peer_executable("sglang", which=_no_path) is None


def test_peer_command_sglang_uses_launch_and_its_log_level() -> None:
    argv = peer_command("sglang", executable="smg", port=4001, metrics_port=4002, backend="127.0.0.1:9")
    assert argv[:2] == ["smg", "launch"]
    assert argv[argv.index("--worker-urls") + 1] == "http://127.0.0.1:9"
    assert argv[argv.index("--port") + 1] == "4001"
    assert argv[argv.index("--prometheus-port") + 1] == "4002"
    assert argv[argv.index("--policy") + 1] == PEER_POLICY
    assert argv[-2:] == ["--log-level", "warn"]


def test_peer_command_vllm_has_no_subcommand_and_its_log_level() -> None:
    argv = peer_command("vllm", executable="vllm-router", port=1, metrics_port=2, backend="h:3")
    assert argv[0] == "vllm-router"
    assert argv[1] == "--host"
    assert "launch" not in argv
    assert argv[-2:] == ["--log-level", "warning"]


def test_absent_peer_is_refused_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with (
        pytest.raises(RouterStartError, match="vllm-router not installed"),
        peer_process(tmp_path, router="vllm", backend="127.0.0.1:9"),
    ):
        pass


def test_cpu_target_is_judged_against_sglang_router_at_concurrency_32() -> None:
    label = f"sglang-router ({PEER_POLICY})"
    better = _cpu_rows({"gateway": 150.0, label: 200.0}, concurrency=32, failed={})
    assert better[0]["verdict"] == "met"
    assert better[1]["metric"] == f"{label} CPU per request, concurrency 32"
    worse = _cpu_rows({"gateway": 250.0, label: 200.0}, concurrency=32, failed={})
    assert worse[0]["verdict"] == "MISSED"
    assert _cpu_rows({"gateway": 250.0, label: 200.0}, concurrency=1, failed={})[0]["verdict"] == "n/a"


def test_cpu_target_without_sglang_router_is_not_judged_and_says_why() -> None:
    rows = _cpu_rows({"gateway": 250.0}, concurrency=32, failed={"sglang-router (x)": "exited with 1"})
    assert rows[0]["verdict"] == "n/a"
    assert "exited with 1" in rows[0]["baseline"]
