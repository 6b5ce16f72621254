"""``igw perf auth`` runs end to end through the real CLI and reports every row against its baselines."""

from __future__ import annotations

import re

import pytest

from igw.cli.main import main


def test_perf_auth_reports_all_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "auth", "--iterations", "20", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for alg in ("RS256", "ES256"):
        for path in ("crypto-only", "pyjwt-decode", "igw-verify", "igw-cached"):
            assert re.search(
                rf"^{alg}\s+{path}\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+(meets|misses)$", out, re.M
            ), (
                alg,
                path,
                out,
            )
