"""``igw sim`` verbs: fleet (subprocess, signals), run, presets, and errors naming the field."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from igw.cli.main import main
from igw.sim.presets import PRESETS

SPEC = """
time_scale: 0.1
pods:
  - name: a
    preset: llama-3.1-8b/h100
    labels: {gpu: h100}
  - name: b
    preset: llama-3.1-8b/a10g
    engine: sglang
    engine_version: "0.4.6"
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_fleet_prints_json_and_stops_cleanly_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "sim", "fleet", "--spec", str(spec), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        described = json.loads(proc.stdout.readline())
        assert [p["name"] for p in described["pods"]] == ["a", "b"]
        assert described["pods"][0]["labels"] == {"gpu": "h100"}
        assert described["time_scale"] == 0.1
        with urllib.request.urlopen(described["pods"][0]["url"] + "/health", timeout=5) as r:
            assert r.status == 200
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_fleet_rejects_a_bad_spec_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("pods:\n  - preset: llama-3.1-8b/h100\n    engine: nope\n", encoding="utf-8")
    assert main(["sim", "fleet", "--spec", str(spec)]) == 2
    assert "spec.pods[0].engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    "words",
    [
        ["sim", "fleet", "--duration", "1", "--spec"],
        ["sim", "run", "--requests", "1", "--spec"],
        ["bench"],
    ],
)
def test_a_fleet_spec_error_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], words: list[str]
) -> None:
    """``igw sim fleet/run --spec`` and ``igw bench --fleet`` said ``spec.pods[1].preset: unknown
    preset ...`` and ``spec.apiVersion: unknown field; ...`` (for a Deployment given as the spec),
    naming no file."""
    if words == ["bench"]:  # the --fleet of a trace replay
        trace = tmp_path / "t.jsonl"
        trace.write_text('{"timestamp": 0, "input_tokens": 10, "output_tokens": 5}\n', encoding="utf-8")
        words = ["bench", "--out", str(tmp_path / "out"), "--trace", str(trace), "--fleet"]
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "pods:\n  - preset: llama-3.1-8b/h100\n  - preset: nope/h100\n    engine: vllm\n", encoding="utf-8"
    )
    assert main([*words, str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"{spec}:3: spec.pods[1].preset: unknown preset 'nope/h100'" in err
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text(
        "# model server\napiVersion: apps/v1\nkind: Deployment\nspec: {}\n", encoding="utf-8"
    )
    assert main([*words, str(deployment)]) == 2
    err = capsys.readouterr().err
    assert f"{deployment}:2: spec: a Kubernetes manifest (kind Deployment), not a fleet spec" in err


def test_run_prints_a_summary_and_writes_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    records = tmp_path / "records.jsonl"
    args = ["sim", "run", "--spec", str(spec), "--requests", "50", "--rate", "5", "--records", str(records)]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 50
    assert summary["policy"] == "round-robin"
    lines = records.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 50
    assert json.loads(lines[0])["status"] == 200
    assert main([*args[:4], "--lengths", "nope"]) == 2


def test_run_writes_records_into_a_folder_it_creates(tmp_path: Path) -> None:
    """``--records new/records.jsonl`` passed the parse-time check (the folder can be created), then
    ended the finished simulation in a FileNotFoundError traceback."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    records = tmp_path / "new" / "sub" / "records.jsonl"
    assert main(["sim", "run", "--spec", str(spec), "--requests", "5", "--records", str(records)]) == 0
    assert len(records.read_text(encoding="utf-8").splitlines()) == 5


def test_presets_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "presets"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-8b/a10g" in out
    assert "qwen3-235b-fp8/8xh100" in out
    assert main(["sim", "presets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["preset"] for r in rows} == set(PRESETS)  # every preset, the A100/H200 ones included
    assert len(rows) == 10
    h100 = next(r for r in rows if r["preset"] == "llama-3.1-8b/h100")
    assert h100["num_gpu_blocks"] == 27485
    assert h100["sources"]
    # The help says what comes out: one array (until session s50 it said "one JSON object per preset",
    # which reads as JSON lines; a script parsing line by line failed on "[").
    with pytest.raises(SystemExit):
        main(["sim", "presets", "--help"])
    assert "one JSON array of the presets" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "empty.jsonl: the trace holds no requests"),
        (
            "header-only.csv",
            b"arrival,prompt_tokens,output_tokens\n",
            "header-only.csv: the trace holds no requests",
        ),
        ("binary.jsonl", b"\xff\xfe\x00{}", "binary.jsonl: not UTF-8 text"),
    ],
)
def test_run_refuses_a_trace_without_requests_or_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, message: str
) -> None:
    """An empty trace printed the summary of a run of no request, exit 0 (``igw bench --trace`` refused
    it); a binary one was refused with the codec's words alone, naming no file."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    trace = tmp_path / name
    trace.write_bytes(content)
    assert main(["sim", "run", "--spec", str(spec), "--trace", str(trace)]) == 2
    assert f"{tmp_path}/{message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "requests"),
    [
        ("excel.csv", "\ufefftimestamp,input_tokens,output_tokens\n0,10,5\n0.5,12,6\n", 2),
        ("bom.jsonl", '\ufeff{"timestamp": 0, "input_tokens": 10, "output_tokens": 5}\n', 1),
    ],
)
def test_run_reads_a_trace_that_starts_with_a_byte_order_mark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str, requests: int
) -> None:
    """Excel's "CSV UTF-8" (and many Windows editors) start the file with a BOM: the CSV's first column
    was read as "\ufefftimestamp" ("excel.csv:2: missing arrival time (one of arrival, timestamp, ...)"
    for a file that has one), a JSONL trace's first line was "invalid JSON: Unexpected UTF-8 BOM"."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    trace = tmp_path / name
    trace.write_text(content, encoding="utf-8")
    assert main(["sim", "run", "--spec", str(spec), "--trace", str(trace)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["served"] == requests


def test_run_runs_every_policy_it_accepts_and_names_it_as_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's ``igw sim run --policy gateway-default`` printed ``"policy": "gateway"``, as did
    ``gateway-tuned``: the summary named the policy object, not the one asked for (before session
    s40). Every policy ``--policy`` accepts now runs on a generated workload and is named as given."""
    from igw.bench.policies.registry import POLICIES

    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    accepted = [name for name, entry in POLICIES.items() if not entry.needs_slo]
    assert {"gateway-default", "gateway-tuned", "oracle"} <= set(accepted)
    for name in accepted:
        assert main(["sim", "run", "--spec", str(spec), "--requests", "5", "--policy", name]) == 0, name
        summary = json.loads(capsys.readouterr().out)
        assert (summary["policy"], summary["served"]) == (name, 5)


