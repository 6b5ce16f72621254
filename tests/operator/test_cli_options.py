"""``igw operator``'s text options are checked while the command line is parsed (exit 2, the option).

Each of these was accepted and went wrong later: ``--gateway-image ''`` made every Deployment the
operator applied invalid, ``--gateway-otlp-endpoint http://host:99999`` failed every pass ("Port out of
range" while building the NetworkPolicy), ``notaurl`` was handed to every gateway pod, and
``--namespace Bad_NS`` was watched silently and matched nothing.
"""

from __future__ import annotations

import pytest

from igw.cli import operator as operator_cli
from igw.cli.main import build_parser, main
from igw.operator.election import ElectionSettings


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--gateway-image", ""),
        ("--gateway-image", "repo/igw:0.1.0\nbad"),
        ("--gateway-otlp-endpoint", "notaurl"),
        ("--gateway-otlp-endpoint", "http://collector:99999"),
        ("--gateway-otlp-endpoint", "ftp://collector:21"),
        ("--gateway-worker-timeout", "-1"),
        ("--gateway-worker-timeout", "30s"),
        ("--namespace", "Bad_NS"),
        ("--lease-namespace", "kube_system"),
        ("--lease-name", "Bad Name"),
    ],
)
def test_a_bad_value_is_refused_while_parsing(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--no-leader-election", option, value])
    assert exited.value.code == 2
    assert f"argument {option}:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--gateway-image", "123456789012.dkr.ecr.us-west-2.amazonaws.com/igw:0.1.0"),
        ("--gateway-image", "public.ecr.aws/igw/inference-gateway@sha256:" + "a" * 64),
        ("--gateway-otlp-endpoint", "http://otel-collector.observability:4318"),
        ("--gateway-otlp-endpoint", "https://otlp.example.com/v1/traces"),
        ("--namespace", "inference"),
        ("--lease-name", "igw-operator"),
    ],
)
def test_a_good_value_parses(option: str, value: str) -> None:
    args = build_parser().parse_args(["operator", option, value])
    dest = option.removeprefix("--").replace("-", "_")
    parsed = getattr(args, dest)
    assert parsed == ([value] if isinstance(parsed, list) else value)


def test_the_election_durations_reach_the_operators_settings() -> None:
    """``--lease-duration`` / ``--renew-deadline`` / ``--retry-period`` (fixed at 8 / 5 / 2 s before, so
    a slow API server made the leader step down over and over) reach the options the runner builds
    its :class:`ElectionSettings` from; left out, they are the settings' own defaults."""
    args = build_parser().parse_args(
        ["operator", "--lease-duration", "30", "--renew-deadline", "20", "--retry-period", "5"]
    )
    options = operator_cli.operator_options(args)
    assert (options.lease_duration_s, options.renew_deadline_s, options.retry_period_s) == (30, 20, 5)
    default = operator_cli.operator_options(build_parser().parse_args(["operator"]))
    settings = ElectionSettings("igw-operator", "kube-system", "one")
    assert (default.lease_duration_s, default.renew_deadline_s, default.retry_period_s) == (
        settings.lease_duration_s,
        settings.renew_deadline_s,
        settings.retry_period_s,
    )


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--renew-deadline", "15"], "--lease-duration (15) must exceed --renew-deadline (15)"),
        (["--retry-period", "9"], "--renew-deadline (10) must exceed 1.2 x --retry-period (9)"),
        (
            ["--lease-duration", "10", "--renew-deadline", "12", "--retry-period", "10"],
            "--renew-deadline (12) must exceed 1.2 x --retry-period (10); "
            "--lease-duration (10) must exceed --renew-deadline (12)",
        ),
    ],
)
def test_election_durations_that_break_the_rules_together_are_refused_naming_the_flags(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each within its bounds, together refused before the operator connects (exit 2), naming the
    flags rather than ``ElectionSettings``' fields."""
    assert main(["operator", "--kubeconfig", "/dev/null", *flags]) == 2
    assert capsys.readouterr().err.strip() == f"igw operator: {named}"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--lease-duration", "2"),
        ("--lease-duration", "301"),
        ("--renew-deadline", "300"),
        ("--retry-period", "0"),
    ],
)
def test_an_election_duration_out_of_bounds_is_refused_while_parsing_with_its_reason(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected a whole number from" in err
    assert "seconds" in err.split(f"got {value!r}", 1)[1]  # the reason, in brackets


def test_election_durations_are_refused_without_leader_election(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--no-leader-election", "--retry-period", "3"]) == 2
    assert "--retry-period does not apply to --no-leader-election" in capsys.readouterr().err
