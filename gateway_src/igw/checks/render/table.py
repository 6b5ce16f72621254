"""Human output: a rich table of findings (and, with ``--show-passed``, everything) plus a summary line."""

from __future__ import annotations

from typing import Any

from igw.checks.model import Severity, Status
from igw.checks.render.report import Report

STYLE = {
    Status.FAIL: "bold red",
    Status.WARN: "yellow",
    Status.PASS: "green",
    Status.SKIP: "dim",
}
SEVERITY_STYLE = {
    Severity.CRITICAL: "bold white on red",
    Severity.HIGH: "bold red",
    Severity.MEDIUM: "yellow",
    Severity.LOW: "cyan",
    Severity.INFO: "dim",
}


def render_table(report: Report, *, console: Any, show_passed: bool = False) -> None:
    # deferred: optional dependency: rich (ops extra), only for the table output
    from rich.markup import escape
    from rich.table import Table

    # What a report quotes from its input (the source's path, a finding's message and resource, a
    # source problem naming a file) is escaped, not taken for rich markup: a file or folder named
    # ``[prod]`` lost that part of its name, and one under ``a[/b]`` ended the command in a
    # ``MarkupError`` traceback.
    table = Table(
        title=f"igw {report.command.value} - {escape(str(report.source))}", show_lines=False, expand=True
    )
    table.add_column("Status", no_wrap=True)
    table.add_column("Severity", no_wrap=True)
    table.add_column("Check", no_wrap=True)
    table.add_column("Resource", overflow="fold")
    table.add_column("Finding", overflow="fold")
    shown = 0
    for result in report.results:
        if result.status is Status.PASS and not show_passed:
            continue
        shown += 1
        message = escape(result.message)
        if result.is_finding and result.remediation:
            message += f"\n[dim]fix: {escape(result.remediation)}[/dim]"
        refs = report.meta(result.check_id).cross_refs
        if result.is_finding and refs:
            message += f"\n[dim]refs: {', '.join(str(c) for c in refs)}[/dim]"
        severity = "" if result.status in (Status.PASS, Status.SKIP) else result.severity.label
        table.add_row(
            f"[{STYLE[result.status]}]{result.status.value}[/]",
            f"[{SEVERITY_STYLE[result.severity]}]{severity}[/]" if severity else "",
            result.check_id,
            escape(result.resource),
            message,
        )
    for error in report.source_errors:
        console.print(f"[yellow]source problem:[/] {escape(str(error))}")
    if shown:
        console.print(table)
    counts = report.counts()
    console.print(
        f"{counts['FAIL']} failed, {counts['WARN']} warnings, {counts['PASS']} passed, {counts['SKIP']} "
        f"skipped "
        f"(fail-on {report.fail_on.label.lower()}, exit {report.exit_code})",
        highlight=False,
    )
