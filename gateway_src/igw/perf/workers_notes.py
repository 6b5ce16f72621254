"""``igw perf workers-notes``: the CPU the pick notes of ``igw serve --workers N`` cost per request.

In one process, two gateway runtimes with the default profile over two pods (the same scrape in
both): the first routes ``--picks`` requests sharing a system prompt, first without and then with
its outbox attached; its batch is encoded by the gateway's own :class:`~igw.gateway.pick_share.
PickShare` and decoded and learned by the second runtime's. Printed per request, in process CPU time
(``time.process_time``, so other processes' load on the machine lengthens nothing but the run):
the pick without notes, the pick with notes (the difference is the request path's share), the
encoding, the decoding and learning at one other worker, and the bytes on the channel. Twice: pods
of one kind of hardware (equal KV capacity) and a mixed pair (8x apart), since
``backlog-ttft-scorer`` notes its picks only on a mixed fleet.

The noted picks are drained, encoded and learned ``--batch`` at a time (default
:data:`NOTE_BATCH`), as the gateway does every note interval: what a batch costs once (looking up
the schedulers and their sharing plugins, one channel line) counts per request as in the gateway,
where one batch of all the picks would hide it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import orjson

if TYPE_CHECKING:
    from igw.gateway.runtime import GatewayRuntime

HELP = "CPU per request of the --workers pick notes: noting, encoding, decoding and learning."
PROMPT: Final = "You are a helpful assistant. " * 20
NOTE_BATCH: Final = 18
"""Picks per batch of notes by default: what one worker makes in a 5 ms note interval at ~3,600
requests/s, each of two workers' share of ``igw perf workers``' ~7,000 (2026-12-03)."""
FLEETS: Final = {"one kind": (10_000, 10_000), "mixed": (40_000, 5_000)}
"""Fleet name -> the two pods' KV blocks."""


@dataclass(frozen=True, slots=True)
class NoteCost:
    """Microseconds of process CPU per request, and channel bytes per request."""

    pick_alone_us: float
    pick_noted_us: float
    encode_us: float
    learn_us: float
    bytes_per_request: float
    lines: int = 0
    """Channel lines the noted picks made (one per batch that held a note)."""

    @property
    def total_us(self) -> float:
        """What the notes add per request: noting, encoding, and learning at one other worker."""
        return self.pick_noted_us - self.pick_alone_us + self.encode_us + self.learn_us


def _runtime(blocks: tuple[int, ...], now: float) -> GatewayRuntime:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.config.build import build_gateway_config
    from igw.gateway.endpoints import DiscoveredEndpoint
    from igw.gateway.runtime import GatewayRuntime
    from igw.scheduling.types import EngineMetrics

    doc = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "notes", "namespace": "default"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [{"name": "s", "modelName": "m", "modelSelector": {"matchLabels": {"app": "s"}}}],
            "extensions": {"routing": {"staleThreshold": "600s"}},
        },
    }
    runtime = GatewayRuntime(build_gateway_config(doc), rng=random.Random(0), clock=time.monotonic)
    pool = runtime.schedulers["s"].pool
    pool.replace([DiscoveredEndpoint(key=f"127.0.0.1:{8000 + i}") for i in range(len(blocks))])
    for state, n in zip(pool.states.values(), blocks, strict=True):
        state.metrics = EngineMetrics(waiting=0, running=1, kv_usage=0.1, block_size=16, num_gpu_blocks=n)
        state.scraped_at = now
    return runtime


def measure(blocks: tuple[int, ...], *, picks: int, batch: int = NOTE_BATCH) -> NoteCost:
    """One round: ``picks`` requests without notes, ``picks`` with, their notes drained and encoded
    every ``batch`` picks and each batch learned."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.gateway.pick_share import PickShare
    from igw.scheduling.types import RoutingRequest

    now = time.monotonic()
    sender, learner = _runtime(blocks, now), _runtime(blocks, now)
    out = PickShare(lambda: sender, time.monotonic, max_line=1 << 20, worker=0)
    into = PickShare(lambda: learner, time.monotonic, max_line=1 << 20, worker=1)
    sr = sender.schedulers["s"]
    clock = time.process_time

    views = sr.pool.views()

    def route(tag: str, *, noted: bool) -> list[float]:
        """Process CPU seconds of the picks and (``noted``) of encoding each ``batch``'s notes."""
        requests = [
            RoutingRequest(
                request_id=f"{tag}{i}",
                model="m",
                base_model="m",
                prefix_text=f"{PROMPT}question {i}",
                prompt_tokens=160,
            )
            for i in range(picks)
        ]
        spent = [0.0, 0.0]
        for start in range(0, picks, batch):
            t0 = clock()
            for request in requests[start : start + batch]:
                sr.scheduler.pick(request, views, now=time.monotonic())
            t1 = clock()
            if noted:  # (the first call attaches the outbox: only once the picks are to be noted)
                lines.extend(out.lines())
            spent[0] += t1 - t0
            spent[1] += clock() - t1
        return spent

    lines: list[bytes] = []
    alone = route("a", noted=False)[0] / picks * 1e6
    out.lines()  # attaches the outbox: the picks from here on are noted
    noted_s, encode_s = route("n", noted=True)
    noted, encode = noted_s / picks * 1e6, encode_s / picks * 1e6
    into.lines()
    t0 = clock()
    for line in lines:
        into.learn(orjson.loads(line))
    learn = (clock() - t0) / picks * 1e6
    return NoteCost(alone, noted, encode, learn, sum(map(len, lines)) / picks, len(lines))


def run(args: argparse.Namespace) -> int:
    print(
        f"{args.picks} picks per round, notes in batches of {args.batch}, {args.rounds} rounds, "
        "process CPU per request (median over rounds)"
    )
    print(
        f"{'fleet':<9} {'pick alone':>10} {'pick noted':>10} {'encode':>7} {'learn':>7} "
        f"{'notes total':>11} {'bytes':>6}"
    )
    for fleet, blocks in FLEETS.items():
        rounds = [measure(blocks, picks=args.picks, batch=args.batch) for _ in range(args.rounds)]

        def median(field: str, rounds: list[NoteCost] = rounds) -> float:
            return float(statistics.median(getattr(r, field) for r in rounds))

        print(
            f"{fleet:<9} {median('pick_alone_us'):>7.1f} µs {median('pick_noted_us'):>7.1f} µs "
            f"{median('encode_us'):>4.1f} µs {median('learn_us'):>4.1f} µs {median('total_us'):>8.1f} µs "
            f"{median('bytes_per_request'):>6.0f}"
        )
    return 0
