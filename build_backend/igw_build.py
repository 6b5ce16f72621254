"""igw's PEP 517 build backend: setuptools' own, plus mypy as a build requirement when ``IGW_MYPYC=1``.

mypy (which ships mypyc) is a large download that a default, pure-Python install does not need, so it
is asked for only by the compiled build (``setup.py``); setuptools documents this wrapper as the way
to add build requirements dynamically. An editable install is refused with ``IGW_MYPYC=1``: its
compiled modules would sit in the working tree and shadow every later edit of their sources.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # the rest of the backend is setuptools'
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

MYPYC_REQUIREMENT = "mypy>=2.4.1,<2.5"
"""The mypy (mypyc) the compiled build was checked with (docs/gateway.md): mypyc's output changes
between versions, so a newer one is adopted by re-running the compiled-build tests."""


def _compiled() -> bool:
    return os.environ.get("IGW_MYPYC") == "1"


def get_requires_for_build_wheel(config_settings: dict[str, str | list[str]] | None = None) -> list[str]:
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    return [*requires, MYPYC_REQUIREMENT] if _compiled() else requires


def get_requires_for_build_editable(
    config_settings: dict[str, str | list[str]] | None = None,
) -> list[str]:
    if _compiled():
        raise SystemExit(
            "IGW_MYPYC=1 builds wheels (pip install . / pip wheel .), not editable installs: compiled "
            "modules in the working tree would shadow every later edit of their sources"
        )
    return _setuptools.get_requires_for_build_editable(config_settings)
