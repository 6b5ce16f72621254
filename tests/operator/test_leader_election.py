"""High availability: two ``igw operator`` processes, one Lease; the holder acts, a standby takes over."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from igw.operator import runner
from igw.operator.election import (
    DEFAULT_LEASE_DURATION_S,
    DEFAULT_RETRY_PERIOD_S,
    LIBRARY_LOGGER,
    ElectionSettings,
    LeaseElection,
)
from igw.operator.kube import FIELD_MANAGER, Kube, NotLeading
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import (
    OperatorThread,
    find,
    igwc,
    operator_options,
    wait_condition,
    wait_for,
    write_latest,
)


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
    # the lease duration, then at most a retry period until the standby's next try (and its slack)
    assert takeover_s <= DEFAULT_LEASE_DURATION_S + DEFAULT_RETRY_PERIOD_S + 5

    cluster.add(igwc("second", model="mistral", app="mistral"))
    wait_condition(cluster, "second", "GatewayProgrammed", timeout=60)
    assert wait_for(lambda: _reporters(cluster, "second"), what="events of the second object") == {standby}
    names = sorted(o["metadata"]["name"] for o in cluster.store.iter_all() if o["kind"] == "Deployment")
    assert names == ["chat-gateway", "second-gateway"]


def test_a_leader_stopped_with_sigterm_hands_the_lease_over_at_once(
    cluster: FakeKubeApiServer, operators: dict[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A rolling update of the operator stops the leader with SIGTERM. It kept its Lease, so the
    standby took over only once the lease expired (the lease duration plus a retry after the last
    renewal) and nothing reconciled meanwhile. Now the leader releases it as it stops, and the
    standby leads at its next try; objects created meanwhile are programmed by it."""
    holder = wait_for(lambda: _lease(cluster).get("holderIdentity"), timeout=60, what="a lease holder")
    standby = "beta" if holder == "alpha" else "alpha"
    cluster.add(igwc("chat"))
    wait_condition(cluster, "chat", "GatewayProgrammed", timeout=60)

    signalled = datetime.now(UTC)
    operators[holder].send_signal(signal.SIGTERM)
    assert operators[holder].wait(30) == 0
    exited = datetime.now(UTC)
    lease = wait_for(
        lambda: (spec := _lease(cluster)).get("holderIdentity") == standby and spec,
        timeout=60,
        what="the standby taking the lease",
    )
    takeover_s = (_time(lease["acquireTime"]) - signalled).total_seconds()
    stop_s = (exited - signalled).total_seconds()
    print(
        f"lease taken over {takeover_s:.1f} s after SIGTERM to the leader (which exited after {stop_s:.1f} s)"
    )
    # Released as it exits, the lease is taken at the standby's next try (a retry period at most);
    # kept, it is taken only once it expires (the lease duration after the last renewal).
    assert takeover_s <= stop_s + DEFAULT_RETRY_PERIOD_S + 1.5
    assert takeover_s < DEFAULT_LEASE_DURATION_S
    log = (tmp_path / f"{holder}.log").read_text(encoding="utf-8", errors="replace")
    assert f"{holder}: released Lease default/igw-operator" in log, log[-3000:]

    cluster.add(igwc("second", model="mistral", app="mistral"))
    wait_condition(cluster, "second", "GatewayProgrammed", timeout=60)
    assert wait_for(lambda: _reporters(cluster, "second"), what="events of the second object") == {standby}


def test_a_lease_another_candidate_holds_is_never_released(cluster: FakeKubeApiServer) -> None:
    """The release reads the Lease afresh: one another candidate took meanwhile (this leader stalled
    past the lease duration and has not noticed yet) is left as it is, and so is any change made after
    that read (the replace carries its resourceVersion). The holder's own release clears the holder."""
    identity = "stalled"
    kind = cluster.store.kind_for(api_version="coordination.k8s.io/v1", kind="Lease")

    def take_over(lease: dict[str, Any]) -> None:
        lease["spec"]["holderIdentity"] = "newer"
        cluster.store.replace(kind, "default", "igw-operator", lease)

    async def main() -> tuple[bool, bool]:
        settings = ElectionSettings("igw-operator", "default", identity)
        first = LeaseElection(settings, cluster.api_client())
        first.start()
        await asyncio.wait_for(first.leading.wait(), 30)
        write_latest(cluster, "Lease", "default", "igw-operator", take_over)
        released_theirs = await first.release()

        second = LeaseElection(ElectionSettings("own", "default", identity), cluster.api_client())
        second.start()
        await asyncio.wait_for(second.leading.wait(), 30)
        released_own = await second.release()
        return released_theirs, released_own

    cluster.add(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "own", "namespace": "default"},
        }
    )
    released_theirs, released_own = asyncio.run(main())
    assert released_theirs is False
    theirs = cluster.store.get(kind, "default", "igw-operator")
    assert theirs["spec"]["holderIdentity"] == "newer"
    assert released_own is True
    own = cluster.store.get(kind, "default", "own")["spec"]
    assert "holderIdentity" not in own
    assert own["leaseDurationSeconds"] == 1


