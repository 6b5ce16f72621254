"""igw's build: pure Python by default; ``IGW_MYPYC=1`` compiles the hot path with mypyc.

Everything else about the package is in ``pyproject.toml``. With ``IGW_MYPYC=1`` the modules of
:data:`igw.compiled.COMPILED_MODULES` (``IGW_MYPYC_MODULES=a,b``: only those, a subset, for the
tests) become C extension modules, and the SHA-256 of each compiled source is recorded beside them
(:data:`igw.compiled.MANIFEST_NAME`) so that a compiled module shadowing an edited source is found
(:func:`igw.compiled.inspect_tree`). Used as::

    IGW_MYPYC=1 pip install .                      # or: pip wheel --no-deps . (the gateway image)
    IGW_MYPYC=1 python setup.py build_ext --inplace  # a scratch copy only: igw.perf.compiled_tree

mypy (which ships mypyc) becomes a build requirement only then (``build_backend/igw_build.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "gateway_src"))

from igw.compiled import COMPILED_MODULES, source_path, write_manifest  # noqa: E402

SWITCH = "IGW_MYPYC"
SUBSET = "IGW_MYPYC_MODULES"
OPT_LEVEL = "3"


def selected_modules() -> tuple[str, ...]:
    """:data:`COMPILED_MODULES`, or the subset ``IGW_MYPYC_MODULES`` names (each must be listed)."""
    subset = os.environ.get(SUBSET, "").strip()
    if not subset:
        return COMPILED_MODULES
    names = tuple(name.strip() for name in subset.split(",") if name.strip())
    unknown = [name for name in names if name not in COMPILED_MODULES]
    if unknown:
        raise SystemExit(f"{SUBSET}: not in igw.compiled.COMPILED_MODULES: {', '.join(unknown)}")
    return names


class RecordingBuildExt(build_ext):
    """``build_ext`` that also writes the manifest of the sources it compiled into the built package."""

    def run(self) -> None:
        super().run()
        sources = ROOT / "gateway_src" / "igw"
        built = sources if self.inplace else Path(self.build_lib) / "igw"
        write_manifest(selected_modules(), sources=sources, into=built)


def compiled_options() -> dict[str, Any]:
    """``setup()`` arguments of the compiled build."""
    # deferred: optional build dependency: mypy is installed (igw_build) only when IGW_MYPYC=1
    from mypyc.build import mypycify

    igw = ROOT / "gateway_src" / "igw"
    files = [str(source_path(name, igw).relative_to(ROOT)) for name in selected_modules()]
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    return {
        "ext_modules": mypycify([*config, *files], opt_level=OPT_LEVEL),
        "cmdclass": {"build_ext": RecordingBuildExt},
    }


BUILD_COMMANDS = frozenset({"build", "build_ext", "bdist_wheel", "install"})
"""The setup.py commands that compile. The build backend also runs setup.py to read requirements
(``egg_info``, before mypy is installed) and metadata (``dist_info``): mypycify, which type-checks and
translates every listed module when called, runs only for a build."""


if __name__ == "__main__":
    os.chdir(ROOT)  # mypycify takes paths relative to the repository root (mypy_path = gateway_src)
    compiling = os.environ.get(SWITCH) == "1" and not BUILD_COMMANDS.isdisjoint(sys.argv[1:])
    setup(**(compiled_options() if compiling else {}))
