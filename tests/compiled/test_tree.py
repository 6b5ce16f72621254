"""``tests.compiled.tree``: how a test tells the sources from a compiled tree (the compiled side is
checked in ``test_compiled_build``, in a process run on a compiled copy)."""

from __future__ import annotations

import igw.compiled
import igw.scheduling.scheduler
from tests.compiled.tree import compiled, skip_compiled


def test_a_module_loaded_from_its_source_is_not_compiled() -> None:
    assert not compiled("igw.compiled")  # stdlib only, never in the build
    assert compiled("igw.scheduling.scheduler") == (
        not (igw.scheduling.scheduler.__file__ or "").endswith(".py")
    )
    assert igw.compiled.__file__ is not None


def test_the_skip_names_the_module_and_the_reason_and_applies_only_when_compiled() -> None:
    mark = skip_compiled("igw.compiled", "a stand-in")
    assert mark.args == (False,)
    assert mark.kwargs["reason"] == "igw.compiled is compiled in this tree: a stand-in"