def test_the_election_writes_the_lease_under_the_operators_field_manager(cluster: FakeKubeApiServer) -> None:
    """The library's LeaseLock names no ``fieldManager``: the Lease's acquire, renewals and release
    were filed under the Python client's User-Agent, ``OpenAPI-Generator`` (as any script using the
    client), where every other write of the operator says ``igw-operator``."""
    kind = cluster.store.kind_for(api_version="coordination.k8s.io/v1", kind="Lease")

    async def main() -> bool:
        election = LeaseElection(ElectionSettings("igw-operator", "default", "one"), cluster.api_client())
        election.start()
        await asyncio.wait_for(election.leading.wait(), 30)
        return await election.release()

    assert asyncio.run(main()) is True
    lease = cluster.store.get(kind, "default", "igw-operator")
    assert {entry["manager"] for entry in lease["metadata"]["managedFields"]} == {FIELD_MANAGER}


@pytest.mark.parametrize("log_threads", [True, False], ids=["thread-recorded", "logThreads-off"])
def test_renewals_and_standby_tries_are_not_logged_every_retry_period(
    cluster: FakeKubeApiServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    log_threads: bool,
) -> None:
    """The library logs each renewal (``leader <id> has successfully acquired lease``) and each
    standby's try (``yet to finish lease_duration …``) at INFO, once per retry period: 43,200 lines a
    day per replica. Each line is logged once while it stays the same; the leader's first acquisition
    and the standby's view of who holds the Lease still are."""
    # ``logThreads`` off (as ``igw serve`` sets it, process-wide): records carry no thread. Until
    # session s45's fix the filter keyed on it, and a suite run where an earlier test had turned it off
    # logged every renewal.
    monkeypatch.setattr(logging, "logThreads", log_threads)
    fast = {"lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 1}
    renewals: set[str] = set()

    def renewed_three_times() -> bool:
        renew = _lease(cluster).get("renewTime")
        if renew:
            renewals.add(str(renew))
        return len(renewals) >= 4

    async def main() -> None:
        leader = LeaseElection(
            ElectionSettings("igw-operator", "default", "one", **fast), cluster.api_client()
        )
        leader.start()
        await asyncio.wait_for(leader.leading.wait(), 30)
        standby = LeaseElection(
            ElectionSettings("igw-operator", "default", "two", **fast), cluster.api_client()
        )
        standby.start()
        await asyncio.to_thread(wait_for, renewed_three_times, what="three renewals of the Lease")
        standby.stop()
        await leader.release()

    with caplog.at_level(logging.INFO, logger=LIBRARY_LOGGER):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == LIBRARY_LOGGER]
    assert lines.count("leader one has successfully acquired lease") == 1, lines
    waiting = [line for line in lines if line.startswith("yet to finish lease_duration")]
    assert waiting == ["yet to finish lease_duration, lease held by one and has not expired"], lines


