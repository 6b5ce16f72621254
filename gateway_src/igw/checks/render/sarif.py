"""SARIF 2.1.0 output for code-scanning UIs.

One rule per check (with ``properties.security-severity`` 0-10 so GitHub maps CRITICAL/HIGH/
MEDIUM/LOW) and one result per FAIL/WARN; PASS and SKIP are not alerts. Each result carries a
logical location (the resource) and, for static sources, a physical one - the manifest file and the
line its document starts on, or the CDK template - because code-scanning services reject results
without a file. A source that failed to load (an unreadable file, a template that does not parse) is
an error-level tool execution notification, and the run is marked unsuccessful.
"""

from __future__ import annotations

import json
from typing import Any

from igw import __version__
from igw.checks.model import Severity, Status
from igw.checks.render.report import Report

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/igw/igw/blob/main/docs/operator-tools.md"


def _level(status: Status, severity: Severity) -> str:
    if status is Status.WARN or severity in (Severity.LOW, Severity.MEDIUM):
        return "warning" if severity is not Severity.LOW else "note"
    if severity is Severity.INFO:
        return "note"
    return "error"


def _location(report: Report, resource: str) -> dict[str, Any]:
    location: dict[str, Any] = {
        "logicalLocations": [{"name": resource, "fullyQualifiedName": resource, "kind": "resource"}]
    }
    found = report.location(resource)
    if found is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": found.uri}}
        if found.line is not None:
            physical["region"] = {"startLine": found.line}
        location["physicalLocation"] = physical
    return location


def to_sarif(report: Report) -> dict[str, Any]:
    rules = []
    index: dict[str, int] = {}
    for position, meta in enumerate(report.checks):
        index[meta.id] = position
        rules.append(
            {
                "id": meta.id,
                "name": meta.title.replace(" ", ""),
                "shortDescription": {"text": meta.title},
                "fullDescription": {"text": meta.description},
                "help": {"text": meta.remediation},
                "helpUri": f"{INFORMATION_URI}#{meta.id.lower()}",
                "defaultConfiguration": {"level": _level(Status.FAIL, meta.severity)},
                "properties": {
                    "security-severity": f"{meta.severity.security_severity:.1f}",
                    "tags": ["security", meta.category, *[str(c) for c in meta.cross_refs]],
                },
            }
        )
    results = []
    for result in report.results:
        if not result.is_finding:
            continue
        results.append(
            {
                "ruleId": result.check_id,
                "ruleIndex": index[result.check_id],
                "level": _level(result.status, result.severity),
                "message": {"text": f"{result.resource}: {result.message}"},
                "locations": [_location(report, result.resource)],
                "partialFingerprints": {"igw/resource": f"{result.check_id}|{result.resource}"},
                "properties": {
                    "security-severity": f"{result.severity.security_severity:.1f}",
                    "status": result.status.value,
                    "remediation": result.remediation,
                },
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "igw",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": rules,
                    }
                },
                "automationDetails": {"id": f"igw/{report.command.value}/"},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": report.exit_code in (0, 1) and not report.source_errors,
                        "toolExecutionNotifications": [
                            *(
                                {"level": "error", "message": {"text": f"source not loaded: {error}"}}
                                for error in report.source_errors
                            ),
                            *(
                                {
                                    "level": "warning",
                                    "message": {"text": f"{r.check_id} skipped: {r.message}"},
                                }
                                for r in report.results
                                if r.not_evaluated
                            ),
                        ],
                    }
                ],
            }
        ],
    }


def render_sarif(report: Report) -> str:
    return json.dumps(to_sarif(report), indent=2) + "\n"
