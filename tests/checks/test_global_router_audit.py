"""IGW-AU307: a GlobalRouterConfig's cluster endpoints over plain http, graded by what travels in clear."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.checks.model import Command, Status
from igw.cli.main import main as igw_main
from tests.checks.helpers import of, run, write_docs

EXAMPLE = Path(__file__).parents[2] / "crds" / "examples" / "global" / "global-router.yaml"


def _router(*, endpoint: str, auth: bool, forward: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc["spec"]["clusters"][1]["endpoint"] = endpoint
    if auth:
        doc["spec"]["auth"] = {
            "jwt": {
                "provider": {
                    "name": "idp",
                    "issuer": "https://idp.example.com",
                    "remoteJWKS": {"uri": "https://idp.example.com/jwks.json"},
                    "audiences": ["inference"],
                }
            }
        }
    if forward:
        doc["spec"]["authorization"] = {"forwardAuthorization": True}
    return doc


@pytest.mark.parametrize(
    ("endpoint", "auth", "forward", "status", "severity"),
    [
        ("https://igw.use1-b.example.com", False, False, Status.PASS, None),
        ("http://127.0.0.1:8081", False, False, Status.PASS, None),  # a local demo
        ("http://localhost:8081", True, False, Status.PASS, None),
        ("http://igw.use1-b.example.com", True, False, Status.FAIL, "MEDIUM"),  # tokens stay at the router
        ("http://igw.use1-b.example.com", True, True, Status.FAIL, "HIGH"),  # forwardAuthorization
        ("http://10.0.3.7:8080", False, False, Status.FAIL, "HIGH"),  # no auth: Authorization passes through
    ],
    ids=["https", "loopback", "localhost", "http-auth", "http-forwarded", "http-no-auth"],
)
def test_plain_http_cluster_endpoints_are_graded_by_what_they_carry(
    endpoint: str, auth: bool, forward: bool, status: Status, severity: str | None
) -> None:
    [result] = of(run([_router(endpoint=endpoint, auth=auth, forward=forward)], Command.AUDIT), "IGW-AU307")
    assert result.status is status, result.message
    assert result.resource == "GlobalRouterConfig global-llama"
    if severity is not None:
        assert result.severity.label == severity
        assert "use1-b (igw.use1-b.example.com)" in result.message or "use1-b (10.0.3.7)" in result.message


def test_without_a_global_router_config_the_check_has_nothing_in_scope() -> None:
    [result] = of(run([], Command.AUDIT), "IGW-AU307")
    assert result.status is Status.SKIP


def test_igw_audit_reads_a_global_router_config_from_a_manifest_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_docs(
        tmp_path / "manifests", [_router(endpoint="http://igw.use1-b.example.com", auth=False)]
    )
    igw_main(["audit", "--manifests", str(folder), "--check", "IGW-AU307", "-o", "json"])
    out = capsys.readouterr().out
    assert '"IGW-AU307"' in out
    assert '"FAIL"' in out


def _task_template(config_text: object) -> dict[str, Any]:
    """A synthesized template with the global router stack's shape: the GlobalRouterConfig as a
    container's environment value, its Redis host joined in from an attribute (``Fn::Join``)."""
    return {
        "Resources": {
            "Task79114B6B": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "ContainerDefinitions": [
                        {
                            "Name": "router",
                            "Environment": [
                                {
                                    "Name": "OTHER",
                                    "Value": "kind: GlobalRouterConfig is mentioned, not held: [",
                                },
                                {"Name": "IGW_GLOBAL_CONFIG", "Value": config_text},
                            ],
                        }
                    ]
                },
            }
        }
    }


