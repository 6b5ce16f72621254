"""``igw operator``'s text options are checked while the command line is parsed (exit 2, the option).

Each of these was accepted and went wrong later: ``--gateway-image ''`` made every Deployment the
operator applied invalid, ``--gateway-otlp-endpoint http://host:99999`` failed every pass ("Port out of
range" while building the NetworkPolicy), ``notaurl`` was handed to every gateway pod, and
``--namespace Bad_NS`` was watched silently and matched nothing.
"""

from __future__ import annotations

import pytest

from igw.cli.main import build_parser, main


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
