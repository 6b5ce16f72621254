"""``igw top --screenshot FILE``: run the screen without a terminal and save it as SVG.

Uses textual's headless mode and auto-pilot: wait until the screen has drawn the wanted number of
successful refreshes (so rates and quantiles are filled in), save, quit. Gives up, saving nothing:
at once when the gateway answers with something asking again will not change (a 4xx status such
as a 404 on ``/metrics``, a page that is not Prometheus text or ``/readyz`` JSON; until session s42
those were retried for the 30 intervals below, 33 s at the default interval); when no answer came
at all (refused, reset, timed out) once ``wait_unanswered_s`` has passed (``--screenshot-wait``,
default 0: at the first such attempt); and when the refreshes are not drawn within
:data:`GIVE_UP_AFTER_INTERVALS` refresh intervals (the gateway answers, but with a 5xx, a 408 or
429, or a body cut off: a gateway starting or overloaded). Until session s39 a port nothing
listens on took those 30 intervals, 31 s at the default interval, to say so.

Ctrl-C (SIGINT) ends the run at once, saving nothing, as ``KeyboardInterrupt`` (``igw: interrupted``,
exit 130). Until session s50 it was lost inside the headless app: a run waiting on ``--screenshot-wait``
went on until that wait was over, and only SIGTERM or SIGKILL ended it earlier.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Final

from textual.pilot import Pilot

from igw.top.app import TopApp

SCREEN_SIZE: Final = (150, 40)
GIVE_UP_AFTER_INTERVALS: Final = 30
EXIT_SAVED = 0
EXIT_NO_DATA = 1


def save_screenshot(app: TopApp, file: str, *, refreshes: int, wait_unanswered_s: float = 0.0) -> int:
    """Run ``app`` headless until it has drawn ``refreshes`` scrapes, then write ``file`` (SVG)."""
    target = Path(file)
    outcome: list[int] = []
    interrupted: list[bool] = []

    def interrupt() -> None:
        interrupted.append(True)
        app.exit()

    async def pilot(driver: Pilot[object]) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            await _drive(driver)
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def _drive(driver: Pilot[object]) -> None:
        wait_s = app.interval_s / 4
        started = time.monotonic()
        for _ in range(int((GIVE_UP_AFTER_INTERVALS * app.interval_s + wait_unanswered_s) / wait_s)):
            if app.refreshes >= refreshes:
                break
            if app.refused:
                error = f"{app.source.base_url}: {app.last_error} (not retried)"
                print(f"igw top: no data from {error}", file=sys.stderr)
                outcome.append(EXIT_NO_DATA)
                app.exit()
                return
            if app.unreachable and not app.refreshes and time.monotonic() - started >= wait_unanswered_s:
                hint = "" if wait_unanswered_s else " (a gateway still starting: pass --screenshot-wait S)"
                print(
                    f"igw top: no answer from {app.source.base_url}: {app.last_error}{hint}", file=sys.stderr
                )
                outcome.append(EXIT_NO_DATA)
                app.exit()
                return
            await asyncio.sleep(wait_s)
            if interrupted:
                return
        else:
            print(f"igw top: no data from {app.source.base_url}: {app.last_error}", file=sys.stderr)
            outcome.append(EXIT_NO_DATA)
            app.exit()
            return
        await driver.pause()
        app.save_screenshot(filename=target.name, path=str(target.parent.resolve()))
        if app.last_error is not None:  # saved without the decisions asked for: say why
            print(f"igw top: saved {file} without decisions: {app.last_error}", file=sys.stderr)
        outcome.append(EXIT_SAVED)
        app.exit()

    app.run(headless=True, size=SCREEN_SIZE, auto_pilot=pilot)
    if interrupted:
        raise KeyboardInterrupt
    return outcome[0] if outcome else EXIT_NO_DATA
