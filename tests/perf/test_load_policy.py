"""The benchmark load's scheduling policy (set at spawn, inherited by later threads, read back from
the kernel) and the context-switch counts read from ``/proc``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from igw.perf import load_policy
from igw.perf.gateway_load import PROMPT, backend_process, group_pids
from igw.perf.wrk_load import WrkError, run_wrk, script, wrk_binary

# A child that starts a second thread only after it has been running a while: the thread must
# inherit the policy given at spawn, not just the threads present then.
LATE_THREAD = """
import sys, threading, time
time.sleep(0.2)
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()
print("threads", threading.active_count(), flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize(("policy", "expected"), [("batch", "SCHED_BATCH"), ("normal", "SCHED_OTHER")])
def test_a_child_and_the_threads_it_makes_later_run_under_the_policy_set_at_spawn(
    policy: str, expected: str
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", LATE_THREAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=load_policy.at_spawn(policy),
    ) as child:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "threads 2"
        tasks = list(Path(f"/proc/{child.pid}/task").iterdir())
        assert len(tasks) == 2
        assert {os.sched_getscheduler(int(t.name)) for t in tasks} == {load_policy.POLICIES[policy]}
        assert load_policy.thread_policies(child.pid) == {expected}
        child.stdin.write("\n")
        child.stdin.flush()
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process untouched


def test_this_process_gets_the_policy_and_its_own_back() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert other.native_id is not None
        with load_policy.process_policy("batch"):
            assert os.sched_getscheduler(0) == os.SCHED_BATCH
            assert os.sched_getscheduler(other.native_id) == os.SCHED_BATCH
            # A child spawned now inherits it (wrk, with --load raw's process as the load).
            out = subprocess.run(
                [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                capture_output=True,
                text=True,
                check=True,
            )
            assert int(out.stdout) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        assert os.sched_getscheduler(other.native_id) == os.SCHED_OTHER
    finally:
        stop.set()
        other.join()


def test_wrk_and_the_backend_run_under_the_policy_given() -> None:
    try:
        wrk_binary()
    except WrkError:
        pytest.skip("wrk is not installed")
    seen: dict[int, set[str]] = {}

    def look(backend_pid: int) -> None:
        for pid in group_pids(os.getpid())[1:]:
            if pid != backend_pid and Path(f"/proc/{pid}/comm").read_text().strip() == "wrk":
                seen[pid] = load_policy.thread_policies(pid)
                seen[-pid] = {str(len(list(Path(f"/proc/{pid}/task").iterdir())))}

    async def phase(base: str, script_path: Path, backend_pid: int) -> None:
        running = asyncio.create_task(
            run_wrk(
                base,
                concurrency=4,
                seconds=2,
                script_path=script_path,
                preexec=load_policy.at_spawn("batch"),
            )
        )
        await asyncio.sleep(0.5)
        look(backend_pid)
        assert (await running).requests > 0

    with (
        backend_process(chunks=1, interval=0.0, raw=True, preexec=load_policy.at_spawn("batch")) as (
            base,
            backend,
        ),
        tempfile.TemporaryDirectory() as scripts,
    ):
        assert load_policy.thread_policies(backend.pid) == {"SCHED_BATCH"}
        script_path = Path(scripts) / "load.lua"
        script_path.write_text(script(PROMPT))
        asyncio.run(phase(base, script_path, backend.pid))
        if backend.stdout is not None:
            backend.stdout.close()
    [(pid, policies)] = [(pid, p) for pid, p in seen.items() if pid > 0]
    assert policies == {"SCHED_BATCH"}
    assert int(next(iter(seen[-pid]))) >= 2  # wrk's main thread and its load thread, made after exec


def test_switches_are_read_from_every_thread_of_a_real_process() -> None:
    before = load_policy.context_switches(os.getpid())
    for _ in range(20):
        time.sleep(0.001)  # each sleep gives up the CPU: a voluntary switch of this thread
    done = threading.Event()

    def sleeper() -> None:
        for _ in range(30):
            time.sleep(0.001)
        done.set()
        time.sleep(0.5)  # still alive when counted: a thread that ended takes its counts along

    thread = threading.Thread(target=sleeper)
    thread.start()
    done.wait()
    main_only = load_policy.parse_switches(Path(f"/proc/{os.getpid()}/status").read_text())
    after = load_policy.context_switches(os.getpid())
    thread.join()
    assert after[0] - before[0] >= 50  # this thread's 20 and the other's 30
    assert after[0] >= main_only[0] + 30  # /proc/<pid>/status alone counts the main thread only
    assert after[1] >= before[1] >= 0


def test_switch_counts_are_parsed_by_name() -> None:
    status = "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n"
    assert load_policy.parse_switches(status) == (17, 4)
    assert load_policy.context_switches(2**22 + 1) == (0, 0)  # no such process


@pytest.mark.parametrize(
    ("gateway", "load", "expected"),
    [
        ((), (), "batch"),
        ((0, 1), (), "batch"),
        ((), (2,), "batch"),
        ((0, 1), (1, 2), "batch"),
        ((0, 1), (2, 3), "normal"),
    ],
)
def test_the_default_is_batch_when_the_load_may_share_a_workers_core(
    gateway: tuple[int, ...], load: tuple[int, ...], expected: str
) -> None:
    assert load_policy.default_policy(gateway, load) == expected
