"""Every ``igw`` example anywhere in README.md and docs/*.md, inline or in a fenced block, is parsed by
the real ``igw`` parser: a command, sub-command, option, option value (choices, numbers, names) or
bench scenario that does not exist fails here. A synopsis (``igw serve --endpoint FILE``,
``[--region R]``) is not parsed, but each ``--option`` it names must be one its command takes.

:mod:`tests.architecture.test_readme_guide` checks only the Commands table, only ``--long`` options,
and passes over an example whose command words name no command (``igw perf gatway``); the examples
in the rest of the README (the results section, the walk-through against the simulated fleet) were
checked by nothing. The options that must name an existing file or folder take any value here: the
README says ``igwc.yaml``, ``./deploy``, ``cdk.out`` and the like are the reader's to provide; so
do the CPU lists (``--gateway-cpus 0,1,2,3``), which this machine may not have.

Until session s48 only README.md was read: the docs' examples (about 500) were checked by nothing,
a synopsis's options were not looked up, ``a/b`` alternatives (``igw addon create/update``,
``--trace/--fleet/--summarize``) were refused whole and ``.venv/bin/igw ...`` lines not read.
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
from igw.cli.arg_types import NON_NEGATIVE_INT, NumberList
from igw.cli.main import build_parser
from igw.config.paths import REPO_ROOT
from tests.architecture.support import assert_none

_README = REPO_ROOT / "README.md"
_DOCS = [_README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
_SPAN = re.compile(r"`(?:\.venv/bin/)?(igw [^`]+)`")
_ALTERNATIVES = re.compile(r"^(--)?[a-z][a-z0-9-]*(/(--)?[a-z][a-z0-9-]*)+$")
"""``create/update``, ``--trace/--fleet``: one example per alternative (no dots, so not a path)."""
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_PLACEHOLDER = re.compile(r"(^|[\s=,])([A-Z][A-Z0-9_]*|\.\.\.|…)($|[\s,])|[\[\]<>|]")
"""A synopsis rather than a command line: ``igw serve --workers N``, ``[--json]``, ``2|3``."""
_REFUSED_ON_PURPOSE = frozenset(
    {
        'igw validate ""',
        'igw serve --config ""',
        "igw serve --host ''",
        "igw perf des --policy nope",
        "igw addon create --role-arn notanarn",
        "igw serve --endpoint FILE",
    }
)
"""Examples the README and docs give of what the parser refuses (an empty path, a wrong value, an
abbreviated option)."""

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
_MACHINE_CHECKS: dict[Callable[[str], Any], Callable[[str], Any]] = {perf._cpus: NumberList(NON_NEGATIVE_INT)}
"""Checks whose answer depends on this machine, and the same check without that part."""


def examples(text: str) -> list[str]:
    """Each distinct ``igw ...`` command line of a Markdown ``text``: inline-code spans (joined
    across line breaks) and the lines of fenced blocks that start with ``igw `` or ``.venv/bin/igw ``
    (up to a shell ``#`` comment, ``&`` or redirection)."""
    found = [" ".join(span.split()) for span in _SPAN.findall(text)]
    for block in text.split("```")[1::2]:
        for line in block.splitlines():
            line = line.strip().removeprefix(".venv/bin/")
            if line.startswith("igw "):
                found.append(re.split(r"\s+(?:#|&|>|2>)", line)[0])
    return list(dict.fromkeys(found))


def _accept_any_path(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (and its sub-parsers) with every file-existence check replaced by ``str``."""
    for action in parser._actions:
        if action.type in _FILE_CHECKS:
            action.type = str
        elif action.type in _MACHINE_CHECKS:
            action.type = _MACHINE_CHECKS[action.type]
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


def _is_message(word: str) -> bool:
    """A word that ends a command's name in a message quoted in prose (``igw bench global: ...``,
    ``igw preflight: error: ...``), not a value such as ``::``."""
    return word.endswith(":") and any(char.isalpha() for char in word)


def _options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option of ``parser`` and, where it has sub-commands, of any command below it."""
    found = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options_of(child)
    return found


def _unknown_option(words: list[str]) -> str | None:
    """The first ``--option`` a synopsis names that its command (as far as its words name one)
    does not take, as an error line, or ``None``."""
    parser, command = build_parser(), ["igw"]
    for word in words:
        children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not children or word not in children[0].choices:
            break
        parser = children[0].choices[word]
        command.append(word)
    known = _options_of(parser)
    for word in words[len(command) - 1 :]:
        for option in _OPTION.findall(word):
            if option not in known:
                return f"{' '.join(command)}: no option {option}"
    return None


def _parse_problem(words: list[str]) -> str | None:
    """Why the real parser refuses the command line ``igw WORDS``, or ``None``."""
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


def _variants(words: list[str]) -> list[list[str]]:
    """``words`` with each ``a/b`` alternative (``create/update``, ``--trace/--fleet``) spelt out."""
    for index, word in enumerate(words):
        if _ALTERNATIVES.match(word):
            return [
                variant
                for choice in word.split("/")
                for variant in _variants([*words[:index], choice, *words[index + 1 :]])
            ]
    return [words]


def problem(example: str) -> str | None:
    """Why the real parser refuses ``example`` (its error line), or ``None``. Error messages quoted
    in prose (``igw serve: cannot listen ...``) and fragments are not examples; a synopsis
    (``igw serve --workers N``, ``[--json]``, ``2|3``) is not parsed, only its options looked up."""
    try:
        words = shlex.split(example)[1:]
    except ValueError:  # an unbalanced quote: not a command line
        return None
    if not words or any(_is_message(word) for word in words):
        return None
    if _PLACEHOLDER.search(example):
        return _unknown_option(words)
    return next(filter(None, map(_parse_problem, _variants(words))), None)


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
    assert set(found_examples) >= {'igw validate ""', 'igw serve --config ""'}


def test_every_docs_example_parses_with_the_real_parser() -> None:
    found = {path.name: refused(path.read_text()) for path in _DOCS[1:]}
    assert len(found) > 10, "the docs must be found"
    lines = [f"docs/{name}: {line}" for name, refused_lines in found.items() for line in refused_lines]
    assert_none(lines, "docs examples the igw parser refuses")
    every_example = {example for path in _DOCS for example in examples(path.read_text())}
    assert every_example >= _REFUSED_ON_PURPOSE, "an example refused on purpose is no longer in the docs"
    assert all(problem(example) for example in _REFUSED_ON_PURPOSE), "the docs say these are refused"


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


def test_the_check_reads_alternatives_synopses_and_venv_lines() -> None:
    text = (
        "`igw addon create/updte --cluster c` · `igw bench --trace/--flet` · `igw sim fleet/run --spec`\n"
        "`igw global serve --config G [--regoin us-west-2] [--port 8080]` · `igw addon … --regon ''`\n"
        "```\n.venv/bin/igw demo --operater   # from a checkout\n```\n"
        "`igw perf workers --workers 1,2 --gateway-cpus 0,1,2,3,999` · `igw bench global: interrupted`\n"
        "`igw operator --gateway-emf-interval/--gateway-emf-endpoint` · `igw serve --workers 2|3`"
    )
    found = refused(text)
    assert [line.split("`")[1] for line in found] == [
        "igw addon create/updte --cluster c",
        "igw bench --trace/--flet",
        "igw global serve --config G [--regoin us-west-2] [--port 8080]",
        "igw addon … --regon ''",
        "igw demo --operater",
    ], found
    assert "invalid choice: 'updte'" in found[0]
    assert "unrecognized arguments: --flet" in found[1]
    assert found[2].endswith("igw global serve: no option --regoin")
    assert found[3].endswith("igw addon: no option --regon")
