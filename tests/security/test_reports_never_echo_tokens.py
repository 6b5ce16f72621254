"""What the tools print about a configuration never carries a token put in a wrong field.

``igw validate`` quoted a JWT given as a selector's operator whole (``operator eyJ... takes no
values``) and its first 57 characters in the enum message; ``igw audit`` quoted one given as a load
balancer's TLS policy whole, in every output format (SARIF is uploaded to code scanning). Problems
and check results now pass the gateway's log redaction where they are made
(:class:`igw.config.errors.Problem`, :class:`igw.checks.model.Result`), and quoted values are masked
before they are cut (:func:`igw.config.schema_messages.show`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from igw.checks.model import Result, Severity, Status
from igw.cli.main import main
from igw.config.errors import Problem
from igw.redaction import MASK, redact_value
from tests.security.helpers import kubeconfig_with_password

JWT = (
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
API_KEY = "sk-proj4f9aQ2x7LmN8pR3tV6wY1zB5cD0eF"
SECRETS = (JWT, API_KEY)
PIECES = ("eyJhbGciOiJSUzI1NiIs", "SflKxwRJSMeKKF2QT4fw", "proj4f9aQ2x7LmN8pR3t")
"""Fragments of the secrets that a cut-off quote would still show."""


def _assert_clean(text: str) -> None:
    for piece in PIECES:
        assert piece not in text, text


def _igwc(operator: str, model_name: str) -> dict[str, object]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "gw", "namespace": "inference"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [
                {
                    "name": "one",
                    "modelName": model_name,
                    "modelSelector": {
                        "matchLabels": {"app": "x"},
                        "matchExpressions": [{"key": "app", "operator": operator, "values": ["a"]}],
                    },
                },
                {"name": "two", "modelName": model_name, "modelSelector": {"matchLabels": {"app": "y"}}},
            ],
        },
    }


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("output", ["text", "json"])
def test_validate_quotes_no_token_put_in_a_wrong_field(
    secret: str, output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "igwc.yaml"
    path.write_text(yaml.safe_dump(_igwc(operator=secret, model_name=f"Bearer {secret}")))
    assert main(["validate", "--output", output, str(path)]) == 1
    out, err = capsys.readouterr()
    assert "operator" in out  # the problems are still reported, at their fields
    assert "modelName" in out
    _assert_clean(out + err)


def _service(policy: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "gw",
            "namespace": "inference",
            "annotations": {
                "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
                "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": (
                    "arn:aws:acm:us-east-1:123456789012:certificate/1234abcd-12ab-34cd-56ef-1234567890ab"
                ),
                "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy": policy,
            },
        },
        "spec": {"type": "LoadBalancer", "ports": [{"port": 443, "targetPort": 8080}]},
    }


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("output", ["table", "json", "sarif", "junit"])
def test_audit_reports_quote_no_token_put_in_a_wrong_field(
    secret: str, output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "service.yaml").write_text(yaml.safe_dump(_service(f"Bearer {secret}")))
    main(["audit", "--manifests", str(folder), "-o", output])
    out, err = capsys.readouterr()
    assert "IGW-AU102" in out  # the unknown policy is still a finding
    _assert_clean(out + err)


def test_problems_and_results_are_masked_where_they_are_made() -> None:
    problem = Problem(path=f"spec.labels.{JWT}", message=f"operator {API_KEY} takes no values", rule="r")
    assert problem.path == f"spec.labels.{MASK}"
    assert problem.message == f"operator sk-{MASK} takes no values"
    result = Result(
        "X-1", Status.FAIL, Severity.HIGH, f"Service ns/{JWT}", f"policy {JWT}", f"drop {API_KEY}"
    )
    _assert_clean(f"{result.resource} {result.message} {result.remediation}")
    assert result.remediation == f"drop sk-{MASK}"


@pytest.mark.parametrize(
    "text",
    [
        "/home/user1/projects/gateway/config/igwc.yaml: cannot read",
        "arn:aws:acm:us-east-1:123456789012:certificate/1234abcd-12ab-34cd-56ef-1234567890ab",
        "meta-llama/Llama-3.1-8B-Instruct",
        "gw-1abc-57cb980e-gateway",
    ],
)
def test_paths_arns_and_names_are_left_readable(text: str) -> None:
    assert redact_value(text) == text


@pytest.mark.parametrize(
    "secret",
    [
        "c2VjcmV0LXZhbHVlLTEyMzQ1Njc4OTA=",  # base64 with padding
        "Zm9vYmFy/YmF6cXV4Zm9v+YmFy/cXV4",  # base64 with '+' and '/'
        "Zm9vYmFyYmF6cXV4Zm9vYmFy/YmF6",  # a slash, and a piece that is a token by itself
        "AKIAIOSFODNN7EXAMPLEKEY1",  # no slash at all
    ],
)
def test_base64_secrets_with_slashes_are_still_masked(secret: str) -> None:
    assert redact_value(f"value {secret} here") == f"value {MASK} here"


@pytest.mark.parametrize("command", ["preflight", "audit"])
@pytest.mark.parametrize("output", ["table", "json", "sarif", "junit"])
def test_a_cluster_named_by_a_url_with_a_password_is_reported_without_it(
    command: str, output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report named the cluster it checked by its API server URL, user-info included."""
    password = "S3cretPassw0rd9XYZqq"
    kubeconfig = kubeconfig_with_password(tmp_path / "kubeconfig", password)
    main([command, "--kubeconfig", str(kubeconfig), "-o", output])
    out, err = capsys.readouterr()
    assert password not in out + err
    if output in ("table", "json"):
        assert "[REDACTED]@127.0.0.1:1" in out  # the cluster is still named


@pytest.mark.parametrize(
    "argv",
    [
        ["operator", "--gateway-otlp-endpoint", "http://admin:S3cretPassw0rd9XYZqq@host:99999"],
        ["global", "serve", "--config", "g.yaml", "--port", "Bearer sk-proj4f9aQ2x7LmN8pR3tV6wY1zB5cD0eF"],
    ],
)
def test_argument_errors_quote_no_credential(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse quotes the refused value; a command that fails to start in a pod logs it."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err
    assert "S3cretPassw0rd9XYZqq" not in err
    assert "proj4f9aQ2x7LmN8pR3t" not in err
