"""IGW-AU401: containers run as a non-root user (runAsNonRoot or a non-zero runAsUser)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._workloads import per_workload, security_context
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU401",
    title="Containers run as non-root",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.MEDIUM,
    description="A root process that escapes the container is root on the node.",
    remediation="securityContext: {runAsNonRoot: true, runAsUser: 10001}",
    cross_refs=refs(
        "kube-score:container-security-context-user-group-id",
        "Polaris:runAsRootAllowed",
        "Checkov:CKV_K8S_23",
        "Trivy:KSV012",
    ),
)


def problem(container: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    own, shared = security_context(container), security_context(pod)
    user = own.get("runAsUser", shared.get("runAsUser"))
    non_root = own.get("runAsNonRoot", shared.get("runAsNonRoot"))
    if user == 0:
        return "runAsUser 0"
    if non_root is True or (isinstance(user, int) and user > 0):
        return None
    return "runAsNonRoot not set"


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload, problems in per_workload(ctx, problem):
        if problems:
            yield r.fail(ref(workload), "; ".join(problems))
        else:
            yield r.passed(ref(workload), "all containers non-root")


CHECK = FunctionCheck(META, _run)
