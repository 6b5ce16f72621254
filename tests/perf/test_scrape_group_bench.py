"""``igw perf scrape --groups``: a real ``igw serve --workers W`` group before a tiny fleet, each of
its processes' CPU named by its role, every worker's scrape ages, and the host bound's verdict."""

from __future__ import annotations

import os
import re

import pytest

from igw.cli.main import main
from igw.perf.scrape_group import GroupRow, _ages, _worker_label, print_group_targets


def test_a_group_run_names_each_process_and_every_workers_scrape_ages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["perf", "scrape", "--pods", "3", "--groups", "1,2", "--seconds", "1"])
    out = capsys.readouterr().out
    assert code == 0
    single = next(line for line in out.splitlines() if "3 pods, 1 worker(s)" in line)
    assert re.search(r"group [\d.]+ % of a core \(single process [\d.]+\)", single)
    assert re.search(r"oldest scrape p50 / max worker 0 \d+ / \d+ ms$", single)
    group = next(line for line in out.splitlines() if "3 pods, 2 worker(s)" in line)
    # The parent and both workers, each by the role the parent gave it.
    assert re.search(r"\(parent [\d.]+, worker 0 [\d.]+, worker 1 [\d.]+\)", group), group
    # Both workers' copies of the pods' state were read, each within a second (the stale threshold).
    found = re.findall(r"worker (\d) \d+ / (\d+) ms", group.split("oldest scrape", 1)[1])
    assert {worker for worker, _ in found} == {"0", "1"}
    assert all(int(oldest) < 1000 for _, oldest in found), group
    # Each process's event-loop wake-ups, read per process: a follower that sleeps between the
    # relay's batches and reports (tens a second here) counts some, and nothing counts thousands.
    lines = out.splitlines()
    wakeups = lines[lines.index(group) + 1]
    rates = dict(re.findall(r"(parent|worker \d) (\d+)", wakeups.split("per second:", 1)[1]))
    assert set(rates) == {"parent", "worker 0", "worker 1"}, wakeups
    assert 0 < int(rates["worker 1"]) < 400, wakeups
    assert "none measured: the host bound is for 1,000 pods" in out


def _row(workers: int, cpu: dict[str, float], oldest_s: float) -> GroupRow:
    return GroupRow(
        pods=1000,
        workers=workers,
        seconds=10.0,
        stale_threshold_s=1.0,
        cpu_pct=cpu,
        fleet_pct=20.0,
        ages_s={"0": [0.02, oldest_s], "1": [0.03]},
    )


@pytest.mark.parametrize(
    ("cpu", "oldest_s", "verdict"),
    [
        ({"parent": 0.2, "worker 0": 70.0, "worker 1": 20.0}, 0.1, "met"),
        ({"parent": 0.2, "worker 0": 75.0, "worker 1": 15.0, "worker 2": 15.0}, 0.1, "MISSED"),
        ({"parent": 0.2, "worker 0": 50.0, "worker 1": 10.0}, 1.5, "MISSED"),
    ],
    ids=["within", "over-a-core", "stale"],
)
def test_the_host_bound_sums_every_process_and_needs_every_worker_fresh(
    cpu: dict[str, float], oldest_s: float, verdict: str, capsys: pytest.CaptureFixture[str]
) -> None:
    print_group_targets([_row(len(cpu) - 1, cpu, oldest_s)])
    out = capsys.readouterr().out
    cores = sum(cpu.values()) / 100
    assert f"{cores:.2f} cores for the whole group vs 1 = {cores:.2f}×" in out
    assert f"oldest scrape of any worker {oldest_s * 1000:.0f} ms vs 1000 ms ({verdict})" in out


def test_scrape_ages_are_read_by_worker_label() -> None:
    page = "\n".join(
        [
            "# HELP igw_pool_oldest_scrape_age_seconds Seconds since the least recent scrape.",
            'igw_pool_oldest_scrape_age_seconds{scheduler="s",worker="0"} 0.02',
            'igw_pool_oldest_scrape_age_seconds{scheduler="s",worker="1"} 0.07',
            'igw_pool_oldest_scrape_age_seconds{scheduler="t",worker="1"} 0.04',
            'igw_endpoint_scrape_age_seconds{endpoint="a:1",scheduler="s",worker="0"} 3',
        ]
    )
    assert _ages(page) == {"0": [0.02], "1": [0.07, 0.04]}
    assert _ages('igw_pool_oldest_scrape_age_seconds{scheduler="s"} 0.5') == {"0": [0.5]}


def test_a_process_without_a_worker_role_is_named_by_its_pid() -> None:
    assert _worker_label(os.getpid(), os.getpid()) == "parent"
    assert _worker_label(os.getpid(), 1) == f"pid {os.getpid()}"  # this test process has no role
