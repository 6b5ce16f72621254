"""What ``igw perf scrape``'s two ways of measuring share: the simulated fleet's process, the
benchmark's configuration and the issue's bounds (:mod:`igw.perf.scrape` times the scraper in its own
process, :mod:`igw.perf.scrape_group` a whole ``igw serve --workers W``)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Final

from igw.config.durations import format_duration
from igw.errors import IgwToolingError
from igw.perf.scrape_fleet import VARIANTS

TARGET_FLEET_PODS: Final = 1000
TARGET_HOST_CORES: Final = 1.0
"""The issue's goal: 1,000 pods kept fresh within the stale threshold on at most one core per host."""
SCHEDULER: Final = "bench"
FLEET_START_TIMEOUT_S: Final = 120.0


class ScrapeBenchmarkError(IgwToolingError, RuntimeError):
    """The simulated fleet did not start, or no scrape of it succeeded."""


def config_doc(interval_s: float, stale_s: float) -> dict[str, object]:
    """The benchmark's InferenceGatewayConfig: one scheduler, this scrape interval and stale threshold."""
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "perf-scrape", "namespace": "inference"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": SCHEDULER, "modelName": "m", "modelSelector": {"matchLabels": {"app": "bench"}}}
            ],
            "extensions": {
                "routing": {
                    "scrapeInterval": format_duration(interval_s),
                    "staleThreshold": format_duration(stale_s),
                    "scrapeTimeout": "1s",
                }
            },
        },
    }


@contextlib.asynccontextmanager
async def fleet(
    pods: int, variants: int = VARIANTS, busy: int | None = None
) -> AsyncIterator[tuple[int, list[int]]]:
    """Run the fleet process; yields its pid and ports, closes its stdin (which stops it) on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.perf_scrape_fleet_process", "--pods", str(pods),
        "--variants", str(variants), "--busy", str(pods if busy is None else busy),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    if proc.stdin is None or proc.stdout is None:
        raise ScrapeBenchmarkError("the scrape fleet process has no pipes")
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), FLEET_START_TIMEOUT_S)).decode()
        if not line.startswith("PORTS "):
            raise ScrapeBenchmarkError(f"the scrape fleet did not start: {line.strip()!r}")
        yield proc.pid, [int(p) for p in line.split()[1].split(",")]
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout=30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
