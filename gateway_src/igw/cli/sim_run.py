"""``igw sim run``: one DES run of a generated workload or a trace through a named routing policy."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from igw.bench.policies.registry import PolicyContext, build_policy
from igw.cli.arg_types import create_parent
from igw.sim.des import SimulationError, simulate
from igw.sim.request import SimRequest
from igw.sim.spec import FleetSpec, SpecError
from igw.sim.workloads import WorkloadError, gamma_arrivals, length_profile, replay, synthetic


def run_des_command(
    *,
    spec_path: str,
    policy_name: str,
    count: int,
    rate: float,
    cv: float,
    lengths: str,
    trace: str | None,
    seed: int | None,
    scrape_interval_s: float,
    max_retries: int,
    records_path: str | None,
) -> int:

    try:
        spec = FleetSpec.from_yaml(spec_path)
        # the spec's own seed unless --seed is given: it was ignored here (only `igw sim fleet` read it), so
        # editing it changed nothing while the docs say every draw is seeded from the spec or --seed
        seed = spec.seed if seed is None else seed
        model = spec.pods[0].model_name
        rng = random.Random(seed)
        requests: Iterator[SimRequest]
        if trace is not None:
            requests = replay(trace, model=model, rng=rng)
        else:
            prompt_lengths, output_lengths = length_profile(lengths)
            requests = synthetic(
                count=count,
                arrivals=gamma_arrivals(rate=rate, cv=cv, rng=rng),
                prompt_lengths=prompt_lengths,
                output_lengths=output_lengths,
                model=model,
                rng=rng,
            )
        policy = build_policy(policy_name, PolicyContext(rng=random.Random(seed + 1)))
        result = simulate(
            pods=spec.pods,
            requests=requests,
            policy=policy,
            seed=seed,
            scrape_interval_s=scrape_interval_s,
            max_retries=max_retries,
        )
    except (SpecError, WorkloadError, SimulationError, ValueError) as exc:
        print(f"igw sim run: {exc}", file=sys.stderr)
        return 2
    # the registry name asked for: the policy's own name is "gateway" for both gateway-default and
    # gateway-tuned, so the summary could not tell them apart (before session s40)
    # and the seed used: without --seed it is the spec's, which the output did not show, so a printed
    # result could not be reproduced from itself (before session s48)
    summary = {**result.summary(), "policy": policy_name, "seed": seed}
    print(json.dumps(summary, indent=2))
    unserved = summary["requests"] - summary["served"]
    if unserved:
        # the percentiles leave these out, so the JSON alone made a policy that lost its slow
        # requests look faster than one that served them (before session s43)
        print(
            f"igw sim run: {unserved} of {summary['requests']} requests were not served "
            f"({summary['errors']} errors, {summary['rejected_429']} 429, {summary['rejected_503']} 503); "
            f"the ttft/itl/e2e percentiles are over the {summary['served']} served ones only",
            file=sys.stderr,
        )
    if records_path is not None:
        try:
            with create_parent(Path(records_path)).open("w", encoding="utf-8") as fh:
                for rec in result.records:
                    fh.write(json.dumps(asdict(rec)) + "\n")
        except OSError as exc:  # the disk filled, the folder went away: the summary is printed above
            print(f"igw sim run: --records {records_path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    return 0
