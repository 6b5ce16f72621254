"""``configMapRef`` EndpointPickerConfigs read once per worker group: worker 0 reads, the others take it.

Why: every worker of ``igw serve --workers N`` read each scheduler's ConfigMap itself, at start and at
every reload (N GETs on the API server each time), and the reads were seconds apart (the others start
after worker 0 serves). A ConfigMap edited in between, or a read that failed on one worker only, left
the group running two picker configurations: in session s42 an edit made as worker 0 started gave
worker 0 ``queue-scorer`` weight 4 and workers 1 and 2 weight 9, for good (picker ConfigMaps are read
again only when the gateway's own configuration changes).

How: worker 0 reads the configs as a single process does and writes what it got (the configs, or the
error it refused them with) to ``picker-configs.json`` in the group's private directory
(:attr:`~igw.gateway.workers.WorkerRole.picker_configs`), under the digest of
the configuration file it loaded (:func:`~igw.gateway.reload.file_digest`). Worker 0 publishes at start
before it reports having started (the others start after that) and at a reload before it tells the
others (they reload when told), so a worker loading the same file finds worker 0's read and takes it:
the same configs, or the same refusal. A worker that finds another digest there (the file changed again
in between) reads the ConfigMaps itself at start; at a reload it waits for worker 0's word (its
safety-net check can run ahead of worker 0: it then leaves the file for the next check).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from igw.config.model import GatewayConfig
from igw.errors import IgwGatewayError
from igw.gateway.runtime import PickerConfigs

log = logging.getLogger("igw.gateway.picker_share")


class PickerReadPending(IgwGatewayError):
    """Worker 0 has not published its read of this configuration file's picker configs yet."""


class SharedPickerConfigs:
    """A worker's picker-config loader in a group: worker 0 (``leads``) reads with ``load`` and
    publishes; the others take worker 0's read of the same configuration file."""

    def __init__(self, path: str, *, leads: bool, load: Callable[[GatewayConfig], PickerConfigs]) -> None:
        self._path = Path(path)
        self._leads = leads
        self._load = load

    def __call__(self, config: GatewayConfig) -> PickerConfigs:
        """A read of this worker's own (no configuration file digest to share it under)."""
        return self._load(config)

    def load(self, config: GatewayConfig, digest: str | None, *, wait: bool = False) -> PickerConfigs:
        """The picker configs of ``config``, loaded from the file whose digest is ``digest``.

        Raises what the read raises (worker 0), or ``ValueError`` with worker 0's message when worker
        0 refused the same file's configs (the others). ``wait``: a worker other than 0 that finds no
        read of this file's raises :class:`PickerReadPending` instead of reading its own (a reload:
        worker 0 tells it when it has read them)."""
        if digest is None:
            return self._load(config)
        if self._leads:
            try:
                pickers = self._load(config)
            except Exception as exc:
                self._publish({"digest": digest, "error": str(exc)})
                raise
            self._publish({"digest": digest, "pickers": pickers})
            return pickers
        shared = self._read()
        if shared is None or shared.get("digest") != digest:
            if wait:
                raise PickerReadPending(digest)
            log.info("picker configs: worker 0 has not read this configuration's yet: reading them here")
            return self._load(config)
        if shared.get("own"):
            return self._load(config)
        if "error" in shared:
            raise ValueError(str(shared["error"]))
        taken: PickerConfigs = shared["pickers"]
        return taken

    def _publish(self, doc: dict[str, Any]) -> None:
        """Write ``doc`` whole (a reader never sees half of it). Configs that JSON cannot carry are
        published as ``own`` (the others read their own, rather than wait for a read that never
        comes); a file that cannot be written is removed, so that no worker takes a stale read."""
        try:
            data = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            log.warning("picker configs: cannot share worker 0's read (the others read their own): %s", exc)
            data = orjson.dumps({"digest": doc["digest"], "own": True})
        partial = self._path.with_name(self._path.name + ".partial")
        try:
            partial.write_bytes(data)
            os.replace(partial, self._path)
        except OSError as exc:
            log.warning("picker configs: cannot share worker 0's read (the others read their own): %s", exc)
            with contextlib.suppress(OSError):
                self._path.unlink()

    def _read(self) -> dict[str, Any] | None:
        try:
            doc = orjson.loads(self._path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None
