"""``igw bench canary-rollout``: move a model to a new version live, 10 % -> 50 % -> 100 %.

Real processes and real HTTP on loopback: two simulated-fleet pods (one per version) and ``igw serve``
with a ``modelRewrites`` rule for the client-facing name, hot-reloading its configuration file.
Clients keep sending while the weights change; each phase starts by rewriting the file and waiting
until the gateway reports the reload applied (``igw_config_reloads_total{result="applied"}``).

Per phase the report gives the observed share of the new version among the requests sent after the
reload took effect (without a sticky key: the weighted random draw), the failed requests counted
over the whole phase including the switch, and stickiness: sticky users (an ``x-user`` header) must
stay on one version within a phase, and a user on the new version must stay there in later phases.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml

from igw.bench.console import Progress, quiet, stderr_progress
from igw.bench.processes import router_process
from igw.errors import IgwToolingError
from igw.sim.live import RunningFleet, run_fleet
from igw.sim.spec import FleetSpec

CLIENT_MODEL: Final = "llama"
OLD: Final = "llama-v1"
NEW: Final = "llama-v2"
STICKY_HEADER: Final = "x-user"
PHASES: Final = (10, 50, 100)
"""The new version's weight (percent) in each phase."""
SPLIT_BAND: Final = 0.01
"""The observed share must be within this of the weight (the issue's bound)."""
RELOAD_POLLS: Final = 600
"""Polls of ``/metrics`` (50 ms apart) before a weight change counts as never applied."""
GIVE_UP_FAILURES: Final = 100
"""A phase with this many failed requests ends early (the run has already failed)."""
STICKY_EVERY: Final = 10
"""One request in this many carries a sticky user key (the rest measure the random split)."""


@dataclass(slots=True)
class PhaseResult:
    weight_percent: int
    measured: int = 0
    """Requests without a sticky key answered among the first ``requests_per_phase`` of them sent
    after the reload was applied (sticky ones are checked apart). The sample is fixed when a request
    is sent, not when it is answered: the progress line and the report count the same requests, and
    the requests still in flight when the count is reached are neither added afterwards (until
    session s50 the report counted up to 16 more than the progress line - 1,014 against 1,000, with a
    different share) nor dropped (the first answered would favour the faster version)."""
    on_new: int = 0
    failed: int = 0
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    sticky_violations: int = 0
    """Sticky users seen on both versions within this phase."""
    moved_off_new: int = 0
    """Sticky users on the new version in the previous phase and on the old one now."""

    @property
    def share(self) -> float | None:
        return self.on_new / self.measured if self.measured else None

    @property
    def within_band(self) -> bool:
        share = self.share
        return share is not None and abs(share - self.weight_percent / 100) <= SPLIT_BAND


def gateway_config(new_percent: int) -> dict[str, Any]:
    def scheduler(model: str) -> dict[str, Any]:
        return {"name": model, "modelName": model, "modelSelector": {"matchLabels": {"app": model}}}

    rule = {
        "model": CLIENT_MODEL,
        "targets": [{"model": OLD, "weight": 100 - new_percent}, {"model": NEW, "weight": new_percent}],
        "stickyBy": "header",
        "stickyHeader": STICKY_HEADER,
    }
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "canary-bench", "namespace": "bench"},
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [scheduler(OLD), scheduler(NEW)],
            "extensions": {
                "routing": {"configReloadInterval": "100ms", "scrapeInterval": "50ms"},
                "modelRewrites": {"rules": [rule]},
                # Bursts wait for capacity instead of failing with 429 while the fleet is busy.
                "flowControl": {"pollInterval": "10ms"},
            },
        },
    }


def _fleet_spec() -> FleetSpec:
    pods = [
        {"name": "old", "preset": "llama-3.1-8b/h100", "served_model_name": OLD},
        {"name": "new", "preset": "llama-3.1-8b/h100", "served_model_name": NEW},
    ]
    return FleetSpec.from_mapping({"time_scale": 0.01, "seed": 11, "pods": pods})


