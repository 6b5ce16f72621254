"""README.md is the newcomer's guide: every ``igw`` command has an example in its Commands section,
every option an example there shows is one the command accepts, every page under docs/ is listed in
its Documentation table, and its layer picture (and docs/architecture.md's) names every package the
import contracts place.

Before session s44 ``igw addon delete`` had no example, docs/flow-control.md was missing from the
Documentation table, and both layer pictures left out ``top``, ``compiled`` and ``redaction``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib

from igw.cli.main import build_parser
from igw.config.paths import REPO_ROOT
from tests.architecture.support import assert_none

_README = REPO_ROOT / "README.md"
_SPAN = re.compile(r"`(igw [^`]+)`")
_WORD = re.compile(r"[A-Za-z_]+")


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown ``text`` (up to the next ``## ``)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """Every runnable ``igw`` command (one with no sub-commands) as its words, with its options."""
    found: dict[tuple[str, ...], set[str]] = {}
    children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in children:
        for name, child in action.choices.items():
            found.update(commands(child, (*words, name)))
    if not children:
        found[words] = {option for action in parser._actions for option in action.option_strings}
    return found


def _examples(text: str) -> list[list[str]]:
    """The words of every inline-code ``igw ...`` example in ``text``, without the leading ``igw``."""
    found = []
    for span in _SPAN.findall(text):
        try:
            found.append(shlex.split(span)[1:])
        except ValueError:  # an unbalanced quote: not a command line
            continue
    return found


def missing_examples(text: str, known: dict[tuple[str, ...], set[str]]) -> list[str]:
    """``igw WORDS`` for each command of ``known`` that no example in ``text`` runs."""
    shown = {tuple(words[: len(command)]) for words in _examples(text) for command in known}
    return [f"igw {' '.join(command)}" for command in sorted(known) if command not in shown]


def unknown_options(text: str, known: dict[tuple[str, ...], set[str]]) -> list[str]:
    """``igw WORDS: --flag`` for each option an example in ``text`` gives a command that lacks it."""
    found = []
    for words in _examples(text):
        command = next((c for c in known if tuple(words[: len(c)]) == c), None)
        if command is None:
            continue
        for word in words[len(command) :]:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and flag not in known[command]:
                found.append(f"igw {' '.join(command)}: {flag} (in `igw {' '.join(words)}`)")
    return found


def test_every_igw_command_has_an_example_in_the_readme_commands_section() -> None:
    known = commands(build_parser())
    assert len(known) > 25, "the walk must reach the sub-commands"
    found = missing_examples(section(_README.read_text(), "Commands"), known)
    assert_none(found, "commands without an example")


def test_every_option_a_readme_command_example_shows_is_accepted() -> None:
    found = unknown_options(section(_README.read_text(), "Commands"), commands(build_parser()))
    assert_none(found, "options the command does not take")


def test_the_checks_find_a_missing_example_and_an_unknown_option() -> None:
    known: dict[tuple[str, ...], set[str]] = {
        ("addon", "create"): {"--cluster"},
        ("addon", "delete"): {"--cluster", "--preserve"},
    }
    text = "| `igw addon` | `igw addon create --cluster c --clutser=d` · `igw addon delete/create` |"
    assert missing_examples(text, known) == ["igw addon delete"]
    assert unknown_options(text, known) == [
        "igw addon create: --clutser (in `igw addon create --cluster c --clutser=d`)"
    ]


def test_every_docs_page_is_in_the_readme_documentation_table() -> None:
    listed = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", section(_README.read_text(), "Documentation")))
    pages = {path.name for path in (REPO_ROOT / "docs").glob("*.md")}
    assert_none(sorted(pages - listed), "docs pages missing from README's Documentation table")


def contract_packages() -> set[str]:
    """The ``igw`` packages and modules the exhaustive layer contract places."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "core-below-tooling")
    return {word for layer in contract["layers"] for word in _WORD.findall(layer)}


def _layer_picture(text: str) -> str:
    """The fenced block of ``text`` that draws the tooling and core layers."""
    blocks = text.split("```")[1::2]
    return next(block for block in blocks if re.search(r"^ tooling ", block, re.M) and " core " in block)


def test_the_layer_pictures_name_every_package_the_contracts_place() -> None:
    packages = contract_packages()
    assert {"cli", "top", "launch", "gateway", "errors"} <= packages, packages
    found = []
    for document in (_README, REPO_ROOT / "docs" / "architecture.md"):
        drawn = set(_WORD.findall(_layer_picture(document.read_text())))
        found += [f"{document.relative_to(REPO_ROOT)}: {name}" for name in sorted(packages - drawn)]
    assert_none(found, "packages missing from a layer picture")
