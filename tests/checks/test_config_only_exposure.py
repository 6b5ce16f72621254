"""``igw audit --manifests DIR`` on a folder holding only InferenceGatewayConfig objects.

No Service or Ingress is in scope, so the load-balancer checks see none. IGW-AU201 still grades a
config without ``spec.auth.jwt`` CRITICAL when the config itself asks the operator for an
internet-facing load balancer (``spec.extensions.dataPlane.scheme``); an AWS-shaped config (no
dataPlane extension) says nothing about exposure and stays HIGH, as do ClusterIP data planes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import cli, find, secure_docs, write_docs


def _config_without_auth(data_plane: dict[str, Any] | None) -> dict[str, Any]:
    config = copy.deepcopy(find(secure_docs(), "InferenceGatewayConfig", "gateway"))
    del config["spec"]["auth"]
    if data_plane is not None:
        config["spec"].setdefault("extensions", {})["dataPlane"] = data_plane
    return config


@pytest.mark.parametrize(
    ("data_plane", "severity"),
    [
        ({"scheme": "internet-facing"}, "CRITICAL"),
        ({"serviceType": "LoadBalancer", "scheme": "internet-facing"}, "CRITICAL"),
        ({"serviceType": "ClusterIP", "scheme": "internet-facing"}, "HIGH"),
        ({"scheme": "internal"}, "HIGH"),
        (None, "HIGH"),
    ],
)
def test_a_config_alone_grades_missing_auth_by_its_own_exposure(
    tmp_path: Path, data_plane: dict[str, Any] | None, severity: str
) -> None:
    folder = write_docs(tmp_path / "m", [_config_without_auth(data_plane)])
    _, out = cli("audit", "--manifests", str(folder), "-o", "json", "--check", "IGW-AU201")
    (result,) = [r for r in json.loads(out)["results"] if r["checkId"] == "IGW-AU201"]
    assert (result["status"], result["severity"]) == ("FAIL", severity)
    if severity == "CRITICAL":
        assert "spec.extensions.dataPlane.scheme internet-facing" in result["message"]
