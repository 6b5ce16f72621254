"""Reports point at files, broken inputs are errors, and bad paths are usage errors (exit 2)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.checks.helpers import FIXTURES, cli, find, mutated


def _insecure_folder(tmp_path: Path) -> Path:
    """The secure corpus written one document per file, with the model server's labels broken."""
    docs = mutated(
        lambda d: find(d, "Deployment", "llama-8b")["spec"]["template"]["metadata"]["labels"].update(app="x")
    )
    folder = tmp_path / "manifests"
    folder.mkdir()
    for index, doc in enumerate(docs):
        text = f"# document {index}\n---\n" + yaml.safe_dump(doc)
        (folder / f"{index:02d}-{doc['kind'].lower()}.yaml").write_text(text)
    return folder


def test_sarif_results_carry_the_manifest_file_and_line(tmp_path: Path) -> None:
    folder = _insecure_folder(tmp_path)
    _, out = cli("preflight", "--manifests", str(folder), "-o", "sarif")
    run = json.loads(out)["runs"][0]
    assert run["results"]
    for result in run["results"]:
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"]["uri"].startswith(str(folder))
    selector = next(r for r in run["results"] if r["ruleId"] == "IGW-PF010")
    physical = selector["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"].endswith("-inferencegatewayconfig.yaml")
    assert physical["region"]["startLine"] == 3  # after the comment and the document marker


def test_a_source_that_failed_to_load_is_an_error_not_skips(tmp_path: Path) -> None:
    folder = _insecure_folder(tmp_path)
    (folder / "broken.yaml").write_text("kind: [unclosed")
    _, sarif = cli("audit", "--manifests", str(folder), "-o", "sarif")
    invocation = json.loads(sarif)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    errors = [n for n in invocation["toolExecutionNotifications"] if n["level"] == "error"]
    assert len(errors) == 1
    assert "broken.yaml" in errors[0]["message"]["text"]
    _, junit = cli("audit", "--manifests", str(folder), "-o", "junit")
    root = ET.fromstring(junit)
    assert root.get("errors") == "1"
    (sources,) = [s for s in root.iter("testsuite") if s.get("name") == "sources"]
    (error,) = sources.iter("error")
    assert "broken.yaml" in str(error.get("message"))


def test_an_empty_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("not a manifest")
    code, _ = cli("audit", "--manifests", str(tmp_path / "empty"))
    assert code == 2
    assert "no manifests found" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("command", ["audit", "preflight"])
@pytest.mark.parametrize(
    "text", ["root:x:0:0:root:/root:/bin/bash\n", "# only a comment\n---\n", "- a list\n- of words\n"]
)
def test_a_file_without_a_kubernetes_object_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str
) -> None:
    """``igw preflight --manifests /etc/passwd`` (a YAML string, not an object) ran every check against
    an empty cluster and exited 0; an empty folder was already an error."""
    named = tmp_path / "passwd"
    named.write_text(text)
    code, _ = cli(command, "--manifests", str(named))
    assert code == 2
    assert "no manifests found" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("where", ["missing-folder/report.sarif", "."], ids=["no-such-folder", "a-directory"])
def test_a_bad_output_file_is_a_usage_error(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _insecure_folder(tmp_path)
    target = tmp_path / where
    code, _ = cli("audit", "--manifests", str(folder), "-o", "sarif", "--output-file", str(target))
    assert code == 2
    err = capsys.readouterr().err
    assert "--output-file" in err
    assert "Traceback" not in err


def test_cdk_out_results_point_at_the_template_and_the_resource_line() -> None:
    folder = FIXTURES / "cdk" / "insecure"
    _, out = cli("audit", "--cdk-out", str(folder), "-o", "sarif")
    results = json.loads(out)["runs"][0]["results"]
    assert results
    template = str(folder / "Platform.template.json")
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == template for r in results)
    lines = (folder / "Platform.template.json").read_text().splitlines()
    located = [r for r in results if "region" in r["locations"][0]["physicalLocation"]]
    assert located, "manifests applied by the stack should carry the line of their resource"
    for result in located:
        line = lines[result["locations"][0]["physicalLocation"]["region"]["startLine"] - 1]
        assert line.strip() == '"Workloads": {'  # the KubernetesResource that applies the manifests
