"""Entry point of the ``igw`` command."""

from __future__ import annotations

import _thread
import argparse
import difflib
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType, ModuleType
from typing import Any, NoReturn

from igw import __version__
from igw.cli import early_stop
from igw.cli.option_scope import record_given
from igw.cli.registry import SUBCOMMANDS
from igw.redaction import redact_value

USAGE_ERROR = 2
_PARSER_ATTRIBUTE = "_igw_parser"
"""Namespace attribute holding the innermost parser that parsed the command line."""


def _load(module_name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"igw.cli.{module_name}")
    except ModuleNotFoundError as exc:
        # Only tolerate the sub-command module itself being absent from this install,
        # never a missing dependency inside it.
        if exc.name is not None and f"igw.cli.{module_name}".startswith(exc.name):
            return None
        raise


class _RedactingParser(argparse.ArgumentParser):
    """An argument parser whose errors quote no credential: an option's value is quoted in them
    (``argument --gateway-otlp-endpoint: 'http://admin:<password>@host:99999' is not ...``), and a
    command that fails to start in a pod writes them to its log. Sub-command parsers are made of the
    same class (``add_subparsers`` uses the parent's).

    Abbreviations are off (``allow_abbrev=False`` is this class's default, so every sub-command
    parser has it too): ``igw serve --endpoint FILE`` was taken for ``--endpoints``, and a script
    relying on an abbreviation broke, or silently hit another option, once a new option shared the
    prefix. The options given are recorded (:func:`igw.cli.option_scope.record_given`) so that a
    mode can refuse those it would ignore."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        super().error(redact_value(message))

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; same behaviour
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Also record, in the namespace, the innermost (sub-)command parser that parsed it.

        argparse leaves an option no sub-command knows (``igw serve --prot 1``) to the top-level
        parser, which printed ``usage: igw [-h] [--version] COMMAND ...`` and named no command:
        :func:`_parse` reports it through the parser recorded here instead, with that command's
        usage. A sub-parser's namespace is copied into its parent's after it returns, so the
        innermost parser is the one kept (``setdefault``-like: set only when absent)."""
        words = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(words, namespace)
        if not hasattr(parsed, _PARSER_ATTRIBUTE):
            setattr(parsed, _PARSER_ATTRIBUTE, self)
        record_given(self, words, parsed)
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = _RedactingParser(
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
        cmd.set_defaults(
            _run=module.run,
            _defers_stop=getattr(module, "DEFERS_STOP_SIGNALS", False),
            _holds_hangup=getattr(module, "HOLDS_HANGUP", False),
        )
    return parser


SIGTERM_EXIT = 128 + signal.SIGTERM
SIGINT_EXIT = 128 + signal.SIGINT


STOP_GRACE_S = 1.0
"""How long a stop signal waits for a running event loop to raise it between two callbacks; past it
the loop is busy in one callback (a long loop that never awaits) and the signal is raised there."""
_BUSY: set[int] = set()
"""Signals whose loop did not raise them within :data:`STOP_GRACE_S`: raised where the main thread is."""


def _stop_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else SystemExit(128 + signum)


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as ``SystemExit(143)``, Ctrl-C as ``KeyboardInterrupt``: raised here, or, while an
    event loop runs, by the loop between two callbacks. Python runs this handler wherever the main
    thread happens to be, and inside a transport's callback (uvloop's ``data_received``) the exception
    is taken for the connection's fatal error: the connection is closed and the command goes on, then
    fails on the closed connection (exit 1, seen as a flaky test of ``igw perf workers``). A callback's
    ``SystemExit`` or ``KeyboardInterrupt`` is let out by both asyncio's and uvloop's loops, and
    ``asyncio.run`` then cancels the tasks so their ``finally`` blocks stop what the command started.

    A loop busy in one long callback runs nothing else: asyncio's own Ctrl-C handler (cancel the main
    task) and a bare ``call_soon`` waited for it, and ``igw perf soak --pods 10**30`` building its pod
    names ignored Ctrl-C until SIGKILL (before session s50). Past :data:`STOP_GRACE_S` the signal is
    raised again, where the main thread is, as a second Ctrl-C is by asyncio."""
    # Not imported, or still being imported (the signal came during ``import asyncio``: the module is
    # in sys.modules without get_running_loop yet, and an AttributeError here ended the command in a
    # traceback, exit 1): no loop can be running, and nothing is imported here.
    aio = sys.modules.get("asyncio")
    get_running_loop = getattr(aio, "get_running_loop", None)
    try:
        loop = None if get_running_loop is None else get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or signum in _BUSY:
        _BUSY.discard(signum)
        raise _stop_exception(signum)
    pending = _PendingStop(signum)
    loop.call_soon_threadsafe(pending.raise_between_callbacks)
    timer = threading.Timer(STOP_GRACE_S, pending.raise_in_busy_loop)
    timer.daemon = True
    timer.start()


class _PendingStop:
    """One stop signal, raised once: by the loop between two callbacks, or, past the grace, in the busy
    main thread. The other way then does nothing: a queued raise left behind would interrupt
    ``asyncio.run`` cancelling the tasks, and their ``finally`` blocks would not all run."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self._lock = threading.Lock()
        self._taken = False

    def _take(self) -> bool:
        with self._lock:
            taken, self._taken = self._taken, True
        return not taken

    def raise_between_callbacks(self) -> None:
        if self._take():
            raise _stop_exception(self.signum)

    def raise_in_busy_loop(self) -> None:
        if self._take():
            _BUSY.add(self.signum)
            _thread.interrupt_main(
                signal.Signals(self.signum)
            )  # runs _stop_on_signal again in the main thread


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM ends a command the way Ctrl-C does: ``finally`` blocks and context managers run, so the
    # processes a benchmark started (backends, simulated fleets, igw serve) are stopped with it. With
    # Python's default action the command died at once and left them running (seen after `timeout`).
    # While igw imports and parses, both signals are only recorded (igw.cli.early_stop says why); a
    # command that installs its own handlers keeps them recorded until it has (DEFERS_STOP_SIGNALS).
    # The previous handlers are restored on return (main may be called in-process, e.g. by tests).
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    # SIGHUP is blocked as early (a command that handles it unblocks it once it has: HOLDS_HANGUP).
    hangup_held_before = early_stop.hold_hangup()
    previous = early_stop.defer()
    try:
        args, run = _parse(argv)
        if run is None:
            return USAGE_ERROR
        stopped = early_stop.take()
        if stopped is not None:
            print("igw: interrupted", file=sys.stderr)
            return 128 + stopped
        if not getattr(args, "_holds_hangup", False):
            early_stop.let_hangup_through(hangup_held_before)
        if not getattr(args, "_defers_stop", False):
            _act_on_stop_signals(previous)
        return run(args)
    except KeyboardInterrupt:
        # Ctrl-C that the command did not handle itself: the ``finally`` blocks have run; no
        # traceback, the shell's code for SIGINT.
        print("igw: interrupted", file=sys.stderr)
        return SIGINT_EXIT
    finally:
        for signum, handler in previous.items():
            current = signal.getsignal(signum)
            if current is _stop_on_signal or early_stop.deferring(signum):  # a command may have set its own
                signal.signal(signum, handler)
        early_stop.drop_held_hangup(hangup_held_before)


