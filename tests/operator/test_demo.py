"""The operator demo runs end to end on loopback and answers a request through the gateway it created."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operator import demo


def test_demo_prints_status_and_a_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Rollout State:  Available" in out or "rolloutState: Available" in out
    assert '"finish_reason"' in out
    assert "kubelet stand-in: igw serve --config" in out
