from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from igw.bench.report import format_value, write_report
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.stats import Estimate, RequestSample, summarize

PODS = ["p0", "p1"]


def _samples(ttfts: list[float], ep_cycle: list[str]) -> list[RequestSample]:
    return [
        RequestSample(
            endpoint=ep_cycle[i % len(ep_cycle)], ok=True, arrival_s=float(i), ttft_s=t, e2e_s=t + 1.0,
            itl_s=0.01, prompt_tokens=100, output_tokens=20, cached_tokens=10,
        )
        for i, t in enumerate(ttfts)
    ]  # fmt: skip


def _policy(name: str, ttfts_per_seed: list[list[float]], eps: list[str]) -> PolicyRun:
    run = PolicyRun(policy=name, description=name)
    for seed, ttfts in enumerate(ttfts_per_seed):
        samples = _samples(ttfts, eps)
        run.seeds.append(seed)
        run.summaries.append(summarize(samples, endpoints=PODS, ttft_slo_s=1.0, duration_s=10.0))
        if seed == 0:
            run.samples = samples
            run.queue_series = {p: [(0.0, 0), (1.0, 3), (2.0, 1)] for p in PODS}
    return run


@pytest.fixture
def scenario_run() -> ScenarioRun:
    run = ScenarioRun(scenario="tiny", mode="des", parameters={"fleet": "2 pods", "seed": [0, 1]})
    run.policies["round-robin"] = _policy("round-robin", [[2.0] * 10, [2.0] * 10], PODS)
    run.policies["gateway"] = _policy("gateway", [[0.5] * 10, [0.7] * 10], ["p0"])
    run.policies["oracle"] = _policy("oracle", [[0.4] * 10, [0.4] * 10], PODS)
    run.policies["vllm-router"] = PolicyRun(policy="vllm-router", description="peer", unavailable="no wheel")
    return run


def test_reductions_and_gaps_are_computed_from_seed_means(scenario_run: ScenarioRun) -> None:
    assert scenario_run.reduction_vs_baseline("gateway", "ttft_p99_s") == pytest.approx(70.0)
    assert scenario_run.gap_to_oracle("gateway", "ttft_p99_s") == pytest.approx(50.0)
    assert scenario_run.reduction_vs_baseline("oracle", "output_tok_per_s") == pytest.approx(0.0)
    assert scenario_run.reduction_vs_baseline("vllm-router", "ttft_p99_s") is None


def test_write_report_produces_markdown_json_and_pngs(tmp_path: Path, scenario_run: ScenarioRun) -> None:
    md = write_report(scenario_run, tmp_path)
    text = md.read_text()
    assert "| gateway | 600 ms ±" in text
    assert "+70.0 %" in text
    assert "+50.0 %" in text
    assert "not run: no wheel" in text
    assert "- **fleet**: 2 pods" in text
    for png in ("tiny-ttft-cdf.png", "tiny-queue-depth.png"):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(data) > 2000
        assert f"]({png})" in text
    doc = orjson.loads((tmp_path / "tiny.json").read_bytes())
    gw = doc["policies"]["gateway"]
    assert gw["estimates"]["ttft_p99_s"]["mean"] == pytest.approx(0.6)
    assert gw["reduction_vs_baseline_pct"]["ttft_p99_s"] == pytest.approx(70.0)
    assert gw["mean_load_share"] == {"p0": 1.0, "p1": 0.0}
    assert doc["parameters"] == {"fleet": "2 pods", "seed": [0, 1]}
    assert doc["policies"]["vllm-router"]["unavailable"] == "no wheel"
    assert len(gw["per_seed"]) == 2


def test_format_value_units() -> None:
    assert format_value("ttft_p99_s", Estimate(mean=0.0123, lo=0.0123, hi=0.0123, n=1)) == "12 ms"
    assert format_value("ttft_p99_s", Estimate(mean=2.5, lo=2.0, hi=3.0, n=3)) == "2.50 s ±500ms"
    assert format_value("goodput", Estimate(mean=0.5, lo=0.5, hi=0.5, n=1)) == "50.0 %"
    assert format_value("output_tok_per_s", None) == "–"


