"""The operator's Kube wrapper used from many worker threads at once, against the fake API server."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from kubernetes.dynamic.exceptions import ResourceNotFoundError

from igw.operator.kube import IGWC_API_VERSION, Kube
from tests.fakes.kube_api import running_fake_kube
from tests.operator.harness import install_crd

KINDS = [
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Pod"),
    ("v1", "ServiceAccount"),
    ("policy/v1", "PodDisruptionBudget"),
    (IGWC_API_VERSION, "InferenceGatewayConfig"),
]
MISSING = [("inference.networking.x-k8s.io/v1alpha2", "InferenceModelRewrite"), ("example.com/v1", "Nothing")]
"""Kinds whose CRD is not installed: a miss makes the dynamic client refresh its whole cache."""


@dataclass
class Lookups:
    """Every thread's lookup, started together."""

    kube: Kube
    start: threading.Barrier
    found: list[Any] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def look(self, api_version: str, kind: str) -> None:
        self.start.wait()
        try:
            self.found.append(self.kube._resource(api_version, kind))
        except ResourceNotFoundError:
            self.missing.append(kind)
        except BaseException as exc:  # collected and asserted by the test
            self.errors.append(exc)


def test_resource_lookups_from_many_threads_at_once_all_succeed() -> None:
    """The dynamic client's discovery cache is not thread-safe (a miss rewrites it; concurrent lookups
    raised KeyError('resources') in a reconcile); the wrapper serialises lookups and keeps them."""
    with running_fake_kube() as server:
        install_crd(server)
        jobs = KINDS * 2 + MISSING * 3
        for _ in range(5):  # a fresh wrapper each round: the cold cache is where the race was
            run = Lookups(Kube(server.api_client()), threading.Barrier(len(jobs)))
            threads = [threading.Thread(target=run.look, args=job) for job in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert run.errors == []
            assert sorted(run.missing) == sorted([k for _, k in MISSING] * 3)
            assert {(r.api_version, r.kind) for r in run.found} == {(v.split("/")[-1], k) for v, k in KINDS}
            assert len(run.found) == len(KINDS) * 2
            assert run.kube._resource("apps/v1", "Deployment") is run.kube._resource("apps/v1", "Deployment")
