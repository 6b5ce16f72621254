"""All command-line parsing lives in :mod:`igw.cli`: no other package builds or runs an argparse parser.

Product and tooling packages take typed arguments; the ``igw`` sub-commands and the ``python -m``
process entry points in ``igw.cli`` turn command lines into those arguments. (An
``argparse.Namespace`` type annotation elsewhere is allowed: it parses nothing.)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from igw.cli.main import build_parser
from igw.config.paths import REPO_ROOT
from tests.architecture.support import SOURCE_ROOT, assert_none, offenders, python_files, sample

CLI_PACKAGE = SOURCE_ROOT / "cli"
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
