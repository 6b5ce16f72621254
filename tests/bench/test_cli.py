"""``igw bench`` / ``igw demo`` argument errors name the bad argument and run nothing."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from igw.bench.console import PlainProgress, stderr_progress
from igw.cli import bench as bench_cli
from igw.cli import demo as demo_cli
from igw.cli import option_scope
from igw.cli.main import build_parser, main
from igw.config.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "gateway_src" / "igw" / "sim" / "examples"
TRACE = str(EXAMPLES / "trace-prefix-lora.jsonl")
FLEET = str(EXAMPLES / "mixed-fleet.yaml")
"""A trace and a fleet that exist: ``--trace`` and ``--fleet`` refuse a missing file while parsing."""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nope"], "unknown scenario 'nope'"),
        (["bench", "homogeneous-steady", "--policies", "round-robin,fancy"], "--policies: unknown fancy"),
        (["bench", "homogeneous-steady", "--weights", "{queue: 2"], "--weights: not valid JSON"),
        (
            ["bench", "homogeneous-steady", "--weights", '{"queue": "two"}'],
            "--weights: expected a JSON object",
        ),
        (["bench"], "name at least one scenario"),
        (["bench", "--trace", TRACE, "--mode", "live"], "--trace runs in DES mode only"),
        (
            ["bench", "random", "--count", "5", "--draws", "2,7"],
            "--draws: [7] outside the family's draws 0..4",
        ),
        # built every draw before the first ran: 25 s and 390 MB in, --count 1000000 was still building
        (["bench", "random", "--count", "1000001"], "--count: at most 1,000 draws, got 1,000,001"),
        (
            ["bench", "random", "--count", "5000", "--draws", ",".join(map(str, range(1001)))],
            "--draws: at most 1,000 draws, got 1,001",
        ),
        (["demo", "--routers", "round-robin,warp"], "--routers: unknown warp"),
    ],
)
def test_bad_arguments_are_rejected_with_the_argument_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--requests", "3"], "argument --requests: expected a whole number >= 10, got '3'"),
        (["demo", "--drain", "0"], "argument --drain: expected a number > 0.0 and <= 3600.0, got '0'"),
    ],
)
def test_the_demo_refuses_what_it_cannot_run_while_parsing(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The parser took ``--requests`` from 1 and ``--drain 0`` (its help said nothing of a bound), then
    the run refused them with "--requests must be >= 10, --rate and --drain > 0" (before session s47):
    one bound, :data:`~igw.cli.demo.MIN_REQUESTS`, now checked where the option is parsed."""
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert build_parser().parse_args(["demo", "--requests", "10"]).requests == demo_cli.MIN_REQUESTS == 10
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "requests per router, at least 10" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--seeds", "1,x"),
        ("--seeds", "-1"),
        ("--draws", "3,x"),
        ("--draws", "-2"),
        ("--count", "0"),
        ("--duration-scale", "0"),
        ("--duration-scale", "nan"),
        # refused only once the capacity probe had run (before session s49)
        ("--duration-scale", "1e9"),
        ("--duration-scale", "1001"),
    ],
)
def test_bad_seeds_and_draws_are_an_argparse_error(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "random", option, value])
    assert option in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["bench", "homogeneous-steady"], ["perf", "workers-des"]])
