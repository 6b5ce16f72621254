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

import ast
import importlib

import pytest

from igw.compiled import source_path


def compiled(module: str) -> bool:
    """Whether ``module`` (``igw.x.y``) is loaded from a compiled extension rather than its source."""
    path = importlib.import_module(module).__file__ or ""
    return not path.endswith(".py")


def skip_compiled(module: str, why: str) -> pytest.MarkDecorator:
    """Skip the test where ``module`` runs compiled, saying ``why`` it cannot run there."""
    return pytest.mark.skipif(compiled(module), reason=f"{module} is compiled in this tree: {why}")


def declared_types(cls: type) -> dict[str, str]:
    """``cls``'s field annotations as written in its module's source. Read from the source, not from
    ``dataclasses.fields``: in the compiled build a field's type is erased (``str | None`` reads as
    ``type``), so a test that picks fields by type would pick none there."""
    source = source_path(cls.__module__).read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    return {
        item.target.id: ast.unparse(item.annotation)
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }


REFERENCES_SUBCLASS = (
    "the reference implementations (tests/scheduling/reference.py) subclass compiled classes, which "
    "mypyc refuses to interpreted subclasses; tests/compiled compares the compiled decisions with "
    "the pure ones"
)
"""Why a test built on those references skips on a compiled tree."""
