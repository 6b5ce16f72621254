"""The watching half of a configuration file's hot reload, shared by both tiers.

:class:`PolledFile` checks a file every interval (or at once when nudged), compares its content by
digest (SHA-256: two edits of one size within the file system's timestamp granularity are both
seen), reports a file that cannot be read once (and loads it again when it can, even unchanged), and
tells a file read while being written in place (:meth:`PolledFile.being_written`) from a broken one.
What a change means - load, validate, apply or reject - is the subclass's :meth:`PolledFile.check`:
:class:`igw.gateway.reload.ConfigReloader` (an ``igw serve`` gateway's InferenceGatewayConfig) and
:class:`igw.global_router.reload.GlobalConfigReloader` (an ``igw global serve`` router's
GlobalRouterConfig, since session s50; the router read its file once before).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path

TORN_WRITE_SETTLE_S = 0.1
"""How long after a failed load the file is read again, to tell a file caught while being written
in place (its content changed meanwhile: checked again next interval) from a broken one."""


def file_digest(path: Path) -> str:
    """The digest a reloader compares ``path``'s content by (raises ``OSError`` as reading does)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class PolledFile(abc.ABC):
    """A file checked for changes by a task of its own (:meth:`start`, :meth:`stop`)."""

    def __init__(self, path: Path, *, loaded_digest: str | None, task_name: str) -> None:
        """``loaded_digest``: :func:`file_digest` of the file as it was when the running configuration
        was loaded from it, taken before that load; ``None``: read now (an edit that landed between
        the load and now is then taken for the running configuration)."""
        self.path = path
        self._digest = file_digest(path) if loaded_digest is None else loaded_digest
        self._task: asyncio.Task[None] | None = None
        self._task_name = task_name
        self._nudged = asyncio.Event()
        self.on_changed: Callable[[], None] | None = None
        """Called after a check that found the file changed (applied or rejected)."""

    @abc.abstractmethod
    def wait_s(self) -> float:
        """Seconds until the next check (unless nudged)."""

    @abc.abstractmethod
    async def check(self) -> bool | None:
        """Reload if the file changed: ``True`` applied, ``False`` rejected, ``None`` unchanged."""

    @abc.abstractmethod
    def reject(self, message: str) -> bool:
        """Report a change that was not applied (``message`` names the file); returns ``False``."""

    def nudge(self) -> None:
        """Check the file now (the loop's next turn) instead of at the end of the interval."""
        self._nudged.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), self.wait_s())
            self._nudged.clear()
            try:
                changed = await self.check()
            except Exception as exc:  # the watch must outlive any file: a dead watch is silent
                changed = self.reject(f"{self.path}: unexpected {type(exc).__name__} while reloading: {exc}")
            if changed is not None and self.on_changed is not None:
                self.on_changed()

    def changed_digest(self, *, again: bool = False) -> str | bool | None:
        """The file's new digest, taken as its state from now on, when its content changed since the
        last check (``again``: even unchanged); ``None`` unchanged; ``False`` it cannot be read
        (:meth:`reject`-ed, once: an unreadable file is remembered as the file's state, so when it
        can be read again it is loaded even with the running content - which clears the error -
        instead of an error logged every interval after an editor or a deploy script removed and
        rewrote it)."""
        try:
            digest = file_digest(self.path)
        except OSError as exc:
            unreadable = f"{self.path}: cannot be read: {exc}"
            if unreadable == self._digest:
                return None
            self._digest = unreadable
            return self.reject(unreadable)
        if digest == self._digest and not again:
            return None
        self._digest = digest
        return digest

    async def being_written(self, digest: str) -> bool:
        """Whether the file read as ``digest`` has changed after :data:`TORN_WRITE_SETTLE_S`: a failed
        load may have read it half-written (truncated, then written: an editor, ``kubectl cp``, a
        script's ``open(path, "w")``), so it is not rejected but checked again next interval."""
        await asyncio.sleep(TORN_WRITE_SETTLE_S)
        try:
            return file_digest(self.path) != digest
        except OSError:
            return False
