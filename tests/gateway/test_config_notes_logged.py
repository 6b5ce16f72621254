"""``igw serve`` names AWS's fields that it accepts without acting on, as ``igw validate`` does.

A user who applies the YAML with kubectl, or serves a file, never runs ``igw validate``; ``igw serve``
said nothing about ``logLevel: 4`` or ``bbr.replicas: 2`` and served as if they were not there.
It logs each note once at start (not once more by every worker of a group) and once on every applied
reload (by worker 0, not by every worker), with the file and line.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import yaml

from igw.config.loader import load_gateway_config
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

REPLICAS_NOTE = "note: spec.bbr.replicas: accepted (AWS's field) but has no effect in igw"
LOG_LEVEL_NOTE = "note: spec.schedulers[0].logLevel: accepted (AWS's field) but has no effect in igw"
ENV_FROM_NOTE = "note: spec.schedulers[0].envFrom: accepted (AWS's field) but has no effect in igw"


def _doc(**fields: Any) -> dict[str, Any]:
    doc = config_doc([scheduler("pool", "m", **fields)])
    doc["spec"]["bbr"]["replicas"] = 3
    return doc


def test_the_loaded_config_names_each_unused_field_with_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "igwc.yaml"
    path.write_text(yaml.safe_dump(_doc(logLevel=4), sort_keys=False))
    lines = path.read_text().splitlines()
    config = load_gateway_config(path)
    assert len(config.notes) == 2
    replicas_line = next(i for i, text in enumerate(lines, 1) if "replicas: 3" in text)
    log_level_line = next(i for i, text in enumerate(lines, 1) if "logLevel: 4" in text)
    assert config.notes[0].startswith(f"{path}:{replicas_line}: {REPLICAS_NOTE}")
    assert config.notes[1].startswith(f"{path}:{log_level_line}: {LOG_LEVEL_NOTE}")
    assert config.notes[1].endswith("[accepted-unused]")
    # the notes are not the configuration: the same spec without them is the same config
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(_doc(logLevel=4)))
    assert load_gateway_config(plain) == config


def test_a_value_equal_to_the_default_is_not_named_by_serve(tmp_path: Path) -> None:
    """The operator serves the stored object, into which the API server wrote the CRD's defaults
    (``bbr.replicas: 2``): every gateway pod would log a note about a field nobody wrote."""
    doc = _doc()
    doc["spec"]["bbr"]["replicas"] = 2
    doc["spec"]["observability"] = {"metrics": {"enabled": True}}
    path = tmp_path / "igwc.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_gateway_config(path).notes == ()


async def test_a_worker_group_logs_each_note_once_at_start_and_once_per_reload(tmp_path: Path) -> None:
    config = tmp_path / "igwc.yaml"
    config.write_text(yaml.safe_dump(_doc(logLevel=4)))
    async with running(FakeModelServer("pod")) as (pod,):
        (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {"pool": [pod.key]}}))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config),
            "--endpoints", str(tmp_path / "e.yaml"), "--host", "127.0.0.1", "--port", "0",
            "--workers", "2", "--drain-seconds", "0",
            stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        stderr = proc.stderr
        assert stderr is not None
        seen: list[str] = []

        async def read_until(text: str, count: int) -> None:
            while sum(text in line for line in seen) < count:
                line = (await asyncio.wait_for(stderr.readline(), timeout=60)).decode()
                assert line, f"igw serve exited: {seen}"
                seen.append(line)

        try:
            await read_until("garbage collector: start-up objects frozen", 2)  # both workers serve
            config.write_text(yaml.safe_dump(_doc(envFrom=[{"configMapRef": {"name": "x"}}])))
            await read_until("reloaded and applied", 2)  # worker 0, then worker 1 when told
            with contextlib.suppress(TimeoutError):  # what the workers log after it (the notes follow)
                await asyncio.wait_for(read_until("never logged", 1), timeout=2)
        finally:
            proc.kill()
            await proc.wait()
    assert sum(LOG_LEVEL_NOTE in line for line in seen) == 1, seen
    assert sum(ENV_FROM_NOTE in line for line in seen) == 1, seen
    assert sum(REPLICAS_NOTE in line for line in seen) == 2, seen  # at start, and in the reloaded file
    assert all(f"{config}:" in line for line in seen if "accepted (AWS's field)" in line)
