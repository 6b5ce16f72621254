"""``igw bench overload-priority --mode live``: the overload scenario over real HTTP and real processes.

One simulated-fleet pod (vLLM engine model, ``max_num_seqs`` small so that the pod, not the Python
gateway, is the bottleneck on a laptop) is first measured closed-loop for its completion rate; then
the same open-loop Poisson request list at 150 % of that rate (20 % Critical, 50 % Standard, 30 %
Sheddable, tenants as in the DES, named in ``x-gateway-inference-objective`` and
``x-gateway-inference-fairness-id``) is sent, streaming, through three routers in turn:

* ``flow-control``: ``igw serve`` with ``spec.extensions.flowControl`` (default bands);
* ``flow-control-max-kept``: the same with ``maxKeptShare`` raised so that ``slotWait`` may keep all
  but one slot (the tail-vs-throughput knob at its other end);
* ``flow-control-engine-priority``: the default bands with ``enginePriority`` in front of a second,
  SGLang-shaped pod of the same model and batch started with ``--enable-priority-scheduling``
  (priority preemption on): the gateway writes each band into the body's ``priority`` and keeps no
  batch slots, and the engine preempts a lower band's running request for a Critical one;
* ``flow-control-fixed-slot``: the same bands with Standard's ``slotWait`` left out, so each pod
  keeps the constant one batch slot of ``keepSlots`` whatever the Critical traffic;
* ``flow-control-no-places``: the same bands without the per-endpoint places (``maxEndpointQueue``,
  ``keepSlots``), so their effect and their cost are measured in the same run;
* ``no-flow-control``: ``igw serve`` without it (429 when the pool is saturated);
* ``round-robin``: the round-robin proxy (no admission, the pod queues everything).

The unloaded reference is ``flow-control`` at 50 % of the measured rate, and for
``flow-control-engine-priority`` that arm at 50 % (the same engine setting). A request that was not
answered (429, or the run's deadline) counts as not served.

Each request carries its own ``X-Request-Id``; each arm keeps the router's access log entries and
the pod's record of every request it took in, so the slowest Critical requests can be split into
where their time went (:mod:`igw.bench.overload_tail`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml

from igw.bench.console import Progress, quiet
from igw.bench.loadgen import LiveRequest, drive
from igw.bench.overload_des import BAND_NAMES, DEFAULT_MIX, TrafficClass
from igw.bench.overload_tail import access_records, request_id
from igw.bench.processes import router_process
from igw.bench.rr_proxy import LISTENING_PREFIX
from igw.bench.stats import RequestSample
from igw.sim.live import RunningFleet, run_fleet
from igw.sim.server import PodArrival
from igw.sim.spec import FleetSpec

MODEL: Final = "llama"
MAX_TOKENS: Final = 32
MAX_NUM_SEQS: Final = 8
PROBE_S: Final = 8.0
PROBE_CONCURRENCY: Final = 3 * MAX_NUM_SEQS
ENGINE_ARM: Final = "flow-control-engine-priority"
"""The arm whose pod's engine preempts by priority (its own pod and unloaded reference)."""
ARMS: Final = (
    "flow-control",
    ENGINE_ARM,
    "flow-control-max-kept",
    "flow-control-fixed-slot",
    "flow-control-no-places",
    "no-flow-control",
    "round-robin",
)
FIXED_SLOT_BANDS: Final = (
    {"priority": 1, "maxRequests": 256, "ttl": "60s"},
    {
        "priority": 0,
        "maxRequests": 256,
        "ttl": "30s",
        "dispatchBelow": 0.9,
        "maxEndpointQueue": 2,
        "keepSlots": 1,
    },
    {
        "priority": -1,
        "maxRequests": 128,
        "maxBytes": 32 << 20,
        "ttl": "10s",
        "dispatchBelow": 0.9,
        "maxEndpointQueue": 2,
        "keepSlots": 1,
    },
)
"""The default bands without Standard's ``slotWait``: one kept batch slot per pod, always."""
NO_PLACES_BANDS: Final = (
    {"priority": 1, "maxRequests": 256, "ttl": "60s"},
    {"priority": 0, "maxRequests": 256, "ttl": "30s", "dispatchBelow": 0.9},
    {"priority": -1, "maxRequests": 128, "maxBytes": 32 << 20, "ttl": "10s", "dispatchBelow": 0.9},
)
"""The default bands' limits and headroom, without ``maxEndpointQueue``, ``keepSlots`` and ``slotWait``."""
ARM_BANDS: Final = {"flow-control-fixed-slot": FIXED_SLOT_BANDS, "flow-control-no-places": NO_PLACES_BANDS}
"""The flow-control arms that replace the default bands, and their bands."""
MAX_KEPT_SHARE: Final = 0.875
"""``flow-control-max-kept``'s ``maxKeptShare``: ``slotWait`` may keep all but one slot of the pod."""
ARM_SETTINGS: Final = {"flow-control-max-kept": {"maxKeptShare": MAX_KEPT_SHARE}}
"""The flow-control arms that add settings to the defaults, and those settings."""


