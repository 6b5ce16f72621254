"""A mypyc-compiled copy of this checkout's ``igw``, to run beside the pure tree through ``PYTHONPATH``.

``igw perf compiled`` and the compiled-build tests use it. The copy holds what ``setup.py`` needs
(``pyproject.toml``, ``setup.py``, ``README.md``, ``gateway_src/igw``) and is
compiled in place with ``IGW_MYPYC=1 python setup.py build_ext --inplace``: the checkout itself is
never compiled, so no extension module can shadow a source being edited. A copy whose recorded
sources still match the checkout's is reused (the full build takes minutes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from igw.compiled import COMPILED_MODULES, MANIFEST_NAME, inspect_tree
from igw.config.paths import REPO_ROOT
from igw.errors import IgwToolingError

BUILD_TIMEOUT_S: Final = 1800.0
_COPIED_FILES: Final = ("pyproject.toml", "setup.py", "README.md")


class CompiledBuildError(IgwToolingError, RuntimeError):
    """The compiled copy could not be built, or was built but does not load as compiled."""


def _up_to_date(dest: Path, modules: tuple[str, ...]) -> bool:
    """``dest`` holds a build of exactly ``modules`` from sources equal to the checkout's, every
    ``.py`` of the copy included (its interpreted modules run too)."""
    built = dest / "gateway_src" / "igw"
    recorded = built / MANIFEST_NAME
    if not recorded.is_file() or set(json.loads(recorded.read_text())["modules"]) != set(modules):
        return False
    ours = REPO_ROOT / "gateway_src" / "igw"
    mine = {p.relative_to(ours): p.read_bytes() for p in ours.rglob("*.py")}
    copied = {p.relative_to(built): p.read_bytes() for p in built.rglob("*.py")}
    tree = inspect_tree(built)
    return mine == copied and set(tree.compiled) == set(modules) and not tree.stale


def build_compiled_tree(
    dest: Path, modules: tuple[str, ...] = COMPILED_MODULES, *, jobs: int = 2
) -> tuple[Path, float]:
    """Copy the checkout into ``dest`` and compile ``modules`` there (reused when up to date).

    Returns the directory to put on ``PYTHONPATH`` (``dest/gateway_src``) and the build's wall
    seconds (0 when reused). Raises :class:`CompiledBuildError` with the build's output tail."""
    root = dest / "gateway_src"
    if _up_to_date(dest, modules):
        return root, 0.0
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in _COPIED_FILES:
        shutil.copy2(REPO_ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", MANIFEST_NAME)
    shutil.copytree(REPO_ROOT / "gateway_src" / "igw", root / "igw", ignore=ignore)
    env = {**os.environ, "IGW_MYPYC": "1", "IGW_MYPYC_MODULES": ",".join(modules)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "-j", str(jobs)],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise CompiledBuildError(f"compiled build failed in {dest}:\n{(done.stdout + done.stderr)[-4000:]}")
    tree = inspect_tree(root / "igw")
    if tree.stale or set(tree.compiled) != set(modules):
        raise CompiledBuildError(
            f"compiled build in {dest} does not load as built: compiled {list(tree.compiled)}, "
            f"asked for {list(modules)}, stale {list(tree.stale)}"
        )
    return root, seconds
