"""``igw perf checks`` runs end to end: its simulated cluster stays clean under every registered check.

The benchmark refuses to time a cluster with findings (the timings would be of the wrong path); a new
check that its cluster does not satisfy (IGW-PF016 reads the status igw operator writes, which the
cluster lacked) made the README's ``igw perf checks`` end in a traceback, unseen by any test.
"""

from __future__ import annotations

import pytest

from igw.cli.main import main


def test_perf_checks_runs_clean_on_a_small_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "checks", "--pods", "40", "--configs", "4", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "cluster: 40 pods, 4 configs x 2 schedulers" in out
    assert "(target < 10 s: met)" in out
