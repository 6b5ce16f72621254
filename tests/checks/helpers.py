"""Helpers for the check tests: the secure fixture corpus, mutation, and running checks/CLI."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Iterable, Sequence
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from igw.checks.framework import CheckContext, CheckOptions, run_checks
from igw.checks.inventory import Inventory
from igw.checks.model import Command, Result, Status
from igw.checks.registry import checks_for
from igw.checks.sources.manifests import inventory_from_documents
from igw.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"
SECURE = FIXTURES / "secure"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


GLOBAL_ROUTER_EXAMPLE = Path(__file__).parents[2] / "crds" / "examples" / "global" / "global-router.yaml"


def router_doc(url: str) -> dict[str, Any]:
    """The example GlobalRouterConfig with its heartbeats read from the Redis at ``url``."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(GLOBAL_ROUTER_EXAMPLE.read_text()))
    doc["spec"]["heartbeats"]["redis"]["url"] = url
    return doc


def secure_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(SECURE.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def crds_first(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``docs`` with the CustomResourceDefinitions first, as an installer applies them: an API server
    (the fake in ``tests.fakes`` too) serves a custom kind only once its CRD is there."""
    return sorted(docs, key=lambda doc: doc.get("kind") != "CustomResourceDefinition")


def find(docs: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def mutated(mutate: Callable[[list[dict[str, Any]]], object]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(secure_docs())
    mutate(docs)
    return docs


def run(
    docs: Sequence[dict[str, Any]] | Inventory,
    command: Command,
    options: CheckOptions | None = None,
) -> list[Result]:
    inventory = docs if isinstance(docs, Inventory) else inventory_from_documents(list(docs), source="test")
    ctx = CheckContext(inventory=inventory, options=options or CheckOptions(), clock=lambda: NOW)
    return run_checks(checks_for(command), ctx)


def findings(results: Iterable[Result]) -> set[tuple[str, str, str]]:
    """``(check ID, status, severity)`` of every FAIL/WARN."""
    return {(r.check_id, r.status.value, r.severity.label) for r in results if r.is_finding}


def of(results: Iterable[Result], check_id: str) -> list[Result]:
    return [r for r in results if r.check_id == check_id]


def statuses(results: Iterable[Result], check_id: str) -> set[Status]:
    return {r.status for r in of(results, check_id)}


def write_docs(folder: Path, docs: Iterable[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "all.yaml").write_text(yaml.safe_dump_all(list(docs)))
    return folder


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()
