"""Worker 0's read of the picker configs, taken by the other workers of a group (real files in a
private directory, as the group's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from igw.config.model import GatewayConfig
from igw.gateway.picker_share import PickerReadPending, SharedPickerConfigs
from igw.gateway.runtime import PickerConfigs
from igw.gateway.workers import WorkerRole


class Reads:
    """A loader that answers what it is told to and counts its calls."""

    def __init__(self, answer: PickerConfigs | Exception) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, config: GatewayConfig) -> PickerConfigs:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


CONFIG: Any = object()  # the loaders here do not read it


def test_the_others_take_worker_0_s_read_of_the_same_file(tmp_path: Path) -> None:
    first, other = Reads({"s": {"weight": 4}}), Reads({"s": {"weight": 9}})
    leader = SharedPickerConfigs(str(tmp_path / "picker-configs.json"), leads=True, load=first)
    follower = SharedPickerConfigs(str(tmp_path / "picker-configs.json"), leads=False, load=other)
    assert leader.load(CONFIG, "d1") == {"s": {"weight": 4}}
    assert follower.load(CONFIG, "d1") == {"s": {"weight": 4}}
    assert (first.calls, other.calls) == (1, 0)


def test_worker_0_s_refusal_is_every_worker_s(tmp_path: Path) -> None:
    """A read that failed on worker 0 (the API server refused it) fails the others' reload with the
    same message, rather than leaving them on a configuration worker 0 did not apply."""
    leader = SharedPickerConfigs(
        str(tmp_path / "picker-configs.json"),
        leads=True,
        load=Reads(ValueError("configMapRef ns/epp: HTTP 403")),
    )
    other = Reads({"s": {}})
    follower = SharedPickerConfigs(str(tmp_path / "picker-configs.json"), leads=False, load=other)
    with pytest.raises(ValueError, match="HTTP 403"):
        leader.load(CONFIG, "d2")
    with pytest.raises(ValueError, match="configMapRef ns/epp: HTTP 403"):
        follower.load(CONFIG, "d2")
    assert other.calls == 0


def test_another_file_s_read_is_not_taken(tmp_path: Path) -> None:
    """The file changed again in between (or the follower checked first): it reads its own."""
    SharedPickerConfigs(
        str(tmp_path / "picker-configs.json"), leads=True, load=Reads({"s": {"weight": 4}})
    ).load(CONFIG, "old")
    own = Reads({"s": {"weight": 5}})
    assert SharedPickerConfigs(str(tmp_path / "picker-configs.json"), leads=False, load=own).load(
        CONFIG, "new"
    ) == {"s": {"weight": 5}}
    assert own.calls == 1


def test_a_worker_leaving_after_its_parent_removes_the_shared_read_too(tmp_path: Path) -> None:
    """A parent killed outright cannot remove the group's directory; its last worker does, and the
    shared read must not keep it there (``rmdir`` of a directory with a file left in it fails)."""
    group = tmp_path / "group"
    group.mkdir()
    orphaned = WorkerRole(index=0, count=1, directory=str(group), parent=os.getppid() + 1_000_000)
    SharedPickerConfigs(orphaned.picker_configs, leads=True, load=Reads({"s": {}})).load(CONFIG, "d")
    assert Path(orphaned.picker_configs).exists()
    orphaned.leave()
    assert not group.exists()


def test_a_reload_ahead_of_worker_0_waits_for_its_read(tmp_path: Path) -> None:
    """A follower's safety-net check found the changed file before worker 0 had read its configs:
    it waits (worker 0 tells it when it has read them) instead of reading its own, which a ConfigMap
    edited in between would make another configuration."""
    path = str(tmp_path / "picker-configs.json")
    own = Reads({"s": {"weight": 5}})
    follower = SharedPickerConfigs(path, leads=False, load=own)
    with pytest.raises(PickerReadPending):
        follower.load(CONFIG, "d3", wait=True)
    SharedPickerConfigs(path, leads=True, load=Reads({"s": {"weight": 4}})).load(CONFIG, "d3")
    assert follower.load(CONFIG, "d3", wait=True) == {"s": {"weight": 4}}
    assert own.calls == 0


def test_configs_json_cannot_carry_are_read_by_each_worker_not_waited_for(tmp_path: Path) -> None:
    path = str(tmp_path / "picker-configs.json")
    odd = Reads({"s": {"at": {1, 2}}})  # a set: not JSON
    SharedPickerConfigs(path, leads=True, load=odd).load(CONFIG, "d4")
    own = Reads({"s": {}})
    assert SharedPickerConfigs(path, leads=False, load=own).load(CONFIG, "d4", wait=True) == {"s": {}}
    assert own.calls == 1