def test_a_seed_given_twice_is_an_argparse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--seeds 1,1`` ran seed 1 twice and reported its spread as ``±0``: a result no seed changes."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--seeds", "1,2,1"])
    err = capsys.readouterr().err
    assert "--seeds" in err
    assert "1 given more than once" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--policies", "gateway-default", "--weights", '{"foo": 1}'],
            "--weights: weights.foo: unknown scorer",
        ),
        (
            ["--policies", "gateway-tuned", "--weights", '{"queue": -1}'],
            "weights.queue: must be a non-negative",
        ),
        (["--policies", "random", "--weights", '{"queue": 3}'], "--weights: none of the policies run"),
        # `{}` ran the policies' own defaults while the report stated the override `{}` (s42)
        (["--policies", "gateway-default", "--weights", "{}"], "--weights: the map is empty"),
        # every weight 0 built no scorer: a random router reported as gateway-default (s43)
        (
            ["--policies", "gateway-default", "--weights", '{"queue": 0, "kvCache": 0, "prefix": 0}'],
            "--weights: every weight is 0",
        ),
        (["--policies", "gateway-tuned", "--weights", '{"predictedLatency": 0.0}'], "every weight is 0"),
    ],
)
def test_bad_weights_are_refused_before_any_policy_runs(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Weights were checked only when the gateway policy's turn came, after round-robin and every
    earlier policy had run (minutes at full scale), and ignored without a word when no policy has
    weights. (Refused at once now: the scenario below never starts.)"""
    argv = ["bench", "homogeneous-steady", "--quick", "--duration-scale", "0.05", *extra]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "seed 1:" not in err  # no policy ran
    assert not (tmp_path / "out").exists()


def test_list_names_every_scenario_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("mixed-fleet-8b", "burst-235b", "shared-prefix-8b-high-cache", "demo-mixed-8b", "oracle"):
        assert name in out


def test_trace_replay_runs_every_policy_and_writes_the_report(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 20}}' for i in range(120))
    )
    out = tmp_path / "out"
    argv = ["bench", "--trace", str(trace), "--policies", "round-robin,oracle", "--seeds", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    text = (out / "trace-trace.md").read_text()
    assert "| oracle |" in text
    assert "| round-robin |" in text
    assert (out / "trace-trace.json").exists()
    assert (out / "index.md").exists()


def test_bracketed_out_and_trace_names_are_printed_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed as rich markup, ``--out 'o[/b]'`` ended a finished run in a ``MarkupError`` traceback
    (exit 1, after the reports were written) and a trace named ``[bold]t.jsonl`` lost ``[bold]`` from
    its table's title."""
    trace = tmp_path / "[bold]t.jsonl"
    trace.write_text(
        "\n".join(f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 20}}' for i in range(120))
    )
    out = tmp_path / "o[" / "b]"
    argv = ["bench", "--trace", str(trace), "--policies", "round-robin", "--seeds", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"reports written to {out}/ (trace-[bold]t.md, index.md)" in printed  # index.md named (s50)
    assert "trace-[bold]t (des)" in printed
    assert (out / "trace-[bold]t.json").exists()


def test_a_trace_naming_what_the_fleet_cannot_serve_is_rejected_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [f'{{"arrival": {i * 0.02}, "prompt_tokens": 50, "output_tokens": 5}}' for i in range(20)]
    rows += [f'{{"arrival": {1 + i * 0.02}, "prompt_tokens": 50, "output_tokens": 5, "adapter": "ghost"}}'
             for i in range(3)]  # fmt: skip
    trace.write_text("\n".join(rows))
    out = tmp_path / "out"
    assert main(["bench", "--trace", str(trace), "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "3 requests name what no pod of the fleet serves" in err
    # the 21st request (line 21): its default id counts from 0
    assert "adapter 'ghost': 3 requests (first: request 21 of the trace, id trace-20)" in err
    assert not out.exists()
    trace.write_text("\n".join(rows[:21]))
    assert main(["bench", "--trace", str(trace), "--seeds", "1", "--out", str(out)]) == 2
    assert "1 request names what no pod of the fleet serves (adapter 'ghost': 1 request (first:" in (
        capsys.readouterr().err
    )


def test_failed_requests_make_the_run_exit_nonzero_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet whose pod dies mid-run: its requests fail, the command says so and exits 1."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "pods:\n"
        "  - {name: h100-0, preset: llama-3.1-8b/h100}\n"
        "  - name: h100-1\n"
        "    preset: llama-3.1-8b/h100\n"
        "    faults: [{kind: kill, start_s: 0.5}]\n"
    )
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(
            f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 200}}' for i in range(100)
        )
    )
    argv = [
        "bench",
        "--trace",
        str(trace),
        "--fleet",
        str(fleet),
        "--policies",
        "round-robin",
        "--seeds",
        "1",
    ]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 1
    assert "failed requests: trace-trace/round-robin:" in capsys.readouterr().out
    assert main([*argv, "--out", str(tmp_path / "b"), "--allow-failures"]) == 0
    report = (tmp_path / "b" / "trace-trace.md").read_text()
    assert "| failed |" in report


