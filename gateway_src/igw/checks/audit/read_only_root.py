"""IGW-AU402: containers have a read-only root filesystem (writable paths as emptyDir mounts)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._workloads import per_workload, security_context
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU402",
    title="Read-only root filesystem",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.MEDIUM,
    description="A writable root filesystem lets an intruder drop and run tools.",
    remediation="securityContext.readOnlyRootFilesystem: true, plus an emptyDir for /tmp.",
    cross_refs=refs(
        "kube-score:container-security-context-readonlyrootfilesystem",
        "Polaris:notReadOnlyRootFilesystem",
        "Checkov:CKV_K8S_22",
        "Trivy:KSV014",
    ),
)


def problem(container: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    return (
        None
        if security_context(container).get("readOnlyRootFilesystem") is True
        else "root filesystem writable"
    )


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload, problems in per_workload(ctx, problem):
        if problems:
            yield r.fail(ref(workload), "; ".join(problems))
        else:
            yield r.passed(ref(workload), "read-only root filesystems")


CHECK = FunctionCheck(META, _run)
