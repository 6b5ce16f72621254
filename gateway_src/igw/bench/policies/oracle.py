"""The oracle: a router that sees every pod's true instantaneous state (no scrape delay, exact cache).

It is the limit routing can approach, not a production policy: it reads the simulated engines
directly through the DES's oracle hook (``bind_oracle``), and for each request picks the pod with
the least *predicted* time to first token, computed from exact state:

* prefill work ahead of the request: uncomputed prompt tokens of waiting and running requests, plus
  the request's own prompt minus the blocks that pod has cached *right now*;
* the step time of the pod's model/GPU preset (docs/simulator.md, Engine model; without jitter)
  with its current decode batch and context, so a slow A10G and a busy H100 are compared in seconds;
* KV-cache shortfall: if the free blocks cannot hold the work ahead, the wait until enough running
  requests finish (their exact remaining output lengths are known to the simulator);
* a LoRA adapter that is not resident costs its load time, and when every adapter slot is busy with
  other adapters, the wait until one of them drains.

It is greedy (it optimises each request's TTFT in turn, not a global schedule), which is stated in
the report: "gap to oracle" is a gap to this greedy, perfectly-informed router.

``oracle-slo`` has the objective the benchmark's SLO goodput measures: among the pods where the
request is predicted to meet both its TTFT SLO and its time-per-output-token SLO (the step time of
the pod's decode batch with this request added, :func:`predicted_tpot`), the least predicted TTFT;
when no pod is predicted to meet both, the least predicted TTFT as before.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from igw.bench.policies.decisions import no_endpoints
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    RequestOutcome,
    RoutingDecision,
    RoutingRequest,
)

if TYPE_CHECKING:
    from igw.sim.truth import PodTruth


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """Exact state of one pod relevant to a new request's TTFT, in tokens and seconds."""

    t_ovh: float
    t_w0: float
    c_tok: float
    k_kv: float
    t_ar: float
    max_num_batched_tokens: int
    prefill_tokens_ahead: int
    """Uncomputed prompt tokens of everything already queued or running on the pod."""
    decoding: int
    """Running requests past their prefill (one token per step each)."""
    decode_context_tokens: int
    free_kv_tokens: int
    cached_tokens: int
    """Tokens of *this* request's prompt the pod has cached now."""
    finishing: tuple[tuple[float, int], ...] = ()
    """Running requests as (seconds until they finish at the current step time, tokens they free)."""
    lora_load_s: float = 0.0
    """Delay from LoRA: the adapter's load time if not resident, plus the wait for a free adapter slot
    when every slot is held by other running adapters (0 without an adapter)."""
    slowdown: float = 1.0


def step_time(s: PodSnapshot, tokens: int) -> float:
    """Step time (docs/simulator.md, Engine model) of a batch of ``tokens`` tokens (dense, no jitter)."""
    return (
        s.t_ovh + math.hypot(s.t_w0, s.c_tok * tokens) + s.k_kv * s.decode_context_tokens + s.t_ar
    ) * s.slowdown


def predicted_ttft(s: PodSnapshot, *, prompt_tokens: int) -> float:
    """Seconds until this request's first token if it were sent to the pod now."""
    own = max(1, prompt_tokens - s.cached_tokens)
    ahead = s.prefill_tokens_ahead + own
    prefill_per_step = max(1, s.max_num_batched_tokens - s.decoding)
    steps = math.ceil(ahead / prefill_per_step)
    per_step = step_time(s, s.decoding + min(ahead, prefill_per_step))
    wait_for_kv = 0.0
    deficit = ahead - s.free_kv_tokens
    if deficit > 0:
        freed = 0
        for seconds, tokens in sorted(s.finishing):
            freed += tokens
            wait_for_kv = seconds
            if freed >= deficit:
                break
        else:
            wait_for_kv = max((sec for sec, _ in s.finishing), default=0.0) + steps * per_step
    return wait_for_kv + steps * per_step + s.lora_load_s


def predicted_tpot(s: PodSnapshot) -> float:
    """Seconds per output token once the request decodes: one step of the current decode batch plus
    this request (queued prefill is not counted: it is the TTFT's share)."""
    return step_time(s, s.decoding + 1)


