"""Entry point of the ``igw`` command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from igw import __version__
from igw.cli.registry import SUBCOMMANDS

USAGE_ERROR = 2


def _load(module_name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"igw.cli.{module_name}")
    except ModuleNotFoundError as exc:
        # Only tolerate the sub-command module itself being absent from this install,
        # never a missing dependency inside it.
        if exc.name is not None and f"igw.cli.{module_name}".startswith(exc.name):
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="igw",
        description="GPU-aware inference gateway: gateway, simulator, benchmark, add-on and operator tools.",
    )
    parser.add_argument("--version", action="version", version=f"igw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS:
        module = _load(module_name)
        if module is None:
            continue
        # argparse %-formats help strings (not descriptions): a literal % in HELP must be doubled
        cmd = sub.add_parser(name, help=module.HELP.replace("%", "%%"), description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    result: int = run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
