"""The modules the opt-in mypyc build compiles (``igw.compiled.COMPILED_MODULES``) keep to what mypyc
compiles correctly - checked on the source, so an edit is caught without a C build:

- one name per exception type in a function's ``except ... as NAME`` clauses. mypyc gives a local
  one type, the first binding's, where mypy accepts any: ``except BodyTooLarge as exc`` followed by
  ``except BadRequestBody as exc`` made a compiled gateway answer a malformed body with a 500
  ("BodyTooLarge object expected; got BadRequestBody") instead of the 400;
- every class that subclasses a class from outside igw (aiohttp, asyncio, ...), or a built-in
  exception with its own instance layout (``OSError``, ``TimeoutError``, ...) beside another base,
  is marked ``@mypyc_attr(native_class=False)``: a native class cannot extend them (the build fails;
  ``class E(IgwError, ValueError)`` builds);
- no ``@runtime_checkable`` protocol: the compiled module fails to import ("@runtime_checkable can
  be only applied to protocol classes", mypyc/mypyc#909).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from pathlib import Path

from igw.compiled import COMPILED_MODULES, SCHEDULING_INTERPRETED, source_path
from tests.architecture.support import SOURCE_ROOT, assert_none, offenders, sample

INTERPRETED_BASE_MODULES = ("typing", "enum", "igw")
"""Bases from these modules are fine for a native class (igw's own are compiled or plain classes)."""


def _scopes(tree: ast.Module) -> list[ast.AST]:
    return [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions and classes nested in it."""
    found: list[ast.AST] = []
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def reused_except_names(path: Path) -> list[str]:
    """``path:line`` of each ``except T as NAME`` whose NAME an earlier clause of the same function
    bound to another exception type."""
    hits: list[str] = []
    for scope in _scopes(ast.parse(path.read_text())):
        first: dict[str, tuple[str, int]] = {}
        handlers = [n for n in _own_nodes(scope) if isinstance(n, ast.ExceptHandler) and n.name]
        for handler in sorted(handlers, key=lambda h: h.lineno):
            assert handler.name is not None
            assert handler.type is not None
            caught = ast.unparse(handler.type)
            seen = first.setdefault(handler.name, (caught, handler.lineno))
            if seen[0] != caught:
                hits.append(
                    f"{path}:{handler.lineno}: `except {caught} as {handler.name}` reuses the name of "
                    f"`except {seen[0]} as {handler.name}` (line {seen[1]}): give it its own name"
                )
    return hits


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """Name bound at module level -> the module it was imported from."""
    origin: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                origin[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                origin[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
    return origin


def _root_name(base: ast.expr) -> str | None:
    while isinstance(base, ast.Attribute | ast.Subscript):
        base = base.value
    return base.id if isinstance(base, ast.Name) else None


def _non_native(cls: ast.ClassDef) -> bool:
    return any(
        isinstance(d, ast.Call)
        and _root_name(d.func) == "mypyc_attr"
        and any(
            k.arg == "native_class" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in d.keywords
        )
        for d in cls.decorator_list
    )


def native_subclasses_of_foreign_classes(path: Path) -> list[str]:
    """``path:line`` of each class with a base imported from outside igw, typing and enum that is not
    marked ``@mypyc_attr(native_class=False)``."""
    tree = ast.parse(path.read_text())
    origin = _imported_from(tree)
    hits: list[str] = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        foreign = [
            ast.unparse(base)
            for base in cls.bases
            if (module := origin.get(_root_name(base) or "")) is not None
            and module.split(".")[0] not in INTERPRETED_BASE_MODULES
        ]
        if foreign and not _non_native(cls):
            hits.append(
                f"{path}:{cls.lineno}: class {cls.name} subclasses {', '.join(foreign)}: "
                "mark it @mypyc_attr(native_class=False)"
            )
    return hits


def _laid_out_builtin_exception(base: ast.expr) -> bool:
    """A built-in exception whose instances carry fields of their own (larger than ``BaseException``'s:
    ``OSError``'s errno and strerror, ``StopIteration``'s value, ...)."""
    found = getattr(builtins, base.id, None) if isinstance(base, ast.Name) else None
    return (
        isinstance(found, type)
        and issubclass(found, BaseException)
        and found.__basicsize__ != BaseException.__basicsize__
    )


def native_classes_with_two_bases_one_a_builtin_exception(path: Path) -> list[str]:
    """``path:line`` of each class with several bases, one of them a built-in exception with its own
    layout (``class E(IgwGatewayError, OSError)``), not marked ``@mypyc_attr(native_class=False)``:
    mypyc refuses to build it ("Inheriting from most builtin types is unimplemented")."""
    tree = ast.parse(path.read_text())
    return [
        f"{path}:{cls.lineno}: class {cls.name} has a built-in exception among several bases: "
        "mark it @mypyc_attr(native_class=False)"
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
        if len(cls.bases) > 1
        and any(_laid_out_builtin_exception(b) for b in cls.bases)
        and not _non_native(cls)
    ]


def runtime_checkable_protocols(path: Path) -> list[str]:
    """``path:line`` of each class decorated ``@runtime_checkable`` (``typing`` or
    ``typing_extensions``), which fails to import once compiled."""
    tree = ast.parse(path.read_text())
    return [
        f"{path}:{cls.lineno}: class {cls.name} is @runtime_checkable: move it to an interpreted module "
        "or tell its implementations apart without isinstance"
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
        if any(
            (d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "")
            == "runtime_checkable"
            for d in cls.decorator_list
        )
    ]


def _compiled_sources() -> list[Path]:
    return [source_path(name, SOURCE_ROOT) for name in COMPILED_MODULES]


def test_every_listed_module_exists() -> None:
    missing = [str(path) for path in _compiled_sources() if not path.is_file()]
    assert not missing, missing


def test_every_scheduling_module_is_compiled_or_named_as_interpreted() -> None:
    """A module added to ``igw.scheduling`` (a new plugin) is compiled unless it is named in
    ``SCHEDULING_INTERPRETED`` with its reason: a scorer left out ran interpreted in the compiled
    build with nothing to say so (``output_affinity_scorer``, sessions s16-s17)."""
    package = SOURCE_ROOT / "scheduling"
    found = {
        ".".join(("igw", *path.relative_to(SOURCE_ROOT).with_suffix("").parts)).removesuffix(".__init__")
        for path in package.rglob("*.py")
    }
    compiled = {
        name for name in COMPILED_MODULES if name == "igw.scheduling" or name.startswith("igw.scheduling.")
    }
    interpreted = {f"igw.scheduling.{name}" for name in SCHEDULING_INTERPRETED}
    assert not compiled & interpreted, compiled & interpreted
    listed = compiled | interpreted
    assert found == listed, f"not listed: {sorted(found - listed)}; no such module: {sorted(listed - found)}"


def test_compiled_modules_give_each_caught_type_its_own_name() -> None:
    assert_none(offenders(_compiled_sources(), reused_except_names), "an except name bound to two types")


def test_compiled_modules_mark_subclasses_of_foreign_classes_non_native() -> None:
    assert_none(
        offenders(_compiled_sources(), native_subclasses_of_foreign_classes),
        "a native class extending a class from outside igw",
    )


def test_compiled_modules_mark_classes_with_a_builtin_exception_among_their_bases_non_native() -> None:
    assert_none(
        offenders(_compiled_sources(), native_classes_with_two_bases_one_a_builtin_exception),
        "a native class with a built-in exception among several bases",
    )


def test_compiled_modules_have_no_runtime_checkable_protocol() -> None:
    assert_none(offenders(_compiled_sources(), runtime_checkable_protocols), "a @runtime_checkable protocol")


def _classes_named(hits: list[str]) -> list[str]:
    """The class names the checks' ``path:line: class NAME ...`` lines report, in order."""
    return [hit.split(": class ")[1].split(" ")[0] for hit in hits]


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    reused = sample(
        tmp_path,
        "def handle():\n"
        "    try:\n        pass\n"
        "    except KeyError as exc:\n        pass\n"
        "    except ValueError as exc:\n        pass\n"
        "    except ValueError as exc:\n        pass\n"
        "    def inner():\n"
        "        try:\n            pass\n"
        "        except OSError as exc:\n            pass\n",
    )
    found = reused_except_names(reused)
    assert len(found) == 2, found  # both ValueError clauses; the nested function is its own scope
    assert all("except ValueError as exc" in hit for hit in found)
    class_checks: list[tuple[Callable[[Path], list[str]], str, list[str]]] = [
        (
            native_subclasses_of_foreign_classes,
            "import asyncio\nfrom aiohttp import web\nfrom typing import Protocol\n"
            "from mypy_extensions import mypyc_attr\nfrom igw.errors import IgwError\n"
            "class A(asyncio.Protocol): pass\n"
            "class B(web.StreamResponse): pass\n"
            "@mypyc_attr(native_class=False)\nclass C(web.StreamResponse): pass\n"
            "class D(Protocol): pass\n"
            "class E(IgwError): pass\n",
            ["A", "B"],
        ),
        (
            native_classes_with_two_bases_one_a_builtin_exception,
            "from mypy_extensions import mypyc_attr\nfrom igw.errors import IgwError\n"
            "class F(IgwError, OSError): pass\n"
            "@mypyc_attr(native_class=False)\nclass G(IgwError, OSError): pass\n"
            "class H(OSError): pass\n"
            "class I(IgwError, ValueError): pass\n"
            "class M(IgwError, TimeoutError): pass\n",
            ["F", "M"],
        ),
        (
            runtime_checkable_protocols,
            "import typing\nfrom typing import Protocol, runtime_checkable\n"
            "@runtime_checkable\nclass J(Protocol): pass\n"
            "@typing.runtime_checkable\nclass K(Protocol): pass\n"
            "class L(Protocol): pass\n",
            ["J", "K"],
        ),
    ]
    for check, source, expected in class_checks:
        found = check(sample(tmp_path, source, name=f"{check.__name__}.py"))
        assert _classes_named(found) == expected, (check.__name__, found)
