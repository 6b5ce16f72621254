"""``igw bench`` / ``igw demo`` argument errors name the bad argument and run nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from igw.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nope"], "unknown scenario 'nope'"),
        (["bench", "homogeneous-steady", "--policies", "round-robin,fancy"], "--policies: unknown fancy"),
        (["bench", "homogeneous-steady", "--weights", "{queue: 2"], "--weights: not valid JSON"),
        (
            ["bench", "homogeneous-steady", "--weights", '{"queue": "two"}'],
            "--weights: expected a JSON object",
        ),
        (["bench", "homogeneous-steady", "--duration-scale", "0"], "--duration-scale must be > 0"),
        (["bench"], "name at least one scenario"),
        (
            ["bench", "demo-mixed-8b", "--mode", "live", "--check-agreement", "--agreement-des-seeds", "1"],
            "--agreement-des-seeds: at least 2",
        ),
        (["bench", "--trace", "t.jsonl", "--mode", "live"], "--trace runs in DES mode only"),
        (["demo", "--routers", "round-robin,warp"], "--routers: unknown warp"),
        (["demo", "--requests", "3"], "--requests must be >= 10"),
    ],
)
def test_bad_arguments_are_rejected_with_the_argument_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_seeds_are_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "homogeneous-steady", "--seeds", "1,x"])
    assert "--seeds" in capsys.readouterr().err


def test_list_names_every_scenario_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("mixed-fleet-8b", "burst-235b", "shared-prefix-8b-high-cache", "demo-mixed-8b", "oracle"):
        assert name in out


def test_trace_replay_runs_every_policy_and_writes_the_report(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 20}}' for i in range(120))
    )
    out = tmp_path / "out"
    argv = ["bench", "--trace", str(trace), "--policies", "round-robin,oracle", "--seeds", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    text = (out / "trace-trace.md").read_text()
    assert "| oracle |" in text
    assert "| round-robin |" in text
    assert (out / "trace-trace.json").exists()
    assert (out / "index.md").exists()
