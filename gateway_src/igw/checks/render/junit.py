"""JUnit XML: one testcase per check x resource.

FAIL → ``<failure>``; WARN → ``<failure>`` only at or above ``--fail-on`` (else ``<system-out>``, so a CI
dashboard agrees with the exit code); SKIP → ``<skipped message=reason>``; PASS → an empty testcase.
A source that failed to load is an ``<error>`` in a ``sources`` suite, so CI shows a broken input as
an error rather than as checks that were merely skipped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from igw.checks.model import Status
from igw.checks.render.report import Report


def render_junit(report: Report) -> str:
    suites = ET.Element("testsuites", name=f"igw {report.command.value}")
    by_check: dict[str, ET.Element] = {}
    counts: dict[str, dict[str, int]] = {}
    for meta in report.checks:
        suite = ET.SubElement(suites, "testsuite", name=f"{meta.id} {meta.title}")
        by_check[meta.id] = suite
        counts[meta.id] = {"tests": 0, "failures": 0, "skipped": 0}
    for result in report.results:
        suite = by_check[result.check_id]
        tally = counts[result.check_id]
        tally["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname=result.check_id, name=result.resource)
        gating = result.severity.rank >= report.fail_on.rank
        if result.status is Status.SKIP:
            tally["skipped"] += 1
            ET.SubElement(case, "skipped", message=result.message)
        elif result.status is Status.FAIL or (result.is_finding and gating):
            tally["failures"] += 1
            failure = ET.SubElement(
                case,
                "failure",
                message=result.message,
                type=f"{result.status.value} {result.severity.label}",
            )
            failure.text = result.remediation
        elif result.is_finding:
            out = ET.SubElement(case, "system-out")
            out.text = f"{result.status.value} {result.severity.label}: {result.message}"
    for check_id, suite in by_check.items():
        for key, value in counts[check_id].items():
            suite.set(key, str(value))
        suite.set("errors", "0")
    total = {k: sum(c[k] for c in counts.values()) for k in ("tests", "failures", "skipped")}
    if report.source_errors:
        sources = ET.SubElement(suites, "testsuite", name="sources", tests=str(len(report.source_errors)))
        sources.set("failures", "0")
        sources.set("skipped", "0")
        sources.set("errors", str(len(report.source_errors)))
        for error in report.source_errors:
            case = ET.SubElement(sources, "testcase", classname="source", name=error.split(": ", 1)[0])
            ET.SubElement(case, "error", message=error, type="SourceNotLoaded")
        total["tests"] += len(report.source_errors)
    for key, value in total.items():
        suites.set(key, str(value))
    suites.set("errors", str(len(report.source_errors)))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