FAST = {"lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 1}


def _election(
    cluster: FakeKubeApiServer, identity: str, settings: dict[str, int] = FAST, **options: Any
) -> LeaseElection:
    """A candidate for the ``igw-operator`` Lease with an API client of its own (token ``identity``),
    so that the fake can cut off, hang or count that candidate's calls alone."""
    return LeaseElection(
        ElectionSettings("igw-operator", "default", identity, **settings),
        cluster.api_client(token=identity),
        **options,
    )


async def _leader(
    cluster: FakeKubeApiServer, identity: str, settings: dict[str, int] = FAST, **options: Any
) -> LeaseElection:
    """:func:`_election`, started, once it leads (alone, it takes the free Lease at its first try)."""
    election = _election(cluster, identity, settings, **options)
    election.start()
    await asyncio.wait_for(election.leading.wait(), 30)
    return election


def _calls_by(cluster: FakeKubeApiServer, token: str, since: int) -> int:
    return sum(1 for who, _, _ in cluster.callers[since:] if who == token)


def _writes_by(cluster: FakeKubeApiServer, token: str, since: int) -> list[tuple[str, str]]:
    return [
        (method, path) for who, method, path in cluster.callers[since:] if who == token and method != "GET"
    ]


def test_a_leader_frozen_past_its_renew_deadline_writes_nothing_and_steps_down(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader frozen past the lease duration (SIGSTOP, a paused VM: the monotonic clock runs on) went
    on reconciling once thawed, beside the standby that had taken over, until its renew loop gave up
    (6.0 s after the thaw, measured with two ``igw operator`` processes). Its API calls are now fenced:
    none once the last renewal began a renew deadline ago, and it steps down (``lost``)."""
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    async def main() -> tuple[bool, type[BaseException] | None, bool, list[tuple[str, str]]]:
        election = await _leader(cluster, "frozen", monotonic=clock)
        kube = Kube(cluster.api_client(token="frozen"), fence=election.acting, threads=1)
        acting_before = election.acting()
        offset[0] += FAST["renew_deadline_s"] + 0.5  # the freeze: no renewal for the renew deadline
        refused: type[BaseException] | None = None
        try:
            await kube.apply(_config_map("written-after-the-freeze"))
        except NotLeading as exc:
            refused = type(exc)
        await asyncio.wait_for(election.watch(), 5)
        await asyncio.sleep(0.5)  # a renewal already in flight at the step-down may still land
        stepped_down = len(cluster.callers)
        await asyncio.sleep(2 * FAST["retry_period_s"])  # the library's renew loop tries again meanwhile
        election.stop()
        kube.close()
        return acting_before, refused, election.lost.is_set(), _writes_by(cluster, "frozen", stepped_down)

    since = len(cluster.callers)
    with caplog.at_level(logging.ERROR, logger="igw.operator"):
        acting_before, refused, lost, renewed_after = asyncio.run(main())
    assert acting_before is True
    assert refused is NotLeading
    assert lost is True
    # stepped down, it renews the Lease no more (it used to, so the standby waited out a fresh lease)
    assert renewed_after == []
    assert find(cluster, "ConfigMap", "default", "written-after-the-freeze") is None
    assert [w for w in _writes_by(cluster, "frozen", since) if "leases" not in w[1]] == []
    assert any("frozen: stepping down: Lease default/igw-operator not renewed" in m for m in caplog.messages)


def test_a_leader_that_stepped_down_gives_its_lease_up_once_it_stopped(
    cluster: FakeKubeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``igw operator`` frozen past its renew deadline steps down (exit 3). It only stopped the
    election, so its Lease still named it and the standby waited out the whole lease duration (10 s
    here) with nothing reconciling. Once kopf and its handlers have stopped it now releases the Lease
    (read afresh: only while it still names this replica), and the standby leads at its next try."""
    durations = {"lease_duration_s": 10, "renew_deadline_s": 2, "retry_period_s": 1}
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    elections: list[LeaseElection] = []

    def election(settings: ElectionSettings, api_client: Any) -> LeaseElection:
        elections.append(LeaseElection(settings, api_client, monotonic=clock))
        return elections[-1]

    def frozen_lease_call(_method: str, path: str) -> bool:
        return "/leases" in path and not elections[0].lost.is_set()

    monkeypatch.setattr(runner, "LeaseElection", election)
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="frozen")
    options = operator_options(kubeconfig, leader_election=True, identity="frozen", **durations)
    caplog.set_level(logging.INFO, logger="igw.operator")
    operator = OperatorThread(options).start()
    try:
        wait_for(lambda: _lease(cluster).get("holderIdentity") == "frozen", timeout=30, what="the leader")

        async def main() -> float:
            standby = LeaseElection(
                ElectionSettings("igw-operator", "default", "standby", **durations), cluster.api_client()
            )
            standby.start()
            await asyncio.sleep(2 * durations["retry_period_s"])  # the standby found the lease held
            # The freeze: the leader's clock jumps past its renew deadline, and its Lease calls get no
            # answer until it stepped down. Its renew loop runs on beside the clock: a renewal begun
            # after the jump but before the fence's next check (a quarter retry period; longer on a
            # loaded machine) succeeded - the 10 s lease had not expired, so leading on was right -
            # and the leader never stepped down (the standby waited 30 s, once in three loaded runs).
            cluster.hang("frozen", where=frozen_lease_call)
            offset[0] += durations["renew_deadline_s"] + 0.5
            thawed = time.monotonic()
            await asyncio.wait_for(standby.leading.wait(), 3 * durations["lease_duration_s"])
            took = time.monotonic() - thawed
            await standby.release()
            return took

        took = asyncio.run(main())
    finally:
        exit_code = operator.stop()
    print(f"standby led {took:.1f} s after the leader's step-down")
    assert exit_code == runner.EXIT_LOST_LEASE
    assert "frozen: released Lease default/igw-operator" in caplog.messages
    # released: kopf's stop plus at most one retry period; kept, the lease duration after the leader's
    # last renewal (about 9 s)
    assert took < durations["lease_duration_s"] / 2, took


def _config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


@pytest.mark.parametrize("settings", [{**FAST, "lease_duration_s": 6}, {}], ids=["short", "defaults"])
def test_a_leader_cut_off_from_the_api_server_steps_down_and_writes_nothing_after(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture, settings: dict[str, int]
) -> None:
    """A leader whose requests get no answer (a partition; the standby still reaches the API server):
    the library's lock catches only ``ApiException``, so the connection error ended the election
    thread, the leader never stepped down, and once the network healed it wrote beside the new leader
    (27 writes in 10 s, measured with two processes). It now steps down within the renew deadline,
    before its lease could be taken, and writes nothing after the partition heals: with a 6 s lease
    the step-down (about 2 s after the last renewal) and the lease's end are 4 s apart; at the
    defaults (:data:`~igw.operator.election.DEFAULT_RENEW_DEADLINE_S`), which ride out hung
    renewals, 10 s and 15 s."""
    lease_duration_s = settings.get("lease_duration_s", DEFAULT_LEASE_DURATION_S)

    async def main() -> tuple[bool, bool]:
        election = await _leader(cluster, "cut", settings)
        kube = Kube(cluster.api_client(token="cut"), fence=election.acting, threads=1)
        cluster.cut_off("cut")
        watching = asyncio.ensure_future(election.watch())
        await asyncio.wait_for(election.lost.wait(), 3 * lease_duration_s)
        lease = _lease(cluster)  # the last renewal that reached the API server
        expires = _time(lease["renewTime"]) + timedelta(seconds=lease["leaseDurationSeconds"])
        unexpired = lease["holderIdentity"] == "cut" and datetime.now(UTC) < expires
        cluster.reconnect("cut")
        with pytest.raises(NotLeading):
            await kube.apply(_config_map("written-after-the-partition"))
        await asyncio.wait_for(watching, 5)
        election.stop()
        kube.close()
        return unexpired, election.lost.is_set()

    with caplog.at_level(logging.WARNING):
        unexpired, lost = asyncio.run(main())
    assert lost is True
    # stepped down while its lease still stood: no other candidate could have led yet
    assert unexpired is True
    assert find(cluster, "ConfigMap", "default", "written-after-the-partition") is None
    assert any("cut: stepping down" in m for m in caplog.messages), caplog.messages


def test_a_standby_cut_off_for_a_while_still_takes_over_afterwards(cluster: FakeKubeApiServer) -> None:
    """A standby's connection error (not an ``ApiException``) ended its election thread: it never
    campaigned again, a healthy-looking replica that would never lead."""

    async def main() -> bool:
        leader = await _leader(cluster, "one")
        standby = _election(cluster, "two")
        cluster.cut_off("two")
        since = len(cluster.callers)
        standby.start()
        await asyncio.to_thread(
            wait_for, lambda: _calls_by(cluster, "two", since) >= 2, what="two of the standby's tries dropped"
        )
        cluster.reconnect("two")
        await leader.release()
        await asyncio.wait_for(standby.leading.wait(), 3 * FAST["lease_duration_s"])
        led = standby.leading.is_set()
        await standby.release()
        return led

    assert asyncio.run(main()) is True


def test_a_standby_whose_lease_calls_hang_for_a_while_still_takes_over(cluster: FakeKubeApiServer) -> None:
    """An API server that takes a standby's request and never answers: the Lease calls had no timeout,
    so the standby's election thread waited on that answer for ever and never campaigned again (once
    the leader exited, no replica led). Each Lease call now times out within the retry period, a
    failed try, and the standby takes over once its calls are answered again."""

    async def main() -> bool:
        leader = await _leader(cluster, "one")
        standby = _election(cluster, "two")
        cluster.hang("two")
        since = len(cluster.callers)
        standby.start()
        await asyncio.to_thread(wait_for, lambda: _calls_by(cluster, "two", since) >= 1, what="a hung try")
        await asyncio.sleep(2 * FAST["retry_period_s"])
        cluster.reconnect("two")
        await leader.release()
        try:
            await asyncio.wait_for(standby.leading.wait(), 3 * FAST["lease_duration_s"])
        except TimeoutError:
            standby.stop()
            return False
        await standby.release()
        return True

    assert asyncio.run(main()) is True


def test_a_leader_whose_renewals_hang_steps_down_at_its_renew_deadline(cluster: FakeKubeApiServer) -> None:
    """The leader's renewals get no answer: it steps down at the renew deadline (the fence), and its
    renew loop goes on trying (each hung call a failed try) instead of waiting for ever."""

    # a renew deadline of 4 retry periods: two hung tries (each ended by its 0.75 s timeout, then the
    # next after one retry period) fit before it with over a second to spare on a loaded box
    roomy = {"lease_duration_s": 6, "renew_deadline_s": 4, "retry_period_s": 1}

    async def main() -> tuple[float, int]:
        election = await _leader(cluster, "hung", roomy)
        watching = asyncio.ensure_future(election.watch())
        since = len(cluster.callers)
        cluster.hang("hung")
        hung_at = time.monotonic()
        await asyncio.wait_for(election.lost.wait(), 3 * roomy["lease_duration_s"])
        stepped_down_after = time.monotonic() - hung_at
        await asyncio.wait_for(watching, 5)
        await asyncio.sleep(2 * roomy["retry_period_s"])
        election.stop()
        return stepped_down_after, _calls_by(cluster, "hung", since)

    stepped_down_after, calls = asyncio.run(main())
    # before the lease could be taken (6 s): a leader still acting then is two writers
    assert stepped_down_after < roomy["lease_duration_s"], stepped_down_after
    # the renew loop tried again (the hung call ended by its timeout) until it gave up; without the
    # timeout its first renewal waited for ever
    assert calls >= 2, calls


@pytest.mark.parametrize("hung_tries", [1, 2])
def test_a_leader_at_the_default_durations_rides_out_hung_renewals(
    cluster: FakeKubeApiServer, hung_tries: int
) -> None:
    """One black-holed Lease call made the leader step down for good (exit 3) at the default 8 / 5 / 2 s:
    the fence counts from the start of the last good try, the hung try starts a retry period after it
    and fails 1.5 s later (its call timeout), the next comes a retry period after that: 5.5 s, past the
    5 s renew deadline, though the next try renewed and the 8 s lease never lapsed. At the defaults it
    now rides out two hung tries in a row (:class:`~igw.operator.election.ElectionSettings`)."""

    async def main() -> tuple[bool, bool, bool]:
        election = await _leader(cluster, "flaky", {})
        watching = asyncio.ensure_future(election.watch())  # steps down at any lapse of the fence
        since = len(cluster.callers)
        await asyncio.to_thread(wait_for, lambda: _writes_by(cluster, "flaky", since), what="a renewal")
        since = len(cluster.callers)
        cluster.hang("flaky")  # the next try (a retry period after that renewal) hangs
        await asyncio.to_thread(
            wait_for,
            lambda: _calls_by(cluster, "flaky", since) >= hung_tries or election.lost.is_set(),
            what="the hung tries",
        )
        cluster.reconnect("flaky")
        since = len(cluster.callers)
        # two renewals after the reconnect: the first one has returned (and renewed the fence)
        await asyncio.to_thread(
            wait_for,
            lambda: len(_writes_by(cluster, "flaky", since)) >= 2 or election.lost.is_set(),
            what="renewals after the hang",
        )
        acting, lost, watched_on = election.acting(), election.lost.is_set(), not watching.done()
        watching.cancel()
        election.stop()
        return acting, lost, watched_on

    acting, lost, watched_on = asyncio.run(main())
    assert (acting, lost, watched_on) == (True, False, True)


def test_a_leader_stopped_while_its_lease_calls_hang_stops_promptly(cluster: FakeKubeApiServer) -> None:
    """SIGTERM while the API server takes the leader's requests and never answers: giving the Lease up
    waited on the renewal in flight (it holds the write mutex) and on its own read, both for ever, so
    the operator never exited. Both now time out: the release gives up (the Lease expires)."""

    async def main() -> bool:
        election = await _leader(cluster, "stopping")
        since = len(cluster.callers)
        cluster.hang("stopping")
        await asyncio.to_thread(
            wait_for, lambda: _calls_by(cluster, "stopping", since) >= 1, what="a hung renewal"
        )
        try:
            return await asyncio.wait_for(election.release(), 4 * FAST["retry_period_s"])
        finally:
            election.stop()

    assert asyncio.run(main()) is False
    assert _lease(cluster).get("holderIdentity") == "stopping"  # left to expire


def _open_connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on 127.0.0.1 (its client side)."""
    own = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                own.add(target[len("socket:[") : -1])
    remote = f"0100007F:{port:04X}"
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == remote and fields[3] == "01" and fields[9] in own:
            count += 1
    return count


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
@pytest.mark.parametrize("ending", ["release", "stop"])
def test_an_ended_election_closes_its_own_api_client(cluster: FakeKubeApiServer, ending: str) -> None:
    """The election makes an ``ApiClient`` of its own (single-attempt requests) and never closed it:
    each ended election kept its pooled connection to the API server until the process exited (one
    per election in a test run)."""

    async def main() -> tuple[int, int]:
        election = LeaseElection(
            ElectionSettings("igw-operator", "default", "one", **FAST), cluster.api_client()
        )
        election.start()
        await asyncio.wait_for(election.leading.wait(), 30)
        campaigning = _open_connections_to(cluster.port)
        if ending == "release":
            await election.release()
        else:
            election.stop()
        await asyncio.sleep(2 * FAST["retry_period_s"])  # the library's loops run on meanwhile
        return campaigning, _open_connections_to(cluster.port)

    campaigning, ended = asyncio.run(main())
    assert campaigning >= 1
    assert ended == 0


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (
            {"lease_duration_s": 5, "renew_deadline_s": 5},
            "lease_duration_s (5) must exceed renew_deadline_s (5)",
        ),
        (
            {"renew_deadline_s": 2, "retry_period_s": 2},
            "renew_deadline_s (2) must exceed 1.2 x retry_period_s",
        ),
        ({"retry_period_s": 0}, "retry_period_s must be at least 1"),
    ],
)
def test_election_settings_the_library_would_refuse_are_refused_up_front(
    settings: dict[str, int], named: str
) -> None:
    """The library ``sys.exit``-ed on them inside the election thread: only that thread ended, and the
    replica waited to lead for ever."""
    with pytest.raises(ValueError, match=re.escape(named)):
        ElectionSettings("igw-operator", "default", "one", **settings)


def test_kopfs_own_writes_are_fenced_on_the_renew_deadline(
    cluster: FakeKubeApiServer,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only the operator's own API calls were fenced: kopf writes through its own client, and once a
    handler returns it patches its bookkeeping annotations on the object. A leader whose deadline
    passed while the pass ran (frozen here right as the pass returns) still sent kopf's PATCH after
    it (probed: ``PATCH .../inferencegatewayconfigs/late`` with kopf's User-Agent, at the deadline).
    kopf's writes now ask the same fence, and nothing but the Lease is written after the freeze."""
    durations = {"lease_duration_s": 10, "renew_deadline_s": 2, "retry_period_s": 1}
    offset = [0.0]
    frozen_at: list[int] = []

    def clock() -> float:
        return time.monotonic() + offset[0]

    original = Reconciler.reconcile

    async def reconcile_then_freeze(self: Reconciler, namespace: str, name: str, **kwargs: Any) -> Any:
        result = await original(self, namespace, name, **kwargs)
        if name == "late" and "listed" not in kwargs and not frozen_at:  # kopf's handler, not a resync
            frozen_at.append(len(cluster.callers))
            offset[0] += durations["renew_deadline_s"] + 0.5
        return result

    monkeypatch.setattr(Reconciler, "reconcile", reconcile_then_freeze)
    monkeypatch.setattr(runner, "LeaseElection", functools.partial(LeaseElection, monotonic=clock))
    options = operator_options(
        kubeconfig, leader_election=True, identity="frozen", resync_s=60.0, **durations
    )
    caplog.set_level(logging.WARNING)
    operator = OperatorThread(options).start()
    try:
        wait_for(lambda: _lease(cluster).get("holderIdentity") == "frozen", timeout=30, what="the leader")
        cluster.add(igwc("chat"))
        wait_condition(cluster, "chat", "GatewayProgrammed", timeout=60)
        cluster.add(igwc("late", model="mistral", app="mistral"))
        wait_for(lambda: frozen_at, timeout=60, what="the pass of the late object")
        wait_for(lambda: operator.exit_code is not None, timeout=30, what="the step-down")
    finally:
        exit_code = operator.stop()
    assert exit_code == runner.EXIT_LOST_LEASE
    after = [(method, path) for _, method, path in cluster.callers[frozen_at[0] :] if method != "GET"]
    assert [w for w in after if "/leases/" not in w[1]] == [], after
    # kopf's refusals at the step-down: one line, no traceback (it logged two ERRORs with tracebacks
    # for the object: its failed handler, and its refused PATCH)
    kopf_lines = [r for r in caplog.records if r.name.startswith("kopf") and "not leading" in r.getMessage()]
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in kopf_lines] == [
        (
            "WARNING",
            "frozen: not leading: kopf's handlers and writes are refused from now on (stepping down)",
            None,
        )
    ]


