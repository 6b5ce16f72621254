"""A simulated fleet (``igw sim fleet``) as its own child process, for endurance runs.

The load generator, the gateway and the fleet each get their own process, so a stall of one (the
garbage collector, a busy core on a shared machine) cannot delay the others' event loops: with the
fleet inside the load generator's process, one long pause there used to surface as requests lost
by the gateway. The child is started with ``--json``; the context manager yields the pods it
describes and stops the child's process group on exit (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Final

import yaml

from igw.bench.processes import router_process

ADMIN_URL_PATTERN: Final = r'"admin_url": "(http://[^"]+)"'
"""The admin API's URL in the child's JSON description: present once every pod listens."""


@contextlib.asynccontextmanager
async def fleet_process(spec: Mapping[str, object], workdir: Path) -> AsyncIterator[list[str]]:
    """Run the fleet described by ``spec`` (a fleet-spec mapping); yield its pods' ``host:port`` keys.

    The spec is written to ``workdir/fleet.yaml``; the child's output goes to ``workdir/fleet.log``.
    """
    spec_path = workdir / "fleet.yaml"
    spec_path.write_text(yaml.safe_dump(dict(spec)))
    log_path = workdir / "fleet.log"
    argv = [sys.executable, "-m", "igw.cli.main", "sim", "fleet", "--spec", str(spec_path), "--json"]
    async with router_process(name="sim fleet", argv=argv, log_path=log_path, url_pattern=ADMIN_URL_PATTERN):
        described = next(
            json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")
        )
        yield [str(pod["key"]) for pod in described["pods"]]
