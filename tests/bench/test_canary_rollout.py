"""``igw bench canary-rollout`` at a small scale: real ``igw serve`` and simulated pods, weights moved
10 % -> 50 % -> 100 % by hot reload while clients send."""

from __future__ import annotations

import math
import re
from pathlib import Path

from igw.bench.canary_rollout import PHASES, markdown, run_canary


async def test_small_rollout_has_no_failures_and_follows_the_weights(tmp_path: Path) -> None:
    n = 300
    said: list[str] = []
    results = await run_canary(tmp_path, requests_per_phase=n, concurrency=8, users=40, progress=said.append)
    assert [r.weight_percent for r in results] == list(PHASES)
    for r in results:
        assert r.failed == 0, r.failures[:5]
        assert r.measured == n  # the sample fixed at sending: not the requests in flight at the count
        p = r.weight_percent / 100
        assert abs(r.on_new - p * r.measured) <= 4 * math.sqrt(r.measured * p * (1 - p)) + 1e-9
        assert r.sticky_violations == 0
        assert r.moved_off_new == 0
    assert results[-1].on_new == results[-1].measured
    assert "| 100 % |" in markdown(results, "igw bench canary-rollout")
    # The full run took four minutes without a line before its table (session s43): each phase is
    # now told as it starts and ends, what ``igw bench canary-rollout`` prints, stamped, on stderr.
    assert said[0] == "starting the simulated fleet (llama-v1, llama-v2) and igw serve"
    steps = [re.sub(r"^\d+\.\d\d%$", "SHARE", line.split(": ")[1].split(" ")[0]) for line in said[1:]]
    assert steps == [
        "measuring", "SHARE", "reloading", "measuring", "SHARE", "reloading", "measuring", "SHARE"
    ]  # fmt: skip
    assert said[-1] == f"phase 100 %: 100.00% of {n} on llama-v2, 0 failed"
    # The progress line and the report give the same share of the same count (session s50: 9.60 % of
    # 1,000 on the line, 9.47 % of 1,014 in the table).
    told = [line.split(": ")[1] for line in said if " on llama-v2, " in line]
    assert told == [f"{r.share:.2%} of {r.measured} on llama-v2, 0 failed" for r in results]