def test_a_write_sent_just_before_the_renew_deadline_waits_no_longer_than_the_deadline(
    cluster: FakeKubeApiServer,
) -> None:
    """The fence is asked before a call is sent: a write sent 0.3 s before the renew deadline to an
    API server that never answers (``hang``) kept waiting with no bound (probed: still waiting 9.7 s
    past the deadline when the probe gave up), and an answer, the write applied, could have come
    after the standby took over. Each request's timeout is now bounded by the time left
    (:meth:`~igw.operator.election.LeaseElection.seconds_left`): the call ends by the deadline."""

    async def main() -> tuple[float, float, type[BaseException] | None]:
        election = await _leader(cluster, "late")
        api_client = cluster.api_client(token="late")
        api_client.configuration.retries = 1  # as igw's own client (make_api_client): PUTs are resent
        kube = Kube(api_client, fence=election.acting, time_left=election.seconds_left, threads=1)
        await kube.apply(_config_map("written-in-time"))
        lock: Any = election._lock
        last = lock.renewed_at
        while lock.renewed_at == last:  # right after a renewal: a whole renew deadline away  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        cluster.hang("late")  # the renewals and the write alike
        deadline = lock.renewed_at + FAST["renew_deadline_s"]
        await asyncio.sleep(deadline - time.monotonic() - 0.3)
        sent = time.monotonic()
        ended: type[BaseException] | None = None
        try:
            await asyncio.wait_for(kube.apply(_config_map("written-late")), 10)
        except Exception as exc:
            ended = type(exc)
        done = time.monotonic()
        election.stop()
        kube.close()
        return deadline - sent, done - deadline, ended

    left, past, ended = asyncio.run(main())
    print(f"sent {left:.2f} s before the deadline, ended {past:.2f} s after it: {ended}")
    assert ended is not None
    assert ended is not TimeoutError  # the request's own timeout ended it, not the test's
    assert past < 0.2, past
    assert find(cluster, "ConfigMap", "default", "written-late") is None


