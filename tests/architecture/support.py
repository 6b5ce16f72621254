"""Helpers shared by the architecture checks: the files they scan and how they report offenders."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from igw.config.paths import REPO_ROOT

SOURCE_ROOT = REPO_ROOT / "gateway_src" / "igw"
TESTS_ROOT = REPO_ROOT / "tests"


def python_files(root: Path, *, skip: Path | None = None) -> list[Path]:
    """Every ``*.py`` below ``root`` in a stable order, leaving out those below ``skip``."""
    return [path for path in sorted(root.rglob("*.py")) if skip is None or not path.is_relative_to(skip)]


def offenders(paths: Iterable[Path], finder: Callable[[Path], list[str]]) -> list[str]:
    """What ``finder`` reports for each file, in file order."""
    return [hit for path in paths for hit in finder(path)]


def assert_none(found: list[str], rule: str) -> None:
    """Fail with every offending place listed under ``rule``."""
    assert not found, f"{rule}:\n" + "\n".join(found)


def sample(tmp_path: Path, source: str, name: str = "sample.py") -> Path:
    """A throw-away module, so a check can be shown to find what it looks for."""
    path = tmp_path / name
    path.write_text(source)
    return path
