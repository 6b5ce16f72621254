"""IGW-AU405: no privileged containers, host namespaces or privilege escalation."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._workloads import per_workload, security_context
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import pod_spec, ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU405",
    title="No privileged mode, host namespaces or privilege escalation",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.HIGH,
    description="privileged, hostNetwork/hostPID/hostIPC and allowPrivilegeEscalation break container "
    "isolation.",
    remediation="securityContext: {privileged: false, allowPrivilegeEscalation: false}; no host namespaces.",
    cross_refs=refs(
        "CIS-EKS:4.2.1",
        "CIS-EKS:4.2.5",
        "Checkov:CKV_K8S_16",
        "Checkov:CKV_K8S_20",
        "Trivy:KSV001",
        "Polaris:runAsPrivileged",
        "Polaris:privilegeEscalationAllowed",
        "Polaris:hostNetworkSet",
    ),
)


def problem(container: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    sc = security_context(container)
    issues = []
    if sc.get("privileged") is True:
        issues.append("privileged")
    if sc.get("allowPrivilegeEscalation") is not False:
        issues.append("allowPrivilegeEscalation not false")
    return ", ".join(issues) or None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload, problems in per_workload(ctx, problem):
        host = [f for f in ("hostNetwork", "hostPID", "hostIPC") if pod_spec(workload).get(f) is True]
        if host:
            problems.insert(0, f"pod uses {', '.join(host)}")
        severe = bool(host) or any("privileged" in p.split(": ", 1)[-1].split(", ") for p in problems)
        if problems:
            yield r.fail(ref(workload), "; ".join(problems), severity=None if severe else Severity.MEDIUM)
        else:
            yield r.passed(ref(workload), "no privilege")


CHECK = FunctionCheck(META, _run)
