"""Inputs for the DES determinism tests: a LoRA mixed fleet and a trace that exercises every
routing signal (prefix groups, adapters, long and short prompts), and a digest of a decisions file.

Why these inputs: the state that could leak between runs, or differ between two processes, lives
where a run touches strings in sets (adapter names), hashes (prefix blocks), learnt models (per-pod
TTFT fits) and trees (the cache-aware peers); a trace on a mixed fleet with adapters reaches all
of them in a run short enough for a test.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

LORA_FLEET_YAML = """\
pods:
  - {name: h100, replicas: 2, preset: llama-3.1-8b/h100, lora_adapters: [a0, a1, a2, a3, a4], max_loras: 2}
  - {name: a10g, replicas: 2, preset: llama-3.1-8b/a10g, lora_adapters: [a0, a1, a2, a3, a4], max_loras: 1}
"""
"""Two H100s and two A10Gs serving five adapters, with fewer slots than adapters (slot waits)."""


def write_trace(path: Path, *, count: int = 400, seed: int = 5) -> Path:
    """``count`` requests over about four seconds: a third in three shared-prefix groups, half for
    one of the fleet's adapters, prompts of 20 to 3,000 tokens."""
    rng = random.Random(seed)
    rows = []
    t = 0.0
    for i in range(count):
        t += rng.expovariate(100.0)
        row: dict[str, object] = {
            "arrival": round(t, 6),
            "prompt_tokens": rng.choice([20, 150, 600, 3000]),
            "output_tokens": rng.randint(1, 60),
            "request_id": f"t{i}",
        }
        if i % 3 == 0:
            row["prefix_group"] = f"g{i % 9 // 3}"
            row["prefix_tokens"] = 16
        if i % 2 == 0:
            row["adapter"] = f"a{rng.randrange(5)}"
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes (two runs' decisions files compared without printing them)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
