"""Fast-forward of pure-decode stretches for the DES, exactly equivalent to stepping one by one.

When a replica has nothing waiting and every running request is decoding, each step until the first
request finishes is predictable: the batch is the same B requests, each emits one token, the decode
context grows by B per step, and the step time follows the §8.1 formula with that step's jitter draw.
A :class:`DecodeRun` precomputes those step ends (drawing the jitter values in order) and the DES
schedules one event for the whole stretch instead of one per step.

State is *materialised lazily* to any time ``t`` (:func:`advance`): steps that ended before ``t`` are
applied in O(B) regardless of how many, and the blocks of the step in progress are allocated, which is
exactly the state step-by-step simulation would have at ``t``. A run starts only if the free blocks
cover every allocation it could need, so no preemption can occur inside it. When a request arrives
(:func:`cut`), the step in progress becomes an ordinary batch and the unused jitter draws are handed
back to the engine, so the random sequence - and every record - is identical to stepping one by one
(tested in tests/sim/test_des.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from igw.sim.engine import Batch, Engine, EngineRequest

MIN_STEPS = 3
"""Shorter stretches are cheaper to step normally."""
MAX_STEPS = 64


@dataclass(slots=True)
class DecodeRun:
    requests: list[EngineRequest]
    ends: list[float]
    durations: list[float]
    jitters: list[float]
    applied: int = 0
    """Steps whose tokens have been applied."""
    started: int = 0
    """Steps whose KV blocks have been allocated (the step in progress included)."""

    @property
    def end(self) -> float:
        return self.ends[-1]


def begin(engine: Engine, now: float) -> DecodeRun | None:
    """A decode run starting at ``now``, or None when the replica's next steps are not pure decode."""
    if engine.waiting or not engine.running:
        return None
    running = engine.running
    b = len(running)
    if b > engine.max_num_batched_tokens:
        return None
    k = MAX_STEPS
    sum_ctx = 0
    for req in running:
        if req.num_computed != req.num_tokens - 1 or req.output_tokens == 0:
            return None
        left = req.max_output_tokens - req.output_tokens
        if left < k:
            k = left
        sum_ctx += req.num_computed
    if k < MIN_STEPS:
        return None
    bs = engine.block_size
    need = 0
    for req in running:
        blocks = (req.num_computed + k + bs - 1) // bs - req.capacity // bs
        if blocks > 0:
            need += blocks
    if need > engine.pool.num_free:
        return None
    lora = bool(engine._running_adapters)
    base_of = engine._base_step_time
    slowdown = engine.slowdown
    sigma = engine.jitter_sigma
    ends: list[float] = []
    durations: list[float] = []
    jitters: list[float] = []
    t = now
    for j in range(k):
        d = base_of(b, sum_ctx + j * b, 0.0, lora)
        if sigma > 0:
            jit = engine.draw_jitter()
            jitters.append(jit)
            d *= jit
        d = d * slowdown + 0.0
        durations.append(d)
        t = t + d
        ends.append(t)
    return DecodeRun(requests=list(running), ends=ends, durations=durations, jitters=jitters)


def advance(engine: Engine, run: DecodeRun, t: float) -> None:
    """Materialise the replica's exact state at time ``t`` (within the run)."""
    k = len(run.ends)
    done = bisect.bisect_left(run.ends, t)
    if done > k - 1:
        done = k - 1
    started = done + 1
    if started > run.started:
        _allocate(engine, run, started)
    delta = done - run.applied
    if delta > 0:
        at = run.ends[done - 1]
        bs = engine.block_size
        pool = engine.pool
        for req in run.requests:
            nc = req.num_computed + delta
            req.num_computed = nc
            req.num_tokens += delta
            req.output_tokens += delta
            req.last_token_at = at
            nh = req.next_hash
            if nh < req.nhashes:
                # generated-token blocks that filled up: cached exactly as Engine.complete would
                full = min(nc // bs, req.nhashes)
                if full > nh:
                    hashes = req.block_hashes
                    for j in range(nh, full):
                        if pool.register_full_block(hashes[j]):
                            req.held.append(hashes[j])
                            req.anon -= 1
                    req.next_hash = full
        engine.counters.generation_tokens += delta * len(run.requests)
        engine.counters.steps += delta
        run.applied = done


def cut(engine: Engine, run: DecodeRun, t: float) -> Batch:
    """End the run at the step in progress at ``t``: that step becomes an ordinary batch."""
    advance(engine, run, t)
    j = run.applied
    if run.jitters:
        engine.return_jitter(run.jitters[j + 1 :])
    for req in run.requests:
        req.sched_n = 1
    engine.counters.steps += 1
    return Batch(requests=list(run.requests), duration=run.durations[j], num_tokens=len(run.requests))


def _allocate(engine: Engine, run: DecodeRun, started: int) -> None:
    bs = engine.block_size
    ahead = started - run.applied
    total = 0
    for req in run.requests:
        target = req.num_computed + ahead
        if target > req.capacity:
            blocks = (target + bs - 1) // bs - req.capacity // bs
            req.anon += blocks
            req.capacity += blocks * bs
            total += blocks
    if total and not engine.pool.allocate(total):
        raise AssertionError("decode run allocation failed although begin() checked the free blocks")
    run.started = started
