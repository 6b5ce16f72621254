"""docs/runbook.md's backup and restore of InferenceGatewayConfigs, run as the runbook writes it: the
real ``kubectl``, ``jq`` and ``bash`` against the fake API server, the operator running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import (
    ROOT,
    OperatorThread,
    condition,
    find,
    igwc,
    wait_condition,
    wait_for,
)
from tests.operator.kubectl_cli import KUBECTL, kubectl, needs_kubectl

pytestmark = [
    needs_kubectl,
    pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed"),
]

BACKUP: str = """kubectl get igwc -A -o json | jq '.items[]
  | del(.status, .metadata.uid, .metadata.resourceVersion, .metadata.generation,
        .metadata.creationTimestamp, .metadata.managedFields, .metadata.selfLink,
        .metadata.deletionTimestamp, .metadata.deletionGracePeriodSeconds,
        .metadata.finalizers, .metadata.ownerReferences)
  | .metadata.annotations |= ((. // {}) | with_entries(select(.key
      | (startswith("operator.igw.dev/") or . == "kubectl.kubernetes.io/last-applied-configuration")
      | not)))' > igwc-backup.json"""
"""The runbook's backup command, verbatim (the test fails when the runbook's differs)."""

RESTORE: str = "kubectl apply -f igwc-backup.json"
"""The runbook's restore command, verbatim."""

SERVER_SET: frozenset[str] = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"}
)


LAST_APPLIED: str = "kubectl.kubernetes.io/last-applied-configuration"


def _gateway(cluster: FakeKubeApiServer, name: str) -> dict[str, Any] | None:
    """The gateway Deployment the operator makes for config ``name`` in ``inference``, if any."""
    return find(cluster, "Deployment", "inference", f"{name}-gateway")


def _handled(cluster: FakeKubeApiServer, name: str) -> bool | None:
    """Whether kopf has recorded config ``name`` as handled (its annotation the backup must strip)."""
    obj = find(cluster, "InferenceGatewayConfig", "inference", name) or {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return True if "operator.igw.dev/last-handled-configuration" in annotations else None


def _gone(cluster: FakeKubeApiServer, name: str) -> bool | None:
    """True once config ``name``'s gateway Deployment is collected."""
    return _gateway(cluster, name) is None or None


def _run_documented(command: str, kubeconfig: Path, cwd: Path) -> str:
    """``command`` as an operator types it in ``cwd``: ``bash``, with ``kubectl`` on the PATH and
    ``KUBECONFIG`` pointing at the fake cluster."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{Path(KUBECTL).parent}:{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{command} failed: {done.stderr}"
    return done.stdout


def _backed_up(path: Path) -> list[dict[str, Any]]:
    """The objects of the backup file (a stream of JSON objects, as ``jq`` writes them)."""
    decoder = json.JSONDecoder()
    text, position, objects = path.read_text(), 0, []
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        obj, position = decoder.raw_decode(text, position)
        objects.append(obj)
    return objects


def test_the_runbook_s_backup_and_restore_brings_configs_and_gateways_back(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """The runbook said ``kubectl get igwc -A -o yaml > igwc-backup.yaml`` and no restore. That
    export is a ``List`` carrying each object's uid, resourceVersion, managedFields, status and the
    operator's kopf annotations: a client that creates from it as it is is refused on a cluster
    (``resourceVersion should not be set on objects to be created``), and ``kubectl apply`` of it
    keeps all of that, status included, in the restored object's last-applied annotation. The
    documented backup strips them; its restore brings both configs back, the operator makes their
    gateways again and writes their status."""
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    assert BACKUP in runbook
    assert RESTORE in runbook
    for name in ("chat", "code"):
        manifest = tmp_path / f"{name}.yaml"
        manifest.write_text(yaml.safe_dump(igwc(name, model=name, app=name)))
        kubectl(kubeconfig, "apply", "-f", str(manifest))
    for name in ("chat", "code"):
        wait_condition(cluster, name, "GatewayProgrammed", "True")
        # kopf records the object as handled in its own patch after the handler's status write,
        # so the annotation can land a moment after the condition: wait for it, too.
        wait_for(partial(_handled, cluster, name), what=f"kopf's record of {name} as handled")
    originals = {
        name: (find(cluster, "InferenceGatewayConfig", "inference", name) or {})["spec"]
        for name in ("chat", "code")
    }

    _run_documented(BACKUP, kubeconfig, tmp_path)
    saved = _backed_up(tmp_path / "igwc-backup.json")
    assert sorted(obj["metadata"]["name"] for obj in saved) == ["chat", "code"]
    for obj in saved:
        assert "status" not in obj
        assert not SERVER_SET & obj["metadata"].keys(), obj["metadata"]
        assert obj["metadata"]["annotations"] == {}
        assert obj["spec"] == originals[obj["metadata"]["name"]]

    kubectl(kubeconfig, "delete", "igwc", "chat", "code", "-n", "inference")
    for name in ("chat", "code"):
        wait_for(partial(_gone, cluster, name), what=f"{name}'s gateway collected")

    restored = _run_documented(RESTORE, kubeconfig, tmp_path)
    assert restored.count(" created") == 2, restored
    for name in ("chat", "code"):
        wait_for(partial(_gateway, cluster, name), what=f"{name}'s gateway made again")
        wait_condition(cluster, name, "GatewayProgrammed", "True")
        obj = find(cluster, "InferenceGatewayConfig", "inference", name) or {}
        assert obj["spec"] == originals[name]
        assert condition(obj, "Accepted")["status"] == "True"
        last_applied = json.loads(obj["metadata"]["annotations"][LAST_APPLIED])
        assert "status" not in last_applied
        assert not SERVER_SET & last_applied["metadata"].keys()
