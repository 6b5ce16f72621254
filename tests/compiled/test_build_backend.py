"""The build backend (``build_backend/igw_build.py``): mypy is a build requirement only for the compiled
build, reading requirements does not compile, and an editable compiled install is refused."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from igw.config.paths import REPO_ROOT


def _backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("igw_build", REPO_ROOT / "build_backend" / "igw_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def checkout_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What the backend reads, copied (setuptools writes its egg-info beside the sources)."""
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO_ROOT / name, tmp_path / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    shutil.copytree(REPO_ROOT / "gateway_src" / "igw", tmp_path / "gateway_src" / "igw", ignore=ignore)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("switch", "with_mypy"), [(None, False), ("1", True)])
def test_mypy_is_required_only_by_the_compiled_build(
    checkout_copy: Path, monkeypatch: pytest.MonkeyPatch, switch: str | None, with_mypy: bool
) -> None:
    monkeypatch.delenv("IGW_MYPYC", raising=False)
    if switch is not None:
        monkeypatch.setenv("IGW_MYPYC", switch)
    backend = _backend()
    requires = backend.get_requires_for_build_wheel()
    assert (backend.MYPYC_REQUIREMENT in requires) is with_mypy
    assert not (checkout_copy / "build").exists()  # reading the requirements compiled nothing


def test_an_editable_compiled_install_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IGW_MYPYC", "1")
    with pytest.raises(SystemExit, match="not editable installs"):
        _backend().get_requires_for_build_editable()
