"""``igw perf metrics-page`` runs from the command line and prints both ways for every size, for the
page and for the EMF interval, then for the global router's page."""

from __future__ import annotations

import pytest

from igw.cli.main import main


def test_both_ways_are_measured_for_every_size(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["perf", "metrics-page", "--endpoints", "8,24", "--pools", "4", "--models", "3", "--scrapes", "1"]
    assert main([*argv, "--clusters", "3", "--regions", "2", "--router-models", "2"]) == 0
    out = capsys.readouterr().out
    sizes, router = out.split("global router, 3 clusters in 2 regions, 2 models")
    for size in ("8 endpoints", "24 endpoints"):
        assert size in sizes
    for way in ("on loop   loop stall", "off loop  loop stall"):
        assert sizes.count(f"EMF {way}") == 2  # the CloudWatch EMF interval's, per size
        assert sizes.count(way) == 4  # and the page's
        assert router.count(way) == 1
