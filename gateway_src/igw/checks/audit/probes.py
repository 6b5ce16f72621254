"""IGW-AU409: containers have readiness (and liveness) probes, so traffic only reaches servers that are up."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import containers, ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU409",
    title="Readiness and liveness probes",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.MEDIUM,
    description="Without a readiness probe a pod receives requests before the model is loaded.",
    remediation="Add readinessProbe (model servers: GET /health or /ping) and a livenessProbe.",
    cross_refs=refs("kube-score:pod-probes", "Checkov:CKV_K8S_8", "Checkov:CKV_K8S_9"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload in workloads(ctx):
        no_ready = [str(c.get("name")) for c in containers(workload) if not c.get("readinessProbe")]
        no_live = [str(c.get("name")) for c in containers(workload) if not c.get("livenessProbe")]
        if no_ready:
            yield r.fail(ref(workload), f"no readinessProbe: {', '.join(no_ready)}")
        elif no_live:
            yield r.warn(ref(workload), f"no livenessProbe: {', '.join(no_live)}", severity=Severity.LOW)
        else:
            yield r.passed(ref(workload), "readiness and liveness probes set")


CHECK = FunctionCheck(META, _run)
