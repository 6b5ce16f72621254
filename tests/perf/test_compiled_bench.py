"""``igw perf compiled --peers``: the peer routers run beside each tree and every run's gateway CPU
per request at concurrency 32 is given as a ratio to the better peer's of the same run (issue 16's
target); without ``--peers`` no peer directory reaches the runs. The runs themselves are stood in for
by a fake ``igw perf gateway`` that records its environment and writes the rows it would print."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from igw.cli.main import build_parser
from igw.compiled import inspect_tree
from igw.perf import compiled
from igw.perf.compiled import better_peer, peer_ratio, run_environment

GATEWAY_32 = "gateway CPU per request, concurrency 32"
SGLANG_32 = "sglang-router 0.3.2 (round_robin) CPU per request, concurrency 32"
VLLM_32 = "vllm-router 0.1.17 (round_robin) CPU per request, concurrency 32"
VLLM_1 = "vllm-router 0.1.17 (round_robin) CPU per request, concurrency 1"


def test_the_environment_passes_the_peers_directory_only_with_peers(tmp_path: Path) -> None:
    base = {"IGW_PEERS_DIR": "/somewhere/peers", "PATH": "/bin", "PYTHONPATH": "/elsewhere"}
    with_peers = run_environment(tmp_path, peers=True, environ=base)
    without = run_environment(tmp_path, peers=False, environ=base)
    assert with_peers == {"IGW_PEERS_DIR": "/somewhere/peers", "PATH": "/bin", "PYTHONPATH": str(tmp_path)}
    assert without == {"PATH": "/bin", "PYTHONPATH": str(tmp_path)}
    assert base["PYTHONPATH"] == "/elsewhere"  # the caller's mapping is not changed


def test_the_better_peer_is_the_lowest_concurrency_32_figure_and_never_the_gateway() -> None:
    rows = {
        GATEWAY_32: "40 µs",  # lower than both peers: must not be taken for one
        SGLANG_32: "80 µs",
        VLLM_32: "57 µs",
        VLLM_1: "20 µs",  # concurrency 1: not the target's row
        "sglang-router 0.3.2 (round_robin), concurrency 32": "not measured",
    }
    assert better_peer(rows) == ("vllm-router 0.1.17 (round_robin)", 57.0)
    assert better_peer({GATEWAY_32: "150 µs"}) is None
    assert peer_ratio(150.0, ("vllm-router", 60.0)) == pytest.approx(2.5)
    assert peer_ratio(150.0, None) is None
    assert peer_ratio(None, ("vllm-router", 60.0)) is None


def _fake_perf_gateway(calls: list[dict[str, str]], cpu: dict[str, float], peer_cpu: dict[str, float]) -> Any:
    """A stand-in for ``subprocess.run`` of ``igw perf gateway``: the rows of a run of the tree on
    ``PYTHONPATH``, with peer rows only when ``IGW_PEERS_DIR`` reached it."""

    def fake(argv: list[str], *, env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(env)
        tree = Path(env["PYTHONPATH"])
        label = "compiled" if "build" in tree.parts else "pure"
        rows = [
            {"metric": "gateway code", "value": inspect_tree(tree / "igw").describe()},
            {"metric": GATEWAY_32, "value": f"{cpu[label]:.0f} µs"},
        ]
        if "IGW_PEERS_DIR" in env:
            rows += [
                {"metric": SGLANG_32, "value": f"{peer_cpu[label] + 20:.0f} µs"},
                {"metric": VLLM_32, "value": f"{peer_cpu[label]:.0f} µs"},
            ]
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(rows))
        return subprocess.CompletedProcess(argv, 0, "", "")

    return fake


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["perf", "compiled", "--pairs", "2", "--tree", str(tmp_path), *extra])


@pytest.mark.parametrize("peers", [True, False])
def test_each_run_reports_its_ratio_to_the_better_peer_with_peers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], peers: bool
) -> None:
    built = tmp_path / "build" / "gateway_src"
    (built / "igw").mkdir(parents=True)
    monkeypatch.setattr(compiled, "build_compiled_tree", lambda dest, modules: (built, 0.0))
    calls: list[dict[str, str]] = []
    fake = _fake_perf_gateway(
        calls, cpu={"pure": 240, "compiled": 150}, peer_cpu={"pure": 80, "compiled": 60}
    )
    monkeypatch.setattr(subprocess, "run", fake)  # how igw.perf.compiled starts igw perf gateway
    monkeypatch.setenv("IGW_PEERS_DIR", str(tmp_path / "peers"))
    args = _args(tmp_path, *(["--peers"] if peers else []))
    assert args.peers is peers
    assert compiled.run(args) == 0
    out = capsys.readouterr().out
    assert len(calls) == 4
    assert all(("IGW_PEERS_DIR" in env) is peers for env in calls)
    assert "compiled / pure CPU per request at c=32: 0.62" in out
    if peers:
        # pure 240 / 80 = 3.0, compiled 150 / 60 = 2.5: each run's figure over its own run's peer
        per_tree = "CPU per request at c=32 / the better peer's in the same run, median of 2"
        assert f"pure: {per_tree}: 3.00" in out
        assert f"compiled: {per_tree}: 2.50" in out
        assert "median of 2 peer-normalised pair ratio(s): 0.83" in out
        assert "better peer: vllm-router 0.1.17 (round_robin)" in out
    else:
        assert "better peer" not in out
        assert "peer-normalised" not in out