def test_progress_is_written_as_lines_where_the_output_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI log or a pipe gets no status line from rich: without these lines a full-scale run was
    silent until its first table, minutes later. (120 requests: with fewer than 100 a warning that
    the p99 rests on too few of them would be written to stderr too.)"""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 20}}' for i in range(120))
    )
    argv = ["bench", "--trace", str(trace), "--policies", "round-robin", "--seeds", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines
    assert all(line.startswith("[") and "s] " in line for line in lines)


def test_plain_progress_writes_the_first_message_then_at_most_one_per_interval() -> None:
    now = [0.0]
    stream = io.StringIO()
    say = PlainProgress(stream, every_s=10.0, clock=lambda: now[0])
    for t, message in ((0.0, "a"), (3.0, "b"), (9.9, "c"), (10.0, "d"), (15.0, "e"), (25.0, "f")):
        now[0] = t
        say(message)
    assert stream.getvalue() == "a\nd\nf\n"


def test_summarize_refuses_a_folder_without_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--summarize`` of the wrong folder wrote a summary.md of headers only into it, exit 0; a
    ``<name>.json`` folder in it ended in an IsADirectoryError traceback."""
    (tmp_path / "notes.json").mkdir()
    assert main(["bench", "--summarize", str(tmp_path)]) == 2
    assert "holds no DES report of igw bench" in capsys.readouterr().err
    assert not (tmp_path / "summary.md").exists()


def test_summarize_names_a_report_that_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report cut short by an interrupted run: the message was orjson's alone, naming no file."""
    (tmp_path / "mixed-fleet-8b.json").write_text('{"scenario": "mixed-fl')
    assert main(["bench", "--summarize", str(tmp_path)]) == 2
    assert f"--summarize: {tmp_path / 'mixed-fleet-8b.json'}: not a JSON report" in capsys.readouterr().err


