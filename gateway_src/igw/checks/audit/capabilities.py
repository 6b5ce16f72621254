"""IGW-AU403: containers drop ALL capabilities and add none beyond NET_BIND_SERVICE."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._workloads import per_workload, security_context
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

ALLOWED_ADDS = frozenset({"NET_BIND_SERVICE"})

META = CheckMeta(
    id="IGW-AU403",
    title="Capabilities dropped",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.MEDIUM,
    description="Default capabilities include NET_RAW (spoofing) and more; added ones like SYS_ADMIN are "
    "worse.",
    remediation="securityContext.capabilities: {drop: [ALL]} and no add beyond NET_BIND_SERVICE.",
    cross_refs=refs(
        "Checkov:CKV_K8S_37",
        "Checkov:CKV_K8S_25",
        "Checkov:CKV_K8S_28",
        "Trivy:KSV003",
        "Trivy:KSV106",
        "Polaris:dangerousCapabilities",
        "Polaris:insecureCapabilities",
    ),
)


def problem(container: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    caps = security_context(container).get("capabilities") or {}
    dropped = {str(c).upper() for c in caps.get("drop") or []}
    added = {str(c).upper() for c in caps.get("add") or []} - ALLOWED_ADDS
    issues = []
    if "ALL" not in dropped:
        issues.append("does not drop ALL")
    if added:
        issues.append(f"adds {', '.join(sorted(added))}")
    return ", ".join(issues) or None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload, problems in per_workload(ctx, problem):
        if problems:
            escalated = any(" adds " in p for p in problems)
            yield r.fail(ref(workload), "; ".join(problems), severity=Severity.HIGH if escalated else None)
        else:
            yield r.passed(ref(workload), "ALL capabilities dropped")


CHECK = FunctionCheck(META, _run)
