"""IGW-AU409: containers have readiness (and liveness) probes, so traffic only reaches servers that are up.

A Job or CronJob runs to completion: its pods are judged only when a Service selects them (a model
server run as a Job then takes requests before its model is loaded); a batch Job no Service reaches
has no traffic to gate.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._selecting import service_selects
from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest
from igw.checks.k8s import containers, namespace_of, ref, template_labels
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


RUN_TO_COMPLETION = frozenset({"Job", "CronJob"})


def _served(workload: Manifest, services: list[Manifest]) -> bool:
    """Whether a Service selects the workload's pods."""
    labels, namespace = template_labels(workload), namespace_of(workload)
    return any(service_selects(s, namespace, labels) for s in services)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    found = ctx.inventory.kube.of("Service")
    services = found if isinstance(found, list) else []
    for workload in workloads(ctx):
        if workload.get("kind") in RUN_TO_COMPLETION and not _served(workload, services):
            continue
        no_ready = [str(c.get("name")) for c in containers(workload) if not c.get("readinessProbe")]
        no_live = [str(c.get("name")) for c in containers(workload) if not c.get("livenessProbe")]
        if no_ready:
            yield r.fail(ref(workload), f"no readinessProbe: {', '.join(no_ready)}")
        elif no_live:
            yield r.warn(ref(workload), f"no livenessProbe: {', '.join(no_live)}", severity=Severity.LOW)
        else:
            yield r.passed(ref(workload), "readiness and liveness probes set")


CHECK = FunctionCheck(META, _run)
