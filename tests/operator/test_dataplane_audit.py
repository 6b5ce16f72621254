"""``igw audit`` on what the operator creates: the data plane is hardened like the chart's gateway."""

from __future__ import annotations

from typing import Any

from igw.checks.model import Command, Severity
from igw.checks.sources.manifests import inventory_from_documents
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from tests.checks.helpers import findings, run

ARN = "arn:aws:acm:us-west-2:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
IGWC: dict[str, Any] = {
    "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
    "kind": "InferenceGatewayConfig",
    "metadata": {"name": "chat", "namespace": "inference", "uid": "u"},
    "spec": {
        "bbr": {"enabled": True},
        "tls": {"acmArn": ARN},
        "auth": {
            "jwt": {
                "provider": {
                    "name": "idp",
                    "issuer": "https://idp.example.com",
                    "remoteJWKS": {"uri": "https://idp.example.com/jwks.json"},
                    "audiences": ["chat"],
                }
            }
        },
        "schedulers": [
            {"name": "main", "modelName": "llama", "modelSelector": {"matchLabels": {"app": "llama"}}}
        ],
    },
}


def test_data_plane_has_no_serious_findings_and_no_workload_hardening_findings() -> None:
    documents = [IGWC, *desired_objects(IGWC, DataPlaneSettings())]
    found = findings(run(inventory_from_documents(documents, source="operator"), Command.AUDIT))
    assert {f for f in found if Severity[f[2]].rank >= Severity.HIGH.rank} == set()
    # Pod hardening, probes, replicas, PDB and NetworkPolicy (IGW-AU4xx) are all satisfied.
    assert {f[0] for f in found if f[0].startswith("IGW-AU4")} == set()
    # What is left is about the user's spec (rate limits, tenancy, token lifetime) and the VPC-wide
    # source range.
    assert {f[0] for f in found} <= {"IGW-AU206", "IGW-AU302", "IGW-AU601", "IGW-AU602", "IGW-AU604"}
