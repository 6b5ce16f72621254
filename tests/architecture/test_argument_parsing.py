"""All command-line parsing lives in :mod:`igw.cli`: no other package builds or runs an argparse parser.

Product and tooling packages take typed arguments; the ``igw`` sub-commands and the ``python -m``
process entry points in ``igw.cli`` turn command lines into those arguments. (An
``argparse.Namespace`` type annotation elsewhere is allowed: it parses nothing.)
"""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path

import pytest

from igw.cli import perf as perf_cli
from igw.cli.arg_types import (
    FLEET_TIME_SCALE,
    MAX_FLEET_TIME_SCALE,
    MIN_FLEET_TIME_SCALE,
    NumberList,
    NumberOrWord,
    NumberRange,
    ca_bundle,
    existing_directory,
    existing_file,
    existing_file_or_stdin,
    existing_path,
    listen_host,
    output_directory,
    output_file,
    region_name,
    source_name,
    source_path,
)
from igw.cli.main import build_parser, main
from igw.config.paths import REPO_ROOT
from tests.architecture.support import SOURCE_ROOT, assert_none, offenders, python_files, sample

CLI_PACKAGE = SOURCE_ROOT / "cli"
A_FILE = __file__
"""A file that exists, for options that refuse a missing one while parsing."""
PARSER_CALLS = frozenset(
    {"ArgumentParser", "add_argument", "add_argument_group", "add_subparsers", "add_parser", "parse_args"}
)


def parser_calls(path: Path, *, root: Path = REPO_ROOT) -> list[str]:
    """``file:line: name`` of every call in ``path`` whose callee is one of :data:`PARSER_CALLS`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
        if name in PARSER_CALLS:
            found.append((node.lineno, f"{path.relative_to(root)}:{node.lineno}: {name}"))
    return [text for _, text in sorted(found)]


def test_the_check_sees_parser_calls(tmp_path: Path) -> None:
    module = sample(
        tmp_path,
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--x')\n"
        "def run(args: argparse.Namespace) -> None: ...\n",
    )
    found = [line.rsplit(": ", 1)[1] for line in parser_calls(module, root=tmp_path)]
    assert found == ["ArgumentParser", "add_argument"]
    assert parser_calls(CLI_PACKAGE / "perf.py"), "the cli package itself must show up as parsing"


def test_no_argument_parsing_outside_the_cli_package() -> None:
    found = offenders(python_files(SOURCE_ROOT, skip=CLI_PACKAGE), parser_calls)
    assert_none(found, "argument parsing outside igw.cli")


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every sub-command parser below it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def test_every_help_page_renders() -> None:
    """``igw ... --help`` for every command: argparse %-formats help strings, so a stray ``%`` (as in
    "80 % of capacity") breaks the help page of the command that lists it."""
    parsers = _parsers(build_parser())
    assert len(parsers) > 30, "the walk must reach the sub-commands"
    for parser in parsers:
        assert parser.format_help(), parser.prog


BARE_NUMBER_TYPES = frozenset({"int", "float"})


def bare_number_options(path: Path, *, root: Path = REPO_ROOT) -> list[str]:
    """``file:line`` of every ``add_argument(..., type=int|float|lambda ...)`` in ``path``: a numeric
    option must name its range with a type from :mod:`igw.cli.arg_types`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"):
            continue
        for keyword in node.keywords:
            value = keyword.value
            text = ast.unparse(value)
            bare = (isinstance(value, ast.Name) and value.id in BARE_NUMBER_TYPES) or (
                isinstance(value, ast.Lambda) and ("int(" in text or "float(" in text)
            )
            if keyword.arg == "type" and bare:
                found.append(f"{path.relative_to(root)}:{node.lineno}: type={text}")
    return found


def test_the_check_sees_bare_number_types(tmp_path: Path) -> None:
    module = sample(
        tmp_path,
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--a', type=int)\n"
        "p.add_argument('--b', type=lambda t: [int(n) for n in t.split(',')])\n"
        "p.add_argument('--c', type=COUNT)\n"
        "p.add_argument('--d', type=lambda t: t.split(','))\n",
    )
    found = bare_number_options(module, root=tmp_path)
    assert [line.split(": ", 1)[1] for line in found] == [
        "type=int",
        "type=lambda t: [int(n) for n in t.split(',')]",
    ]


def test_every_numeric_option_names_its_range() -> None:
    """``type=int`` took ``--port 70000`` (served on 4464) and ``--pods 0`` (a traceback)."""
    assert_none(offenders(python_files(CLI_PACKAGE), bare_number_options), "numeric options without a range")


def _options(parser: argparse.ArgumentParser) -> list[tuple[list[str], argparse.Action]]:
    """(the command words leading to ``parser``, option) for every option of every command."""
    found: list[tuple[list[str], argparse.Action]] = []

    def walk(words: list[str], p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk([*words, name], child)
            elif action.option_strings and not isinstance(
                action, argparse._HelpAction | argparse._VersionAction
            ):
                found.append((words, action))

    walk([], parser)
    return found


def test_options_with_numeric_defaults_parse_numbers() -> None:
    """An option whose default is a number but that has no type hands the command a string when given."""
    untyped = [
        f"igw {' '.join(words)} {action.option_strings[0]}"
        for words, action in _options(build_parser())
        if isinstance(action.default, int | float)
        and not isinstance(action.default, bool)
        and action.type is None
        and action.nargs != 0
        and not isinstance(action, argparse._StoreConstAction | argparse._CountAction)
    ]
    assert_none(untyped, "numeric defaults without a type")


def test_every_out_of_range_number_is_refused_while_parsing_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    checked = 0
    for words, action in _options(build_parser()):
        if not isinstance(action.type, NumberRange | NumberList | NumberOrWord):
            continue
        bad = action.type.outside()
        if bad is None:
            continue
        flag = action.option_strings[-1]
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*words, f"{flag}={bad}"])
        err = capsys.readouterr().err
        assert exited.value.code == 2, (words, flag, bad)
        assert f"argument {'/'.join(action.option_strings)}: expected" in err, (words, flag, err)
        assert bad in err, err
        checked += 1
    assert checked > 60, "the walk must reach the numeric options of every command"


