"""``igw addon`` without a usable AWS setup says what is missing instead of printing a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from igw.cli.main import main


@pytest.fixture
def no_aws_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No region, no credentials, no instance metadata: what a newcomer's laptop has."""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["addon", "versions"], "pass --region or set AWS_DEFAULT_REGION"),
        (["addon", "versions", "--region", "us-west-2"], "Unable to locate credentials"),
        (["addon", "versions", "--profile", "nobody"], "nobody"),
        (["addon", "delete", "--cluster", "c", "--region", "us-west-2"], "Unable to locate credentials"),
    ],
)
def test_a_missing_aws_setup_is_named_not_a_traceback(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("igw addon: AWS: ")
    assert says in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize(
    ("argv", "next_step"),
    [
        (
            ["addon", "versions", "--region", "us-west-2"],
            "(pass --profile, set AWS_PROFILE, or run aws configure or aws sso login)",
        ),
        (["addon", "package", "--push", "--region", "us-west-2"], "pass --profile, set AWS_PROFILE"),
        (["addon", "versions", "--profile", "nobody"], "(name a profile of the AWS config: aws configure"),
    ],
)
def test_missing_credentials_or_profile_say_what_to_do(
    argv: list[str], next_step: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before session s50 these ended at botocore's "Unable to locate credentials" / "The config
    profile (nobody) could not be found", with no next step, where igw preflight names one."""
    assert main(argv) == 2
    assert next_step in capsys.readouterr().err


@pytest.mark.usefixtures("no_aws_setup")
def test_the_region_hint_names_the_variable_boto3_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hint said "set AWS_REGION", which boto3 does not read: following it changed nothing."""
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    assert main(["addon", "versions"]) == 2
    assert "set AWS_DEFAULT_REGION" in capsys.readouterr().err
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert main(["addon", "versions"]) == 2
    assert "Unable to locate credentials" in capsys.readouterr().err


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize("command", ["create", "update"])
@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"replicaCount": "two"}', "replicaCount"),
        ("mode: [", "not valid JSON or YAML"),
    ],
)
def test_a_bad_values_file_is_reported_before_any_aws_call(
    tmp_path: Path, command: str, content: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a region the values file's problems were hidden behind "You must specify a region"."""
    values = tmp_path / "values.json"
    values.write_text(content)
    assert main(["addon", command, "--cluster", "c", "--configuration-values", str(values)]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "region" not in err


JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlMTIzNDU2Nzg5MA"


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize("form", ["inline-json", "inline-yaml", "long-inline-json", "file-url", "path"])
def test_configuration_values_are_taken_as_aws_eks_create_addon_takes_them(
    tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``aws eks create-addon --configuration-values`` takes the values inline or as ``file://PATH``;
    this command took every value for a file name, so an inline one ended in "No such file or
    directory" quoting the whole value, a token in it included."""
    document = '{"replicaCount": "two", "otel": {"headers": "Bearer ' + JWT + '"}}'
    values = tmp_path / "values.json"
    values.write_text(document)
    given = {
        "inline-json": document,
        "inline-yaml": f"replicaCount: two\notel:\n  headers: Bearer {JWT}\n",
        # longer than a file name may be: asking whether it names a file raised "File name too long"
        "long-inline-json": document[:-1] + ', "podAnnotations": {"note": "' + "x" * 400 + '"}}',
        "file-url": f"file://{values}",
        "path": str(values),
    }[form]
    assert main(["addon", "create", "--cluster", "c", "--configuration-values", given]) == 2
    err = capsys.readouterr().err
    assert "configurationValues.replicaCount: expected integer" in err  # the values were read
    assert ("(inline)" in err) is ("inline" in form)
    assert JWT[:20] not in err


@pytest.mark.usefixtures("no_aws_setup")
def test_an_inline_json_array_is_refused_as_values_not_looked_for_as_a_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It was taken for a file name: "[Errno 2] No such file or directory: '[1]'"."""
    assert main(["addon", "update", "--cluster", "c", "--configuration-values", "[1]"]) == 2
    err = capsys.readouterr().err
    assert "expected an object, got list" in err
    assert "No such file" not in err


@pytest.mark.usefixtures("no_aws_setup")
def test_a_values_file_that_cannot_be_read_is_named_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "sk-proj4f9aQ2x7LmN8pR3tV6wY1zB5cD0eF-values.yaml"
    assert main(["addon", "create", "--cluster", "c", "--configuration-values", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--configuration-values: cannot read " in err
    assert "No such file or directory" in err
    assert "proj4f9aQ2x7LmN8pR3t" not in err


@pytest.mark.usefixtures("no_aws_setup")
def test_a_missing_file_url_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``file://missing.yaml`` (the form ``aws eks update-addon`` takes) printed only the OS error."""
    missing = tmp_path / "missing.yaml"
    assert main(["addon", "update", "--cluster", "c", "--configuration-values", f"file://{missing}"]) == 2
    err = capsys.readouterr().err
    assert f"--configuration-values: cannot read {missing}: No such file or directory" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize("given", ["", "file://", "  "])
def test_empty_configuration_values_are_named_as_such(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--configuration-values "$VALUES"`` with the variable unset (or a bare ``file://``) was read as
    the current folder: "cannot read : Is a directory"."""
    assert main(["addon", "update", "--cluster", "c", "--configuration-values", given]) == 2
    err = capsys.readouterr().err
    assert f"--configuration-values {given!r} names no values" in err
    assert "Is a directory" not in err


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize("prefix", ["", "file://"])
def test_a_values_file_that_is_not_text_is_refused_naming_it(
    tmp_path: Path, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A binary file given as the values (a .tgz, a picture) ended in a UnicodeDecodeError traceback."""
    values = tmp_path / "values.yaml"
    values.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe binary")
    assert main(["addon", "create", "--cluster", "c", "--configuration-values", prefix + str(values)]) == 2
    assert f"{values}: not UTF-8 text" in capsys.readouterr().err


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize(
    "role",
    ["notanarn", "arn:aws:iam::12345:role/x", "arn:aws:s3:::bucket", "arn:aws:iam::123456789012:user/x"],
)
def test_a_role_that_is_not_an_iam_role_arn_is_refused_while_parsing(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was checked by its last ``/`` part against this account's roles and sent to EKS as is."""
    with pytest.raises(SystemExit) as stopped:
        main(["addon", "create", "--cluster", "c", "--role-arn", role])
    assert stopped.value.code == 2
    assert f"argument --role-arn: {role!r} is not an IAM role ARN" in capsys.readouterr().err


def test_an_iam_role_arn_is_taken() -> None:
    from igw.cli.arg_types import iam_role_arn

    for arn in (
        "arn:aws:iam::123456789012:role/igw-gateway",
        "arn:aws-us-gov:iam::123456789012:role/p/a.b@c",
    ):
        assert iam_role_arn(arn) == arn


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize("region", [[], ["--region", "us-west-2"]], ids=["no-region", "region"])
@pytest.mark.parametrize(
    ("argv", "values", "says"),
    [
        (
            ["create", "--role-arn", "arn:aws:iam::123456789012:role/igw"],
            None,
            "role: with the chart's mode operator no pod runs as service account",
        ),
        (["create"], "replicaCount: 3\n", "configurationValues.replicaCount: has no effect"),
        (["update"], "replicaCount: 3\n", "configurationValues.replicaCount: has no effect"),
    ],
    ids=["role-in-operator-mode", "create-operator-mode-value", "update-operator-mode-value"],
)
def test_invalid_input_is_a_usage_error_found_before_any_aws_client(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    region: list[str],
    argv: list[str],
    values: str | None,
    says: str,
) -> None:
    """Input that is wrong whatever the cluster holds exited 1, the code of a failed AWS operation,
    where every other command (and ``igw addon`` for an unreadable values file) exits 2; without a
    region it was hidden behind "You must specify a region"."""
    command = ["addon", *argv, "--cluster", "c", *region]
    if values is not None:
        (tmp_path / "values.yaml").write_text(values)
        command += ["--configuration-values", str(tmp_path / "values.yaml")]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"igw addon: refusing to {argv[0]} the add-on: invalid input" in err
    assert says in err
    if values is not None:
        assert f"(configuration values from {tmp_path / 'values.yaml'})" in err
    assert "region" not in err
    assert "credentials" not in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["create", "--cluster", "c", "--version", "latest"],
            "argument --version: 'latest' is not an add-on version",
        ),
        (["update", "--cluster", "c", "--version", "2"], "argument --version: '2' is not an add-on version"),
        (["delete", "--cluster", ""], "argument --cluster: '' is not an EKS cluster name"),
        (["create", "--cluster", "a b"], "argument --cluster: 'a b' is not an EKS cluster name"),
        (["versions", "--kubernetes-version", "latest"], "argument --kubernetes-version: 'latest' is not a"),
        (
            ["package", "--push", "--namespace", "My Charts"],
            "argument --namespace: 'My Charts' is not an ECR",
        ),
        (["package", "--namespace", "charts/"], "argument --namespace: 'charts/' is not an ECR"),
        (
            ["create", "--cluster", "c", "--resolve-conflicts", "PRESERVE"],
            "argument --resolve-conflicts: invalid choice: 'PRESERVE'",
        ),
    ],
)
def test_bad_flag_values_are_refused_while_parsing_naming_the_flag(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--version latest`` was refused only after parsing (exit 1); a cluster name or Kubernetes
    version EKS cannot take was sent to AWS, as was ``create --resolve-conflicts PRESERVE`` (after every
    pre-check; ``CreateAddon`` refuses it: InvalidParameterException)."""
    with pytest.raises(SystemExit) as stopped:
        main(["addon", *argv])
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err


def test_credentials_aws_rejects_are_reported_as_a_failed_aws_call_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """moto checking every request's signature against its IAM (``set_initial_no_auth_action_count(0)``):
    a key AWS does not know. ``create``'s read-only pre-check (DescribeCluster) raised botocore's
    ``ClientError`` out of ``igw addon``: a traceback, exit 1."""
    from moto import mock_aws
    from moto.core import set_initial_no_auth_action_count

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-key-aws-knows")

    @set_initial_no_auth_action_count(0)
    @mock_aws
    def run() -> int:
        return main(["addon", "create", "--cluster", "c", "--region", "us-west-2"])

    assert run() == 1
    err = capsys.readouterr().err
    assert err.startswith("igw addon: AWS: ")
    assert "DescribeCluster" in err
    assert "InvalidClientTokenId" in err


def test_update_still_takes_preserve() -> None:
    """PRESERVE is what keeps fields changed in the cluster on update (``UpdateAddon`` takes it)."""
    from igw.cli.main import build_parser

    args = build_parser().parse_args(["addon", "update", "--cluster", "c", "--resolve-conflicts", "PRESERVE"])
    assert args.resolve_conflicts == "PRESERVE"


@pytest.mark.parametrize(
    ("command", "default"), [("create", "the one this igw pins"), ("update", "the installed one, unchanged")]
)
def test_the_version_help_gives_each_command_its_own_default(command: str, default: str) -> None:
    """``igw addon update --help`` said "(create default: the pinned one)": update keeps the installed
    version when none is given (session s50)."""
    from igw.cli.main import build_parser

    parser = build_parser()
    addon = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["addon"]
    action = next(a for a in addon._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    (version,) = (a for a in action._actions if "--version" in a.option_strings)
    assert version.help == f"add-on version (default: {default})"


@pytest.mark.usefixtures("no_aws_setup")
def test_the_cli_clients_retry_a_throttled_call_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients ``igw addon`` makes retry ``ThrottlingException`` as botocore's standard mode does (3
    attempts, jittered backoff), the throttle sent as EKS sends it (HTTP 429, ``x-amzn-ErrorType``) so
    botocore's retry handler sees it; the Stubber answers above that handler and never retries. The
    add-on waits add their own polling on top (``test_operations.py::test_a_throttled_poll_*``)."""
    import argparse

    import botocore.endpoint
    from botocore.awsrequest import AWSResponse

    from igw.addon.eks_api import AddonApiError
    from igw.addon.operations import AwsClients
    from igw.cli import addon as addon_cli

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-key")
    for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"):  # botocore's defaults, not this machine's
        monkeypatch.delenv(name, raising=False)
    delays: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", delays.append)
    clients = addon_cli._clients(argparse.Namespace(region="us-west-2", profile=None))
    assert isinstance(clients, AwsClients)

    class Body:
        def stream(self, **_kwargs: object) -> Iterator[bytes]:
            yield b'{"message": "Rate exceeded"}'

    def throttled(request: Any, **_kwargs: object) -> AWSResponse:
        headers = {"x-amzn-ErrorType": "ThrottlingException", "content-type": "application/json"}
        return AWSResponse(request.url, 429, headers, Body())

    clients.addons._eks.meta.events.register("before-send.eks.DescribeAddon", throttled)
    with pytest.raises(AddonApiError, match="DescribeAddon: ThrottlingException: Rate exceeded"):
        clients.addons.describe_addon(cluster="igw", name="igw-inference-gateway")
    assert len(delays) == 2
    assert all(0 <= delay <= 20 for delay in delays)


@pytest.mark.usefixtures("no_aws_setup")
def test_irsa_without_a_role_is_a_usage_error_before_any_aws_call(capsys: pytest.CaptureFixture[str]) -> None:
    """``igw addon create --identity irsa`` without ``--role-arn`` (nor ``serviceAccount.roleArn`` in
    the values) went on to the AWS calls: here it ended in "Unable to locate credentials", with
    credentials in DescribeCluster and the other pre-checks."""
    argv = ["addon", "create", "--cluster", "c", "--identity", "irsa", "--region", "us-west-2"]
    argv += ["--configuration-values", '{"mode": "gateway"}']
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--identity irsa" in err
    assert "pass --role-arn ARN (or set serviceAccount.roleArn in the configuration values)" in err
    assert "credentials" not in err


def _refusing(status: int, code: str, message: str) -> Any:
    """A ``before-send`` handler answering every call as AWS refuses it (below botocore's retry handler)."""
    from botocore.awsrequest import AWSResponse

    class Body:
        def stream(self, **_kwargs: object) -> Iterator[bytes]:
            yield ('{"message": "' + message + '"}').encode()

    def refuse(request: Any, **_kwargs: object) -> AWSResponse:
        headers = {"x-amzn-ErrorType": code, "content-type": "application/json"}
        return AWSResponse(request.url, status, headers, Body())

    return refuse


@pytest.mark.usefixtures("no_aws_setup")
@pytest.mark.parametrize(
    ("argv", "status", "code", "message", "hint"),
    [
        (
            ["versions"],
            429,
            "ThrottlingException",
            "Rate exceeded",
            "AWS throttled or failed the call through botocore's retries with backoff: wait a minute",
        ),
        (
            ["create", "--cluster", "c"],
            429,
            "TooManyRequestsException",
            "Too many requests",
            "or set AWS_MAX_ATTEMPTS=10 to retry longer",
        ),
        (
            ["versions"],
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired",
            "the credentials have expired: refresh them with aws sso login or a new session token",
        ),
        (
            ["create", "--cluster", "c"],
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired",
            "the credentials have expired",
        ),
        (
            ["delete", "--cluster", "c"],
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
            "AWS does not accept these credentials; check --profile, AWS_PROFILE and the access key",
        ),
        (
            ["versions"],
            403,
            "AccessDeniedException",
            "Access denied",
            "the caller's IAM policies must allow eks:DescribeAddonVersions",
        ),
    ],
    ids=["throttled", "throttled-precheck", "expired", "expired-precheck", "unrecognized", "denied"],
)
def test_an_aws_refusal_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    status: int,
    code: str,
    message: str,
    hint: str,
) -> None:
    """Each printed AWS's error alone, exit 1: a throttle that outlasted botocore's retries read like a
    refusal, an expired session token did not say new credentials are the fix, and an
    ``AccessDeniedException`` whose message names no action (a boundary, an SCP) not which action is
    missing. ``create``'s pre-check ``DescribeCluster`` comes through a plain client (botocore's
    ``ClientError``), the add-on calls through the seam (``AddonApiError``): both say it."""
    import botocore.endpoint

    from igw.cli import addon as addon_cli

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-key")
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda _s: None)
    make = addon_cli._clients

    def refused_clients(args: Any) -> object:
        clients = make(args)
        for client in (clients.addons._eks, clients.eks, clients.iam):  # type: ignore[attr-defined]
            client.meta.events.register_first("before-send", _refusing(status, code, message))
        return clients

    monkeypatch.setattr(addon_cli, "_clients", refused_clients)
    assert main(["addon", *argv, "--region", "us-west-2"]) == 1
    err = capsys.readouterr().err
    first, second = err.splitlines()
    assert code in first
    assert message in first
    assert second.startswith("  - ")
    assert hint in second
    assert "Traceback" not in err


@pytest.mark.usefixtures("no_aws_setup")
def test_an_access_denied_message_that_names_the_action_gets_no_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from igw.cli import addon as addon_cli

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-key")
    make = addon_cli._clients
    user = "arn:aws:iam::123456789012:user/bob"
    denied = f"User: {user} is not authorized to perform: eks:DescribeAddonVersions"

    def refused_clients(args: Any) -> object:
        clients = make(args)
        clients.addons._eks.meta.events.register_first(  # type: ignore[attr-defined]
            "before-send", _refusing(403, "AccessDeniedException", denied)
        )
        return clients

    monkeypatch.setattr(addon_cli, "_clients", refused_clients)
    assert main(["addon", "versions", "--region", "us-west-2"]) == 1
    assert capsys.readouterr().err == f"igw addon: DescribeAddonVersions: AccessDeniedException: {denied}\n"


@pytest.mark.parametrize("kind", ["client-error", "validation-error"])
def test_an_aws_error_quoting_a_secret_is_printed_redacted(
    kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """botocore's errors were printed as they came: an EKS refusal quoting the API server's field error
    (``spec.token: Invalid value: "..."``) or a parameter validation error quoting a secret parameter's
    value reached the terminal (and CI logs) whole."""
    from botocore.exceptions import ClientError, ParamValidationError

    import igw.cli.addon as addon_cli

    secret = "s3cr3tTokenValue9876"

    def refused(args: object) -> object:
        if kind == "client-error":
            raise ClientError(
                {
                    "Error": {
                        "Code": "InvalidParameterException",
                        "Message": f'webhook denied: spec.token: Invalid value: "{secret}": must be empty',
                    }
                },
                "DescribeCluster",
            )
        raise ParamValidationError(
            report=f"Invalid type for parameter SecretString, value: {secret}, type: <class 'int'>, "
            "valid types: <class 'str'>"
        )

    monkeypatch.setattr(addon_cli, "_clients", refused)
    code = main(["addon", "versions", "--region", "us-west-2"])
    err = capsys.readouterr().err
    assert code == (1 if kind == "client-error" else 2)
    assert err.startswith("igw addon: AWS: ")
    assert secret not in err
    assert "[REDACTED]" in err