def test_run_refuses_a_policy_that_needs_a_scenarios_slos_while_parsing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--policy oracle-slo`` was accepted, then refused after the fleet spec was read with a message
    naming an internal field (``PolicyContext.slo``); ``igw perf des`` ended in its traceback."""
    for words in (["sim", "run", "--spec", __file__], ["perf", "des"]):  # a --spec that exists
        with pytest.raises(SystemExit) as exited:
            main([*words, "--policy", "oracle-slo"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "argument --policy: oracle-slo needs a scenario's TTFT and TPOT SLOs" in err, words
        assert "igw bench SCENARIO --policies oracle-slo" in err
        assert "PolicyContext" not in err


def test_the_measured_policy_table_in_the_simulator_docs_is_what_sim_run_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/simulator.md shows ``igw sim run`` on the example fleet through four policies, "measured";
    the gateway-default row had kept the numbers of earlier default weights (p95 39.7 ms, p99 88.8 ms
    against the 25.5 / 55.1 ms the command prints), so each row is re-measured here."""
    repo = Path(__file__).resolve().parents[2]
    doc = (repo / "docs" / "simulator.md").read_text(encoding="utf-8")
    spec = repo / "gateway_src" / "igw" / "sim" / "examples" / "mixed-fleet.yaml"
    table = doc.split("The same fleet and workload through other registry policies", 1)[1].split("\n\n")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert len(rows) == 4

    def shown(seconds: float, like: str) -> str:
        return f"{seconds:.2f} s" if like.endswith(" s") else f"{seconds * 1000:.1f} ms"

    for name, served, p50, p95, p99, preempted in rows:
        policy = name.split(" ")[0]
        argv = ["sim", "run", "--spec", str(spec), "--policy", policy, "--requests", "2000", "--rate", "40"]
        assert main(argv) == 0
        got = json.loads(capsys.readouterr().out)
        measured = [
            str(got["served"]),
            shown(got["ttft_p50"], p50),
            shown(got["ttft_p95"], p95),
            shown(got["ttft_p99"], p99),
            str(got["preempted"]),
        ]
        assert measured == [served, p50, p95, p99, preempted], policy


