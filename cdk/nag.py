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


def apply_checks(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app))


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
        violations += _findings(plugin.get("violations", []), suppressed=False)
        acknowledged += _findings(plugin.get("suppressedViolations", []), suppressed=True)
    return violations, acknowledged
