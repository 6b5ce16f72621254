"""Entry point of the ``igw`` command."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, ModuleType

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


SIGTERM_EXIT = 128 + signal.SIGTERM
SIGINT_EXIT = 128 + signal.SIGINT


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as ``SystemExit(143)``: raised here, or, while an event loop runs, by the loop between
    two callbacks. Python runs this handler wherever the main thread happens to be, and inside a
    transport's callback (uvloop's ``data_received``) the exception is taken for the connection's
    fatal error: the connection is closed and the command goes on, then fails on the closed
    connection (exit 1, seen as a flaky test of ``igw perf workers``). A callback's ``SystemExit`` is
    let out by both asyncio's and uvloop's loops, and ``asyncio.run`` then cancels the tasks so their
    ``finally`` blocks stop what the command started."""
    # Not imported, or still being imported (the signal came during ``import asyncio``: the module is
    # in sys.modules without get_running_loop yet, and an AttributeError here ended the command in a
    # traceback, exit 1): no loop can be running, and nothing is imported here.
    aio = sys.modules.get("asyncio")
    get_running_loop = getattr(aio, "get_running_loop", None)
    try:
        loop = None if get_running_loop is None else get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        raise SystemExit(SIGTERM_EXIT)
    loop.call_soon(_raise_sigterm_exit)


def _raise_sigterm_exit() -> None:
    raise SystemExit(SIGTERM_EXIT)


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM ends a command the way Ctrl-C does: ``finally`` blocks and context managers run, so the
    # processes a benchmark started (backends, simulated fleets, igw serve) are stopped with it. With
    # Python's default action the command died at once and left them running (seen after `timeout`).
    # Long-running servers (serve, operator, global serve) install their own handlers on the loop.
    # The previous handler is restored on return (main may be called in-process, e.g. by tests).
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C that no command handled itself (most often while igw still imports and parses: the
        # first second): the ``finally`` blocks have run; no traceback, the shell's code for SIGINT.
        print("igw: interrupted", file=sys.stderr)
        return SIGINT_EXIT
    finally:
        if signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:  # a command may have set its own
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
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