@pytest.mark.parametrize(
    ("settings", "warned"),
    [(FAST, True), ({"lease_duration_s": 8, "renew_deadline_s": 5, "retry_period_s": 2}, True), ({}, False)],
    ids=["fast", "8-5-2", "defaults"],
)
def test_settings_that_cannot_ride_out_one_hung_lease_call_are_warned_of_at_start(
    cluster: FakeKubeApiServer,
    caplog: pytest.LogCaptureFixture,
    settings: dict[str, int],
    warned: bool,
) -> None:
    """At 8 / 5 / 2 one hung Lease call made the leader step down for good with nothing saying the
    settings could not ride it out (5 s < 2 + (1.5 + 2) s). Such settings are not refused (the tests
    use short ones) but named with their arithmetic in a WARNING when the election starts."""

    async def main() -> None:
        election = await _leader(cluster, "warned", settings)
        election.stop()

    with caplog.at_level(logging.WARNING, logger="igw.operator"):
        asyncio.run(main())
    lines = [m for m in caplog.messages if "one Lease call the API server does not answer" in m]
    if warned:
        retry = settings["retry_period_s"]
        expected = (
            f"warned: renew deadline {settings['renew_deadline_s']} s < retry period + (request timeout"
            f" + retry period) = {retry} + ({0.75 * retry:.2f} + {retry}) = {2.75 * retry:.2f} s"
        )
        assert lines == [
            f"{expected}: one Lease call the API server does not answer makes this leader step down"
        ]
    else:
        assert lines == []