def test_demo_refuses_options_it_would_ignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``igw demo --quick`` ran the whole demo (minutes) as if --quick had not been given;
    ``igw demo --operator --global`` ran the operator demo alone."""
    assert main(["demo", "--quick", "--out", str(tmp_path / "out")]) == 2
    assert "--quick applies to --global only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--operator", "--global"])
    assert exited.value.code == 2
    assert "argument --global: not allowed with argument --operator" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "global"], 10.0),
        (["bench", "global", "--live-rate", "20"], 20.0),
        (["bench", "global", "--live-rate", "15"], 15.0),
        (["bench", "demo-mixed-8b", "--mode", "live"], 20.0),
        (["bench", "demo-mixed-8b", "--mode", "live", "--live-rate", "10"], 10.0),
    ],
)
def test_bench_runs_at_the_live_rate_given_even_when_it_equals_another_default(
    argv: list[str], expected: float
) -> None:
    """``igw bench global --live-rate 20`` ran at 10 requests/s: the command told "not given" from
    "given" by comparing the value with the general default (20), so that one value was replaced."""
    args = build_parser().parse_args(argv)
    default = bench_cli.GLOBAL_LIVE_RATE if argv[1] == "global" else bench_cli.DEFAULT_LIVE_RATE
    assert bench_cli.offered_rate(args, default=default) == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["demo", "--global"], 10.0),
        (["demo", "--global", "--rate", "20"], 20.0),
        (["demo"], 20.0),
        (["demo", "--rate", "10"], 10.0),
    ],
)
def test_demo_runs_at_the_rate_given_even_when_it_equals_another_default(
    argv: list[str], expected: float
) -> None:
    """``igw demo --global --rate 20`` ran at 10 requests/s (the same comparison with the default)."""
    assert demo_cli.offered_rate(build_parser().parse_args(argv)) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["bench", "overload-priorty"],
            "unknown scenario 'overload-priorty' (known: mixed-fleet-8b,",
        ),
        (["bench", "overload-priority", "mixed-fleet-8b"], "overload-priority runs alone"),
        (["bench", "mixed-fleet-8b", "random"], "random runs alone"),
    ],
)
def test_a_scenario_name_error_names_the_benchmarks_that_run_alone(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw bench overload-priorty`` listed only the scenarios as known, and
    ``igw bench overload-priority mixed-fleet-8b`` said "unknown scenario 'overload-priority'":
    the benchmarks that run alone (global, global-des, overload-priority, canary-rollout, random)
    were named nowhere but in the docs."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "unknown scenario 'overload-priority'" not in err
    if "unknown" in message:
        assert "each run alone: random, global, global-des, overload-priority, canary-rollout" in err


def test_list_names_the_benchmarks_that_run_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    alone = out.split("run alone", 1)[1].split("policies:", 1)[0]
    for name in ("random", "global", "global-des", "overload-priority", "canary-rollout"):
        assert f"\n  {name} " in alone, out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--global", "--requests", "50"], "igw demo: --requests does not apply to --global"),
        (
            ["demo", "--global", "--requests", "600", "--drain", "5", "--routers", "round-robin"],
            "--requests, --drain, --routers do not apply to --global",
        ),
        (["demo", "--operator", "--rate", "3"], "igw demo: --rate does not apply to --operator"),
        (["demo", "--operator", "--routers", "gateway-default"], "--routers does not apply to --operator"),
        (["demo", "--global", "--allow-long-run"], "igw demo: --allow-long-run does not apply to --global"),
        (["bench", "overload-priority", "--seeds", "1,2,3"], "overload-priority runs one seed"),
        (["bench", "global-des", "--seeds", "1,2"], "global-des runs one seed"),
        (
            ["bench", "overload-priority", "--policies", "fifo"],
            "--policies does not apply to overload-priority",
        ),
        (["bench", "global", "--seeds", "4"], "igw bench: --seeds does not apply to global"),
        (["bench", "global", "--policies", "gateway-default"], "--policies does not apply to global"),
        (["bench", "canary-rollout", "--seeds", "2"], "--seeds does not apply to canary-rollout"),
        (["bench", "canary-rollout", "--policies", "x"], "--policies does not apply to canary-rollout"),
        (["bench", "canary-rollout", "--mode", "des"], "--mode does not apply to canary-rollout"),
        (["bench", "global-des", "--mode", "live"], "--mode does not apply to global-des"),
        (["bench", "global", "--list"], "--list lists every scenario: name none with it"),
        (["bench", "--tune", "--quick"], "--quick does not apply to --tune"),
        (["bench", "--tune", "--policies", "oracle"], "--policies does not apply to --tune"),
        (["bench", "mixed-fleet-8b", "--count", "5"], "--count does not apply to a DES run of scenarios"),
        (["bench", "mixed-fleet-8b", "--fleet", FLEET], "--fleet does not apply to a DES run"),
        (["bench", "mixed-fleet-8b", "--peers"], "--peers does not apply to a DES run"),
        (
            ["bench", "mixed-fleet-8b", "--mode", "live", "--duration-scale", "0.5"],
            "--duration-scale does not",
        ),
        (
            ["bench", "mixed-fleet-8b", "--mode", "live", "--agreement-des-seeds", "5"],
            "--agreement-des-seeds",
        ),
        (["bench", "mixed-fleet-8b", "--mode", "live", "--decisions-out", "d.jsonl"], "--decisions-out does"),
        (["bench", "mixed-fleet-8b", "--trace", TRACE], "--trace replays the trace instead"),
        (["bench", "--summarize", "TMP", "--seeds", "1"], "--seeds does not apply to --summarize"),
    ],
)
def test_an_option_the_chosen_mode_would_ignore_is_refused_naming_option_and_mode(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``igw demo --global --requests 50`` ran the fixed tier-2 script, ``igw bench overload-priority
    --seeds 1,2,3`` ran seed 1 alone, ``igw bench global --seeds 4 --policies ...`` ran neither: each
    finished with exit 0 and results the user took for those of the options given."""
    out = tmp_path / "out"
    argv = [str(tmp_path) if word == "TMP" else word for word in argv]  # --summarize's folder
    assert main([*argv, "--out", str(out)] if "--summarize" not in argv else argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        (["demo", "--global", "--rate", "5", "--quick"], "--global"),
        (["demo", "--operator"], "--operator"),
        (["bench", "global", "--live-rate", "5", "--quick", "--mode", "live"], "global"),
        (["bench", "global-des", "--seeds", "2", "--quick"], "global-des"),
        (
            ["bench", "overload-priority", "--mode", "live", "--policies", "fifo", "--seeds", "3"],
            "overload-priority",
        ),
        (["bench", "canary-rollout", "--quick"], "canary-rollout"),
        (
            ["bench", "mixed-fleet-8b", "--scrape-interval", "0.1", "--decisions-out", "d"],
            "a DES run of scenarios",
        ),
        (["bench", "random", "--count", "3", "--seed", "2", "--draws", "1"], "random"),
        (["bench", "--trace", TRACE, "--fleet", FLEET, "--trace-speedup", "2"], "--trace"),
        (["bench", "x", "--mode", "live", "--check-agreement", "--agreement-des-seeds", "3"], "--mode live"),
        (["bench", "--tune", "--weights", "{}", "--seeds", "2", "--duration-scale", "2"], "--tune"),
    ],
)
def test_the_options_a_mode_uses_are_accepted_with_it(argv: list[str], mode: str) -> None:
    """The refusal above names only options the mode ignores: every option it uses stays allowed."""
    args = build_parser().parse_args([*argv, "--out", "o"])
    if argv[0] == "demo":
        used = demo_cli.GLOBAL_USES if args.global_router else demo_cli.OPERATOR_USES
        assert set(option_scope.given(args)) <= used
        return
    found, used, _ = bench_cli.options_used(args)
    assert found == mode
    assert option_scope.unused_options(args, used) == []


