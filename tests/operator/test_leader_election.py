"""High availability: two ``igw operator`` processes, one Lease; the holder acts, a standby takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import find, igwc, wait_condition, wait_for

LEASE_DURATION_S = 8
RETRY_PERIOD_S = 2


def _start(kubeconfig: Path, identity: str, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "igw.cli.main",
        "operator",
        "--kubeconfig",
        str(kubeconfig),
        "--lease-namespace",
        "default",
        "--identity",
        identity,
        "--resync-seconds",
        "0.5",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})


@pytest.fixture
def operators(kubeconfig: Path, tmp_path: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started = {name: _start(kubeconfig, name, tmp_path / f"{name}.log") for name in ("alpha", "beta")}
    try:
        yield started
    finally:
        for process in started.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _lease(kube: FakeKubeApiServer) -> dict[str, Any]:
    return dict((find(kube, "Lease", "default", "igw-operator") or {}).get("spec") or {})


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _reporters(kube: FakeKubeApiServer, name: str) -> set[str]:
    return {
        str(e.get("reportingInstance"))
        for e in kube.store.iter_all()
        if e["kind"] == "Event" and e["involvedObject"]["name"] == name
    }


def test_one_operator_acts_and_the_other_takes_over(
    cluster: FakeKubeApiServer, operators: dict[str, subprocess.Popen[bytes]]
) -> None:
    holder = wait_for(lambda: _lease(cluster).get("holderIdentity"), timeout=60, what="a lease holder")
    standby = "beta" if holder == "alpha" else "alpha"
    cluster.add(igwc("chat"))
    wait_condition(cluster, "chat", "GatewayProgrammed", timeout=60)
    assert wait_for(lambda: _reporters(cluster, "chat"), what="events of the first object") == {holder}
    deployments = [o for o in cluster.store.iter_all() if o["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == ["chat-gateway"]

    last_renewal = _time(_lease(cluster)["renewTime"])
    operators[holder].kill()
    operators[holder].wait(10)
    lease = wait_for(
        lambda: (spec := _lease(cluster)).get("holderIdentity") == standby and spec,
        timeout=60,
        what="the standby taking the lease",
    )
    takeover_s = (_time(lease["acquireTime"]) - last_renewal).total_seconds()
    print(f"lease taken over {takeover_s:.1f} s after the dead leader's last renewal")
    assert takeover_s <= 15

    cluster.add(igwc("second", model="mistral", app="mistral"))
    wait_condition(cluster, "second", "GatewayProgrammed", timeout=60)
    assert wait_for(lambda: _reporters(cluster, "second"), what="events of the second object") == {standby}
    names = sorted(o["metadata"]["name"] for o in cluster.store.iter_all() if o["kind"] == "Deployment")
    assert names == ["chat-gateway", "second-gateway"]