def test_kopfs_write_sent_just_before_the_renew_deadline_waits_no_longer_than_the_deadline(
    cluster: FakeKubeApiServer,
) -> None:
    """kopf's session (:func:`~igw.operator.handlers.fenced_session`) asked the fence before a write
    only: a PATCH sent 0.5 s before the deadline to an API server that never answers waited for kopf's
    30 s request timeout (probed: 30.0 s, the PATCH could be applied all that while). It now waits no
    longer than the time left; reads keep kopf's own timeouts."""
    import aiohttp
    import kopf

    from igw.config.model import API_GROUP, API_VERSION
    from igw.operator.handlers import fenced_session

    deadline = time.monotonic() + 0.5

    def time_left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    async def main() -> tuple[float, type[BaseException] | None]:
        info = kopf.ConnectionInfo(server=cluster.url, token="kopf", scheme="Bearer")
        session = fenced_session(info, lambda: time_left() > 0, time_left)
        cluster.hang("kopf")
        ended: type[BaseException] | None = None
        try:
            path = (
                f"{cluster.url}/apis/{API_GROUP}/{API_VERSION}/namespaces/default/inferencegatewayconfigs/x"
            )
            async with session.patch(
                path,
                json={"metadata": {"annotations": {"a": "b"}}},
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=aiohttp.ClientTimeout(total=30),  # kopf's request timeout (build_settings)
            ):
                pass
        except Exception as exc:
            ended = type(exc)
        finally:
            await session.close()
        return time.monotonic() - deadline, ended

    past, ended = asyncio.run(asyncio.wait_for(main(), 40))
    print(f"kopf's PATCH ended {past:.2f} s after the deadline: {ended}")
    assert ended is TimeoutError
    assert past < 0.2, past