def test_bench_des_runs_at_the_scrape_interval_given(tmp_path: Path) -> None:
    """``igw bench SCENARIO --scrape-interval 1`` ran with 0.05 s scrapes: the option was parsed, then
    never passed to the simulation (its report said ``"scrape_interval_s": 0.05``)."""
    argv = ["bench", "homogeneous-steady", "--quick", "--duration-scale", "0.05", "--policies", "round-robin"]
    assert main([*argv, "--scrape-interval", "1", "--out", str(tmp_path)]) == 0
    report = orjson.loads((tmp_path / "homogeneous-steady.json").read_bytes())
    assert report["parameters"]["scrape_interval_s"] == 1.0


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (",", "expected comma-separated names, got ','"),
        ("", "expected comma-separated names, got ''"),
        (" , ", "expected comma-separated names"),
        ("round-robin,,oracle", "(a blank entry)"),
        ("oracle,", "(a blank entry)"),
        ("oracle,round-robin,oracle", "oracle given more than once"),
    ],
)
def test_a_policy_list_with_a_blank_or_repeated_entry_is_an_argparse_error(
    value: str, why: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--policies ,`` (or ``--policies=`` of an unset variable) was an empty list, read as "not
    given": every default policy ran, 41 s at ``--quick``, exit 0; ``a,,b`` dropped the blank."""
    with pytest.raises(SystemExit) as exited:
        main(["bench", "homogeneous-steady", "--quick", "--policies", value, "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --policies:" in err
    assert why in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["bench", "global", "--live-rate", "1e308"], "--live-rate"),
        (["bench", "demo-mixed-8b", "--mode", "live", "--live-rate", "1001"], "--live-rate"),
        (["demo", "--global", "--rate", "1e9"], "--rate"),
    ],
)
def test_a_live_rate_beyond_what_a_loopback_run_can_offer_is_an_argparse_error(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw bench global --live-rate 1e308`` started requests as fast as the loop could, each held
    for up to 60 s: the process grew by 59 MB in 20 s of a quick run, for as long as it ran."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert f"argument {option}: expected a number > 0.0 and <= 1000.0" in err


def test_the_largest_live_rate_is_accepted() -> None:
    args = build_parser().parse_args(["bench", "global", "--live-rate", "1000"])
    assert bench_cli.offered_rate(args, default=bench_cli.GLOBAL_LIVE_RATE) == 1000.0


def _trace(path: Path, count: int) -> Path:
    path.write_text(
        "\n".join(
            f'{{"arrival": {i * 0.02}, "prompt_tokens": 200, "output_tokens": 20}}' for i in range(count)
        )
    )
    return path


@pytest.mark.parametrize(
    ("count", "warned"),
    [
        (10, "p95 and p99 rest on 10 requests per seed (fewer than 20 for a p95, 100 for a p99"),
        (50, "p99 rests on 50 requests per seed (fewer than 100"),
        (120, None),
    ],
)
def test_percentiles_of_too_few_requests_are_warned_and_the_count_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: int, warned: str | None
) -> None:
    """``igw bench SCENARIO --duration-scale 1e-300`` ran one request per seed, exited 0 and printed
    that request's latency as p95 and p99, with no request count anywhere in the table. The table and
    the report now give the requests per seed, and a p95 (p99) resting on fewer than 20 (100) of them
    is warned about on stderr, naming the remedy."""
    trace = _trace(tmp_path / "trace.jsonl", count)
    out = tmp_path / "out"
    argv = ["bench", "--trace", str(trace), "--policies", "round-robin", "--seeds", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    rows = [line for line in captured.out.splitlines() if line.startswith("│round-robin")]
    assert "req/seed" in captured.out
    assert len(rows) == 1
    assert f"│ {count:>8} │" in rows[0]
    assert f"| {count} | 0 |" in (out / "trace-trace.md").read_text()  # requests/seed, errors
    if warned is None:
        assert "warning" not in captured.err
    else:
        assert f"warning: trace-trace: {warned}" in captured.err
        assert "replay a longer trace" in captured.err


def test_a_scenario_scaled_to_one_request_per_seed_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "bench",
        "homogeneous-steady",
        "--quick",
        "--duration-scale",
        "1e-300",
        "--policies",
        "round-robin",
    ]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "warning: homogeneous-steady: p95 and p99 rest on 1 request per seed" in err
    assert "raise --duration-scale" in err