@contextlib.asynccontextmanager
async def _gateway(work: Path, fleet: RunningFleet) -> AsyncIterator[str]:
    config = work / "igwc.yaml"
    endpoints = {OLD: [fleet.pods[0].key], NEW: [fleet.pods[1].key]}
    await asyncio.to_thread(config.write_text, yaml.safe_dump(gateway_config(PHASES[0])))
    await asyncio.to_thread((work / "endpoints.yaml").write_text, yaml.safe_dump({"schedulers": endpoints}))
    argv = [sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config)]
    argv += ["--endpoints", str(work / "endpoints.yaml"), "--host", "127.0.0.1", "--port", "0"]
    async with router_process(
        name="igw serve",
        argv=argv,
        log_path=work / "gateway.log",
        url_pattern=r"serving \d+ scheduler\(s\) at (http://\S+)",
        ready_probe="/readyz",
    ) as url:
        yield url


async def _applied_reloads(http: aiohttp.ClientSession, url: str) -> float:
    text = await (await http.get(url + "/metrics")).text()
    for line in text.splitlines():
        if line.startswith('igw_config_reloads_total{result="applied"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class CanaryBenchError(IgwToolingError, RuntimeError):
    """The gateway never applied a weight change (its log says why)."""


async def _switch(http: aiohttp.ClientSession, url: str, config: Path, percent: int) -> None:
    """Write the new weights and wait until the gateway reports the reload applied."""
    before = await _applied_reloads(http, url)
    await asyncio.to_thread(config.write_text, yaml.safe_dump(gateway_config(percent)))
    for _ in range(RELOAD_POLLS):
        await asyncio.sleep(0.05)
        if await _applied_reloads(http, url) > before:
            return
    raise CanaryBenchError(f"igw serve did not apply the {percent} % weights (see gateway.log)")


class _Load:
    """Clients sending continuously; each response is booked to the phase current when it was sent."""

    def __init__(self, http: aiohttp.ClientSession, url: str, *, concurrency: int, users: int) -> None:
        self.http, self.url = http, url
        self.concurrency, self.users = concurrency, users
        self.phase: PhaseResult | None = None
        self.measuring = False
        self.target = 0
        self.reached = asyncio.Event()
        self.claimed = 0
        """Unkeyed requests of this phase's sample sent so far (at most ``target``)."""
        self.settled = 0
        """Requests of the sample answered or failed (the phase ends when all ``target`` are)."""
        self.sticky: dict[int, dict[str, set[str]]] = {}
        """Phase weight -> user -> versions seen."""
        self.counter = 0

    def start_phase(self, phase: PhaseResult, *, target: int) -> None:
        self.phase, self.measuring, self.target = phase, False, target
        self.reached = asyncio.Event()
        self.claimed = self.settled = 0

    async def one(self) -> None:
        phase, measuring = self.phase, self.measuring
        if phase is None:
            return
        self.counter += 1
        n = self.counter
        user = f"user-{n % self.users}" if n % STICKY_EVERY == 0 else None
        headers = {STICKY_HEADER: user} if user else {}
        body = {"model": CLIENT_MODEL, "prompt": "hello", "max_tokens": 2}
        phase.sent += 1
        sampled = measuring and user is None and self.claimed < self.target
        if sampled:
            self.claimed += 1
        try:
            try:
                async with self.http.post(self.url + "/v1/completions", json=body, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status != 200:
                        self._failed(phase, f"HTTP {resp.status}: {text[:200]}")
                        return
                    served = str(json.loads(text)["model"])
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._failed(phase, f"{type(exc).__name__}: {exc}")
                return
            if not measuring:  # sent around the switch: either weights may apply
                return
            if user is not None:
                self.sticky.setdefault(phase.weight_percent, {}).setdefault(user, set()).add(served)
            elif sampled:
                phase.measured += 1
                phase.on_new += served == NEW
        finally:
            if sampled and phase is self.phase:  # not a phase ended early (GIVE_UP_FAILURES)
                self.settled += 1
                if self.settled >= self.target:
                    self.reached.set()

    def _failed(self, phase: PhaseResult, what: str) -> None:
        phase.failed += 1
        phase.failures.append(what)
        if phase is self.phase and phase.failed >= GIVE_UP_FAILURES:  # it cannot pass: end it
            self.reached.set()

    async def run(self, stop: asyncio.Event) -> None:
        async def worker() -> None:
            while not stop.is_set():
                await self.one()

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))