def test_a_leader_stopped_while_a_pass_call_hangs_still_releases_its_lease(
    cluster: FakeKubeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM while a pass's API call hangs on the API server (the Lease calls still answered): the
    hung call never ended (no request timeout), the runner's 5 s wait for running calls ran out and
    the Lease was left to expire (probed at 15 / 10 / 2: exit after 7.0 s, the standby then waited out
    the 15 s lease). Each call now ends by the renew deadline it saw when sent, urllib3 resends
    nothing after a read timeout (it did, with the whole timeout again), and the runner waits up to the
    renew deadline (12 s here; 5 s ran out): the Lease is released, nothing else is written."""
    durations = {"lease_duration_s": 20, "renew_deadline_s": 12, "retry_period_s": 2}
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="passes")

    def election(settings: ElectionSettings, _api_client: Any, **options: Any) -> LeaseElection:
        return LeaseElection(settings, cluster.api_client(token="lease"), **options)  # the Lease answered

    monkeypatch.setattr(runner, "LeaseElection", election)
    caplog.set_level(logging.INFO, logger="igw.operator")
    options = operator_options(
        kubeconfig, leader_election=True, identity="stopped", resync_s=60.0, **durations
    )
    operator = OperatorThread(options).start()
    try:
        wait_for(lambda: _lease(cluster).get("holderIdentity") == "stopped", timeout=30, what="the leader")
        cluster.add(igwc("chat"))
        wait_condition(cluster, "chat", "GatewayProgrammed", timeout=60)
        cluster.hang("passes")
        since = len(cluster.callers)
        cluster.add(igwc("late", model="mistral", app="mistral"))
        wait_for(lambda: _calls_by(cluster, "passes", since) > 0, timeout=30, what="the hung call")
    finally:
        exit_code = operator.stop()
    assert exit_code == runner.EXIT_STOPPED
    assert "stopped: released Lease default/igw-operator" in caplog.messages
    assert _lease(cluster).get("holderIdentity") is None
    assert _writes_by(cluster, "passes", since) == []


def _operator_process(kubeconfig: Path, tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``igw operator`` in its own process (the interpreter's exit joins its worker threads), logging
    to ``tmp_path/operator.log``; the dynamic client's discovery cache is kept under ``tmp_path``."""
    command = [sys.executable, "-m", "igw.cli.main", "operator", "--kubeconfig", str(kubeconfig), *args]
    with (tmp_path / "operator.log").open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp_path)}
        )


