"""Output formats (E11) and exit codes through the real CLI: JSON against our schema, SARIF against the
OASIS SARIF 2.1.0 schema, JUnit parsed, deterministic order, --fail-on, usage errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.checks.helpers import SECURE, cli, find, mutated, write_docs

SARIF_SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
REPORT_SCHEMA = json.loads(resources.files("igw.checks.render").joinpath("report.schema.json").read_text())


@pytest.fixture
def insecure_dir(tmp_path: Path) -> Path:
    def mutate(docs: list[dict[str, Any]]) -> None:
        igwc = find(docs, "InferenceGatewayConfig", "gateway")
        del igwc["spec"]["auth"]
        ann = find(docs, "Ingress", "gateway")["metadata"]["annotations"]
        del ann["alb.ingress.kubernetes.io/ssl-policy"]
        del ann["alb.ingress.kubernetes.io/load-balancer-attributes"]
        find(docs, "Deployment", "llama-8b")["spec"]["replicas"] = 1

    return write_docs(tmp_path / "insecure", mutated(mutate))


def test_json_validates_and_is_deterministic(insecure_dir: Path) -> None:
    code, first = cli("audit", "--manifests", str(insecure_dir), "-o", "json")
    _, second = cli("audit", "--manifests", str(insecure_dir), "-o", "json")
    assert first == second
    report = json.loads(first)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(report)
    assert code == report["exitCode"] == 1
    keys = [(r["checkId"], r["resource"]) for r in report["results"]]
    assert keys == sorted(keys)
    au102 = next(r for r in report["results"] if r["checkId"] == "IGW-AU102")
    assert au102["crossRefs"] == [
        "Checkov:CKV_AWS_103",
        "Trivy:AWS-0047",
        "SecurityHub:ELB.17",
        "CIS-EKS:5.4.5",
    ]


def test_sarif_validates_against_the_sarif_2_1_0_schema(insecure_dir: Path) -> None:
    code, out = cli("audit", "--manifests", str(insecure_dir), "-o", "sarif")
    sarif = json.loads(out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    run = sarif["runs"][0]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    assert rules["IGW-AU102"]["properties"]["security-severity"] == "8.0"
    levels = {(r["ruleId"], r["level"], r["properties"]["security-severity"]) for r in run["results"]}
    assert ("IGW-AU201", "error", "8.0") in levels
    assert ("IGW-AU304", "warning", "5.5") in levels
    assert ("IGW-AU408", "note", "3.0") in levels
    for result in run["results"]:
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    assert code == 1


def test_sarif_schema_is_strict_enough_to_catch_mistakes(insecure_dir: Path) -> None:
    _, out = cli("audit", "--manifests", str(insecure_dir), "-o", "sarif")
    sarif = json.loads(out)
    sarif["runs"][0]["results"][0]["level"] = "critical"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)


def test_junit_parses_with_one_case_per_check_and_resource(insecure_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    code, out = cli("audit", "--manifests", str(insecure_dir), "-o", "junit", "--output-file", str(target))
    assert out == ""
    assert code == 1
    root = ET.parse(target).getroot()
    assert root.tag == "testsuites"
    cases = root.findall(".//testcase")
    assert int(root.get("tests", "-1")) == len(cases)
    failures = [c for c in cases if c.find("failure") is not None]
    assert int(root.get("failures", "-1")) == len(failures)
    names = {(c.get("classname"), c.get("name")) for c in failures}
    assert ("IGW-AU201", "InferenceGatewayConfig ml/gateway") in names
    assert ("IGW-AU408", "Deployment ml/llama-8b") in names
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert skipped
    for case in skipped:
        skip = case.find("skipped")
        assert skip is not None
        assert skip.get("message"), case.get("name")


@pytest.mark.parametrize(("fail_on", "expected"), [("critical", 0), ("high", 1), ("low", 1), ("INFO", 1)])
def test_fail_on_threshold(insecure_dir: Path, fail_on: str, expected: int) -> None:
    code, _ = cli("audit", "--manifests", str(insecure_dir), "--fail-on", fail_on, "-o", "json")
    assert code == expected


def test_secure_corpus_exits_0_in_every_format() -> None:
    for fmt in ("table", "json", "sarif", "junit"):
        assert cli("audit", "--manifests", str(SECURE), "-o", fmt)[0] == 0
        assert cli("preflight", "--manifests", str(SECURE), "-o", fmt)[0] == 0


def test_a_missing_manifests_folder_is_refused_while_parsing_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("audit", "--manifests", "/nonexistent/dir")
    assert exc.value.code == 2
    assert "argument --manifests: /nonexistent/dir" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ("audit", "--manifests", str(SECURE), "--fail-on", "severe"),
        ("audit", "--manifests", str(SECURE), "--check", "IGW-PF001"),
    ],
)
def test_usage_errors_exit_2(argv: tuple[str, ...]) -> None:
    assert cli(*argv)[0] == 2


def test_argparse_usage_error_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        cli("audit", "--output", "yaml")
    assert exc.value.code == 2


def test_unreadable_file_makes_a_clean_run_exit_3(tmp_path: Path) -> None:
    folder = write_docs(tmp_path / "m", [])
    (folder / "bad.yaml").write_text("kind: [unclosed")
    code, out = cli("audit", "--manifests", str(folder), "-o", "json")
    report = json.loads(out)
    assert code == 3
    assert report["sourceErrors"] == [
        f"{folder / 'bad.yaml'}: line 2, column 1: did not find expected ',' or ']' "
        "(while parsing a flow sequence)"
    ]


def test_check_selection(insecure_dir: Path) -> None:
    code, out = cli("audit", "--manifests", str(insecure_dir), "-o", "json", "--check", "IGW-AU408")
    report = json.loads(out)
    assert {r["checkId"] for r in report["results"]} == {"IGW-AU408"}
    assert code == 0  # LOW finding, below the default threshold
    code, out = cli(
        "audit",
        "--manifests",
        str(insecure_dir),
        "-o",
        "json",
        "--skip-check",
        "IGW-AU201",
        "--skip-check",
        "IGW-AU602",
        "--skip-check",
        "IGW-AU102",
    )
    assert "IGW-AU201" not in {r["checkId"] for r in json.loads(out)["results"]}


def test_a_selection_that_leaves_no_check_is_a_usage_error(
    insecure_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check X --skip-check X`` ran no check and printed "0 failed, 0 warnings, 0 passed, 0
    skipped (... exit 0)": a CI gate that passes whatever the manifests hold. It is refused (exit 2)."""
    code, out = cli(
        "audit", "--manifests", str(insecure_dir), "--check", "IGW-AU201", "--skip-check", "IGW-AU201"
    )
    assert code == 2
    assert out == ""
    assert "leave no check to run" in capsys.readouterr().err
    code, _ = cli(
        "preflight", "--manifests", str(insecure_dir), "--check", "IGW-PF001", "--skip-check", "IGW-PF001"
    )
    assert code == 2


