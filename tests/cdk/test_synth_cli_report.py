"""``make synth`` (``python -m cdk.synth_cli``) reports this run's synthesis, never an earlier one's.

Before session s41 a synthesis that failed for a reason of its own (found with a config string CDK
read as a token it does not know, which the config now refuses; here a construct validation that fails
when CDK synthesizes) printed the ``validation-report.json`` an earlier run had left in ``--out``, so the
user read an old cdk-nag finding as the cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import constructs
import jsii
import pytest
import yaml

from cdk import app_builder, config, nag, synth_cli

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


_REFUSAL = "this stack cannot be synthesized (the test's validation)"


@jsii.implements(constructs.IValidation)
class _FailingValidation:
    """A validation CDK runs during synthesis (after the stacks were built), which fails."""

    def validate(self) -> list[str]:
        return [_REFUSAL]


def test_a_failed_synthesis_does_not_report_an_earlier_runs_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / nag.REPORT_FILE).write_text(json.dumps(STALE_REPORT), encoding="utf-8")
    source = tmp_path / "deployment.yaml"
    source.write_text(yaml.safe_dump(_example()), encoding="utf-8")
    real_build = app_builder.build_app

    def build_with_a_failing_value(deployment: Any, *, app: cdk.App) -> Any:
        built = real_build(deployment, app=app)
        built.stacks[0].node.add_validation(_FailingValidation())
        return built

    monkeypatch.setattr(app_builder, "build_app", build_with_a_failing_value)

    assert synth_cli.main(["--config", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{source}: synthesis failed: " in err
    assert _REFUSAL in err
    assert "AwsSolutions-S1" not in err
    assert "RemovedBucket" not in err


@jsii.implements(cdk.IAspect)
class _BuggyAspect:
    """A Python bug inside a callback from CDK: jsii reraises it as a ``RuntimeError``."""

    def visit(self, node: constructs.IConstruct) -> None:
        raise KeyError("bug-in-an-aspect")


def test_a_bug_keeps_its_traceback_as_in_app_py(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make synth`` shares ``app.py``'s rule (:mod:`cdk.synth_errors`): a refusal is one line naming the
    file (the test above), a bug propagates with its traceback. Before session s42 ``make synth`` printed
    every exception as ``synthesis failed: 'bug-in-an-aspect'``, exit 1, and the bug's location was lost."""
    source = tmp_path / "deployment.yaml"
    source.write_text(yaml.safe_dump(_example()), encoding="utf-8")
    real_build = app_builder.build_app

    def build_with_a_bug(deployment: Any, *, app: cdk.App) -> Any:
        built = real_build(deployment, app=app)
        cdk.Aspects.of(built.stacks[0]).add(_BuggyAspect())
        return built

    monkeypatch.setattr(app_builder, "build_app", build_with_a_bug)

    with pytest.raises(RuntimeError, match="bug-in-an-aspect") as raised:
        synth_cli.main(["--config", str(source), "--out", str(tmp_path / "cdk.out")])
    assert isinstance(raised.value.__context__, KeyError)
    assert "synthesis failed" not in capsys.readouterr().err


def test_an_out_path_that_is_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Session s42: ``--out`` naming a file ended ``make synth`` in a jsii traceback (``RuntimeError: ...
    must be a directory``) raised where the app is created."""
    existing = tmp_path / "cdk.out"
    existing.write_text("not a directory", encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        synth_cli.main(["--out", str(existing)])
    assert exited.value.code == 2
    assert f"--out: {existing} is a file" in capsys.readouterr().err
