"""Find where an object graph still holds an endpoint key: what the pod-churn tests assert on.

Walks the attributes (``__dict__`` and ``__slots__``) and containers reachable from a root and
reports the path of every dict key, set member or list/tuple/deque item equal to the key (or a tuple
holding it, such as ``(endpoint, adapter)``). Generic on purpose: a structure added later that keeps
departed endpoints is found without this helper knowing its name.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


def _attributes(obj: object) -> Iterator[tuple[str, object]]:
    found = getattr(obj, "__dict__", None)
    if isinstance(found, dict):
        yield from found.items()
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name != "__dict__" and hasattr(obj, name):
                yield name, getattr(obj, name)


def _holds(item: object, key: str) -> bool:
    return item == key or (isinstance(item, tuple) and key in item)


def paths_holding(root: object, key: str, *, modules: tuple[str, ...] = ("igw.",)) -> list[str]:
    """Paths (``root.attr[...].attr``) of the containers under ``root`` holding ``key``; only objects
    of classes defined in ``modules`` are entered (not the event loop, sockets, the standard library)."""
    found: list[str] = []
    seen: set[int] = set()
    todo: list[tuple[object, str]] = [(root, "root")]
    while todo:
        obj, path = todo.pop()
        if id(obj) in seen or isinstance(obj, str | bytes | int | float | bool | type) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            if any(_holds(k, key) for k in obj):
                found.append(path)
            todo.extend((v, f"{path}[{k!r}]") for k, v in obj.items())
        elif isinstance(obj, set | frozenset | list | tuple | deque):
            items = list(obj)
            if any(_holds(item, key) for item in items):
                found.append(path)
            todo.extend((v, f"{path}[{i}]") for i, v in enumerate(items))
        elif type(obj).__module__.startswith(modules):
            todo.extend((v, f"{path}.{name}") for name, v in _attributes(obj))
    return sorted(found)