def test_stderr_progress_stamps_each_line_and_writes_it_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """``igw demo --global`` and ``igw bench canary-rollout``'s progress: one ``[elapsed] message``
    line per phase on stderr, none held back."""
    ticks = iter([100.0, 100.0, 112.34])
    say = stderr_progress(clock=lambda: next(ticks))
    say("starting redis-server")
    say("failover script: kill east-a")
    stamped = "[   0.0s] starting redis-server\n[  12.3s] failover script: kill east-a\n"
    assert capsys.readouterr().err == stamped


def test_a_live_plan_over_a_day_is_refused_with_its_length_said_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--live-rate 0.001`` with the default 400 requests planned 400,000 s (111 h) per router and
    seed, and started it without a word (seen with ``timeout 40``: nothing but the DES-only line)."""
    argv = ["bench", "homogeneous-steady", "--mode", "live", "--live-rate", "0.001", "--seeds", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "plan: 3 live runs (1 scenario(s) x 1 seed(s) x 3 router(s)), each 400 requests at 0.001/s" in (
        captured.out.replace("\n", " ")
    )
    assert "about 333.4 h (1,200,090 s)" in captured.out.replace("\n", " ")
    assert (
        "igw bench: --live-requests 400 at --live-rate 0.001 (--drain 30) plans about 333 h of live runs, "
        "over the 24 h bound: raise --live-rate, lower --live-requests, or pass --allow-long-run"
    ) in captured.err
    assert not (tmp_path / "out" / "work").exists()


@pytest.mark.parametrize(
    ("argv", "plan", "refusal"),
    [
        (
            ["demo", "--rate", "0.001"],
            "plan: 2 live runs (1 scenario(s) x 1 seed(s) x 2 router(s)), each 600 requests at 0.001/s + up "
            "to 45 s drain: about 333.4 h (1,200,090 s)",
            "igw demo: --requests 600 at --rate 0.001 (--drain 45) plans about 333 h of live runs, over the "
            "24 h bound: raise --rate, lower --requests, or pass --allow-long-run",
        ),
        (
            ["demo", "--requests", "1000", "--rate", "0.01", "--routers", "gateway-default"],
            "plan: 1 live run (1 scenario(s) x 1 seed(s) x 1 router(s)), each 1000 requests at 0.01/s",
            "igw demo: --requests 1000 at --rate 0.01 (--drain 45) plans about 28 h of live runs",
        ),
    ],
)
def test_a_demo_planned_over_a_day_is_refused_with_its_length_said_first(
    argv: list[str], plan: str, refusal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw demo --rate 0.001`` planned 600,000 s (167 h) per router, and started measuring and sending
    without a word on its length (seen with ``timeout 25``: "600 requests over ~565346s wall")."""
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert plan in " ".join(captured.out.split())
    assert refusal in captured.err
    assert "capacity:" not in captured.out
    assert not (tmp_path / "out" / "work").exists()


