"""Which options a command line gave, and refusing those the chosen mode of a command would ignore.

Several commands have modes that use only some of their options (``igw demo --global`` runs a fixed
tier-2 script, ``igw bench canary-rollout`` a fixed rollout): an option given with such a mode was
silently ignored, so ``igw demo --global --requests 50`` ran the whole demo and the user read its
numbers as those of 50 requests. A command declares, per mode, the options that mode uses; any other
option given on the command line is a usage error naming the option and the mode (exit 2).

"Given" means typed on the command line, not "differs from the default": ``--requests 600`` (the
default) with ``--global`` is ignored just the same. The parser records the options it saw
(:func:`record_given`), which is exact because abbreviations are off (``allow_abbrev=False``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence

GIVEN_ATTRIBUTE = "_igw_given"
"""Namespace attribute: ``{dest: option string as typed}`` for each option the innermost parser saw."""


def given_options(parser: argparse.ArgumentParser, arg_strings: Sequence[str]) -> dict[str, str]:
    """``{dest: option}`` for every option of ``parser`` among ``arg_strings`` (``--opt`` or
    ``--opt=value``; nothing after a lone ``--``, where every word is positional). A value that
    looks like an option is taken for one by argparse too, so the two agree."""
    found: dict[str, str] = {}
    for word in arg_strings:
        if word == "--":
            break
        if not word.startswith("-"):
            continue
        action = parser._option_string_actions.get(word.split("=", 1)[0])
        if action is not None:
            found.setdefault(action.dest, word.split("=", 1)[0])
    return found


def record_given(
    parser: argparse.ArgumentParser, arg_strings: Sequence[str], parsed: argparse.Namespace
) -> None:
    """Record in ``parsed`` the options ``parser`` saw, unless an inner (sub-command) parser already
    did: a sub-parser's namespace is copied into its parent's before the parent returns."""
    if not hasattr(parsed, GIVEN_ATTRIBUTE):
        setattr(parsed, GIVEN_ATTRIBUTE, given_options(parser, arg_strings))


def given(args: argparse.Namespace) -> dict[str, str]:
    """``{dest: option}`` of the options given on the command line (empty for a namespace built by
    hand, which no parser recorded)."""
    recorded: dict[str, str] = getattr(args, GIVEN_ATTRIBUTE, {})
    return recorded


def unused_options(args: argparse.Namespace, used: Collection[str]) -> list[str]:
    """The options given whose destination is not in ``used``, as typed, in command-line order."""
    return [option for dest, option in given(args).items() if dest not in used]


def refuse_unused(args: argparse.Namespace, *, command: str, mode: str, used: Collection[str]) -> bool:
    """Print a usage error and return ``True`` when an option outside ``used`` was given with
    ``mode``; ``False`` when every option given is one the mode uses."""
    unused = unused_options(args, used)
    if not unused:
        return False
    verb, pronoun = ("does", "it") if len(unused) == 1 else ("do", "them")
    print(f"{command}: {', '.join(unused)} {verb} not apply to {mode}; leave {pronoun} out", file=sys.stderr)
    return True


def refuse_given(args: argparse.Namespace, *, command: str, mode: str, ignored: Collection[str]) -> bool:
    """:func:`refuse_unused` from the other side: refuse the options in ``ignored`` given with ``mode``."""
    return refuse_unused(args, command=command, mode=mode, used=set(given(args)) - set(ignored))
