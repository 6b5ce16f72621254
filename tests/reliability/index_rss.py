"""``python -m tests.reliability.index_rss [--pin] [--endpoints N] [--capacity C]``: resident memory
of a prefix index kept at constant size, printed as one JSON object ``{fill: MiB above the start}``.

Run as its own process (the allocator's state is per process): by default two endpoints with the
H100 preset's KV capacity each, unique 17-block prompts, filled to ten times capacity; ``--pin``
fixes glibc's mmap threshold first, as ``igw serve`` does. ``--endpoints`` / ``--capacity`` size the
pool (how much memory one worker's index takes for a fleet: docs/gateway.md, "Several workers");
``--budget BLOCKS`` inserts through a ``prefix-cache-scorer`` bounded to that many blocks in all, as
``igw serve`` bounds it by the container's memory limit (``igw.gateway.memory.memory_plan``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from igw.gateway.memory import pin_mmap_threshold
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer

CAPACITY = 27_485
ENDPOINTS = ("pod-0", "pod-1")
BLOCKS_PER_PROMPT = 17


def rss_mib() -> float:
    found = re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--turnovers", type=int, default=10)
    parser.add_argument("--endpoints", type=int, default=len(ENDPOINTS))
    parser.add_argument("--capacity", type=int, default=CAPACITY, help="blocks per endpoint's LRU")
    parser.add_argument("--budget", type=int, default=None, help="blocks the whole index may hold")
    args = parser.parse_args()
    endpoints = [f"pod-{i}" for i in range(args.endpoints)]
    if args.pin:
        assert pin_mmap_threshold()
    rng = random.Random(1)
    scorer = PrefixCacheScorer(auto_tune=False, max_blocks=BLOCKS_PER_PROMPT)
    scorer.bound_index(args.budget)
    start = rss_mib()
    grown: dict[str, float] = {}
    sent = 0
    for fill in range(1, args.turnovers + 1):
        while sent < fill * args.capacity * len(endpoints):
            hashes = [rng.getrandbits(64) for _ in range(BLOCKS_PER_PROMPT)]
            scorer.learn_pick(rng.choice(endpoints), {"h": hashes, "c": args.capacity})
            sent += BLOCKS_PER_PROMPT
        grown[str(fill)] = round(rss_mib() - start, 2)
    print(json.dumps(grown))


if __name__ == "__main__":
    main()
