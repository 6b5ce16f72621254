"""The real ``kubectl`` client for tests that drive the fake API server with it: where it is, the
mark that skips a test without it, and calls of it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

needs_kubectl = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")
"""Skips a test (or, as ``pytestmark``, a module) where kubectl is not installed."""


def run_kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl --kubeconfig KUBECONFIG ARGS...`` (no external diff tool), its output captured; a
    failure is returned, not raised. Its discovery and OpenAPI cache lives next to the kubeconfig,
    not in ``~/.kube/cache``: that one is keyed by host and port, and a fake API server of another
    test (or xdist worker) on a reused port would leave it a stale document."""
    return subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(kubeconfig.parent / "kube-cache"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECTL_EXTERNAL_DIFF": ""},
        check=False,
    )


def kubectl(kubeconfig: Path, *args: str) -> str:
    """:func:`run_kubectl` that must succeed; its standard output."""
    result = run_kubectl(kubeconfig, *args)
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result.stdout
