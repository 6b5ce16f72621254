"""A prefix index at its final size does not grow the process's resident memory: ``igw serve`` fixes
glibc's mmap threshold so rebuilt hash tables are returned to the system, not left in the heap."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import gateway_doc, igw_serve

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def index_rss(*args: str) -> dict[int, float]:
    """MiB of resident memory gained by a full prefix index at each turnover (its own process)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.reliability.index_rss", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return {int(k): v for k, v in json.loads(out).items()}


@glibc_only
def test_a_full_index_under_churn_keeps_its_resident_memory_with_the_threshold_fixed() -> None:
    pinned = index_rss("--pin")
    unpinned = index_rss()
    # Filled twice, every table has its final size; from there on, only churn at constant size.
    assert pinned[10] - pinned[2] < 1.0, pinned
    # The same loop with glibc's dynamic threshold grows in steps (what the fix removes).
    assert unpinned[10] - unpinned[2] > 2.0, unpinned


@glibc_only
async def test_igw_serve_fixes_the_mmap_threshold_at_start(tmp_path: Path) -> None:
    async with running(FakeModelServer("a")) as (pod,), igw_serve(tmp_path, gateway_doc(), [pod.key]) as gw:
        pass
    assert "fixed mmap threshold: yes" in gw.output