@pytest.mark.parametrize(
    ("endpoint", "status"),
    [("https://igw.use1-b.example.com", Status.PASS), ("http://igw.use1-b.example.com", Status.FAIL)],
)
def test_igw_audit_cdk_out_reads_the_config_the_global_router_stack_passes_its_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: str, status: Status
) -> None:
    # Before, `igw audit --cdk-out` of the global router stack's output had nothing in scope for this
    # check: the configuration lives in the ECS task definition, not in a Kubernetes manifest.
    text = yaml.safe_dump(_router(endpoint=endpoint, auth=False), sort_keys=False)
    head, tail = text.split("global-router-cache.example.com", 1)  # the heartbeat store's host
    joined = {"Fn::Join": ["", [head, {"Fn::GetAtt": ["Redis", "PrimaryEndPoint.Address"]}, tail]]}
    out_dir = tmp_path / "cdk.out"
    out_dir.mkdir()
    (out_dir / "IgwGlobalRouter.template.json").write_text(json.dumps(_task_template(joined), indent=1))
    code = igw_main(["audit", "--cdk-out", str(out_dir), "--check", "IGW-AU307", "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    [result] = [r for r in report["results"] if r["checkId"] == "IGW-AU307"]
    assert result["status"] == status.value
    assert result["resource"] == "GlobalRouterConfig global-llama"
    assert code == (1 if status is Status.FAIL else 0)


@pytest.mark.parametrize(
    ("authorization", "check", "status", "finding"),
    [
        ({"clockSkew": "1h"}, "IGW-AU205", Status.FAIL, "clockSkew 1h exceeds 300s"),
        ({"clockSkew": "60s", "forwardAuthorization": True}, "IGW-AU205", Status.PASS, "defaults"),
        ({}, "IGW-AU206", Status.WARN, "spec.authorization.maxTokenLifetime is not set"),
        ({"maxTokenLifetime": "72h"}, "IGW-AU206", Status.WARN, "spec.authorization.maxTokenLifetime 72h"),
        ({"maxTokenLifetime": "1h"}, "IGW-AU206", Status.PASS, "maxTokenLifetime 1h"),
    ],
    ids=["skew-1h", "forwarded-to-tier1", "lifetime-unset", "lifetime-72h", "lifetime-1h"],
)
def test_a_global_router_configs_jwt_settings_are_audited_as_a_gateways(
    authorization: dict[str, Any], check: str, status: Status, finding: str
) -> None:
    """Tier 2 verifies its callers' tokens with the same settings at ``spec.authorization``; before
    session s41 IGW-AU205 and IGW-AU206 read only InferenceGatewayConfig objects and skipped a
    GlobalRouterConfig with ``clockSkew: 1h`` or no token lifetime bound ("nothing in scope").
    ``forwardAuthorization`` there hands the token to the tier-1 gateways (IGW-AU307 grades that)."""
    doc = _router(endpoint="https://igw.use1-b.example.com", auth=True)
    doc["spec"]["authorization"] = authorization
    [result] = of(run([doc], Command.AUDIT), check)
    assert result.status is status, result.message
    assert result.resource == "GlobalRouterConfig global-llama"
    assert finding in result.message


def test_a_global_router_config_without_auth_is_not_graded_for_jwt_settings() -> None:
    doc = _router(endpoint="https://igw.use1-b.example.com", auth=False)
    doc["spec"]["authorization"] = {"clockSkew": "1h"}
    results = run([doc], Command.AUDIT)
    for check in ("IGW-AU202", "IGW-AU203", "IGW-AU204", "IGW-AU205", "IGW-AU206"):
        [result] = of(results, check)
        assert result.status is Status.SKIP, result.message


@pytest.mark.parametrize(
    ("provider", "check", "status", "finding"),
    [
        ({"issuer": "http://idp.example.com"}, "IGW-AU202", Status.FAIL, "issuer 'http://idp.example.com'"),
        ({"remoteJWKS": {"uri": "http://idp.example.com/jwks"}}, "IGW-AU202", Status.FAIL, "is not https"),
        ({}, "IGW-AU202", Status.PASS, "issuer and JWKS are https"),
        ({"audiences": []}, "IGW-AU203", Status.FAIL, "neither audiences nor requiredClaims"),
        ({}, "IGW-AU203", Status.PASS, "1 audience(s)"),
        (
            {"remoteJWKS": {"uri": "https://169.254.169.254/latest/jwks"}},
            "IGW-AU204",
            Status.FAIL,
            "169.254.169.254 is link-local",
        ),
        ({}, "IGW-AU204", Status.PASS, "JWKS host idp.example.com"),
    ],
    ids=["http-issuer", "http-jwks", "https", "no-audience", "audience", "jwks-metadata-ip", "jwks-public"],
)
def test_a_global_router_configs_jwt_provider_is_audited_as_a_gateways(
    provider: dict[str, Any], check: str, status: Status, finding: str
) -> None:
    """Tier 2 verifies its callers' tokens against its ``spec.auth.jwt.provider``, the gateway's shape;
    before session s42 IGW-AU202..204 read only InferenceGatewayConfig objects, so a GlobalRouterConfig
    fetching its JWKS over http from 169.254.169.254 and taking any audience passed ("nothing in
    scope", exit 0)."""
    doc = _router(endpoint="https://igw.use1-b.example.com", auth=True)
    doc["spec"]["auth"]["jwt"]["provider"].update(provider)
    [result] = of(run([doc], Command.AUDIT), check)
    assert result.status is status, result.message
    assert result.resource == "GlobalRouterConfig global-llama provider idp"
    assert finding in result.message
