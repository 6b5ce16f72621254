"""``igw preflight --cluster-name`` when no AWS read can work, or AWS answers every read alike.

A missing region, an unknown profile or no credentials are one usage error before any check (exit 2);
credentials AWS rejects (expired, unknown) and a throttle that outlasted botocore's retries are one
source problem with what to do, not the same error once per AWS fact. AWS is answered below
botocore's retry handler (a ``before-send`` handler), as EKS answers, so botocore's retries run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.endpoint
import pytest
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.exceptions import TokenRetrievalError

from igw.checks.sources import aws_api
from igw.cli.main import main
from tests.fakes.kube_api import running_fake_kube

Answer = Callable[[AWSRequest], AWSResponse]


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def _error(status: int, code: str, message: str) -> Answer:
    """AWS's error as EKS (JSON) or EC2/IAM/ELBv2 (XML) returns it."""

    def answer(request: AWSRequest) -> AWSResponse:
        if any(f"{host}." in request.url for host in ("ec2", "iam", "elasticloadbalancing")):
            body = (
                f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}"
                "</Message></Error><RequestId>r</RequestId></ErrorResponse>"
            ).encode()
            return AWSResponse(request.url, status, {"content-type": "text/xml"}, _Body(body))
        headers = {"content-type": "application/json", "x-amzn-ErrorType": code}
        return AWSResponse(request.url, status, headers, _Body(json.dumps({"message": message}).encode()))

    return answer


class _Aws:
    """Every AWS request the scan sends (operation names) and botocore's retry sleeps."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.sleeps: list[float] = []
        self.answer: Answer | None = None


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> _Aws:
    """No AWS config or credentials files, no instance metadata, no retry settings from outside."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
    state = _Aws()
    monkeypatch.setattr(botocore.endpoint.time, "sleep", state.sleeps.append)
    client = aws_api.AwsAccount.client

    def answered(self: aws_api.AwsAccount, service: str) -> Any:
        made = client(self, service)

        def before_send(request: AWSRequest, **kwargs: Any) -> AWSResponse | None:
            state.calls.append(str(kwargs.get("event_name", "")).rsplit(".", 1)[-1])
            return state.answer(request) if state.answer else None

        if not getattr(made, "_answered", False):
            made.meta.events.register_first("before-send", before_send)
            made._answered = True
        return made

    monkeypatch.setattr(aws_api.AwsAccount, "client", answered)
    return state


def _preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, dict[str, Any] | None]:
    with running_fake_kube() as kube:
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code = main(["preflight", "--kubeconfig", str(config), "--cluster-name", "hp", "-o", "json", *extra])
    captured = capsys.readouterr()
    return code, captured.err, json.loads(captured.out) if captured.out else None