def test_an_output_path_that_cannot_be_written_is_refused_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out`` under a regular file used to end a finished benchmark in a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    checked = 0
    for words, action in _options(build_parser()):
        if action.type not in (output_directory, output_file):
            continue
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*words, action.option_strings[-1], str(blocker / "sub" / "x")])
        assert exited.value.code == 2, (words, action.option_strings)
        assert "Traceback" not in capsys.readouterr().err
        checked += 1
    assert checked >= 7, checked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_an_empty_path_is_refused_by_every_output_folder_and_scanned_source_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``''`` (``--out "$OUT"`` of an unset variable) is ``Path('.')``: ``igw demo --out=`` and ``igw
    bench --out=`` wrote their reports into the folder they ran in, ``igw addon package
    --destination=`` its archive, and ``igw audit --cdk-out=`` scanned the current folder and reported
    on it. Each refuses it while parsing now, naming the option."""
    checked = []
    for words, action in _options(build_parser()):
        if action.type not in (output_directory, source_path, existing_path):
            continue
        flag = action.option_strings[-1]
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*words, f"{flag}="])
        assert exited.value.code == 2, (words, flag)
        assert f"argument {'/'.join(action.option_strings)}: '' names no f" in capsys.readouterr().err
        checked.append(f"{' '.join(words)} {flag}")
    assert {"demo --out", "addon package --destination", "audit --cdk-out", "preflight --manifests"} <= set(
        checked
    ), checked


READ_PATH_TYPES: frozenset[object] = frozenset(
    {
        existing_path,
        existing_file,
        existing_file_or_stdin,
        existing_directory,
        source_name,
        source_path,
        ca_bundle,
        Path,
    }
)
"""The argument types of options naming a file or folder to read (or, as ``Path``, either way)."""
NOT_CHECKED_WHILE_PARSING = {
    ("serve", "--config"): "with --config-map the command writes the file before it reads it",
    ("generate", "--root"): "a checkout's root; a missing schemas/ folder is refused naming --root",
    ("preflight", "--output-file"): "an output file, checked when the report is written",
    ("audit", "--output-file"): "an output file, checked when the report is written",
}
"""Options that take a path but accept one that does not exist while parsing, and why."""


def test_a_missing_input_path_is_refused_while_parsing_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw preflight --manifests deploy`` (no such folder) said ``error: deploy: no such file or
    directory``, naming no option; ``--kubeconfig`` a file that is not there ended preflight and audit
    in exit 3 ("not evaluated"), and ``igw serve --in-cluster`` only after its start-up lines (before
    session s44). Every option that reads a file or folder refuses a missing one while parsing: exit
    2, argparse's ``argument --OPTION: PATH: ...`` line under the command's usage."""
    missing = str(tmp_path / "no-such")
    checked, path_options = [], []
    for words, action in _options(build_parser()):
        metavar = str(action.metavar or "").upper()
        reads = action.type in READ_PATH_TYPES or any(k in metavar for k in ("FILE", "DIR", "PATH", ".YAML"))
        if not reads or action.type in (output_directory, output_file):
            continue
        flag = action.option_strings[-1]
        path_options.append((" ".join(words), flag))
        if (" ".join(words), flag) in NOT_CHECKED_WHILE_PARSING:
            continue
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*words, flag, missing])
        err = capsys.readouterr().err
        assert exited.value.code == 2, (words, flag)
        assert f"argument {'/'.join(action.option_strings)}: " in err, (words, err)
        assert "no-such" in err, err
        assert err.startswith("usage: igw "), err
        checked.append(f"{' '.join(words)} {flag}")
    stale = set(NOT_CHECKED_WHILE_PARSING) - set(path_options)
    assert not stale, f"exemptions naming no option: {stale}"
    assert {
        "preflight --manifests",
        "preflight --cdk-out",
        "preflight --kubeconfig",
        "audit --manifests",
        "audit --kubeconfig",
        "serve --kubeconfig",
        "serve --config-maps",
        "operator --kubeconfig",
        # refused once the command ran, naming the file but not the option (before session s44)
        "serve --endpoints",
        "global serve --config",
        "sim fleet --spec",
        "sim run --spec",
        "sim run --trace",
        "bench --summarize",
        "bench --trace",
        "bench --fleet",
    } <= set(checked), checked


