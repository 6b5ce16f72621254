"""cdk-nag (AwsSolutions) and cfn-lint over the synthesized assemblies (each config conftest.py makes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdk import nag
from tests.cdk.support import Synthesized, cfn_lint


@pytest.fixture(params=["example", "variant", "existing", "gateway_mode", "own_namespace"])
def assembly(request: pytest.FixtureRequest) -> Synthesized:
    synthesized: Synthesized = request.getfixturevalue(
        "synthesized" if request.param == "example" else request.param
    )
    return synthesized


def test_cdk_nag_reports_no_unsuppressed_findings(assembly: Synthesized) -> None:
    violations, acknowledged = nag.read_report(assembly.outdir)
    assert violations == []
    assert acknowledged, "the report lists what was acknowledged"


def test_every_acknowledgement_is_specific_and_has_a_reason(assembly: Synthesized) -> None:
    _, acknowledged = nag.read_report(assembly.outdir)
    for finding in acknowledged:
        assert len(finding.reason or "") >= 40, finding
        if finding.rule.startswith(("AwsSolutions-IAM4", "AwsSolutions-IAM5")):
            assert "[" in finding.rule, f"{finding.rule}: acknowledge the exact finding, not the whole rule"


def test_cfn_lint_reports_nothing_unaccepted(assembly: Synthesized) -> None:
    assert cfn_lint(*assembly.files.values()) == []


def test_cfn_lint_reports_an_error_in_a_broken_template(tmp_path: Path) -> None:
    """The check above can fail: it did not until session s48 (``python -m cfnlint`` never ran)."""
    template = tmp_path / "broken.template.json"
    template.write_text(
        json.dumps({"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"Nope": 1}}}})
    )
    (finding,) = cfn_lint(template)
    assert finding.startswith("E3002 broken.template.json Resources/Bucket/Properties"), finding


CDK_PROVIDER_FUNCTIONS = ("KubectlProvider", "BucketDeployment", "CustomResourceProvider")


def test_every_lambda_is_a_cdk_provider_and_every_checkov_skip_has_a_reason(assembly: Synthesized) -> None:
    """checkov's acknowledgements on Lambda functions are blanket (aspect) ones: only safe while this app
    defines no function of its own."""
    skipped = 0
    for template in assembly.templates.values():
        for logical, resource in template["Resources"].items():
            if resource["Type"] == "AWS::Lambda::Function":
                assert any(marker in logical for marker in CDK_PROVIDER_FUNCTIONS), logical
            for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
                assert skip["id"].startswith("CKV_"), skip
                assert len(skip["comment"]) >= 40, skip
                skipped += 1
    assert skipped, "the acknowledgements reach the templates"
