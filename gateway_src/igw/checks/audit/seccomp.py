"""IGW-AU404: a seccomp profile (RuntimeDefault or Localhost) applies to every container."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._workloads import per_workload, security_context
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU404",
    title="Seccomp profile set",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.LOW,
    description="Without seccomp every syscall is reachable from the container.",
    remediation="securityContext.seccompProfile.type: RuntimeDefault (pod level).",
    cross_refs=refs("kube-score:container-seccomp-profile", "Checkov:CKV_K8S_31", "Polaris:linuxHardening"),
)


def problem(container: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    profile = security_context(container).get("seccompProfile") or security_context(pod).get("seccompProfile")
    kind = (profile or {}).get("type")
    return None if kind in ("RuntimeDefault", "Localhost") else f"seccompProfile {kind or 'not set'}"


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload, problems in per_workload(ctx, problem):
        if problems:
            yield r.fail(ref(workload), "; ".join(problems))
        else:
            yield r.passed(ref(workload), "seccomp profile applies")


CHECK = FunctionCheck(META, _run)
