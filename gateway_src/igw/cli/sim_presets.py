"""``igw sim presets``: the presets with the numbers derived from them (KV capacity, step times)."""

from __future__ import annotations

import json
import random
from typing import TextIO

from igw.sim.engine import Engine
from igw.sim.presets import PRESETS


def print_presets(out: TextIO, *, as_json: bool = False) -> None:
    if as_json:
        rows = []
        for key, p in PRESETS.items():
            e = Engine(preset=p, rng=random.Random(0), jitter_sigma=0.0)
            rows.append(
                {
                    "preset": key,
                    "model": p.model.served_name,
                    "gpu": p.gpu.name,
                    "tp": p.tp,
                    "num_gpu_blocks": p.num_gpu_blocks,
                    "kv_capacity_tokens": p.kv_capacity_tokens,
                    "max_num_seqs": p.max_num_seqs,
                    "max_num_batched_tokens": p.max_num_batched_tokens,
                    "max_model_len": p.max_model_len,
                    "decode_step_s_b1_ctx1k": e.step_time_estimate(num_tokens=1, sum_ctx=1000),
                    "prefill_s_1k": e.step_time_estimate(num_tokens=1000, attn_pairs=1000 * 500),
                    "sources": list(p.sources),
                }
            )
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    out.write(
        f"{'preset':<24} {'TP':>2} {'KV blocks':>9} {'KV tokens':>10} {'max_seqs':>8} {'budget':>6}"
        f" {'decode B=1/32/128 @1k ctx (ms)':>30} {'prefill 1k (ms)':>15}\n"
    )
    for key, p in PRESETS.items():
        e = Engine(preset=p, rng=random.Random(0), jitter_sigma=0.0)
        decode = "/".join(
            f"{e.step_time_estimate(num_tokens=b, sum_ctx=b * 1000) * 1000:.1f}" for b in (1, 32, 128)
        )
        prefill = e.step_time_estimate(num_tokens=1000, attn_pairs=1000 * 500) * 1000
        out.write(
            f"{key:<24} {p.tp:>2} {p.num_gpu_blocks:>9} {p.kv_capacity_tokens:>10} {p.max_num_seqs:>8}"
            f" {p.max_num_batched_tokens:>6} {decode:>30} {prefill:>15.1f}\n"
        )