def test_the_options_read_through_the_document_reader_still_take_stdin() -> None:
    """``igw sim fleet --spec -`` read the spec from standard input (``read_documents`` takes ``-``,
    as for ``igw validate -``) before these options refused a missing file while parsing; ``-`` is
    still taken where the file is read once that way, and refused where it is re-read or stat'ed."""
    parser = build_parser()
    for words in (
        ["sim", "fleet", "--spec", "-"],
        ["sim", "run", "--spec", "-"],
        ["bench", "--trace", A_FILE, "--fleet", "-"],
        ["global", "serve", "--config", "-"],
    ):
        assert "-" in vars(parser.parse_args(words)).values(), words
    with pytest.raises(SystemExit) as exited:  # re-read on change: a stream cannot be
        parser.parse_args(["serve", "--config", A_FILE, "--endpoints", "-"])
    assert exited.value.code == 2


def test_a_missing_manifests_folder_is_named_with_its_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newcomer's case end to end, through ``igw``'s entry point."""
    for command in ("preflight", "audit"):
        with pytest.raises(SystemExit) as exited:
            main([command, "--manifests", str(tmp_path / "deploy")])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert (
            f"igw {command}: error: argument --manifests: {tmp_path / 'deploy'}: no such file or folder"
            in err
        )


def test_checking_an_output_directory_leaves_nothing_behind(tmp_path: Path) -> None:
    assert output_directory(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        output_file(str(tmp_path))


def _refused_by_every(
    option: str, parse: object, bad: str, message: str, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """Every command taking ``option`` parses it with ``parse`` and refuses ``bad`` while parsing
    (exit 2, ``message`` on stderr); the commands checked, as their words."""
    checked = []
    for words, action in _options(build_parser()):
        if option not in action.option_strings:
            continue
        assert action.type is parse, words
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*words, f"{option}={bad}"])
        err = capsys.readouterr().err
        assert exited.value.code == 2, words
        assert message in err, err
        checked.append(" ".join(words))
    return checked


@pytest.mark.parametrize("bad", ["", "us east 1", "US-EAST-1", "-us-east-1"])
def test_every_region_option_refuses_what_no_region_is_called_while_parsing(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw addon versions --region ''`` (an unset ``$AWS_REGION``) ended in a traceback ("Invalid
    endpoint: https://eks..amazonaws.com"); ``igw global serve --region 'us east 1'`` served with a
    region its configuration could not name, every cluster taken for a remote one."""
    checked = _refused_by_every(
        "--region", region_name, bad, f"argument --region: {bad!r} is not a region name", capsys
    )
    assert {"addon versions", "addon create", "preflight", "audit", "global serve"} <= set(checked)
    assert region_name("us-gov-west-1") == "us-gov-west-1"


