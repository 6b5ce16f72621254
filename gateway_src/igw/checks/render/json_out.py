"""JSON output: a stable, versioned document (schema: ``igw/checks/render/report.schema.json``)."""

from __future__ import annotations

import json
from typing import Any

from igw import __version__
from igw.checks.render.report import Report

SCHEMA_VERSION = 1


def to_document(report: Report) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "tool": {"name": "igw", "version": __version__},
        "command": report.command.value,
        "source": report.source,
        "failOn": report.fail_on.label,
        "exitCode": report.exit_code,
        "summary": report.counts(),
        "sourceErrors": list(report.source_errors),
        "checks": [
            {
                "id": m.id,
                "title": m.title,
                "category": m.category,
                "severity": m.severity.label,
                "crossRefs": [{"tool": c.tool, "id": c.id} for c in m.cross_refs],
            }
            for m in report.checks
        ],
        "results": [
            {
                "checkId": r.check_id,
                "status": r.status.value,
                "severity": r.severity.label,
                "resource": r.resource,
                "message": r.message,
                "remediation": r.remediation,
                "skipKind": r.skip_kind.value if r.skip_kind else None,
                "crossRefs": [str(c) for c in report.meta(r.check_id).cross_refs],
            }
            for r in report.results
        ],
    }


def render_json(report: Report) -> str:
    return json.dumps(to_document(report), indent=2, sort_keys=False) + "\n"
