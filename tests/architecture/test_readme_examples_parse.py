"""Every ``igw`` example anywhere in README.md, inline or in a fenced block, is parsed by the real
``igw`` parser: a command, sub-command, option, option value (choices, numbers, names) or bench
scenario that does not exist fails here.

:mod:`tests.architecture.test_readme_guide` checks only the Commands table, only ``--long`` options,
and passes over an example whose command words name no command (``igw perf gatway``); the examples
in the rest of the README (the results section, the walk-through against the simulated fleet) were
checked by nothing. The options that must name an existing file or folder take any value here: the
README says ``igwc.yaml``, ``./deploy``, ``cdk.out`` and the like are the reader's to provide.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Callable
from typing import Any

from igw.bench.scenarios import GROUPS, RUN_ALONE, SCENARIOS
from igw.cli import arg_types, perf
from igw.cli.main import build_parser
from igw.config.paths import REPO_ROOT
from tests.architecture.support import assert_none

_README = REPO_ROOT / "README.md"
_SPAN = re.compile(r"`(igw [^`]+)`")
_PLACEHOLDER = re.compile(r"(^|[\s=,])([A-Z][A-Z0-9_]*|\.\.\.|…)($|[\s,])|[\[\]<>|]")
"""A synopsis rather than a command line: ``igw serve --workers N``, ``[--json]``, ``2|3``."""
_REFUSED_ON_PURPOSE = frozenset({'igw validate ""', 'igw serve --config ""'})
"""Examples the README gives of what the parser refuses (an empty path)."""

_FILE_CHECKS: frozenset[Callable[[str], Any]] = frozenset(
    {
        arg_types.existing_path,
        arg_types.existing_file,
        arg_types.existing_directory,
        arg_types.existing_file_or_stdin,
        arg_types.ca_bundle,
        perf._igw_tree,
        perf._python_executable,
    }
)


def examples(text: str) -> list[str]:
    """Each distinct ``igw ...`` command line of a Markdown ``text``: inline-code spans (joined
    across line breaks) and the lines of fenced blocks that start with ``igw `` (up to a shell
    ``#`` comment, ``&`` or redirection)."""
    found = [" ".join(span.split()) for span in _SPAN.findall(text)]
    for block in text.split("```")[1::2]:
        for line in block.splitlines():
            if line.strip().startswith("igw "):
                found.append(re.split(r"\s+(?:#|&|>|2>)", line.strip())[0])
    return list(dict.fromkeys(found))


def _accept_any_path(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (and its sub-parsers) with every file-existence check replaced by ``str``."""
    for action in parser._actions:
        if action.type in _FILE_CHECKS:
            action.type = str
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _accept_any_path(child)
    return parser


def _is_fragment(words: list[str], message: str) -> bool:
    """An example that names a command or option in prose rather than running it: ``igw serve``
    (required options left out), ``igw serve --workers`` (the option named, its value not)."""
    if "the following arguments are required" in message:
        return True
    return "expected one argument" in message and bool(words) and words[-1].startswith("-")


def problem(example: str) -> str | None:
    """Why the real parser refuses ``example`` (its error line), or ``None``. Synopses, error
    messages quoted in prose (``igw serve: cannot listen ...``) and fragments are not examples."""
    if _PLACEHOLDER.search(example):
        return None
    try:
        words = shlex.split(example)[1:]
    except ValueError:  # an unbalanced quote: not a command line
        return None
    if not words or words[0].endswith(":"):
        return None
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            args = _accept_any_path(build_parser()).parse_args(words)
    except SystemExit as exit_:
        message = errors.getvalue().strip().splitlines()[-1:] or [""]
        if exit_.code in (0, None) or _is_fragment(words, message[0]):
            return None
        return message[0]
    if args.command == "bench":
        known = {*SCENARIOS, *GROUPS, *RUN_ALONE}
        unknown = [name for name in args.scenarios if name not in known]
        if unknown:
            return f"igw bench: unknown scenario {unknown[0]!r}"
    return None


def refused(text: str) -> list[str]:
    """``igw ...: error`` for each example of ``text`` that the parser refuses."""
    return [
        f"`{example}`: {message}"
        for example in examples(text)
        if example not in _REFUSED_ON_PURPOSE and (message := problem(example))
    ]


def test_every_readme_example_parses_with_the_real_parser() -> None:
    found_examples = examples(_README.read_text())
    assert len(found_examples) > 80, "the README's examples must be found"
    assert_none(refused(_README.read_text()), "README examples the igw parser refuses")
    assert set(found_examples) >= _REFUSED_ON_PURPOSE
    assert all(problem(example) for example in _REFUSED_ON_PURPOSE), "the README says these are refused"


def test_the_check_finds_a_wrong_command_option_value_or_scenario() -> None:
    text = (
        "`igw perf gatway` · `igw perf scrape --pods 1000 --second 10` · `igw audit -o sariff`\n"
        "```bash\nigw sim run --spec x.yaml --policy gateway   # a comment\n"
        "igw bench mixd-fleet-8b --seeds 1,2,3\n```\n"
        "`igw serve --config igwc.yaml --endpoints endpoints.yaml --port 8080` · `igw serve --workers N`"
        " · `igw serve: cannot listen on HOST:PORT` · `igw preflight --ca-bundle` · `igw serve`"
    )
    found = refused(text)
    assert [line.split("`")[1] for line in found] == [
        "igw perf gatway",
        "igw perf scrape --pods 1000 --second 10",
        "igw audit -o sariff",
        "igw sim run --spec x.yaml --policy gateway",
        "igw bench mixd-fleet-8b --seeds 1,2,3",
    ], found
    assert "invalid choice: 'gatway'" in found[0]
    assert "unrecognized arguments: --second 10" in found[1]
    assert "unknown scenario 'mixd-fleet-8b'" in found[4]
