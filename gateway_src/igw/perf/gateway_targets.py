"""The data path's targets, judged from the figures of one ``igw perf gateway`` run.

Each target is printed as a ratio to its reference (a fixed bound, or the better peer router's
figure from the same run) with a verdict, so a reader sees how far off a miss is, not only that it
missed. The peers are the Rust routers (sglang-router, vllm-router) driven like the gateway; a
target that needs a peer is left unjudged, with the reason, when no peer was measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Final

GATEWAY: Final = "gateway"
ADDED_P50_C1_MS: Final = 0.5
"""Added latency p50 at concurrency 1 (milliseconds)."""
ADDED_TTFT_P50_MS: Final = 0.5
"""Added streaming time-to-first-token p50 at concurrency 1 (milliseconds)."""
PEER_FACTOR: Final = 2.0
"""CPU per request and added p50 at concurrency 32: at most this many times the better peer's."""


def row(name: str, value: str, baseline: str, target: str, met: bool | None) -> dict[str, Any]:
    """One printed result: what was measured, against what, the target and the verdict."""
    verdict = "n/a" if met is None else ("met" if met else "MISSED")
    return {"metric": name, "value": value, "baseline": baseline, "target": target, "verdict": verdict}


@dataclass(slots=True)
class LoadFigures:
    """What the load phase measured, keyed by (target label, concurrency)."""

    added_p50_ms: dict[tuple[str, int], float] = field(default_factory=dict)
    cpu_us: dict[tuple[str, int], float] = field(default_factory=dict)
    added_ttft_p50_ms: float | None = None
    peer_ttft_p50_ms: dict[str, float] = field(default_factory=dict)
    """Peer label -> its added streaming TTFT p50 (ms), measured like the gateway's."""
    unmeasured_peers: dict[str, str] = field(default_factory=dict)
    """Peer label -> why it was not measured."""
    added_p50_rounds: dict[int, list[dict[str, float]]] = field(default_factory=dict)
    """Concurrency -> one entry per round: target label -> that round's added p50 (ms), each target's
    round against the direct round of the same round (the rounds alternate the targets, so a load
    drift on the shared machine hits every target of a round alike)."""


def added_text(via_ms: float, direct_ms: float) -> str:
    """One added-latency figure as printed: ``+0.312 ms``, the path through a router minus the direct
    path at the same percentile. A router cannot make the backend answer sooner, so a path measured
    faster than the direct one is the run's noise, not a negative cost: it is printed as the two
    measured values, marked below the direct baseline (``p99 +-0.052 ms`` was printed for a peer)."""
    added = via_ms - direct_ms
    if added >= 0:
        return f"+{added:.3f} ms"
    return f"below the direct baseline ({via_ms:.3f} vs {direct_ms:.3f} ms)"


def _added_ms(added: float) -> str:
    """An added latency already computed as a difference: ``+x ms``, or, below zero, how far below the
    direct baseline it was (noise, see :func:`added_text`)."""
    return f"+{added:.3f} ms" if added >= 0 else f"below the direct baseline by {-added:.3f} ms"


def _better_peer(figures: dict[tuple[str, int], float], concurrency: int) -> tuple[str, float] | None:
    peers = [(v, label) for (label, c), v in figures.items() if c == concurrency and label != GATEWAY]
    if not peers:
        return None
    value, label = min(peers)
    return label, value


def _bound_row(name: str, measured: float | None, bound_ms: float) -> dict[str, Any]:
    if measured is None:
        return row(name, "not measured", "-", f"<= {bound_ms:g} ms", None)
    if measured < 0:  # faster than the direct path: noise (see added_text), within any bound
        return row(
            name,
            f"{_added_ms(measured)} (noise: no added latency measured)",
            f"bound {bound_ms:g} ms",
            f"<= {bound_ms:g} ms",
            True,
        )
    return row(
        name,
        f"+{measured:.3f} ms = {measured / bound_ms:.2f}x the bound",
        f"bound {bound_ms:g} ms",
        f"<= {bound_ms:g} ms",
        measured <= bound_ms,
    )


