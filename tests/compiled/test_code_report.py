"""Which code a tree runs (igw.compiled): a compiled module shadowing an edited source is found, and
``igw serve`` refuses to start on one, logs which code it runs and exports it on ``/metrics``.

The extension modules here are files with an extension module's name: :func:`inspect_tree` reads
names and source digests, never the binaries (``test_compiled_build`` builds real ones).
"""

from __future__ import annotations

import importlib.machinery
import shutil
from pathlib import Path

import aiohttp
import pytest
import yaml

from igw import launch
from igw.cli.main import main
from igw.compiled import (
    COMPILED_MODULES,
    MANIFEST_NAME,
    PACKAGE_ROOT,
    inspect_tree,
    source_path,
    write_manifest,
)
from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
MODULES = ("igw.scheduling.columns", "igw.gateway.inference")


def fake_build(root: Path, modules: tuple[str, ...] = MODULES) -> Path:
    """A copy of the ``igw`` package with ``modules`` 'compiled': an extension-module file beside each
    source and the manifest a build writes."""
    tree = root / "igw"
    shutil.copytree(PACKAGE_ROOT, tree, ignore=shutil.ignore_patterns("__pycache__", "*.so", MANIFEST_NAME))
    for name in modules:
        source = source_path(name, tree)
        source.with_name(source.stem + SUFFIX).write_bytes(b"\x7fELF")
    write_manifest(modules, sources=tree, into=tree)
    return tree


def test_the_checkout_is_pure_python() -> None:
    tree = inspect_tree()
    assert (tree.mode, tree.compiled, tree.stale) == ("python", (), ())
    assert tree.describe() == "pure Python (no mypyc-compiled module)"


def test_a_build_matching_its_sources_is_reported_compiled(tmp_path: Path) -> None:
    tree = inspect_tree(fake_build(tmp_path))
    assert (tree.mode, tree.compiled, tree.stale) == ("mypyc", tuple(sorted(MODULES)), ())
    assert tree.describe() == f"mypyc-compiled: 2 of {len(COMPILED_MODULES)} hot-path modules"


def test_mypycs_shared_library_is_not_taken_for_a_module(tmp_path: Path) -> None:
    """A one-module build puts it beside the module (``ewma__mypyc``); a wheel built that way read
    as stale."""
    root = fake_build(tmp_path, ("igw.scheduling.ewma",))
    (root / "scheduling" / f"ewma__mypyc{SUFFIX}").write_bytes(b"\x7fELF")
    tree = inspect_tree(root)
    assert (tree.compiled, tree.stale) == (("igw.scheduling.ewma",), ())


def test_a_package_init_is_named_by_its_package(tmp_path: Path) -> None:
    assert inspect_tree(fake_build(tmp_path, ("igw.scheduling",))).compiled == ("igw.scheduling",)


def test_an_edited_source_makes_its_compiled_module_stale(tmp_path: Path) -> None:
    root = fake_build(tmp_path)
    source = source_path("igw.gateway.inference", root)
    source.write_text(source.read_text() + "\n# edited\n")
    tree = inspect_tree(root)
    assert len(tree.stale) == 1
    assert str(source) in tree.stale[0]
    assert "changed after igw.gateway.inference was compiled" in tree.stale[0]
    assert tree.describe().endswith("; STALE: 1")


def test_a_compiled_module_without_a_record_is_stale(tmp_path: Path) -> None:
    root = fake_build(tmp_path)
    (root / MANIFEST_NAME).unlink()
    stale = inspect_tree(root).stale
    assert len(stale) == 2
    assert all("not built by igw's compiled build" in line for line in stale)


def test_igw_serve_refuses_a_stale_compiled_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_build(tmp_path / "tree")
    source = source_path("igw.scheduling.columns", root)
    source.write_text(source.read_text() + "\n# edited\n")
    monkeypatch.setattr(launch, "inspect_tree", lambda: inspect_tree(root))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {"m": []}}))
    code = main(["serve", "--config", str(tmp_path / "c.yaml"), "--endpoints", str(tmp_path / "e.yaml")])
    assert code == 2
    err = capsys.readouterr().err
    assert "stale compiled module(s)" in err
    assert str(source) in err


async def test_igw_serve_logs_and_exports_which_code_it_runs(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
    log: list[str] = []
    async with running(FakeModelServer("pod")) as (pod,):
        (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {"m": [pod.key]}}))
        async with (
            serve_process(tmp_path / "c.yaml", tmp_path / "e.yaml", on_line=log.append) as served,
            aiohttp.ClientSession() as http,
            http.get(served.url + "/metrics") as resp,
        ):
            page = await resp.text()
    assert 'igw_gateway_code_info{code="python",compiled_modules="0"} 1.0' in page
    assert any("code: pure Python (no mypyc-compiled module)" in line for line in log), log
