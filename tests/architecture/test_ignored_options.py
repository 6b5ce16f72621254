"""An option the command would ignore is refused (exit 2, naming it), not accepted and dropped.

``igw bench`` and ``igw demo`` modes are covered in ``tests/bench/test_cli.py``; these are the other
commands whose run function used an option only together with another one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from igw.cli.main import main
from igw.config.paths import REPO_ROOT

SPEC = REPO_ROOT / "gateway_src" / "igw" / "sim" / "examples"
TRACE = str(SPEC / "trace-prefix-lora.jsonl")
A_FILE = __file__
"""A file that exists, for the options that refuse a missing one while parsing."""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sim", "run", "--trace", TRACE, "--rate", "5"],
            "igw sim run: --rate does not apply to --trace",
        ),
        (
            ["sim", "run", "--trace", TRACE, "--requests", "9", "--cv", "2", "--lengths", "azure-code"],
            "--requests, --cv, --lengths do not apply to --trace",
        ),
        (
            ["serve", "--config", "c.yaml", "--endpoints", A_FILE, "--worker-timeout", "5"],
            "igw serve: --worker-timeout needs --workers N (N > 1) or auto",
        ),
        (
            [
                "serve",
                "--config",
                "c.yaml",
                "--endpoints",
                A_FILE,
                "--emf-endpoint",
                "tcp://127.0.0.1:25888",
            ],
            "igw serve: --emf-endpoint needs --emf-interval SECONDS > 0",
        ),
        (
            ["top", "http://127.0.0.1:1", "--screenshot-after", "5"],
            "igw top: --screenshot-after needs --screenshot",
        ),
        (
            ["top", "http://127.0.0.1:1", "--screenshot-wait", "5"],
            "igw top: --screenshot-wait needs --screenshot",
        ),
        (
            ["preflight", "--manifests", str(Path(__file__).parent), "--probe-timeout", "30"],
            "igw preflight: --probe-timeout does not apply to a run without --probe",
        ),
        (
            ["operator", "--no-gateway-network-policy", "--gateway-ingress-cidr", "10.0.0.0/8"],
            "igw operator: --gateway-ingress-cidr does not apply to --no-gateway-network-policy",
        ),
        (
            ["operator", "--no-auto-tls", "--tls-sweep-seconds", "60", "--tls-issuer", "ClusterIssuer/ca"],
            "igw operator: --tls-sweep-seconds, --tls-issuer do not apply to --no-auto-tls",
        ),
        (
            ["operator", "--no-leader-election", "--lease-name", "mine"],
            "igw operator: --lease-name does not apply to --no-leader-election",
        ),
        (
            ["operator", "--gateway-workers", "1", "--gateway-worker-timeout", "5"],
            "igw operator: --gateway-worker-timeout does not apply to --gateway-workers 1",
        ),
        (
            ["operator", "--gateway-emf-endpoint", "udp://127.0.0.1:25888"],
            "igw operator: --gateway-emf-endpoint does not apply to --gateway-emf-interval 0",
        ),
        (
            ["perf", "workers", "--workers", "1", "--rounds", "1", "--seconds", "5"],
            "igw perf workers: --seconds does not apply to --load raw",
        ),
        (
            ["perf", "workers", "--load", "wrk", "--requests", "3000"],
            "igw perf workers: --requests does not apply to --load wrk",
        ),
        (
            ["addon", "package", "--namespace", "team-charts"],
            "igw addon package: --namespace does not apply to a package without --push",
        ),
        (
            ["addon", "package", "--region", "us-west-2", "--profile", "prod"],
            "igw addon package: --region, --profile do not apply to a package without --push",
        ),
        (
            ["addon", "versions", "--check-pins", "--addon-name", "vpc-cni", "--region", "us-west-2"],
            "igw addon versions: --addon-name does not apply to --check-pins",
        ),
        (
            ["addon", "delete", "--cluster", "c", "--no-wait", "--timeout", "60"],
            "igw addon delete: --timeout does not apply to --no-wait",
        ),
        (
            ["addon", "update", "--cluster", "c", "--no-wait", "--timeout=60"],
            "igw addon update: --timeout does not apply to --no-wait",
        ),
    ],
)
def test_an_option_that_would_do_nothing_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw sim run --trace T --rate 5`` replayed the trace at its own rate; ``igw addon package
    --namespace NS`` (no ``--push``) pushed nowhere, ``igw operator --no-gateway-network-policy
    --gateway-ingress-cidr C`` wrote no policy at all and ``versions --check-pins --addon-name X`` checked
    the CDK app's pins, not X (refused before any AWS client exists); ``igw serve
    --worker-timeout 5`` (one process) and ``--emf-endpoint`` without an interval started with no
    check and no CloudWatch feed; ``igw top --screenshot-after 5`` opened the live view. Each exit 0."""
    if argv[:2] == ["sim", "run"]:
        argv = [*argv, "--spec", str(next(SPEC.glob("*.yaml")))]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_trace_run_still_takes_the_options_it_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refusing the generator's options leaves ``--seed`` and the rest to a trace run (it fails on the
    empty trace, not on an option)."""
    spec = str(next(SPEC.glob("*.yaml")))
    (tmp_path / "empty.jsonl").write_text("")
    code = main(["sim", "run", "--spec", spec, "--trace", str(tmp_path / "empty.jsonl"), "--seed", "3"])
    err = capsys.readouterr().err
    assert "does not apply" not in err
    assert "the trace holds no requests" in err
    assert code == 2


def test_a_package_without_push_still_takes_its_destination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refusing the push-only options leaves ``--destination`` to a local package."""
    assert main(["addon", "package", "--destination", str(tmp_path)]) == 0
    assert "does not apply" not in capsys.readouterr().err
    assert list(tmp_path.glob("inference-gateway-*.tgz"))


def test_a_ca_bundle_without_probe_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``igw preflight --ca-bundle PEM`` without ``--probe`` fetched nothing and ran as if the probes had
    used it; it is refused, and taken with ``--probe``."""
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    manifests = REPO_ROOT / "crds" / "examples"
    assert main(["preflight", "--manifests", str(manifests), "--ca-bundle", str(ca)]) == 2
    assert "igw preflight: --ca-bundle does not apply to a run without --probe" in capsys.readouterr().err
