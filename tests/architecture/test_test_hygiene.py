"""The test suite's own rules: strict pytest configuration; helpers come from modules, not conftest."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from igw.config.paths import REPO_ROOT
from tests.architecture.support import TESTS_ROOT, assert_none, offenders, python_files, sample


def conftest_imports(path: Path, *, root: Path = REPO_ROOT) -> list[str]:
    """``file:line`` of every import of a ``conftest`` module in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(alias.name for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name == "conftest" or name.endswith(".conftest") for name in names):
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(found, key=lambda hit: int(hit.rsplit(":", 1)[1]))


def test_no_test_imports_from_a_conftest() -> None:
    found = offenders(python_files(TESTS_ROOT), conftest_imports)
    assert_none(found, "import helpers from a support module, not conftest.py")


def test_pytest_runs_strict() -> None:
    options = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert options["filterwarnings"][0] == "error"
    assert options["xfail_strict"] is True
    assert {"--strict-config", "--strict-markers"} <= set(options["addopts"].split())


def test_the_check_finds_conftest_imports(tmp_path: Path) -> None:
    module = sample(
        tmp_path,
        "from tests.gateway.conftest import config_doc\n"
        "from tests.gateway import support\n"
        "from tests.sim import conftest\n",
    )
    assert conftest_imports(module, root=tmp_path) == ["sample.py:1", "sample.py:3"]