@dataclass(frozen=True, slots=True)
class LiveArm:
    """One router's samples for one request list (same order as the list)."""

    name: str
    load: float
    requests: list[LiveRequest]
    samples: list[RequestSample]
    access: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    """The router's access log entries by request id (none for the round-robin proxy)."""
    arrivals: Mapping[str, PodArrival] = dataclasses.field(default_factory=dict)
    """The pod's record of each request it took in, by request id."""
    pod_late_steps: int = 0
    """Engine steps of the pod that started late during the arm (the pod's host was too busy)."""
    preemptions: int = 0
    """Running requests the pod's engine preempted during the arm."""

    def band_of(self, request: LiveRequest) -> int:
        objective = dict(request.headers)["x-gateway-inference-objective"]
        return next(p for p, name in BAND_NAMES.items() if name == objective)


def _fleet() -> FleetSpec:
    """The vLLM pod every arm but :data:`ENGINE_ARM` uses, and that arm's SGLang pod (same model,
    preset and batch; idle while the other arms run)."""
    pod = {
        "name": "pod",
        "preset": "llama-3.1-8b/h100",
        "served_model_name": MODEL,
        "max_num_seqs": MAX_NUM_SEQS,
    }
    sglang = {**pod, "name": "sglang-pod", "engine": "sglang", "enable_priority_scheduling": True}
    return FleetSpec.from_mapping({"time_scale": 1.0, "seed": 5, "pods": [pod, sglang]})


def _pod_index(arm: str) -> int:
    return 1 if arm == ENGINE_ARM else 0


async def probe_rate(pod_url: str, *, seconds: float = PROBE_S) -> float:
    """Completions per second of the pod under a closed loop that keeps it saturated."""
    body = {"model": MODEL, "prompt": "probe", "max_tokens": MAX_TOKENS, "ignore_eos": True}
    done = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        end = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < end:
                async with http.post(pod_url + "/v1/completions", json=body) as resp:
                    await resp.read()
                    done += resp.status == 200

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(PROBE_CONCURRENCY)))
        return done / (time.perf_counter() - start)


def live_requests(
    rate_rps: float, duration_s: float, *, seed: int, mix: Sequence[TrafficClass] = DEFAULT_MIX
) -> list[LiveRequest]:
    """Poisson arrivals per traffic class, each request naming its band and tenant in headers."""
    rng = random.Random(seed)
    out: list[LiveRequest] = []
    for cls in mix:
        t = rng.expovariate(rate_rps * cls.share)
        while t < duration_s:
            headers = (
                ("x-gateway-inference-objective", BAND_NAMES[cls.priority]),
                ("x-gateway-inference-fairness-id", cls.tenant),
            )
            out.append(LiveRequest(t, MODEL, "hello there", MAX_TOKENS, 3, headers))
            t += rng.expovariate(rate_rps * cls.share)
    ordered = sorted(out, key=lambda r: r.at_s)
    return [
        dataclasses.replace(r, headers=(*r.headers, ("x-request-id", request_id(i))))
        for i, r in enumerate(ordered)
    ]


def gateway_config(
    *,
    flow_control: bool,
    bands: Sequence[Mapping[str, Any]] | None = None,
    settings: Mapping[str, Any] | None = None,
    engine_priority: bool = False,
) -> dict[str, Any]:
    """``igw serve``'s configuration for one arm: flow control with the default bands, or ``bands``,
    and ``settings`` added to ``flowControl``; with ``engine_priority`` the pool is an SGLang one
    with ``flowControl.enginePriority``."""
    extensions: dict[str, Any] = {"routing": {"scrapeInterval": "50ms", "configReloadInterval": "1s"}}
    if flow_control:
        # The pod's configured max_num_seqs, as its operator would state it: slots are kept from
        # the first request on, not only once the gate has seen the pod full.
        extensions["flowControl"] = {"pollInterval": "10ms", "assumedBatch": MAX_NUM_SEQS}
        if bands is not None:
            extensions["flowControl"]["bands"] = [dict(b) for b in bands]
        extensions["flowControl"].update(settings or {})
        if engine_priority:
            extensions["flowControl"]["enginePriority"] = [{"scheduler": "main"}]
    scheduler: dict[str, Any] = {
        "name": "main",
        "modelName": MODEL,
        "modelSelector": {"matchLabels": {"app": "pod"}},
    }
    if engine_priority:
        scheduler["engineType"] = "sglang"
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "overload-bench", "namespace": "bench"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [scheduler],
            "extensions": extensions,
        },
    }


