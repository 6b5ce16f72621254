"""The endpoints file watch (`igw serve --endpoints`) sees every change; a missing file is one line.

Real files on disk, a real watch task: a same-size replacement that keeps the old mtime (``cp -p``,
``rsync -a``, a rename over the file) is applied; a file removed for a while logs one ERROR, not one
per poll, and is applied again (with an INFO line) when it is back, even unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.endpoints import DiscoveredEndpoint
from tests.gateway.support import wait_for

POLL_S = 0.02


class Sink:
    """Records the endpoints of scheduler ``s`` and how many times they were applied."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.applied = 0

    def apply_endpoints(self, scheduler: str, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        self.keys = [e.key for e in endpoints]
        self.applied += 1

    def apply_bbr_adapters(self, adapters: Mapping[str, str]) -> None:
        return None

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        return None


def _content(address: str) -> str:
    return f"schedulers:\n  s:\n    - {address}\n"


def _keep_mtime(path: Path, like: os.stat_result) -> None:
    os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))


async def _started(path: Path) -> tuple[StaticFileDiscovery, Sink]:
    source, sink = StaticFileDiscovery(path, names={"s": "s"}, poll_interval_s=POLL_S), Sink()
    await source.start(sink)
    return source, sink


async def test_a_same_size_replacement_with_the_old_mtime_is_applied(tmp_path: Path) -> None:
    """``rsync -a`` writes a temporary file with the source's mtime and renames it over the target."""
    path = tmp_path / "endpoints.yaml"
    path.write_text(_content("127.0.0.1:8001"))
    source, sink = await _started(path)
    try:
        assert sink.keys == ["127.0.0.1:8001"]
        staged = tmp_path / ".endpoints.yaml.tmp"
        staged.write_text(_content("127.0.0.1:8002"))  # the same size
        _keep_mtime(staged, path.stat())
        os.replace(staged, path)
        await wait_for(lambda: sink.keys == ["127.0.0.1:8002"], what="the renamed-over file applied")
    finally:
        await source.stop()


async def test_an_in_place_rewrite_that_restores_the_mtime_is_applied(tmp_path: Path) -> None:
    """``cp -p`` over the file: same inode, same size, the old mtime put back; only ctime moves."""
    path = tmp_path / "endpoints.yaml"
    path.write_text(_content("127.0.0.1:8001"))
    source, sink = await _started(path)
    try:
        before = path.stat()
        path.write_text(_content("127.0.0.1:8003"))
        _keep_mtime(path, before)
        assert (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns) == (
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        )
        await wait_for(lambda: sink.keys == ["127.0.0.1:8003"], what="the rewritten file applied")
    finally:
        await source.stop()


async def test_a_missing_file_is_reported_once_and_applied_again_when_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "endpoints.yaml"
    text = _content("127.0.0.1:8001")
    path.write_text(text)
    source, sink = await _started(path)
    caplog.set_level(logging.INFO, logger="igw.gateway.discovery")
    try:
        path.unlink()
        await asyncio.sleep(POLL_S * 15)  # about 15 polls while the file is missing
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert "No such file or directory" in errors[0].getMessage()
        assert sink.keys == ["127.0.0.1:8001"]  # the previous endpoints stay
        applied = sink.applied
        path.write_text(text)  # back, unchanged
        await wait_for(lambda: sink.applied > applied, what="the file applied again")
        assert sink.keys == ["127.0.0.1:8001"]
        assert any("applied again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
        path.unlink()  # missing again: a new episode, reported again
        await wait_for(
            lambda: len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2,
            what="the second removal reported",
        )
    finally:
        await source.stop()