def _peer_row(
    name: str, figures: dict[tuple[str, int], float], unit: str, *, unmeasured: dict[str, str]
) -> dict[str, Any]:
    target = f"<= {PEER_FACTOR:g}x the better peer's"
    ours = figures.get((GATEWAY, 32))
    peer = _better_peer(figures, 32)
    if ours is None:
        return row(name, "not measured", "-", target, None)
    shown = f"{ours:.0f} µs" if unit == "µs" else _added_ms(ours)
    if peer is None:
        why = "; ".join(f"{label}: {reason}" for label, reason in unmeasured.items()) or "none configured"
        return row(name, shown, f"no peer measured ({why})", target, None)
    label, theirs = peer
    theirs_shown = f"{theirs:.0f} µs" if unit == "µs" else _added_ms(theirs)
    if unit == "ms" and ours < 0 < theirs:  # ours below the direct path: noise, under any multiple
        return row(
            name,
            f"{shown}; {label}'s {theirs_shown}",
            f"better peer: {label}",
            target,
            True,
        )
    if theirs <= 0:  # the peer's figure is within the run's noise: a ratio to it means nothing
        return row(
            name,
            f"{shown}; {label}'s {theirs_shown}",
            f"better peer: {label} (not above zero: noise, not judged)",
            target,
            None,
        )
    return row(
        name,
        f"{shown} = {ours / theirs:.2f}x {label}'s {theirs_shown}",
        f"better peer: {label}",
        target,
        ours <= PEER_FACTOR * theirs,
    )


def round_ratios(rounds: list[dict[str, float]]) -> list[float | None]:
    """Per round, the gateway's added p50 over the better peer's of the same round; None for a round
    without the gateway or a peer, or whose better peer measured at or below zero (noise, see
    :func:`added_text`: a ratio to it means nothing)."""
    ratios: list[float | None] = []
    for added in rounds:
        peers = [value for label, value in added.items() if label != GATEWAY]
        ours = added.get(GATEWAY)
        if ours is None or not peers or min(peers) <= 0:
            ratios.append(None)
        else:
            ratios.append(ours / min(peers))
    return ratios


def _rounds_row(figures: LoadFigures, concurrency: int) -> dict[str, Any] | None:
    """The added-p50 ratio round by round with its median and spread: how far the pooled verdict
    (the target row) is from the bound compared with the round-to-round noise of the run."""
    ratios = round_ratios(figures.added_p50_rounds.get(concurrency, []))
    judged = sorted(r for r in ratios if r is not None)
    if not judged:
        return None
    shown = ", ".join("noise" if r is None else f"{r:.2f}" for r in ratios)
    within = sum(1 for r in judged if r <= PEER_FACTOR)
    median = statistics.median(judged)
    return row(
        f"added latency p50 / the better peer's, concurrency {concurrency}, per round",
        f"{shown}; median {median:.2f}x (spread {judged[0]:.2f}-{judged[-1]:.2f}x)",
        f"{within} of {len(judged)} rounds within {PEER_FACTOR:g}x",
        "(report: the rounds' spread beside the target row's verdict)",
        None,
    )


def _ttft_row(figures: LoadFigures) -> dict[str, Any]:
    """The TTFT bound, with the better peer's added TTFT from the same streams beside it (the bound
    is absolute; the peer shows what a compiled router adds under the same measurement)."""
    judged = _bound_row("target: added streaming TTFT p50", figures.added_ttft_p50_ms, ADDED_TTFT_P50_MS)
    if figures.peer_ttft_p50_ms:
        value, label = min((v, label) for label, v in figures.peer_ttft_p50_ms.items())
        judged["baseline"] += f"; better peer: {label} {_added_ms(value)} (report)"
    return judged


def target_rows(figures: LoadFigures) -> list[dict[str, Any]]:
    """The four data-path targets with ratio and verdict, then (when the run measured rounds with a
    peer) the concurrency-32 added-p50 ratio round by round."""
    unmeasured = figures.unmeasured_peers
    rounds = _rounds_row(figures, 32)
    return [
        _peer_row("target: CPU per request, concurrency 32", figures.cpu_us, "µs", unmeasured=unmeasured),
        _bound_row(
            "target: added latency p50, concurrency 1",
            figures.added_p50_ms.get((GATEWAY, 1)),
            ADDED_P50_C1_MS,
        ),
        _ttft_row(figures),
        _peer_row(
            "target: added latency p50, concurrency 32", figures.added_p50_ms, "ms", unmeasured=unmeasured
        ),
        *([rounds] if rounds is not None else []),
    ]
