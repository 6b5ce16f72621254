"""``igw bench overload-priority`` (DES): the policies behave as their definitions say, on a small run."""

from __future__ import annotations

from pathlib import Path

import pytest

from igw.bench.overload_des import Admission, Arrival, OverloadScenario, arrivals, simulate
from igw.bench.overload_report import band_rows, run_overload, run_overload_command
from igw.bench.stats import max_min_fair
from igw.scheduling.flow_control import CRITICAL, SHEDDABLE, STANDARD, BandLimits, FlowControlSettings

SMALL = OverloadScenario(slots=8, duration_s=40.0)
ROOMY = FlowControlSettings(
    bands={
        CRITICAL: BandLimits(max_requests=256, max_bytes=1 << 20, ttl_s=60.0),
        STANDARD: BandLimits(max_requests=256, max_bytes=1 << 20, ttl_s=30.0, dispatch_below=0.75),
        SHEDDABLE: BandLimits(max_requests=128, max_bytes=1 << 20, ttl_s=10.0, dispatch_below=0.75),
    }
)
"""On 8 slots, Standard and Sheddable start only while at most 5 are busy: 2 stay for Critical."""


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run_overload(SMALL, seed=3, settings=ROOMY)


def row(report, policy: Admission, band: str):  # type: ignore[no-untyped-def]
    return next(r for r in report.bands if r.policy == policy.value and r.band == band)


def test_every_request_is_served_or_shed_exactly_once() -> None:
    requests = arrivals(SMALL, 3)
    for admission in Admission:
        outcome = simulate(SMALL, requests, admission)
        assert not (set(outcome.ttft_s) & outcome.shed)
        assert set(outcome.ttft_s) | outcome.shed == {r.index for r in requests}


def test_flow_control_sheds_from_the_bottom_and_keeps_critical(report) -> None:  # type: ignore[no-untyped-def]
    critical = row(report, Admission.FLOW_CONTROL, "Critical")
    sheddable = row(report, Admission.FLOW_CONTROL, "Sheddable")
    standard = row(report, Admission.FLOW_CONTROL, "Standard")
    assert critical.shed == 0
    assert critical.served == critical.offered
    assert sheddable.shed / sheddable.offered > standard.shed / standard.offered
    assert sheddable.shed > 0


def test_the_baselines_fail_the_way_they_should(report) -> None:  # type: ignore[no-untyped-def]
    # Without flow control every band loses requests alike; without admission nobody is refused
    # but everyone waits behind everyone.
    assert row(report, Admission.NO_FLOW_CONTROL, "Critical").shed > 0
    assert row(report, Admission.ROUND_ROBIN, "Sheddable").shed == 0
    fc = row(report, Admission.FLOW_CONTROL, "Critical").ttft_p99_s
    rr = row(report, Admission.ROUND_ROBIN, "Critical").ttft_p99_s
    assert fc is not None
    assert rr is not None
    assert fc < rr


def test_max_min_fair_share() -> None:
    assert max_min_fair({"a": 10, "b": 100, "c": 100}, 70) == {"a": 10.0, "b": 30.0, "c": 30.0}
    assert max_min_fair({"a": 5, "b": 5}, 100) == {"a": 5.0, "b": 5.0}


def test_unloaded_run_has_no_shedding() -> None:
    calm = OverloadScenario(slots=8, duration_s=40.0, load=0.3)
    requests = arrivals(calm, 1)
    rows = band_rows(simulate(calm, requests, Admission.FLOW_CONTROL), requests)
    assert all(r.shed == 0 for r in rows)


def test_command_writes_tables_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run_overload_command(out=tmp_path, quick=True, seed=1, command="igw bench overload-priority --quick")
        == 0
    )
    text = (tmp_path / "overload-priority.md").read_text()
    assert "| flow-control | Critical |" in text
    assert "| round-robin | Sheddable |" in text
    assert "served / fair" in text
    assert (tmp_path / "overload-priority-queue-depth.png").stat().st_size > 0
    assert (tmp_path / "overload-priority-ttft-cdf.png").stat().st_size > 0
    assert "Critical P99 TTFT unloaded" in capsys.readouterr().out


def test_headroom_lets_critical_find_a_free_slot_at_a_measured_cost(report) -> None:  # type: ignore[no-untyped-def]
    # The same request list with and without the lower bands' headroom: with it, Critical waits
    # less for a slot, and the pool serves fewer requests in total (the reserved slots idle).
    with_room = report.critical_wait_p99(Admission.FLOW_CONTROL.value)
    without = report.critical_wait_p99(Admission.NO_HEADROOM.value)
    assert with_room is not None
    assert without is not None
    assert with_room < without
    assert row(report, Admission.FLOW_CONTROL, "Critical").shed == 0
    assert report.served_rps(Admission.FLOW_CONTROL.value) < report.served_rps(Admission.NO_HEADROOM.value)


def test_lower_bands_never_hold_the_reserved_slots() -> None:
    # Replay and count, at every dispatch of a Standard or Sheddable request, the slots already busy:
    # below 0.75 of 8 slots a lower band starts only while at most 5 are busy; without headroom
    # the same replay starts lower bands with 6 or 7 busy.
    scenario = OverloadScenario(slots=8, duration_s=40.0)
    requests = arrivals(scenario, 2)
    assert _busiest_lower_start(scenario, requests, Admission.FLOW_CONTROL) == 5
    assert _busiest_lower_start(scenario, requests, Admission.NO_HEADROOM) == 7


def _busiest_lower_start(scenario: OverloadScenario, requests: list[Arrival], admission: Admission) -> int:
    """The most slots already busy when a Standard or Sheddable request started."""
    outcome = simulate(scenario, requests, admission, ROOMY)
    by_index = {r.index: r for r in requests}
    starts = sorted((r.at + outcome.wait_s[i], i) for i, r in by_index.items() if i in outcome.wait_s)
    ends: list[float] = []
    busiest = -1
    for at, index in starts:
        ends = [e for e in ends if e > at]
        if by_index[index].priority < CRITICAL:
            busiest = max(busiest, len(ends))
        ends.append(at + by_index[index].service_s)
    return busiest
