"""Imports inside functions are the exception: each one says why it is deferred.

A function-level import hides a dependency from a reader of the module's header and can hide an
import cycle, so igw keeps them only for a stated reason - an optional dependency (an extra that an
install may lack), start-up cost (``igw --help`` builds every sub-command's parser) or a process
entry point. The reason is a ``# deferred: <why>`` comment on the line directly above the first import
of each group of adjacent imports (or at the end of the import's own line).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from igw.config.paths import REPO_ROOT
from tests.architecture.support import SOURCE_ROOT, assert_none, offenders, python_files, sample

REASON = re.compile(r"#\s*deferred:\s*\S.{5,}")


@dataclass(frozen=True)
class ImportGroup:
    path: Path
    first_line: int
    text: str


def _bodies(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody", "handlers"):
        value = getattr(node, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, ast.ExceptHandler):
                    yield item.body


def function_level_import_groups(path: Path) -> list[ImportGroup]:
    """Runs of adjacent import statements anywhere inside a function body in ``path``."""
    source = path.read_text()
    lines = source.splitlines()
    groups: list[ImportGroup] = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            for body in _bodies(node):
                previous_was_import = False
                for stmt in body:
                    is_import = isinstance(stmt, ast.Import | ast.ImportFrom)
                    if is_import and not previous_was_import:
                        groups.append(ImportGroup(path, stmt.lineno, lines[stmt.lineno - 1].strip()))
                    previous_was_import = is_import
    return sorted(set(groups), key=lambda g: g.first_line)


def has_reason(group: ImportGroup) -> bool:
    lines = group.path.read_text().splitlines()
    own_line = lines[group.first_line - 1]
    above = lines[group.first_line - 2].strip() if group.first_line >= 2 else ""
    return bool(REASON.search(own_line)) or (above.startswith("#") and bool(REASON.search(above)))


def unexplained_imports(path: Path) -> list[str]:
    return [
        f"{group.path.relative_to(REPO_ROOT)}:{group.first_line}: {group.text}"
        for group in function_level_import_groups(path)
        if not has_reason(group)
    ]


def test_every_function_level_import_says_why_it_is_deferred() -> None:
    found = offenders(python_files(SOURCE_ROOT), unexplained_imports)
    assert_none(found, "function-level imports without a '# deferred: <why>' comment")


def test_the_check_finds_unexplained_and_accepts_explained_imports(tmp_path: Path) -> None:
    module = sample(
        tmp_path,
        "import os\n\n"
        "def plain():\n    import json\n    import sys\n    return json, sys\n\n"
        "def explained():\n    # deferred: optional dependency (the ops extra)\n"
        "    import yaml\n    return yaml\n\n"
        "async def nested():\n    try:\n        import uvloop  # deferred: optional speed-up\n"
        "    except ImportError:\n        import asyncio\n    return os\n",
    )
    groups = function_level_import_groups(module)
    found = [(group.first_line, has_reason(group)) for group in groups]
    assert found == [(4, False), (10, True), (15, True), (17, False)]
