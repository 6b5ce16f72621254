"""cdk-nag: the AwsSolutions pack runs on every synthesis. Findings land in the cloud assembly's
``validation-report.json``; suppressions are acknowledged beside their resources
(:func:`cdk.constructs.nag_ack.acknowledge`), never here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdk_nag

REPORT_FILE = "validation-report.json"
PLUGIN_NAME = "AwsSolutions"
"""The cdk-nag pack's name in the report's ``pluginReports``."""


def apply_checks(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app))


def synthesize(app: cdk.App) -> list[Finding]:
    """Synthesize ``app`` and return its unsuppressed AwsSolutions findings (empty: none).

    Who stops on a finding depends on who runs the app. Run alone, aws-cdk-lib raises at the end of
    ``synth()``. Under the ``cdk`` CLI (2.1149.0 passes ``@aws-cdk/core:failSynthOnValidationErrors:
    false``) it only writes the report, exits 0 and leaves the verdict to the CLI, which
    ``cdk deploy --ignore-errors`` skips: the stacks deploy with the finding. Reading the report after
    either ending gives the app one verdict whoever runs it. A stale report is removed first, so a
    synthesis that fails for another reason is never blamed on an earlier run's findings."""
    outdir = Path(app.outdir)
    (outdir / REPORT_FILE).unlink(missing_ok=True)
    try:
        app.synth()
    except Exception:  # jsii surfaces a failed validation as a generic JSIIError
        violations = read_report(outdir)[0] if (outdir / REPORT_FILE).is_file() else []
        if not violations:
            raise
        return violations
    return read_report(outdir)[0]


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    constructs: tuple[str, ...]
    message: str
    reason: str | None
    """Why it was acknowledged; ``None`` for an unsuppressed violation."""


def _findings(entries: list[dict[str, Any]], *, suppressed: bool) -> list[Finding]:
    return [
        Finding(
            rule=str(entry.get("ruleName", "?")),
            constructs=tuple(str(c.get("constructPath", "")) for c in entry.get("violatingConstructs", [])),
            message=str(entry.get("description", "")),
            reason=str(entry.get("reason", "")) if suppressed else None,
        )
        for entry in entries
    ]


def read_report(outdir: Path) -> tuple[list[Finding], list[Finding]]:
    """(unsuppressed violations, acknowledged ones) of the AwsSolutions pack in ``outdir``'s report."""
    path = outdir / REPORT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no validation report (was the app synthesized with cdk-nag?)")
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    violations: list[Finding] = []
    acknowledged: list[Finding] = []
    for plugin in report.get("pluginReports", []):
        # aws-cdk-lib's own "CloudFormation Validate" plugin reports here too (its warnings, e.g. W3010
        # on the zones a config names, fail nothing).
        if plugin.get("pluginName") != PLUGIN_NAME:
            continue
        violations += _findings(plugin.get("violations", []), suppressed=False)
        acknowledged += _findings(plugin.get("suppressedViolations", []), suppressed=True)
    return violations, acknowledged
