"""Positional constructors for frozen, slotted dataclasses made on every pick.

Why: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (it must get
past the class's own ``__setattr__``, which refuses), about twice the cost of writing the slots
through their descriptors. A few small records are made once per pick (the scores and predictions a
scorer publishes for the next one); :func:`slot_constructor` makes them by the slot writes, with
the same result (the same fields, equal objects; tests compare them with the constructor's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def slot_constructor(cls: type[T]) -> Callable[..., T]:
    """``cls(*values)`` (every field, positionally, in declaration order) by slot writes, when
    ``cls`` is a dataclass whose ``__slots__`` are exactly its fields, in order, without
    ``__post_init__`` and without ``InitVar`` or ``init=False`` fields; else ``cls`` itself (the
    same call through its constructor). The returned function takes exactly one value per field."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return cls
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if getattr(cls, "__slots__", ()) != names or not all(f.init for f in fields):
        return cls
    params = ", ".join(f"a{i}" for i in range(len(names)))
    writes = "".join(f"    s{i}(o, a{i})\n" for i in range(len(names)))
    bound = "".join(f", s{i}=s{i}" for i in range(len(names)))
    source = f"def make({params}, *, new=new, cls=cls{bound}):\n    o = new(cls)\n{writes}    return o\n"
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    namespace.update({f"s{i}": getattr(cls, name).__set__ for i, name in enumerate(names)})
    exec(
        compile(source, f"<igw slot constructor {cls.__name__}>", "exec"), namespace
    )  # names and indices only
    made: Callable[..., T] = namespace["make"]
    return made
