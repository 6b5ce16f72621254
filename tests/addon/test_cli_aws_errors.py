"""``igw addon`` without a usable AWS setup says what is missing instead of printing a traceback."""

from __future__ import annotations

from pathlib import Path

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
