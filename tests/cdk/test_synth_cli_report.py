"""``make synth`` (``python -m cdk.synth_cli``) reports this run's synthesis, never an earlier one's.

Before session s41 a synthesis that failed for a reason of its own (here a config string CDK reads as
a token it does not know) printed the ``validation-report.json`` an earlier run had left in ``--out``,
so the user read an old cdk-nag finding as the cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdk import config, nag, synth_cli

STALE_REPORT = {
    "title": "Validation Report",
    "pluginReports": [
        {
            "pluginName": nag.PLUGIN_NAME,
            "summary": {"pluginName": nag.PLUGIN_NAME, "status": "failure"},
            "violations": [
                {
                    "ruleName": "AwsSolutions-S1",
                    "description": "The S3 Bucket has server access logs disabled.",
                    "violatingConstructs": [{"constructPath": "IgwInference/RemovedBucket/Resource"}],
                }
            ],
            "suppressedViolations": [],
        }
    ],
}
"""What an earlier run, whose stacks had a bucket since removed, left in the cloud assembly."""


def _example() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(config.EXAMPLE_FILE.read_text(encoding="utf-8"))
    return document


def test_a_failed_synthesis_does_not_report_an_earlier_runs_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / nag.REPORT_FILE).write_text(json.dumps(STALE_REPORT), encoding="utf-8")
    document = _example()
    # Valid for the config (any annotation value is), but CDK resolves it as a token it never issued.
    document["inference"]["gatewayConfig"]["spec"]["podDefaults"] = {
        "annotations": {"note": "${Token[TOKEN.99999]}"}
    }
    source = tmp_path / "deployment.yaml"
    source.write_text(yaml.safe_dump(document), encoding="utf-8")

    assert synth_cli.main(["--config", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "synthesis failed: " in err
    assert "Unrecognized token key: TOKEN.99999" in err
    assert "AwsSolutions-S1" not in err
    assert "RemovedBucket" not in err
