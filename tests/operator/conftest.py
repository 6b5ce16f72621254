from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import OperatorThread, install_crd, running_operator


@pytest.fixture
def cluster() -> Iterator[FakeKubeApiServer]:
    """A fake API server (own thread) with the InferenceGatewayConfig CRD installed."""
    with running_fake_kube() as kube:
        install_crd(kube)
        yield kube


@pytest.fixture
def cert_manager(cluster: FakeKubeApiServer) -> FakeKubeApiServer:
    """``cluster`` with cert-manager's CRDs installed: without them ``cert-manager.io`` is not served
    (404), as on a cluster without cert-manager."""
    cluster.install_cert_manager()
    return cluster


@pytest.fixture
def kubeconfig(cluster: FakeKubeApiServer, tmp_path: Path) -> Path:
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def operator(kubeconfig: Path) -> Iterator[OperatorThread]:
    """One operator (no election) with a fast resync, acting on the fake cluster."""
    with running_operator(kubeconfig) as running:
        yield running