def test_a_duration_scale_one_scenario_cannot_hold_is_refused_before_any_scenario_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each scenario's request count was checked only when its turn came, so ``igw bench
    demo-mixed-8b homogeneous-steady --duration-scale 60`` ran the first scenario for minutes before
    the second was refused. Every scenario is checked now, after the (memoised) capacity measurements
    and before any runs. The measurement is replaced by a fixed rate here (seconds of simulation each),
    and a scenario run by a stub that fails the test."""
    import types

    from igw.bench import des_runner
    from igw.cli import bench_run

    rates = {"demo-mixed-8b": 1.0, "homogeneous-steady": 1_000.0}
    monkeypatch.setattr(
        des_runner,
        "fleet_capacity",
        lambda scenario, **_k: types.SimpleNamespace(requests_per_s=rates[scenario.name]),
    )

    def no_run(*_a: object, **_k: object) -> object:
        raise AssertionError("a scenario ran before the duration scale was checked")

    monkeypatch.setattr(bench_run, "run_des", no_run)
    argv = ["bench", "demo-mixed-8b", "homogeneous-steady", "--duration-scale", "60", "--seeds", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "igw bench: homogeneous-steady: " in err
    assert "requests per seed, more than the 1,000,000 a run holds; lower --duration-scale" in err


@pytest.mark.parametrize(
    ("argv", "option", "value", "reason"),
    [
        # both taken by any DES run (before session s49)
        (["bench", "mixed-fleet-8b"], "--scrape-interval", "1e-300", "counts whole ms"),
        (["bench", "mixed-fleet-8b"], "--scrape-interval", "1e300", "routes on its first scrape"),
        (["perf", "scrape-des"], "--scrape-interval", "1e-300", "counts whole ms"),
        (["perf", "workers-des"], "--scrape-interval", "601", "routes on its first scrape"),
        # at least 2 was checked only once the run began; no upper bound, no --allow-long-run check
        (
            ["bench", "demo-mixed-8b", "--mode", "live", "--check-agreement"],
            "--agreement-des-seeds",
            "1",
            "the tie rule needs seed-to-seed variation",
        ),
        (
            ["bench", "demo-mixed-8b", "--mode", "live", "--check-agreement"],
            "--agreement-des-seeds",
            "1000000000",
            "each seed is a DES run of every router",
        ),
        # refused only once the capacity probe had run (before session s49)
        (["perf", "scrape-des"], "--duration-scale", "1e9", "<= 1000.0"),
        (["perf", "workers-des"], "--duration-scale", "1001", "<= 1000.0"),
    ],
)
def test_bounded_bench_and_perf_options_are_refused_while_parsing_saying_why(
    argv: list[str], option: str, value: str, reason: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected " in err
    assert reason in err
    assert (
        build_parser().parse_args(["bench", "x", "--agreement-des-seeds", "100"]).agreement_des_seeds == 100
    )
    assert build_parser().parse_args(["bench", "x", "--scrape-interval", "0.001"]).scrape_interval == 0.001