def test_check_ids_match_whatever_their_case(insecure_dir: Path) -> None:
    """``igw audit --check igw-au201`` was refused as an unknown check ID (exit 2), the right one lost
    in a list of 40; IDs are matched whatever their case, for ``--skip-check`` too."""
    code, out = cli("audit", "--manifests", str(insecure_dir), "-o", "json", "--check", "igw-au201")
    assert code == 1, out
    assert {r["checkId"] for r in json.loads(out)["results"]} == {"IGW-AU201"}
    code, out = cli(
        "audit", "--manifests", str(insecure_dir), "-o", "json", "--check", "IGW-AU201", "--check",
        "IGW-AU202", "--skip-check", "Igw-Au201",
    )  # fmt: skip
    assert {r["checkId"] for r in json.loads(out)["results"]} == {"IGW-AU202"}


@pytest.mark.parametrize("option", ["--manifests", "--cdk-out"])
@pytest.mark.parametrize("command", ["preflight", "audit"])
def test_an_empty_source_path_is_refused_not_read_as_the_current_folder(
    command: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw audit --cdk-out "$CDK_OUT"`` with the variable unset got ``''``, which is ``Path('.')``:
    it scanned the current folder (from a checkout, the test fixtures: "21 failed ... exit 1") and
    reported on it as the deployment asked about."""
    with pytest.raises(SystemExit) as exited:
        cli(command, option, "")
    assert exited.value.code == 2
    assert f"argument {option}: '' names no file or folder" in capsys.readouterr().err


def test_table_output_shows_findings_and_summary(insecure_dir: Path) -> None:
    code, out = cli("audit", "--manifests", str(insecure_dir))
    assert code == 1
    assert "IGW-AU201" in out
    assert "fix:" in out
    assert out.splitlines()[-1].endswith("(fail-on high, exit 1)")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("preflight", "--manifests", str(SECURE), "--cluster-name", "prod"), "--cluster-name"),
        (
            # an existing file: --kubeconfig is checked while parsing, before this rule
            ("audit", "--manifests", str(SECURE), "--kubeconfig", __file__, "--context", "c"),
            "--kubeconfig, --context",
        ),
        (
            ("audit", "--cdk-out", str(SECURE), "--region", "us-east-1", "--profile", "p"),
            "--region, --profile",
        ),
    ],
)
def test_live_cluster_options_with_a_file_source_are_usage_errors(
    argv: tuple[str, ...], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """They were ignored: ``--manifests deploy/ --cluster-name prod`` scanned no AWS account, and said
    nothing about it."""
    assert cli(*argv)[0] == 2
    assert f"{named}: for the live cluster only, not with --" in capsys.readouterr().err.replace("\n", " ")