def test_summary_puts_the_claim_next_to_measured_reductions(
    tmp_path: Path, scenario_run: ScenarioRun
) -> None:
    from igw.bench.summary import write_summary

    scenario_run.parameters["aws_claim"] = "TTFT p99 −97 %"
    scenario_run.policies["least-request"] = _policy("least-request", [[1.0] * 10, [1.0] * 10], PODS)
    scenario_run.policies["gateway-default"] = scenario_run.policies.pop("gateway")
    write_report(scenario_run, tmp_path)
    text = write_summary(tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| tiny |"))
    assert "TTFT p99 −97 %" in row
    assert "-70.0 % / -70.0 %" in row  # gateway-default p95 / p99 vs round-robin
    assert "least-request: -50.0 %" in row  # the best of the peer-style policies
    assert "+50.0 %" in row  # gateway p99 gap to the oracle
    assert "-40.0 %" in row  # gateway p99 (0.6 s) against the best peer's (1.0 s)


def test_summary_compares_with_kube_service_and_shows_failures(
    tmp_path: Path, scenario_run: ScenarioRun
) -> None:
    from igw.bench.summary import write_summary

    scenario_run.policies["kube-service"] = _policy("kube-service", [[4.0] * 10, [4.0] * 10], PODS)
    scenario_run.policies["gateway-default"] = scenario_run.policies.pop("gateway")
    failing = _policy("least-request", [[1.0] * 10, [1.0] * 10], PODS)
    failed = RequestSample(endpoint="p0", ok=False, arrival_s=0.0, ttft_s=None, e2e_s=None, itl_s=None)
    failing.summaries[0] = summarize(
        [*failing.samples, failed], endpoints=PODS, ttft_slo_s=1.0, duration_s=10.0
    )
    scenario_run.policies["least-request"] = failing
    write_report(scenario_run, tmp_path)
    report = (tmp_path / "tiny.md").read_text()
    assert "| least-request | " in report
    assert "failed" in next(line for line in report.splitlines() if line.startswith("| least-request |"))
    row = next(
        line for line in write_summary(tmp_path).read_text().splitlines() if line.startswith("| tiny |")
    )
    assert "| -85.0 % |" in row  # gateway p99 0.6 s against kube-service's 4.0 s
    assert "(failed / failed)" in row  # least-request's ITL/E2E p99 reach into its failed request


def test_console_table_states_fleet_workload_load_seeds_and_capacity() -> None:
    from rich.console import Console

    from igw.bench.console import scenario_caption, scenario_table
    from igw.bench.results import ScenarioRun

    params = {
        "fleet": "2x h100",
        "workload": "sharegpt",
        "load": "Poisson at 70%",
        "seeds": [1, 2],
        "capacity": "100 req/s",
        "capacity_sweep": "h100: plateau 84% of the probe",
        "command": "x",
    }
    run = ScenarioRun(scenario="s", mode="des", parameters=params)
    caption = scenario_caption(run)
    for key in (
        "fleet: 2x h100",
        "workload: sharegpt",
        "load: Poisson at 70%",
        "seeds: [1, 2]",
        "plateau 84%",
    ):
        assert key in caption
    assert "command" not in caption
    console = Console(width=200, record=True)
    console.print(scenario_table(run))
    assert "Poisson at 70%" in console.export_text()


def test_console_table_prints_the_signed_p99_change_against_round_robin(scenario_run: ScenarioRun) -> None:
    """Negative = lower = better, as the summary tables print it: a policy worse than round-robin
    reads positive (the column read "p99 cut vs RR" and printed a worse policy as a negative cut)."""
    from rich.console import Console

    from igw.bench.console import scenario_table

    scenario_run.policies["slow"] = _policy("slow", [[4.0] * 10, [4.0] * 10], PODS)
    console = Console(width=250, record=True)
    console.print(scenario_table(scenario_run))
    text = console.export_text()
    assert "p99 vs RR" in text
    assert "cut" not in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "-0.0" not in rows["round-robin"]
    assert "-70.0" in rows["gateway"]  # 0.6 s against round-robin's 2.0 s
    assert "+100.0" in rows["slow"]  # 4.0 s against 2.0 s


def test_summary_shows_a_failed_gateway_tail_as_worse_not_as_unmeasured(
    tmp_path: Path, scenario_run: ScenarioRun
) -> None:
    """The gateway's p95/p99 reach into a failed request while round-robin's and the oracle's are finite:
    the reductions are -inf, which the JSON can only write as null; the summary read that null as "not
    measured" and printed "–" where it must say the gateway did infinitely worse."""
    from igw.bench.summary import write_summary

    gateway = scenario_run.policies.pop("gateway")
    failed = RequestSample(endpoint="p0", ok=False, arrival_s=0.0, ttft_s=None, e2e_s=None, itl_s=None)
    gateway.summaries = [
        summarize([*gateway.samples, failed], endpoints=PODS, ttft_slo_s=1.0, duration_s=10.0)
    ]
    gateway.seeds = [0]
    scenario_run.policies["gateway-default"] = gateway
    write_report(scenario_run, tmp_path)
    row = next(
        line for line in write_summary(tmp_path).read_text().splitlines() if line.startswith("| tiny |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "+∞ % / +∞ %"  # TTFT p95 / p99 against round-robin's 2 s
    assert cells[6] == "+∞ % (–)"  # gap to the oracle's 0.4 s (no gateway-tuned row)
    assert cells[9] == "-75.0 % / +0.0 %"  # p50 0.5 s against 2 s; the same output tokens per second


def test_the_baseline_against_itself_reads_plus_zero_not_a_negative_zero_drop(
    tmp_path: Path, scenario_run: ScenarioRun
) -> None:
    """Rates flip the reduction's sign; ``-0.0`` printed round-robin's throughput against its own as
    "-0.0 %" in the report (the console table already avoided it)."""
    md = write_report(scenario_run, tmp_path).read_text()
    row = next(line for line in md.splitlines() if line.startswith("| round-robin | +0.0 %"))
    assert "-0.0 %" not in row
    assert row.count("+0.0 %") == 4  # TTFT p50, p95, p99 and out tok/s against itself


def test_summary_shows_the_per_seed_range_of_each_ttft_p99_change(
    tmp_path: Path, scenario_run: ScenarioRun
) -> None:
    """The summary's changes were of across-seed means alone, so a claimed improvement had no spread
    beside it: the gateway's p99 is 0.5 s on seed 0 and 0.7 s on seed 1 against round-robin's 2 s
    (-75 % and -65 %, mean -70 %) and least-request's 1 s (-50 % and -30 %, mean -40 %)."""
    from igw.bench.summary import write_summary

    scenario_run.policies["least-request"] = _policy("least-request", [[1.0] * 10, [1.0] * 10], PODS)
    scenario_run.policies["gateway-default"] = scenario_run.policies.pop("gateway")
    write_report(scenario_run, tmp_path)
    text = write_summary(tmp_path).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| tiny |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "-70.0 % / -70.0 % [-75.0 % … -65.0 %]"  # p95 / p99 vs RR, p99 per seed
    assert cells[5] == "-40.0 % [-50.0 % … -30.0 %]"  # p99 vs the best peer, per seed
    assert "[lo … hi]" in text
