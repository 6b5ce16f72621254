"""``igw demo --operator`` runs on loopback and answers a request through the gateway it created."""

from __future__ import annotations

from pathlib import Path

import pytest

from igw.cli.main import main


def test_demo_prints_status_and_a_completion(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """With ``--out`` it keeps its kubeconfig, manifest and gateway log in OUT/operator: the option
    was ignored, they went to a temporary folder that was removed."""
    assert main(["demo", "--operator", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "operator").iterdir()), "nothing kept in OUT/operator"
    # The fake cluster has every CRD the operator watches: no "Unresolved resources cannot be served".
    assert "Unresolved resources" not in caplog.text
    out = capsys.readouterr().out
    assert "Rollout State:  Available" in out or "rolloutState: Available" in out
    assert '"finish_reason"' in out
    assert "kubelet stand-in: igw serve --config" in out
    stand_in = next(line for line in out.splitlines() if line.startswith("kubelet stand-in: "))
    assert stand_in.split().count("--drain-seconds") == 1, stand_in  # the rendered one, replaced
