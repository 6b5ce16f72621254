"""``igw demo --operator`` runs on loopback and answers a request through the gateway it created."""

from __future__ import annotations

import pytest

from igw.cli.main import main


def test_demo_prints_status_and_a_completion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--operator"]) == 0
    out = capsys.readouterr().out
    assert "Rollout State:  Available" in out or "rolloutState: Available" in out
    assert '"finish_reason"' in out
    assert "kubelet stand-in: igw serve --config" in out
