"""``igw serve`` sets the garbage collector up for a long-running process (start-up's objects frozen,
a larger young-generation threshold); the library itself never changes it. Run in child processes:
the collector's settings are process-wide and must not leak into the test session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import yaml

from igw.gateway.gc_tuning import YOUNG_THRESHOLD
from tests.gateway.support import config_doc, scheduler, serving_url

PROBE = """
import gc, json
before = gc.get_threshold()
import igw.gateway.app, igw.launch  # importing the gateway changes nothing
assert gc.get_threshold() == before and gc.get_freeze_count() == 0, (gc.get_threshold(), before)
from igw.gateway.gc_tuning import tune_collector
after = tune_collector()
print(json.dumps({"before": before, "after": after, "frozen": gc.get_freeze_count()}))
"""


def test_tuning_freezes_start_up_and_raises_only_the_young_threshold() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    before, after = seen["before"], seen["after"]
    assert after == [YOUNG_THRESHOLD, before[1], before[2]]
    assert before[0] < YOUNG_THRESHOLD
    assert seen["frozen"] > 1000  # the interpreter's and the gateway's objects, now skipped by collections


async def test_igw_serve_tunes_the_collector_once_serving(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {"m": ["127.0.0.1:9"]}}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
        "--endpoints", str(tmp_path / "e.yaml"), "--host", "127.0.0.1", "--port", "0",
        "--drain-seconds", "0",
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await serving_url(proc.stderr)
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), timeout=30)).decode()
        assert f"garbage collector: start-up objects frozen, thresholds ({YOUNG_THRESHOLD}," in line
    finally:
        proc.terminate()
        await proc.wait()