def _act_on_stop_signals(previous: dict[signal.Signals, Any]) -> None:
    """From here on SIGTERM raises ``SystemExit(143)`` and SIGINT ``KeyboardInterrupt``, both through
    :func:`_stop_on_signal`; a SIGINT igw found ignored (started in the background) stays ignored, and
    one a caller gave its own handler keeps it."""
    if signal.SIGTERM in previous:
        signal.signal(signal.SIGTERM, _stop_on_signal)
    if signal.SIGINT in previous:
        handler = previous[signal.SIGINT]
        signal.signal(signal.SIGINT, _stop_on_signal if handler is signal.default_int_handler else handler)


Command = Callable[[argparse.Namespace], int]


def _unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's ``unrecognized arguments`` message, plus the nearest option for each unknown one
    (``--prot`` -> ``--port``), so a typo is fixed from the message alone."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    known = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
    hints = []
    for extra in extras:
        if not extra.startswith("--"):
            continue
        close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.75)
        if close:
            hints.append(close[0])
    if hints:
        message += f" (did you mean {', '.join(hints)}?)"
    return message


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Command | None]:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        innermost: argparse.ArgumentParser = getattr(args, _PARSER_ATTRIBUTE, parser)
        innermost.error(_unrecognized(innermost, extras))
    run: Command | None = getattr(args, "_run", None)
    if run is None:
        parser.print_help(sys.stderr)
    return args, run


def _main(argv: Sequence[str] | None) -> int:
    args, run = _parse(argv)
    if run is None:
        return USAGE_ERROR
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
