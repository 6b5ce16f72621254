"""``igw demo``'s ending: the thin-sample warning ``igw bench`` gives, and its exit status (a failed
request of the gateway demonstrated fails the demo; round-robin's are what it is compared with).

The capacity sweep and the live runs are stubbed: the real demo takes minutes of processes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from igw.bench.capacity import FleetCapacity
from igw.bench.live_runner import LiveOptions, plan_line
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.scenarios import DEMO, Scenario
from igw.bench.stats import RequestSample, summarize
from igw.cli import demo_run
from igw.cli.main import main


def _samples(count: int, failed: int, timed_out: int = 0) -> list[RequestSample]:
    ok = [
        RequestSample(endpoint="h100-0", ok=True, arrival_s=i * 0.05, ttft_s=0.02, e2e_s=0.3, itl_s=0.008,
                      output_tokens=30)
        for i in range(count - failed)
    ]  # fmt: skip
    refused = RequestSample(endpoint="a10g-0", ok=False, arrival_s=1.0, ttft_s=None, e2e_s=None, itl_s=None)
    bad = [refused] * (failed - timed_out)
    late = [
        RequestSample(endpoint="a10g-0", ok=False, arrival_s=1.0, ttft_s=2.0, e2e_s=None, itl_s=None,
                      timed_out=True)
    ] * timed_out  # fmt: skip
    return ok + bad + late


def _stub_demo(
    monkeypatch: pytest.MonkeyPatch,
    *,
    count: int,
    failed: Mapping[str, int],
    unavailable: str | None = None,
    timed_out: Mapping[str, int] | None = None,
) -> None:
    """``igw demo`` with a fixed capacity and a live run that "sent" ``count`` requests per router,
    ``failed[router]`` of them failed (``timed_out[router]`` of those still unanswered when the drain
    ran out); ``unavailable`` names a router that did not start."""

    def capacity(scenario: Scenario) -> FleetCapacity:
        return FleetCapacity(per_type=(), requests_per_s=300.0)

    async def run_live(scenario: Scenario, *, options: LiveOptions, **_: object) -> ScenarioRun:
        run = ScenarioRun(
            scenario=scenario.name,
            mode="live",
            parameters={**scenario.describe(), "time_scale": "1.000 wall s per simulated GPU s"},
            oracle=None,
        )
        for name in options.routers:
            pol = PolicyRun(policy=name, description=name)
            run.policies[name] = pol
            if name == unavailable:
                pol.unavailable = "exited at start (code 1)"
                continue
            samples = _samples(count, failed.get(name, 0), (timed_out or {}).get(name, 0))
            pol.seeds.append(1)
            pol.summaries.append(
                summarize(samples, endpoints=["h100-0", "a10g-0"], ttft_slo_s=1.0, duration_s=10.0)
            )
            pol.samples = samples
        return run

    monkeypatch.setattr(demo_run, "fleet_capacity", capacity)
    monkeypatch.setattr(demo_run, "run_live", run_live)


@pytest.mark.parametrize(
    ("count", "warning"),
    [
        (10, "warning: demo-mixed-8b: p95 and p99 rest on 10 requests per seed (fewer than 20 for a p95, "
             "100 for a p99: the percentile is the sample's largest value, not a tail); raise --requests"),
        (60, "warning: demo-mixed-8b: p99 rests on 60 requests per seed (fewer than 100: the percentile is "
             "the sample's largest value, not a tail); raise --requests"),
        (150, None),
    ],
)  # fmt: skip
def test_a_demo_over_too_few_requests_warns_as_igw_bench_does(
    count: int,
    warning: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``igw demo --requests 10`` printed p95 and p99 over 10 requests (the sample's largest value)
    with exit 0 and no word, where ``igw bench`` warns on stderr."""
    _stub_demo(monkeypatch, count=count, failed={})
    assert main(["demo", "--requests", str(count), "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    if warning is None:
        assert "warning:" not in err
    else:
        assert warning in err.splitlines()
    assert (tmp_path / f"{DEMO.name}.md").is_file()


@pytest.mark.parametrize(
    ("failed", "unavailable", "status", "said"),
    [
        ({}, None, 0, None),
        ({"round-robin": 70}, None, 0, None),  # what every `make demo` shows: round-robin overloaded
        (
            {"round-robin": 70, "gateway-default": 2},
            None,
            1,
            "igw demo: the demo failed: gateway-default failed 2 of 150 requests; exit status 1",
        ),
        (
            {},
            "round-robin",
            1,
            "igw demo: the demo failed: round-robin not run (exited at start (code 1)); exit status 1",
        ),
    ],
)
def test_a_demo_fails_when_the_gateway_loses_requests_or_a_router_is_not_run(
    failed: dict[str, int],
    unavailable: str | None,
    status: int,
    said: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gateway that failed requests ended ``igw demo`` with exit 0 (only a router not run gave 1,
    and without a word on stderr); round-robin's failures are the comparison and leave it 0."""
    _stub_demo(monkeypatch, count=150, failed=failed, unavailable=unavailable)
    assert main(["demo", "--requests", "150", "--out", str(tmp_path)]) == status
    err = capsys.readouterr().err
    if said is None:
        assert "the demo failed" not in err
    else:
        assert said in err.splitlines()


def test_requests_left_unanswered_by_a_short_drain_name_the_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw demo --requests 10 --drain 2`` (a newcomer shortening the demo) failed every request, each
    still being generated when the drain ran out, and ended "gateway-default failed 10 of 10 requests"
    with no word of why nor of ``--drain`` (session s50)."""
    _stub_demo(monkeypatch, count=10, failed={"gateway-default": 10}, timed_out={"gateway-default": 7})
    assert main(["demo", "--requests", "10", "--drain", "2", "--out", str(tmp_path)]) == 1
    assert (
        "igw demo: the demo failed: gateway-default failed 10 of 10 requests (7 still unanswered 2 s after "
        "the last send: raise --drain, default 45); exit status 1"
    ) in capsys.readouterr().err.splitlines()


def test_the_plan_of_make_demo_reads_in_minutes() -> None:
    """``make demo``'s plan (2 routers, 600 requests at 20/s, 45 s drain: 150 s) read "about 0.0 h"."""
    line = plan_line(scenarios=1, seeds=1, routers=2, requests=600, rate=20.0, drain_s=45.0)
    assert line.endswith(
        "each 600 requests at 20/s + up to 45 s drain: about 2 min (150 s) besides start-ups"
    )
    assert "about 11 s besides" in plan_line(
        scenarios=1, seeds=1, routers=2, requests=10, rate=20.0, drain_s=5.0
    )
    assert "about 1.0 h (3,600 s)" in plan_line(
        scenarios=1, seeds=1, routers=1, requests=72, rate=0.02, drain_s=0
    )


def test_a_bracketed_out_folder_is_printed_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The closing ``report: ...`` line was rich markup: ``igw demo --out 'd[/b]'`` ended a finished
    demo in a ``MarkupError`` traceback (exit 1)."""
    _stub_demo(monkeypatch, count=150, failed={})
    out = tmp_path / "d[" / "b]"
    assert main(["demo", "--requests", "150", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"report: {out / DEMO.name}.md (+ JSON and PNG plots in {out}/)" in printed