def meets_slo(s: PodSnapshot, *, prompt_tokens: int, slo: tuple[float, float]) -> bool:
    """Whether the request is predicted to meet both its TTFT and its TPOT SLO on this pod."""
    ttft_slo, tpot_slo = slo
    return predicted_ttft(s, prompt_tokens=prompt_tokens) <= ttft_slo and predicted_tpot(s) <= tpot_slo


OracleLookup = Callable[[EndpointKey], "PodTruth"]
"""The DES's oracle hook: a pod's live, exact state (``igw.sim.truth.PodTruth``)."""


def snapshot(truth: PodTruth, request: RoutingRequest) -> PodSnapshot:
    """Exact state of one simulated pod as it bears on ``request``'s time to first token."""
    engine = truth.engine
    cost = truth.cost
    decoding = 0
    ctx = 0
    for r in engine.running:
        if r.num_computed >= r.num_tokens - 1 and r.output_tokens > 0:
            decoding += 1
            ctx += r.num_computed
    base = PodSnapshot(
        t_ovh=cost.t_ovh,
        t_w0=cost.t_w0 + cost.t_w_experts,
        c_tok=cost.c_tok,
        k_kv=cost.k_kv,
        t_ar=cost.t_ar,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        prefill_tokens_ahead=truth.queued_prefill_tokens,
        decoding=decoding,
        decode_context_tokens=ctx,
        free_kv_tokens=truth.free_blocks * truth.block_size,
        cached_tokens=truth.cached_prefix_tokens(request.prefix_text, adapter=request.adapter),
        slowdown=truth.slowdown,
    )
    per_step = step_time(base, decoding)
    finishing = tuple(
        ((r.max_output_tokens - r.output_tokens) * per_step, r.num_tokens) for r in engine.running
    )
    lora_s = 0.0
    adapter = request.adapter
    if adapter is not None:
        if adapter not in truth.resident_adapters:
            lora_s = truth.preset.lora_load_s
        running = truth.running_adapters
        if adapter not in running and len(running) >= truth.spec.effective_max_loras:
            # Every LoRA slot is busy with other adapters: wait until the first adapter's last
            # running request finishes (the engine admits a new adapter only then).
            last_done: dict[str, float] = {}
            for r in engine.running:
                if r.adapter is not None:
                    done = (r.max_output_tokens - r.output_tokens) * per_step
                    last_done[r.adapter] = max(last_done.get(r.adapter, 0.0), done)
            lora_s += min(last_done.values(), default=0.0)
    return replace(base, finishing=finishing, lora_load_s=lora_s)


class OraclePolicy:
    """Least predicted TTFT over exact pod state (with ``slo``: among pods predicted to meet both
    SLOs first); needs ``bind_oracle`` before the first pick."""

    def __init__(self, *, rng: random.Random, slo: tuple[float, float] | None = None) -> None:
        self._rng = rng
        self._lookup: OracleLookup | None = None
        self._slo = slo
        self.name = "oracle" if slo is None else "oracle-slo"

    def bind_oracle(self, lookup: OracleLookup) -> None:
        self._lookup = lookup

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del now
        if self._lookup is None:
            raise RuntimeError("the oracle policy runs only in the DES (bind_oracle was not called)")
        if not endpoints:
            return no_endpoints()
        lookup = self._lookup
        n = request.prompt_tokens
        snaps = [(snapshot(lookup(e.key), request), e.key) for e in endpoints]
        slo = self._slo
        scored = sorted(
            (
                0 if slo is None or meets_slo(s, prompt_tokens=n, slo=slo) else 1,
                predicted_ttft(s, prompt_tokens=n),
                self._rng.random(),
                key,
            )
            for s, key in snaps
        )
        best = scored[0]
        return RoutingDecision(
            kind=DecisionKind.PICKED,
            endpoint=best[3],
            fallbacks=tuple(k for *_, k in scored[1:]),
            reason=f"predicted TTFT {best[1] * 1000:.1f} ms"
            + ("" if best[0] == 0 else ", no pod meets the SLOs"),
        )

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        del outcome, now

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        del keys