def _stopped_within(process: subprocess.Popen[bytes], within_s: float) -> tuple[int | None, float]:
    """SIGTERM ``process``; its exit status (``None``: still running after ``within_s``, then killed)
    and the seconds it took."""
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code: int | None = process.wait(within_s)
    except subprocess.TimeoutExpired:
        code = None
        process.kill()
        process.wait(10)
    return code, time.monotonic() - signalled


def _not_a_lease_call(_method: str, path: str) -> bool:
    return "/leases" not in path


def test_a_leader_process_stopped_while_a_pass_call_hangs_exits_within_its_grace_period(
    cluster: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A real ``igw operator`` leader, SIGTERM while a pass's API call hangs (its Lease calls
    answered): it exits 0 within :func:`runner.stop_bound_s` (what the chart's operator pod grace
    period is derived from), having released the Lease, and its pool thread, which the interpreter
    joins at exit, did not hold the exit past that."""
    durations = ("--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="op")
    process = _operator_process(
        kubeconfig, tmp_path, "--lease-namespace", "default", "--identity", "stopped", *durations
    )
    try:
        wait_for(lambda: _lease(cluster).get("holderIdentity") == "stopped", timeout=60, what="the leader")
        cluster.add(igwc("chat"))
        wait_condition(cluster, "chat", "GatewayProgrammed", timeout=60)
        cluster.hang("op", where=_not_a_lease_call)
        since = len(cluster.callers)
        cluster.add(igwc("late", model="mistral", app="mistral"))
        wait_for(
            lambda: any(who == "op" and "/leases" not in path for who, _, path in cluster.callers[since:]),
            timeout=30,
            what="the hung pass call",
        )
        bound = runner.stop_bound_s(4, 1)
        code, took = _stopped_within(process, bound + 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    log = (tmp_path / "operator.log").read_text(encoding="utf-8", errors="replace")
    assert code == 0, log[-3000:]
    assert took <= bound, (took, bound)
    assert "stopped: released Lease default/igw-operator" in log, log[-3000:]
    assert _lease(cluster).get("holderIdentity") is None


def test_an_unelected_operator_whose_discovery_read_hangs_still_exits_on_sigterm(
    cluster: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``--no-leader-election``: the first pass's API call reads the API's discovery documents, and the
    API server never answers (``hang`` on ``/version`` alone: kopf's own calls answered). No call had a
    request timeout without the election's renew deadline, so the worker thread waited for ever
    holding the discovery lock, and the interpreter, which joins it at exit, never exited after
    SIGTERM (probed: still running 60 s after it; so with a hung pass call). Each call now waits at
    most :data:`runner.UNELECTED_CALL_TIMEOUT_S`."""
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="op")
    process = _operator_process(kubeconfig, tmp_path, "--no-leader-election", "--resync-seconds", "60")
    try:
        cluster.hang("op", where=lambda _method, path: path == "/version")
        cluster.add(igwc("chat"))
        wait_for(
            lambda: ("op", "GET", "/version") in cluster.callers, timeout=60, what="the hung discovery read"
        )
        # kopf's stop, its handler threads, then the hung call's own timeout (the exit joins it)
        bound = runner.KOPF_STOP_S + runner.HANDLER_JOIN_S + runner.UNELECTED_CALL_TIMEOUT_S
        code, took = _stopped_within(process, bound + 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    log = (tmp_path / "operator.log").read_text(encoding="utf-8", errors="replace")
    assert code == 0, (took, log[-3000:])
    assert took <= bound, (took, bound)
