"""``igw top --screenshot FILE``: run the screen without a terminal and save it as SVG.

Uses textual's headless mode and auto-pilot: wait until the screen has drawn the wanted number of
successful refreshes (so rates and quantiles are filled in), save, quit. Gives up, saving nothing,
when the gateway does not answer within :data:`GIVE_UP_AFTER_INTERVALS` refresh intervals.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Final

from textual.pilot import Pilot

from igw.top.app import TopApp

SCREEN_SIZE: Final = (150, 40)
GIVE_UP_AFTER_INTERVALS: Final = 30
EXIT_SAVED = 0
EXIT_NO_DATA = 1


def save_screenshot(app: TopApp, file: str, *, refreshes: int) -> int:
    """Run ``app`` headless until it has drawn ``refreshes`` scrapes, then write ``file`` (SVG)."""
    target = Path(file)
    outcome: list[int] = []

    async def pilot(driver: Pilot[object]) -> None:
        wait_s = app.interval_s / 4
        for _ in range(int(GIVE_UP_AFTER_INTERVALS * app.interval_s / wait_s)):
            if app.refreshes >= refreshes:
                break
            await asyncio.sleep(wait_s)
        else:
            print(f"igw top: no data from {app.source.base_url}: {app.last_error}", file=sys.stderr)
            outcome.append(EXIT_NO_DATA)
            app.exit()
            return
        await driver.pause()
        app.save_screenshot(filename=target.name, path=str(target.parent.resolve()))
        outcome.append(EXIT_SAVED)
        app.exit()

    app.run(headless=True, size=SCREEN_SIZE, auto_pilot=pilot)
    return outcome[0] if outcome else EXIT_NO_DATA
