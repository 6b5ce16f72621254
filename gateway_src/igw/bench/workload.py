"""Scenario -> simulator inputs: the fleet's pod specs and the request stream at a given capacity.

Uses the simulator's own generators (``igw.sim.workloads``) so that DES and live runs see identical
prompts; this module only decides *which* generator, with which parameters and how many requests.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Final

from igw.bench.scenarios import (
    BurstLoad,
    LengthMix,
    LoraShape,
    Scenario,
    SharedPrefixShape,
    SteadyLoad,
)
from igw.errors import IgwToolingError
from igw.sim import workloads
from igw.sim.presets import get_preset
from igw.sim.request import SimRequest
from igw.sim.spec import EngineKind, PodSpec


def adapter_names(scenario: Scenario) -> tuple[str, ...]:
    w = scenario.workload
    return tuple(f"adapter-{k}" for k in range(w.adapters)) if isinstance(w, LoraShape) else ()


def fleet_pods(scenario: Scenario) -> list[PodSpec]:
    """One :class:`PodSpec` per replica, named ``<gpu>-<n>`` and labelled with their GPU type."""
    pods: list[PodSpec] = []
    adapters = adapter_names(scenario)
    for group in scenario.fleet:
        gpu = group.preset.split("/")[-1]
        already = sum(1 for p in pods if p.labels["gpu"] == gpu)
        pods.extend(
            PodSpec(
                preset=group.preset,
                name=f"{gpu}-{already + i}",
                engine=EngineKind(group.engine),
                labels={"gpu": gpu, "app": "model-server"},
                lora_adapters=adapters,
                max_loras=(group.max_loras if group.max_loras is not None else scenario.max_loras) or 0,
            )
            for i in range(group.count)
        )
    return pods


def model_name(scenario: Scenario) -> str:
    return get_preset(scenario.fleet[0].preset).model.served_name


def _arrivals(scenario: Scenario, *, capacity_rps: float, rng: random.Random) -> Iterator[float]:
    load = scenario.load
    if isinstance(load, SteadyLoad):
        return workloads.poisson_arrivals(rate=load.fraction * capacity_rps, rng=rng)
    assert isinstance(load, BurstLoad)
    return workloads.on_off_arrivals(
        rate=load.calm_fraction * capacity_rps,
        burst_rate=load.peak_fraction * capacity_rps,
        mean_on_s=load.burst_s,
        mean_off_s=load.period_s - load.burst_s,
        rng=rng,
    )


def mean_fraction(scenario: Scenario) -> float:
    load = scenario.load
    return load.fraction if isinstance(load, SteadyLoad) else load.mean_fraction()


class _Clipped:
    """A length sampler capped at ``limit`` tokens."""

    def __init__(self, inner: workloads.LengthSampler, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def sample(self, rng: random.Random) -> int:
        return min(self._limit, self._inner.sample(rng))


def _stream(
    scenario: Scenario, *, arrivals: Iterator[float], count: int, rng: random.Random
) -> list[SimRequest]:
    model = model_name(scenario)
    w = scenario.workload
    if isinstance(w, SharedPrefixShape):
        gen: Iterator[SimRequest] = workloads.shared_prefix(
            groups=w.num_groups,
            prompts_per_group=w.prompts_per_group,
            system_prompt_len=w.system_prompt_len,
            question_len=w.question_len,
            output_len=w.output_len,
            arrivals=arrivals,
            model=model,
            rng=rng,
        )
        return workloads.take(gen, count)
    lengths = w.lengths if isinstance(w, LoraShape) else w
    assert isinstance(lengths, LengthMix)
    prompt, output = workloads.length_profile(lengths.kind)
    if lengths.max_prompt_tokens is not None:
        prompt = _Clipped(prompt, lengths.max_prompt_tokens)
    if lengths.max_output_tokens is not None:
        output = _Clipped(output, lengths.max_output_tokens)
    gen = workloads.synthetic(
        count=count, arrivals=arrivals, prompt_lengths=prompt, output_lengths=output, model=model, rng=rng
    )
    if isinstance(w, LoraShape):
        weights = {name: 1.0 / (k + 1) ** w.zipf_alpha for k, name in enumerate(adapter_names(scenario))}
        gen = workloads.with_lora_mix(gen, adapters=weights, base_weight=0.0, rng=rng)
    return list(gen)


MAX_REQUESTS_PER_SEED: Final = 1_000_000
"""The most requests one seed of a scenario may hold (every one is built, prompt text included, before
the run starts). Why a bound: ``--duration-scale 1e9`` asked for trillions, and the list grew until the
process died of a ``MemoryError`` traceback (or took a shared machine's memory with it); the largest
scenario at full scale (homogeneous-steady) holds about 22,000 per seed."""


class TooManyRequests(IgwToolingError, ValueError):
    """A scenario's seed would hold more than :data:`MAX_REQUESTS_PER_SEED` requests.

    A tooling error as well as the ``ValueError`` ``igw bench`` reports: ``igw perf scrape-des`` and
    ``workers-des`` report only tooling errors, and ended ``--duration-scale 1e9`` in a ``ValueError``
    traceback, exit 1 (before session s48)."""


def scenario_requests(
    scenario: Scenario, *, capacity_rps: float, seed: int, duration_s: float | None = None
) -> list[SimRequest]:
    """The scenario's requests for one seed at its load level relative to ``capacity_rps``.

    Raises :class:`TooManyRequests` naming the scenario and the count when it exceeds
    :data:`MAX_REQUESTS_PER_SEED`."""
    duration = scenario.duration_s if duration_s is None else duration_s
    rng = random.Random(seed)
    count = planned_requests(scenario, capacity_rps=capacity_rps, duration_s=duration)
    return _stream(
        scenario, arrivals=_arrivals(scenario, capacity_rps=capacity_rps, rng=rng), count=count, rng=rng
    )


def planned_requests(scenario: Scenario, *, capacity_rps: float, duration_s: float) -> int:
    """How many requests one seed of ``scenario`` holds over ``duration_s`` at its load level relative
    to ``capacity_rps`` (arithmetic only: nothing is built), so that ``igw bench`` can check every
    scenario of a run before the first one starts.

    Raises :class:`TooManyRequests` naming the scenario and the count when it exceeds
    :data:`MAX_REQUESTS_PER_SEED`."""
    rate = mean_fraction(scenario) * capacity_rps
    count = max(1, round(rate * duration_s))
    if count > MAX_REQUESTS_PER_SEED:
        raise TooManyRequests(
            f"{scenario.name}: {duration_s:g} s of traffic at {rate:.1f} req/s "
            f"is {count:,} requests per seed, more than the {MAX_REQUESTS_PER_SEED:,} a run holds; lower "
            "--duration-scale (live mode: --live-requests)"
        )
    return count


def poisson_requests(scenario: Scenario, *, rate_rps: float, count: int, seed: int) -> list[SimRequest]:
    """``count`` requests of the scenario's workload arriving as a Poisson stream at ``rate_rps``
    (the capacity sweep's offered load; the scenario's own load shape is not involved)."""
    rng = random.Random(seed)
    return _stream(
        scenario, arrivals=workloads.poisson_arrivals(rate=rate_rps, rng=rng), count=count, rng=rng
    )


def flood_requests(scenario: Scenario, *, count: int, seed: int) -> list[SimRequest]:
    """``count`` requests of the scenario's workload all arriving at t=0 (saturation measurement)."""
    return _stream(scenario, arrivals=itertools.repeat(0.0), count=count, rng=random.Random(seed))
