"""``igw sim fleet``: run a live fleet in the foreground until SIGINT/SIGTERM (or ``--duration``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import replace

from igw.sim.live import RunningFleet, run_fleet
from igw.sim.spec import FleetSpec, SpecError


def run_fleet_command(
    *, spec_path: str, as_json: bool, time_scale: float | None, duration: float | None
) -> int:
    try:
        spec = FleetSpec.from_yaml(spec_path)
    except SpecError as exc:
        print(f"igw sim fleet: invalid spec: {exc}", file=sys.stderr)
        return 2
    if time_scale is not None:
        if not 1e-3 <= time_scale <= 1e3:
            print("igw sim fleet: --time-scale must be within [0.001, 1000]", file=sys.stderr)
            return 2
        spec = replace(spec, time_scale=time_scale)
    try:
        asyncio.run(_serve(spec, as_json=as_json, duration=duration))
    except OSError as exc:
        print(f"igw sim fleet: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(spec: FleetSpec, *, as_json: bool, duration: float | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with run_fleet(spec) as fleet:
            _announce(fleet, as_json=as_json)
            if duration is None:
                await stop.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=duration)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print("igw sim fleet: stopped", file=sys.stderr, flush=True)


def _announce(fleet: RunningFleet, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(fleet.describe()), flush=True)
        return
    print(f"simulated fleet: {len(fleet.pods)} pods, time_scale={fleet.time_scale} (wall s per GPU s)")
    print(f"admin API: {fleet.admin_url}/pods")
    for pod in fleet.pods:
        labels = ",".join(f"{k}={v}" for k, v in sorted(pod.labels.items())) or "-"
        metrics = "" if pod.exposes_metrics else "  (no /metrics)"
        print(
            f"  {pod.name:<16} {pod.url:<24} {pod.engine} {pod.engine_version:<12} {pod.preset:<24}"
            f" {labels}{metrics}"
        )
    sys.stdout.flush()