@pytest.mark.parametrize("bad", ["", "  "])
def test_every_listen_host_option_refuses_an_empty_address_while_parsing(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw serve --host ''`` (an unset variable in a script) listened on every interface, silently;
    naming every interface stays allowed (``0.0.0.0``, ``::``)."""
    checked = _refused_by_every(
        "--host",
        listen_host,
        bad,
        "argument --host: an empty address would listen on every interface",
        capsys,
    )
    assert {"serve", "global serve"} <= set(checked)
    assert [listen_host(every) for every in ("0.0.0.0", "::", "127.0.0.1")] == ["0.0.0.0", "::", "127.0.0.1"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_existing_directory_no_file_can_be_created_in_is_refused_while_parsing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``/proc`` exists and is a directory, as a read-only folder is: ``igw bench --out /proc`` ran the
    whole benchmark, then failed writing its reports; ``--records /proc/r.jsonl`` likewise."""
    for words in (
        ["bench", "--out", "/proc"],
        ["sim", "run", "--spec", A_FILE, "--records", "/proc/r.jsonl"],
    ):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(words)
        assert exited.value.code == 2
        assert "cannot write in directory '/proc'" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_path_that_cannot_be_written_names_the_directory_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bare ``strerror`` named no directory at fault: ``--out /proc/x/y`` said "cannot create
    directory '/proc/x/y': No such file or directory" and ``--out /proc`` "cannot write in directory
    '/proc': No such file or directory", both read as a missing ``/proc`` (before session s47)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = "'/proc' exists but takes no new files or directories (No such file or directory)"
    for words, message in (
        (["bench", "--out", "/proc"], f"cannot write in directory '/proc': {proc}"),
        (["demo", "--out", "/proc/x"], f"cannot create directory '/proc/x': {proc}"),
        (
            ["sim", "run", "--spec", A_FILE, "--records", "/proc/x/y/r.jsonl"],
            f"cannot create directory '/proc/x/y': '/proc/x' does not exist and cannot be created: {proc}",
        ),
        (
            ["demo", "--out", str(blocker / "sub" / "x")],
            f"cannot create directory {str(blocker / 'sub' / 'x')!r}: {str(blocker)!r} is a file, "
            "not a directory",
        ),
    ):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(words)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err, words
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_perf_creates_the_folder_of_its_output_files_before_it_measures(tmp_path: Path) -> None:
    """``igw perf gateway --json new/perf.json`` wrote its JSON with a bare open() after minutes of
    measuring: a FileNotFoundError traceback, the results lost."""
    target = tmp_path / "new" / "perf.json"

    def benchmark(args: argparse.Namespace) -> int:
        target.write_text("{}")  # as perf gateway's bare open(args.json, "w") does
        return 0

    args = build_parser().parse_args(["perf", "gateway", "--json", str(target)])
    args._perf_run = benchmark
    assert perf_cli.run(args) == 0
    assert target.read_text() == "{}"


@pytest.mark.parametrize(
    ("words", "needle"),
    [
        (["perf", "des", "--policy", "nope"], "argument --policy: unknown policy 'nope'"),
        (["perf", "des", "--preset", "nope"], "argument --preset: unknown preset 'nope'"),
        (["perf", "workers-des", "--policy", "nope"], "argument --policy: unknown policy 'nope'"),
        (["perf", "workers-des", "--scenarios", "mixed-fleet-8b,nope"], "unknown scenario 'nope'"),
        (["perf", "workers-des", "--shares", "nope"], "argument --shares: not one of"),
        (["perf", "scrape-des", "--policy", "nope"], "argument --policy: unknown policy 'nope'"),
        (["perf", "scrape-des", "--scenarios", "nope"], "argument --scenarios: unknown scenario 'nope'"),
        (["sim", "run", "--spec", A_FILE, "--policy", "nope"], "argument --policy: unknown policy 'nope'"),
        # accepted, then a RuntimeError traceback once the first scenario ran (before session s40)
        (["perf", "workers-des", "--policy", "oracle"], "argument --policy: oracle reads the simulator's"),
        (["perf", "workers-des", "--policy", "oracle-slo"], "argument --policy: oracle-slo reads the"),
        # accepted, then a ValueError traceback (before session s40)
        (["perf", "des", "--policy", "oracle-slo"], "argument --policy: oracle-slo needs a scenario's"),
    ],
)
def test_an_unknown_policy_scenario_or_preset_is_refused_while_parsing(
    words: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw perf des --policy nope`` ended in a ValueError traceback, ``igw perf workers-des
    --scenarios nope`` in a KeyError one (after the scenarios before it had run)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(words)
    assert exited.value.code == 2
    assert needle in capsys.readouterr().err


def test_perf_refuses_a_gateway_tree_python_or_cpu_it_cannot_use_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--gateway-tree typo`` measured the harness's own igw as the other tree's; ``--gateway-python
    /no/python`` and ``--gateway-cpus 999`` ended the run in a traceback once it started processes."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    cases = [
        (["perf", "gateway", "--gateway-tree", str(tmp_path)], "holds no igw package"),
        (["perf", "workers", "--gateway-tree", str(tmp_path)], "holds no igw package"),
        (["perf", "gateway", "--gateway-python", str(tmp_path / "python")], "is not an executable file"),
        (["perf", "gateway", "--gateway-python", str(tmp_path)], "is not an executable file"),
    ]
    if hasattr(os, "sched_getaffinity"):
        cases.append((["perf", "workers", "--gateway-cpus", f"{cpus[-1] + 1000}"], "not available"))
    for words, needle in cases:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(words)
        assert exited.value.code == 2, words
        assert needle in capsys.readouterr().err, words
    parsed = build_parser().parse_args(
        ["perf", "workers", "--gateway-tree", str(SOURCE_ROOT.parent), "--gateway-cpus", str(cpus[0])]
    )
    assert (parsed.gateway_tree, parsed.gateway_cpus) == (SOURCE_ROOT.parent, [cpus[0]])


def test_preflight_refuses_a_ca_bundle_it_cannot_load_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing or non-PEM ``--ca-bundle`` was found by the probes alone: each check said "check could
    not run: FileNotFoundError: [Errno 2] No such file or directory", naming neither file nor option."""
    missing, not_pem = tmp_path / "missing.pem", tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    for given, message in (
        (str(missing), f"cannot read {str(missing)!r}: No such file or directory"),
        (str(tmp_path), f"cannot read {str(tmp_path)!r}: Is a directory"),
        (str(not_pem), f"{str(not_pem)!r} holds no PEM CA certificate"),
        ("", "'' names no file"),
    ):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(["preflight", "--probe", f"--ca-bundle={given}"])
        assert exited.value.code == 2
        assert f"argument --ca-bundle: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "usage", "needle"),
    [
        (
            ["serve", "--config", "c.yaml", "--endpoints", A_FILE, "--prot", "1"],
            "usage: igw serve ",
            "igw serve: error: unrecognized arguments: --prot 1 (did you mean --port?)",
        ),
        (
            ["sim", "fleet", "--spec", A_FILE, "--jsno"],
            "usage: igw sim fleet ",
            "igw sim fleet: error: unrecognized arguments: --jsno (did you mean --json?)",
        ),
        (
            ["addon", "update", "--cluster", "c", "--verison=2"],
            "usage: igw addon update ",
            "igw addon update: error: unrecognized arguments: --verison=2 (did you mean --version?)",
        ),
        (
            ["validate", "x.yaml", "--zzz"],
            "usage: igw validate ",
            "igw validate: error: unrecognized arguments: --zzz\n",
        ),
    ],
)
def test_an_unknown_option_is_reported_by_the_command_it_was_given_to(
    words: list[str], usage: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw serve ... --prot 1`` printed ``usage: igw [-h] [--version] COMMAND ...`` and
    ``igw: error: unrecognized arguments``: argparse leaves a sub-command's unknown option to the
    top-level parser, so the newcomer saw neither the command's usage nor the option they meant."""
    with pytest.raises(SystemExit) as exited:
        main(words)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert needle in err, err
    assert "usage: igw [-h]" not in err


def test_no_parser_accepts_an_abbreviated_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``igw serve --endpoint FILE`` was taken for ``--endpoints``: a script relying on an abbreviation
    broke (or hit another option) once a new option shared the prefix. Every parser, sub-commands and
    the ``python -m igw.cli.*_process`` entry points included, refuses them."""
    assert all(not parser.allow_abbrev for parser in _parsers(build_parser()))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", "c.yaml", "--in-cluster", "--endpoint", "e.yaml"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --endpoint e.yaml (did you mean --endpoints?)" in capsys.readouterr().err
    for path in python_files(CLI_PACKAGE):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser":
                keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
                # serve.worker_argv's parser only lists option names, it parses nothing
                if path.name != "serve.py":
                    assert keywords.get("allow_abbrev") == "False", f"{path.name}:{node.lineno}"


_DESCRIBED_DEFAULTS = frozenset({"all three", "not pinned", "48,000 / size, >= 300"})
"""``(default ...)`` claims that describe a computed default in words rather than state a value."""


def _shown(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_shown(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def test_every_default_a_help_text_states_is_the_parsers_default() -> None:
    """``--help`` promising one default while the parser holds another misleads silently: the help
    text's ``(default X`` (up to ``:``, ``;`` or ``)``) must be the option's default as shown."""
    import re

    checked = 0
    for words, action in _options(build_parser()):
        match = re.search(r"\(default:? ([^;)]+)", action.help or "")
        if match is None or action.default is None or isinstance(action.default, bool):
            continue
        claimed = match.group(1).split(": ", 1)[0].strip()
        if claimed in _DESCRIBED_DEFAULTS:
            continue
        if claimed.replace(".", "", 1).isdigit():
            assert float(claimed) == float(_shown(action.default)), (words, action.option_strings, claimed)
        else:
            assert claimed == _shown(action.default), (words, action.option_strings, claimed)
        checked += 1
    assert checked > 50, checked


def test_every_option_with_a_default_states_it_in_its_help() -> None:
    """A newcomer reads ``--help`` to learn what a bare command does: ``igw perf des --help`` gave
    ``--requests`` and ``--pods`` no text at all (100,000 requests on 64 pods), ``igw operator``
    hid the image its gateway pods run, ``igw perf workers-des --duration-scale`` ("multiply scenario
    durations") did not say it halves them, ``igw sim run`` named none of its defaults (before session
    s40). Every option holding a value when not given says so as ``(default X``, which the test
    above then holds to the parser's default."""
    silent = [
        f"igw {' '.join(words)} {action.option_strings[0]} (default {_shown(action.default)})"
        for words, action in _options(build_parser())
        if action.default is not None
        and not isinstance(action.default, bool)
        and action.default not in ([], ())
        and action.help is not argparse.SUPPRESS
        and "default" not in (action.help or "")
    ]
    assert_none(silent, "options whose --help does not state their default")


def test_bench_seeds_help_names_the_one_seed_quick_tune_and_random_use() -> None:
    """``igw bench --help`` said ``--seeds (default 1,2,3)``; ``--quick``, ``--tune`` and ``random`` run
    seed 1 alone when none is given."""
    (seeds,) = [
        a for words, a in _options(build_parser()) if words == ["bench"] and "--seeds" in a.option_strings
    ]
    assert "1 with --quick, --tune and random" in (seeds.help or "")


def test_every_command_says_what_it_does_in_its_own_help() -> None:
    """``igw sim fleet --help`` and the ``igw addon`` actions' help showed usage and options only:
    what the command does was in the parent's list alone (session s43). Every (sub-)command parser
    now has a description, which ``igw ... --help`` prints under its usage."""
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    if not child.description:
                        missing.append(f"{path} {name}")
                    walk(child, f"{path} {name}")

    walk(build_parser(), "igw")
    assert_none(missing, "commands whose --help does not say what they do")


_SERVER_LIMIT = (
    "checked by the command against spec.extensions.serverLimits's bounds, the one source of truth"
)
_UNPROBED = "not yet probed for 0, 1e-300 and 1e300 (listed in session s49): bound it once it is"
UNBOUNDED_FLOAT_OPTIONS: dict[str, str] = {
    "serve --header-timeout": _SERVER_LIMIT,
    "serve --body-timeout": _SERVER_LIMIT,
    "serve --send-timeout": _SERVER_LIMIT,
    "serve --keepalive-timeout": _SERVER_LIMIT,
    "serve --drain-seconds": _SERVER_LIMIT,
    "serve --stream-grace-seconds": _SERVER_LIMIT,
    "sim fleet --duration": "probed in session s50: 1e-300 stops at once, 1e300 runs until signalled, as "
    "without --duration; both are what was asked",
}
"""Float options without an upper bound, each with why. Every other float option has both ends:
``--cv``, ``--trace-speedup``, ``igw perf scrape --interval`` and ``--stale-threshold`` were
``POSITIVE`` until session s49, and their extremes ran to results no value of theirs means (every
``--cv`` from 100 to 1e100 the same run), a 300-digit load in a report, or tracebacks."""


def unbounded_options(parser: argparse.ArgumentParser, number: type) -> list[str]:
    """``igw <words> <option>`` of every ``number`` (``int`` or ``float``) option whose range has no
    maximum."""
    found = []
    for words, action in _options(parser):
        kind = action.type
        if isinstance(kind, NumberList):
            kind = kind.item
        elif isinstance(kind, NumberOrWord):
            kind = kind.number
        if isinstance(kind, NumberRange) and kind.kind is number and kind.maximum is None:
            found.append(" ".join([*words, action.option_strings[-1]]))
    return found


def unbounded_float_options(parser: argparse.ArgumentParser) -> list[str]:
    """``igw <words> <option>`` of every float option whose range has no maximum."""
    return unbounded_options(parser, float)


_UNPROBED_INT = "not yet probed for 0, -1, 2**63 and 10**30 (listed in session s50): bound it once it is"
UNBOUNDED_INT_OPTIONS: dict[str, str] = {
    "serve --debug-decisions": _UNPROBED_INT,
    "serve --max-connections": _SERVER_LIMIT,
    "serve --max-headers": _SERVER_LIMIT,
    "serve --max-header-bytes": _SERVER_LIMIT,
    "serve --max-body-bytes-held": _SERVER_LIMIT,
    "sim run --seed": _UNPROBED_INT,
    "sim run --max-retries": _UNPROBED_INT,
    "bench --seeds": _UNPROBED_INT,
    "bench --live-requests": _UNPROBED_INT,
    "bench --count": _UNPROBED_INT,
    "bench --seed": _UNPROBED_INT,
    "bench --draws": _UNPROBED_INT,
    "demo --requests": _UNPROBED_INT,
    "audit --cert-warn-days": _UNPROBED_INT,
    "perf gateway --requests": _UNPROBED_INT,
    "perf gateway --rounds": _UNPROBED_INT,
    "perf gateway --stream-requests": _UNPROBED_INT,
    "perf auth --iterations": _UNPROBED_INT,
    "perf auth --repeats": _UNPROBED_INT,
    "perf des --seed": _UNPROBED_INT,
    "perf checks --configs": _UNPROBED_INT,
    "perf checks --schedulers": _UNPROBED_INT,
    "perf checks --repeat": _UNPROBED_INT,
    "perf soak --seed": _UNPROBED_INT,
    "perf scrape --pods": _UNPROBED_INT,
    "perf scrape --parse-iterations": _UNPROBED_INT,
    "perf scrape --page-variants": _UNPROBED_INT,
    "perf scrape --groups": _UNPROBED_INT,
    "perf workers --requests": _UNPROBED_INT,
    "perf workers --concurrency": _UNPROBED_INT,
    "perf workers --rounds": _UNPROBED_INT,
    "perf workers --seconds": _UNPROBED_INT,
    "perf workers-des --workers": _UNPROBED_INT,
    "perf workers-des --seeds": _UNPROBED_INT,
    "perf workers-notes --picks": _UNPROBED_INT,
    "perf workers-notes --rounds": _UNPROBED_INT,
    "perf workers-notes --batch": _UNPROBED_INT,
    "perf scrape-des --seeds": _UNPROBED_INT,
    "perf decide --endpoints": _UNPROBED_INT,
    "perf decide --picks": _UNPROBED_INT,
    "perf decide --runs": _UNPROBED_INT,
    "perf decide --profile": _UNPROBED_INT,
    "perf compiled --pairs": _UNPROBED_INT,
    "perf compiled --requests": _UNPROBED_INT,
    "perf compiled --rounds": _UNPROBED_INT,
    "perf compiled --stream-requests": _UNPROBED_INT,
    "perf metrics-page --endpoints": _UNPROBED_INT,
    "perf metrics-page --pools": _UNPROBED_INT,
    "perf metrics-page --models": _UNPROBED_INT,
    "perf metrics-page --scrapes": _UNPROBED_INT,
    "perf metrics-page --clusters": _UNPROBED_INT,
    "perf metrics-page --regions": _UNPROBED_INT,
    "perf metrics-page --router-models": _UNPROBED_INT,
    "top --screenshot-after": _UNPROBED_INT,
}
"""Integer options without an upper bound, each with why, as :data:`UNBOUNDED_FLOAT_OPTIONS` for
floats: ``--port`` (0 to 65535), ``--workers`` (1 to 64), ``--requests`` of the simulator (up to a
million) and ``igw top --decisions`` (0 to 50) have both ends."""


def unbounded_int_options(parser: argparse.ArgumentParser) -> list[str]:
    """``igw <words> <option>`` of every integer option whose range has no maximum."""
    return unbounded_options(parser, int)


@pytest.mark.parametrize(
    ("number", "allowed"),
    [(float, UNBOUNDED_FLOAT_OPTIONS), (int, UNBOUNDED_INT_OPTIONS)],
    ids=["float", "int"],
)
def test_every_number_option_is_bounded_or_says_why_not(number: type, allowed: dict[str, str]) -> None:
    found = unbounded_options(build_parser(), number)
    assert_none(
        [name for name in found if name not in allowed], f"{number.__name__} options without a maximum"
    )
    assert_none([name for name in allowed if name not in found], "allow-listed options now bounded")


def test_the_check_sees_an_unbounded_int_option() -> None:
    parser = build_parser()
    sim = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["sim"]
    run = next(a for a in sim._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    run.add_argument("--planted", type=NumberList(NumberRange(int, 1)))
    assert "sim run --planted" in unbounded_int_options(parser)
    assert "serve --port" not in unbounded_int_options(parser)


@pytest.mark.parametrize(
    "argv", [["perf", "gateway", "--workers", "65"], ["perf", "workers", "--workers", "1,65"]]
)
def test_perf_refuses_a_worker_count_igw_serve_refuses_while_parsing(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw perf gateway --workers 65`` started an ``igw serve --workers 65``, which refused it: a
    RuntimeError traceback (exit 1) naming serve's option."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert "argument --workers: expected" in capsys.readouterr().err


def test_the_check_sees_an_unbounded_float_option() -> None:
    parser = build_parser()
    sim = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["sim"]
    run = next(a for a in sim._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    run.add_argument("--planted", type=NumberRange(float, 0.0, exclusive_minimum=True))
    assert "sim run --planted" in unbounded_float_options(parser)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["sim", "run", "--spec", A_FILE, "--cv", "100"], "--cv"),
        (["sim", "run", "--spec", A_FILE, "--cv", "1e-300"], "--cv"),
        (["bench", "--trace", A_FILE, "--trace-speedup", "1e300"], "--trace-speedup"),
        (["bench", "--trace", A_FILE, "--trace-speedup", "1e-9"], "--trace-speedup"),
        (["perf", "scrape", "--interval", "1e300"], "--interval"),
        (["perf", "scrape", "--interval", "1e-300"], "--interval"),
        (["perf", "scrape", "--stale-threshold", "1e300"], "--stale-threshold"),
        (["perf", "scrape-des", "--stale-threshold", "1e-300"], "--stale-threshold"),
        (["sim", "fleet", "--spec", A_FILE, "--time-scale", "1e300"], "--time-scale"),
        (["sim", "fleet", "--spec", A_FILE, "--time-scale", "1e-300"], "--time-scale"),
        (["perf", "soak", "--time-scale", "1e300"], "--time-scale"),
        (["perf", "soak", "--minutes", "1e-300"], "--minutes"),
        (["perf", "soak", "--minutes", "1e300"], "--minutes"),
        (["perf", "soak", "--overload-minutes", "0"], "--overload-minutes"),
        (["perf", "des", "--load", "1e-300"], "--load"),
        (["perf", "des", "--load", "1e300"], "--load"),
        (["perf", "des", "--target-s", "1e-300"], "--target-s"),
        (["perf", "des", "--target-s", "1e300"], "--target-s"),
        # igw top never refreshed, and with --screenshot ran until killed (SIGINT did not stop it)
        (["top", "http://127.0.0.1:1", "--interval", "1e300"], "--interval"),
        (["top", "http://127.0.0.1:1", "--screenshot-wait", "1e300"], "--screenshot-wait"),
        (["preflight", "--probe", "--probe-timeout", "1e-300"], "--probe-timeout"),
        (["preflight", "--probe", "--probe-timeout", "1e300"], "--probe-timeout"),
        (["operator", "--resync-seconds", "1e-300"], "--resync-seconds"),
        (["operator", "--resync-seconds", "1e300"], "--resync-seconds"),
        (["operator", "--tls-sweep-seconds", "1e-300"], "--tls-sweep-seconds"),
        (["operator", "--tls-sweep-seconds", "1e300"], "--tls-sweep-seconds"),
        (["addon", "create", "--cluster", "c", "--timeout", "1e-300"], "--timeout"),
        (["addon", "update", "--cluster", "c", "--timeout", "1e300"], "--timeout"),
        (["addon", "delete", "--cluster", "c", "--timeout", "1e-300"], "--timeout"),
        (["top", "http://127.0.0.1:1", "--decisions", "51"], "--decisions"),
        # 0 is off; a tiny positive value wrote EMF back to back / stopped a healthy worker group (exit 3)
        (["serve", "--config", A_FILE, "--endpoints", A_FILE, "--emf-interval", "1e-300"], "--emf-interval"),
        (["serve", "--config", A_FILE, "--endpoints", A_FILE, "--emf-interval", "1e300"], "--emf-interval"),
        (
            ["serve", "--config", A_FILE, "--endpoints", A_FILE, "--worker-timeout", "1e-300"],
            "--worker-timeout",
        ),
        (["serve", "--config", A_FILE, "--endpoints", A_FILE, "--worker-timeout", "1"], "--worker-timeout"),
        (
            ["serve", "--config", A_FILE, "--endpoints", A_FILE, "--worker-timeout", "1e300"],
            "--worker-timeout",
        ),
        (["global", "serve", "--config", A_FILE, "--emf-interval", "1e-300"], "--emf-interval"),
        (["operator", "--gateway-worker-timeout", "1e-300"], "--gateway-worker-timeout"),
        (["operator", "--gateway-emf-interval", "3601"], "--gateway-emf-interval"),
        # no scrape fits in 1e-300 s: "no scrape succeeded" (exit 1) after the warm-up
        (["perf", "scrape", "--seconds", "1e-300"], "--seconds"),
        (["perf", "scrape", "--seconds", "1e300"], "--seconds"),
        # 1e300: no note ever exchanged, so the "picks" rows were the unshared ones, exit 0
        (["perf", "workers-des", "--note-interval", "1e300"], "--note-interval"),
        (["perf", "workers-des", "--note-interval", "1e-300"], "--note-interval"),
        # built pods until killed
        (["perf", "des", "--pods", str(10**30)], "--pods"),
        (["perf", "checks", "--pods", str(10**30)], "--pods"),
        # a capacity of 0 from no answer in time: a ZeroDivisionError traceback in the steady phase
        (["perf", "soak", "--calibrate-seconds", "1e-300"], "--calibrate-seconds"),
        (["perf", "soak", "--settle-seconds", "1e300"], "--settle-seconds"),
        # drained for ever after SIGTERM, further signals ignored: only SIGKILL ended it
        (["global", "serve", "--config", A_FILE, "--drain-seconds", "1e300"], "--drain-seconds"),
        # refused only by the 24 h plan check, which named --live-rate and --live-requests, not --drain
        (["bench", "--mode", "live", "--drain", "1e300"], "--drain"),
        # built pod names until killed, Ctrl-C ignored
        (["perf", "soak", "--pods", str(10**30)], "--pods"),
        (["perf", "soak", "--concurrency", str(10**30)], "--concurrency"),
    ],
)
def test_extreme_rates_and_intervals_are_refused_while_parsing_with_a_reason(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"argument {option}: expected " in err, err
    assert " from " in err, err
    assert "(" in err.rsplit("got", 1)[1], f"the refusal gives the bound's reason: {err}"


def test_workers_des_without_one_worker_is_refused_before_running(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``igw perf workers-des --workers 2`` simulated every count, then ended in a KeyError traceback:
    each row's "p99 vs 1" divides by the one-worker run."""
    args = build_parser().parse_args(["perf", "workers-des", "--workers", "2,4"])
    monkeypatch.setattr(args, "_perf_run", lambda _: pytest.fail("ran the benchmark"))
    assert perf_cli.run(args) == 2
    assert "--workers must include 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "interval"),
    [
        (["perf", "scrape", "--interval", "0.05", "--stale-threshold", "0.05"], "--interval 0.05 s"),
        (["perf", "scrape-des", "--stale-threshold", "0.01"], "--scrape-interval 0.05 s"),
    ],
)
def test_a_stale_threshold_not_above_the_scrape_interval_is_refused_before_running(
    argv: list[str], interval: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scrape`` ended in a SchedulerConfigError traceback, ``scrape-des`` ran and exited 0."""
    args = build_parser().parse_args(argv)
    monkeypatch.setattr(args, "_perf_run", lambda _: pytest.fail("ran the benchmark"))
    assert perf_cli.run(args) == 2
    assert f"must be longer than {interval}" in capsys.readouterr().err


def test_demo_refuses_a_drain_past_an_hour_while_parsing(capsys: pytest.CaptureFixture[str]) -> None:
    """``igw demo --drain 1e300`` was refused only by the 24 h plan check, with a plan of 300-digit
    hours and the advice to raise ``--rate`` or lower ``--requests``; ``--drain 45`` (the docs') runs."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["demo", "--drain", "1e300"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --drain: expected a number > 0.0 and <= 3600.0, got '1e300' (wall seconds" in err, err
    assert build_parser().parse_args(["demo", "--drain", "45"]).drain == 45.0


def test_perf_scrape_refuses_a_measurement_shorter_than_one_interval_before_running(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--seconds 0.5 --interval 2`` warmed every fleet up, then ended "no scrape of the 2-pod fleet
    succeeded" (exit 1); a measurement of exactly one interval still runs."""
    argv = ["perf", "scrape", "--interval", "2", "--stale-threshold", "3"]
    args = build_parser().parse_args([*argv, "--seconds", "0.5"])
    monkeypatch.setattr(args, "_perf_run", lambda _: pytest.fail("ran the benchmark"))
    assert perf_cli.run(args) == 2
    assert "--seconds 0.5 s must be at least --interval 2 s" in capsys.readouterr().err
    args = build_parser().parse_args([*argv, "--seconds", "2"])
    monkeypatch.setattr(args, "_perf_run", lambda _: 0)
    assert perf_cli.run(args) == 0


@pytest.mark.parametrize("scale", [MIN_FLEET_TIME_SCALE, MAX_FLEET_TIME_SCALE])
def test_the_time_scale_options_take_what_a_fleet_spec_takes(scale: float) -> None:
    """``--time-scale`` of ``sim fleet`` and ``perf soak`` ends up as a spec's ``time_scale``: its
    ends are the spec's, so no value the option takes is refused afterwards."""
    from igw.sim.spec import FleetSpec, SpecError

    pods = [{"name": "p", "preset": "llama-3.1-8b/h100"}]
    assert FleetSpec.from_mapping({"time_scale": scale, "pods": pods}).time_scale == scale
    for beyond in (scale / 2, scale * 2):
        if not FLEET_TIME_SCALE.contains(beyond):
            with pytest.raises(SpecError):
                FleetSpec.from_mapping({"time_scale": beyond, "pods": pods})


def test_perf_scrapes_config_takes_the_longest_interval_and_threshold_allowed() -> None:
    """``f"{ms}ms"`` wrote ``600000ms`` for the 600 s the option takes: six digits, which no
    Gateway API duration has (up to five per unit)."""
    from igw.perf.scrape_setup import config_doc
    from igw.scheduling.settings import RoutingSettings

    doc = config_doc(600.0, 3600.0)
    routing = doc["spec"]["extensions"]["routing"]  # type: ignore[index]
    settings = RoutingSettings.from_extension(routing)
    assert (settings.scrape_interval_s, settings.stale_threshold_s) == (600.0, 3600.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--config", A_FILE, "--endpoints", A_FILE, "--emf-interval", "0", "--worker-timeout", "0"],
        [
            "serve",
            "--config",
            A_FILE,
            "--endpoints",
            A_FILE,
            "--emf-interval",
            "0.2",
            "--worker-timeout",
            "2",
        ],
        ["global", "serve", "--config", A_FILE, "--emf-interval", "0.01"],
        ["operator", "--gateway-worker-timeout", "0", "--gateway-emf-interval", "0"],
        ["operator", "--gateway-worker-timeout", "3600", "--gateway-emf-interval", "1"],
    ],
)
def test_zero_still_switches_an_interval_or_timeout_off(argv: list[str]) -> None:
    """The "0 (off) or at least N" options take 0 and the least value the tests run with."""
    build_parser().parse_args(argv)
