"""Which code this test process runs: the sources, or a tree whose modules mypyc compiled.

The tests of ``tests/scheduling`` and ``tests/gateway`` run against the sources (``make test``) and,
with ``PYTHONPATH`` at a compiled tree (``igw.perf.compiled_tree``, or the image's), against it too.
A few of them can only run on the sources: they subclass a compiled class (mypyc refuses an
interpreted subclass at run time), replace a method of a compiled instance or a module constant a
compiled caller bound at build time, or compare a native loop with the generated kernel that the
compiled build replaces by that same loop. Those skip on a compiled tree with :func:`skip_compiled`,
naming why; what they pin there is checked by ``tests/compiled`` (the DES decisions byte-identical,
the native loops against the generated kernels, the HTTP surface).
"""

from __future__ import annotations

import importlib

import pytest


def compiled(module: str) -> bool:
    """Whether ``module`` (``igw.x.y``) is loaded from a compiled extension rather than its source."""
    path = importlib.import_module(module).__file__ or ""
    return not path.endswith(".py")


def skip_compiled(module: str, why: str) -> pytest.MarkDecorator:
    """Skip the test where ``module`` runs compiled, saying ``why`` it cannot run there."""
    return pytest.mark.skipif(compiled(module), reason=f"{module} is compiled in this tree: {why}")


REFERENCES_SUBCLASS = (
    "the reference implementations (tests/scheduling/reference.py) subclass compiled classes, which "
    "mypyc refuses to interpreted subclasses; tests/compiled compares the compiled decisions with "
    "the pure ones"
)
"""Why a test built on those references skips on a compiled tree."""
