"""What a trace replay needs to know about its fleet before it runs: can the fleet serve every request,
and how many requests per second can it sustain on the trace's own mix?

A trace naming an adapter or a model that no pod serves would fail those requests under every policy
alike; the run would measure the trace, not routing. It is rejected before anything starts, naming
what is missing. Capacity is measured like a scenario's (one pod of each type flooded with the trace's
own requests, completion rate between the 20th and 80th percentile of finish times), so the report can
state the trace's offered load as a fraction of what the fleet sustains.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from igw.bench.capacity import MAX_FLOOD, MIN_FLOOD, FleetCapacity, PodCapacity, flood_rate
from igw.bench.policies.baselines import RoundRobinPolicy
from igw.errors import IgwToolingError
from igw.sim.des import simulate
from igw.sim.presets import get_preset
from igw.sim.request import SimRequest
from igw.sim.spec import PodSpec


class UnservableTraceError(IgwToolingError, ValueError):
    """The trace names adapters or models that no pod of the fleet serves."""


def _servable_by(pod: PodSpec, request: SimRequest) -> bool:
    if request.adapter is not None:
        return request.adapter in pod.lora_adapters
    return request.model == pod.model_name


def _limit(pod: PodSpec) -> int:
    """The most tokens (prompt + output) one request may hold on ``pod``: its context window, or its
    whole KV cache if that is smaller. A longer request is refused there with a 400 (the engine's
    ``size_error``)."""
    preset = pod.resolved_preset()
    return min(preset.max_model_len, preset.num_gpu_blocks * preset.block_size)


def _requests(n: int) -> str:
    return f"{n} request names" if n == 1 else f"{n} requests name"


def check_servable(pods: Sequence[PodSpec], requests: Sequence[SimRequest], *, source: str) -> None:
    """Raise :class:`UnservableTraceError` listing every adapter/model of ``requests`` no pod serves."""
    missing: Counter[str] = Counter()
    first: dict[str, str] = {}
    for index, r in enumerate(requests):
        if any(_servable_by(p, r) for p in pods):
            continue
        what = f"adapter {r.adapter!r}" if r.adapter is not None else f"model {r.model!r}"
        missing[what] += 1
        # the ordinal as well as the id: a default id (trace-N) counts from 0, a reader counts from 1
        first.setdefault(what, f"request {index + 1} of the trace, id {r.request_id}")
    if not missing:
        return
    listed = "; ".join(
        f"{what}: {n} request{'' if n == 1 else 's'} (first: {first[what]})"
        for what, n in missing.most_common()
    )
    models = sorted({p.model_name for p in pods})
    adapters = sorted({a for p in pods for a in p.lora_adapters})
    raise UnservableTraceError(
        f"{source}: {_requests(sum(missing.values()))} what no pod of the fleet serves ({listed}); "
        f"the fleet serves models {models} and adapters {adapters or 'none'} (pass a --fleet serving them)"
    )


def check_sizes(pods: Sequence[PodSpec], requests: Sequence[SimRequest], *, source: str) -> None:
    """Raise :class:`UnservableTraceError` when a request is longer than every pod that serves its
    model could ever hold: it would fail with a 400 under every policy alike."""
    limits = [(p, _limit(p)) for p in pods]
    too_long = []
    for index, r in enumerate(requests):
        need = r.prompt_tokens + r.output_tokens
        if not any(need <= limit and _servable_by(p, r) for p, limit in limits):
            too_long.append((index, r))
    if not too_long:
        return
    index, r = too_long[0]
    widest = max(limit for p, limit in limits if _servable_by(p, r))
    n = len(too_long)
    raise UnservableTraceError(
        f"{source}: {n} request{'' if n == 1 else 's'} longer than any pod serving {r.model!r} holds "
        f"(first: request {index + 1} of the trace, id {r.request_id}: {r.prompt_tokens} prompt + "
        f"{r.output_tokens} output tokens, at most {widest} fit); every policy would fail "
        f"{'it' if n == 1 else 'them'} with a 400 (pass a --fleet with a longer context, or shorten "
        "the trace)"
    )


def trace_capacity(pods: Sequence[PodSpec], requests: Sequence[SimRequest], *, seed: int) -> FleetCapacity:
    """Fleet capacity on the trace's own requests: a flood probe per pod type, summed over the pods."""
    per_type: dict[tuple[str, str], PodCapacity] = {}
    for pod in pods:
        key = (pod.preset, pod.engine.value)
        if key in per_type:
            continue
        # Requests the pod refuses outright (too long) are answered at once: in a flood they finished
        # in the first step and made the 20-80 % window of finish times collapse (149e9 req/s).
        limit = _limit(pod)
        mine = [r for r in requests if _servable_by(pod, r) and r.prompt_tokens + r.output_tokens <= limit]
        if not mine:
            continue
        preset = get_preset(pod.preset)
        sample = mine[:200]
        mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in sample) / len(sample)
        concurrency = min(preset.max_num_seqs, preset.kv_capacity_tokens / mean_tokens)
        n = int(min(MAX_FLOOD, max(MIN_FLOOD, 4 * concurrency)))
        flood = [replace(r, arrival=0.0) for r in (mine * (n // len(mine) + 1))[:n]]
        flood = [replace(r, request_id=f"flood-{i}") for i, r in enumerate(flood)]
        result = simulate(pods=[pod], requests=flood, policy=RoundRobinPolicy(), seed=seed,
                          base_model=pod.model_name)  # fmt: skip
        rps, tok_s = flood_rate(result, what=pod.preset)
        per_type[key] = PodCapacity(preset=pod.preset, engine=pod.engine.value, requests_per_s=rps,
                                    output_tokens_per_s=tok_s, flood_requests=n, probe_rps=rps)  # fmt: skip
    total = sum(
        per_type[(p.preset, p.engine.value)].requests_per_s
        for p in pods
        if (p.preset, p.engine.value) in per_type
    )
    return FleetCapacity(per_type=tuple(per_type.values()), requests_per_s=total)