@pytest.mark.parametrize(
    ("extra", "env", "said"),
    [
        ((), {}, "no AWS region for --cluster-name: pass --region or set AWS_DEFAULT_REGION"),
        (
            ("--region", "us-west-2", "--profile", "nope"),
            {},
            "--profile nope: The config profile (nope) could not be found: name a profile of the AWS "
            "config (aws configure list-profiles)",
        ),
        (
            ("--region", "us-west-2"),
            {"AWS_PROFILE": "nope"},
            "AWS_PROFILE: The config profile (nope) could not be found: name a profile of the AWS "
            "config (aws configure list-profiles)",
        ),
        (
            ("--region", "us-west-2"),
            {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
            "no AWS credentials found: pass --profile, set AWS_PROFILE, or run aws configure or aws "
            "sso login",
        ),
    ],
    ids=["no-region", "unknown-profile", "unknown-AWS_PROFILE", "no-credentials"],
)
def test_no_aws_read_can_work_is_one_usage_error(
    aws: _Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: tuple[str, ...],
    env: dict[str, str | None],
    said: str,
) -> None:
    """Each AWS fact failed on its own: ``eks:DescribeCluster hp: NoRegionError: You must specify a
    region.`` five times in the table, and the run exited 1 or 3 on the Kubernetes findings."""
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    code, err, report = _preflight(tmp_path, capsys, *extra)
    assert (code, err, report) == (2, f"igw preflight: error: {said}\n", None)
    assert aws.calls == []


AWS_CHECKS = ("IGW-PF001", "IGW-PF002", "IGW-PF003", "IGW-PF005", "IGW-PF030")


@pytest.mark.parametrize(
    ("code", "message", "said"),
    [
        (
            "ExpiredTokenException",
            "The security token included in the request is expired",
            "the credentials have expired: refresh them with aws sso login or a new session token",
        ),
        (
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
            "AWS does not accept these credentials; check --profile, AWS_PROFILE and the access key",
        ),
    ],
)
def test_rejected_credentials_are_one_source_problem_and_one_request(
    aws: _Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str, message: str, said: str
) -> None:
    """AWS's rejection was each AWS check's SKIP reason, each read tried (three requests) and the
    fix said nowhere; now the first rejection ends the AWS reads and says what to do, once."""
    aws.answer = _error(403, code, message)
    checks = [arg for check in AWS_CHECKS for arg in ("--check", check)]
    exit_code, err, report = _preflight(tmp_path, capsys, "--region", "us-west-2", *checks)
    assert report is not None
    assert report["sourceErrors"] == [
        f"AWS side not read: eks:DescribeCluster hp answered {code} ({message.rstrip('.')}); {said}"
    ]
    assert aws.calls == ["DescribeCluster"]
    reasons = {r["checkId"]: (r["status"], r["skipKind"], r["message"]) for r in report["results"]}
    reason = f"not read: AWS rejected the credentials (eks:DescribeCluster hp answered {code}, {message})"
    assert reasons == {check: ("SKIP", "not-evaluated", reason.replace(".)", ")")) for check in AWS_CHECKS}
    assert (exit_code, err) == (3, "")


def test_throttling_that_outlasts_the_retries_gets_one_hint(
    aws: _Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each throttled read was its own SKIP reason (``ThrottlingException: Rate exceeded``) and nothing
    said what to do; one hint now, the other reads still tried (another API may answer)."""
    aws.answer = _error(429, "ThrottlingException", "Rate exceeded")
    exit_code, err, report = _preflight(tmp_path, capsys, "--region", "us-west-2")
    assert report is not None
    assert report["sourceErrors"] == [
        "AWS side partly read: eks:DescribeCluster hp answered ThrottlingException (Rate exceeded); AWS "
        "throttled or failed the call through botocore's retries with backoff: wait a minute and run "
        "again, or set AWS_MAX_ATTEMPTS=10 to retry longer"
    ]
    assert aws.calls[:3] == ["DescribeCluster"] * 3  # botocore's standard mode: 3 attempts
    assert {"ListAddons", "DescribeLoadBalancers"} <= set(aws.calls)
    assert exit_code == 1  # the empty cluster's findings win over "not evaluated"
    assert err == ""


def test_a_real_session_provides_every_service_after_its_first_client(aws: _Aws) -> None:
    """``provides`` asked whether a client was held, so once the first one was made (EKS) a live scan's
    account said no to ``sagemaker``/``service-quotas`` and IGW-PF031 was skipped as "clients not
    given" on every live scan."""
    account = aws_api.AwsAccount(region="us-west-2")
    account.client("eks")
    assert account.provides("sagemaker")
    assert account.provides("service-quotas")
    injected = aws_api.AwsAccount(clients={"eks": object()})
    assert injected.provides("eks")
    assert not injected.provides("service-quotas")


def test_an_sdk_error_named_for_a_token_is_reported_unmasked(
    aws: _Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report passes every reason through the value redaction, which took an error's name holding
    ``Token``/``Credential`` and a colon for a secret's name and masked the next word: each AWS
    fact's reason read ``TokenRetrievalError: [REDACTED] when retrieving token from sso`` (round 14)."""

    def answer(request: AWSRequest) -> AWSResponse:
        raise TokenRetrievalError(provider="sso", error_msg="Token has expired and refresh failed")

    aws.answer = answer
    _, _, report = _preflight(tmp_path, capsys, "--region", "us-west-2", "--check", "IGW-PF001")
    assert report is not None
    [result] = report["results"]
    assert result["message"].endswith(
        "TokenRetrievalError: Error when retrieving token from sso: Token has expired and refresh failed"
    ), result["message"]