def test_run_takes_its_seed_from_the_spec_unless_seed_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec's ``seed`` was ignored by ``igw sim run`` (always 0 without ``--seed``): editing it
    changed nothing, while the docs say every draw is seeded from the spec or ``--seed``."""

    def records(spec_seed: int | None, *extra: str) -> str:
        spec = tmp_path / "fleet.yaml"
        head = "" if spec_seed is None else f"seed: {spec_seed}\n"
        spec.write_text(head + SPEC, encoding="utf-8")
        out = tmp_path / "records.jsonl"
        assert (
            main(["sim", "run", "--spec", str(spec), "--requests", "40", "--records", str(out), *extra]) == 0
        )
        return out.read_text(encoding="utf-8")

    from_spec = records(3)
    # the summary names the seed used, so a printed result can be reproduced from itself
    assert json.loads(capsys.readouterr().out)["seed"] == 3
    assert from_spec == records(None, "--seed", "3")
    assert from_spec != records(None)  # no seed anywhere: 0
    assert records(3, "--seed", "0") == records(None)  # --seed wins over the spec


def test_run_refuses_a_trace_row_beyond_the_simulators_time_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finite but huge arrival (``1e308``) passed the trace checks and ended the run in an
    ``OverflowError`` traceback from the scrape clock, naming no line."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival": 0, "output_tokens": 10, "prompt_tokens": 100}\n'
        '{"arrival": 1e308, "output_tokens": 10, "prompt_tokens": 100}\n',
        encoding="utf-8",
    )
    assert main(["sim", "run", "--spec", str(spec), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert f"igw sim run: {trace}:2: arrival 1e+308 s after the first row" in err
    assert "beyond the simulator's range of 1e+09 s" in err


HUNG_POD_SPEC = """\
seed: 7
pods:
  - name: h100
    replicas: 2
    preset: llama-3.1-8b/h100
    engine: vllm
  - name: stuck
    preset: llama-3.1-8b/h100
    engine: vllm
    faults:
      - {kind: hang, start_s: 0}
"""


def test_run_says_its_percentiles_leave_out_the_requests_it_did_not_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round-robin sent a third of 600 requests to a hung pod (200 ended 504) and printed a TTFT p99 of
    43 ms, below least-request's 48 ms (22 lost): the percentiles are over served requests only, and
    nothing beside them said how many that was."""
    spec = tmp_path / "hung.yaml"
    spec.write_text(HUNG_POD_SPEC, encoding="utf-8")
    argv = ["sim", "run", "--spec", str(spec), "--requests", "60", "--rate", "20"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    unserved = summary["requests"] - summary["served"]
    assert unserved == 20  # every third request, round-robin
    assert summary["served_fraction"] == pytest.approx(40 / 60)
    assert (
        f"igw sim run: {unserved} of 60 requests were not served ({summary['errors']} errors, 0 429, 0 503); "
        "the ttft/itl/e2e percentiles are over the 40 served ones only"
    ) in captured.err


def test_run_says_nothing_more_when_every_request_was_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    assert main(["sim", "run", "--spec", str(spec), "--requests", "20", "--rate", "5"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["served_fraction"] == 1.0
    assert captured.err == ""


@pytest.mark.parametrize("cv", ["1e-300", "1e-160", "1e160", "1e300"])
def test_run_refuses_a_cv_whose_gamma_shape_is_not_a_number(
    cv: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cv 1e-300`` (cv² underflows to 0) and ``--cv 1e160`` (1/cv² underflows to 0) ended in a
    ZeroDivisionError traceback, exit 1; from session s49 they are outside ``--cv``'s 0.001 to 10,
    refused while parsing."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["sim", "run", "--spec", str(spec), "--requests", "5", "--cv", cv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --cv: expected a number from 0.001 to 10.0, got '{cv}'" in err
    assert "Traceback" not in err


def test_run_and_perf_des_refuse_a_request_count_beyond_the_documented_maximum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--requests 99999999999999999`` was accepted and ran until killed (requests are generated lazily,
    one record kept each); a count over 1,000,000 is refused while parsing, naming the range."""
    for words in (["sim", "run", "--spec", __file__], ["perf", "des"]):  # a --spec that exists
        with pytest.raises(SystemExit) as exited:
            main([*words, "--requests", "99999999999999999"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "argument --requests: expected a whole number from 1 to 1000000" in err, words


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--rate", "1e-300", "the simulated clock outruns the precision of step times"),
        ("--rate", "0.0009", "the simulated clock outruns the precision of step times"),
        ("--rate", "1e300", "arrivals are one burst"),
        ("--scrape-interval", "1e-300", "the gateway's scrapeInterval counts whole ms"),
        ("--scrape-interval", "1e300", "every policy routes on its first scrape"),
    ],
)
def test_run_refuses_a_rate_or_scrape_interval_it_cannot_simulate_saying_why(
    option: str, value: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rate 1e-300`` exited 0 with every TTFT 0.0 (the clock at 2e302 s, where millisecond steps
    no longer register), and ``--scrape-interval`` took any positive number (before session s49)."""
    with pytest.raises(SystemExit) as exited:
        main(["sim", "run", "--spec", __file__, option, value])  # a --spec that exists
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected a number from " in err
    assert reason in err


def test_run_takes_the_rate_bounds_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    for rate in ("0.001", "1e6"):
        assert main(["sim", "run", "--spec", str(spec), "--requests", "5", "--rate", rate]) == 0
        assert json.loads(capsys.readouterr().out)["served"] == 5