async def run_canary(
    work: Path,
    *,
    requests_per_phase: int,
    concurrency: int = 16,
    users: int = 200,
    progress: Progress = quiet,
) -> list[PhaseResult]:
    """Run the three phases; ``requests_per_phase`` measured (unkeyed) requests each. ``progress``
    is told each phase as it starts and ends (the full run takes minutes)."""
    results: list[PhaseResult] = []
    progress(f"starting the simulated fleet ({OLD}, {NEW}) and igw serve")
    async with run_fleet(_fleet_spec(), admin=False) as fleet, _gateway(work, fleet) as url:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            load = _Load(http, url, concurrency=concurrency, users=users)
            stop = asyncio.Event()
            clients = asyncio.create_task(load.run(stop))
            try:
                for index, percent in enumerate(PHASES):
                    phase = PhaseResult(percent)
                    results.append(phase)
                    load.start_phase(phase, target=requests_per_phase)
                    if index > 0:  # the switch happens while the clients keep sending
                        progress(f"phase {percent} %: reloading the weights")
                        await _switch(http, url, work / "igwc.yaml", percent)
                    await asyncio.sleep(0.2)  # requests sent before the reload have answered
                    load.measuring = True
                    progress(f"phase {percent} %: measuring {requests_per_phase} requests")
                    await load.reached.wait()
                    share = "-" if phase.share is None else f"{phase.share:.2%}"
                    told = f"{share} of {phase.measured} on {NEW}, {phase.failed} failed"
                    progress(f"phase {percent} %: {told}")
            finally:
                stop.set()
                await clients
    _stickiness(results, load.sticky)
    return results


def _stickiness(results: list[PhaseResult], sticky: dict[int, dict[str, set[str]]]) -> None:
    previous: dict[str, set[str]] = {}
    for phase in results:
        seen = sticky.get(phase.weight_percent, {})
        phase.sticky_violations = sum(len(versions) > 1 for versions in seen.values())
        phase.moved_off_new = sum(
            1 for user, versions in seen.items() if previous.get(user) == {NEW} and OLD in versions
        )
        previous = seen


def markdown(results: list[PhaseResult], command: str) -> str:
    lines = [
        "# canary-rollout (live)",
        "",
        f"Command: `{command}`. Two simulated-fleet pods ({OLD}, {NEW}) behind `igw serve`; the rule's",
        "weights change by hot reload while clients keep sending.",
        "",
        "| phase | measured | share on new | within ±1 % | sent (incl. switch) | failed "
        "| sticky users on 2 versions | moved off new |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        share = "-" if r.share is None else f"{r.share:.2%}"
        lines.append(
            f"| {r.weight_percent} % | {r.measured} | {share} | {'yes' if r.within_band else 'no'} "
            f"| {r.sent} | {r.failed} | {r.sticky_violations} | {r.moved_off_new} |"
        )
    return "\n".join(lines) + "\n"


def run_canary_command(*, out: Path, quick: bool, command: str) -> int:
    """The CLI body: run, write ``canary-rollout.md`` / ``.json``; exit 1 when a request failed."""
    (out / "canary-work").mkdir(parents=True, exist_ok=True)
    requests = 1000 if quick else 10_000
    work = out / "canary-work"
    results = asyncio.run(run_canary(work, requests_per_phase=requests, progress=stderr_progress()))
    text = markdown(results, command)
    (out / "canary-rollout.md").write_text(text, encoding="utf-8")
    data = [{**asdict(r), "failures": r.failures[:20], "share": r.share} for r in results]
    (out / "canary-rollout.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(text)
    return 1 if any(r.failed for r in results) else 0