@contextlib.asynccontextmanager
async def _router(arm: str, work: Path, fleet: RunningFleet) -> AsyncIterator[str]:
    folder = work / arm
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    if arm == "round-robin":
        argv = [sys.executable, "-m", "igw.cli.rr_proxy_process", fleet.pods[0].url]
        pattern = LISTENING_PREFIX + r"(http://\S+)"
    else:
        flow = arm.startswith("flow-control")
        config = yaml.safe_dump(
            gateway_config(
                flow_control=flow,
                bands=ARM_BANDS.get(arm),
                settings=ARM_SETTINGS.get(arm),
                engine_priority=arm == ENGINE_ARM,
            )
        )
        endpoints = yaml.safe_dump({"schedulers": {"main": [fleet.pods[_pod_index(arm)].key]}})
        await asyncio.to_thread((folder / "igwc.yaml").write_text, config)
        await asyncio.to_thread((folder / "endpoints.yaml").write_text, endpoints)
        argv = [sys.executable, "-m", "igw.cli.main", "serve", "--config", str(folder / "igwc.yaml")]
        argv += [
            "--endpoints",
            str(folder / "endpoints.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-reload",
        ]
        pattern = r"serving \d+ scheduler\(s\) at (http://\S+)"
    async with router_process(
        name=arm, argv=argv, log_path=folder / "router.log", url_pattern=pattern
    ) as url:
        await asyncio.sleep(1.0)  # first scrapes of the pod before traffic
        yield url


async def _run_arm(
    arm: str, load: float, requests: list[LiveRequest], work: Path, fleet: RunningFleet, duration_s: float
) -> LiveArm:
    folder = work / f"{arm}-{load:g}"
    pod = fleet.pod(fleet.pods[_pod_index(arm)].key)
    arrivals: dict[str, PodArrival] = {}
    late_before = pod.lagged_steps
    preempted_before = pod.engine.counters.preemptions
    pod.arrivals = arrivals
    try:
        async with _router(arm, folder, fleet) as url:
            samples = await drive(
                base_url=url, requests=requests, endpoint_headers=(), deadline_s=duration_s + 60.0
            )
        await asyncio.sleep(2.0)  # the pod finishes what a cut-off router left running
    finally:
        pod.arrivals = None
    log_path = folder / arm / "router.log"
    log_text = await asyncio.to_thread(log_path.read_text, encoding="utf-8", errors="replace")
    access = access_records(log_text.splitlines())
    return LiveArm(
        arm,
        load,
        requests,
        samples,
        access,
        arrivals,
        pod.lagged_steps - late_before,
        pod.engine.counters.preemptions - preempted_before,
    )


async def run_live_overload(
    work: Path,
    *,
    duration_s: float,
    seed: int,
    load: float = 1.5,
    routers: Sequence[str] = ARMS,
    unloaded: bool = True,
    progress: Progress = quiet,
) -> tuple[float, list[LiveArm]]:
    """The measured pod rate and one :class:`LiveArm` per router, plus the unloaded reference last.
    ``progress`` is told each step as it starts: the full run (seven arms of 60 s, each behind a
    router process of its own) takes ten minutes and more."""
    arms: list[LiveArm] = []

    async def run_arm(arm: str, at_load: float, requests: list[LiveRequest]) -> None:
        progress(f"arm {len(arms) + 1}: {arm} at {at_load:.0%} load, {duration_s:g} s")
        arms.append(await _run_arm(arm, at_load, requests, work, fleet, duration_s))

    progress("starting the simulated pod, probing its rate")
    async with run_fleet(_fleet(), admin=False) as fleet:
        rate = await probe_rate(fleet.pods[0].url)
        progress(f"pod rate {rate:.1f} req/s")
        await asyncio.sleep(2.0)
        loaded = live_requests(load * rate, duration_s, seed=seed)
        for arm in routers:
            await run_arm(arm, load, loaded)
        if unloaded:
            calm = live_requests(0.5 * rate, duration_s, seed=seed)
            await run_arm("flow-control", 0.5, calm)
            if ENGINE_ARM in routers:
                await run_arm(ENGINE_ARM, 0.5, calm)
    return rate, arms
