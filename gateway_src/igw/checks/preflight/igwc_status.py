"""IGW-PF016: what the operator reports on each ``InferenceGatewayConfig`` (live clusters only).

``igw operator`` writes conditions and per-scheduler rollout state on every object; this check reads
them back so a pre-flight run shows refused specs (``Accepted=False`` with the path-named problems),
gateways that are not ready and why, degraded schedulers with their missing signals, and objects the
operator never reported on (it is not running, or the status is for an older generation).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Missing, need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-PF016",
    title="InferenceGatewayConfig status: accepted, programmed and ready",
    command=Command.PREFLIGHT,
    category="operator",
    severity=Severity.HIGH,
    description="Reads status.conditions and status.schedulers[] that igw operator writes on every "
    "InferenceGatewayConfig: Accepted, GatewayProgrammed, Ready, rolloutState, missing signals.",
    remediation="kubectl describe igwc NAME -n NS shows each condition's message; see docs/operating.md "
    "(Conditions and reasons, Debugging).",
)


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        str(c.get("type")): c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type")
    }


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    if ctx.inventory.kube.static:
        yield r.skip("-", Missing("status is written in the cluster: manifests carry none"))
        return
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        resource = ref(config)
        status = config.get("status") or {}
        generation = (config.get("metadata") or {}).get("generation")
        if not status.get("conditions"):
            yield r.warn(
                resource,
                "no status: igw operator is not running or not watching this namespace "
                "(with the chart's gateway mode nothing writes status)",
                severity=Severity.MEDIUM,
            )
            continue
        conditions = _conditions(status)
        accepted = conditions.get("Accepted") or {}
        if accepted.get("status") == "False":
            yield r.fail(
                resource,
                f"not accepted ({accepted.get('reason')}): {accepted.get('message')}",
                severity=Severity.CRITICAL,
            )
            continue
        if generation is not None and status.get("observedGeneration") != generation:
            yield r.warn(
                resource,
                f"status describes generation {status.get('observedGeneration')}, "
                f"the object is at {generation}",
                severity=Severity.MEDIUM,
            )
        ready = conditions.get("Ready") or {}
        if ready.get("status") != "True":
            yield r.fail(
                resource,
                f"not ready ({ready.get('reason', 'no Ready condition')}): {ready.get('message', '')}",
            )
        degraded = False
        for scheduler in status.get("schedulers") or []:
            if isinstance(scheduler, Mapping) and scheduler.get("rolloutState") == "Degraded":
                degraded = True
                endpoints = scheduler.get("endpoints") or {}
                signals = (
                    "; ".join(str(s) for s in scheduler.get("missingSignals") or []) or "no missing signal"
                )
                yield r.warn(
                    f"{resource} scheduler {scheduler.get('name')}",
                    f"Degraded: {endpoints.get('ready', 0)}/{endpoints.get('found', 0)} endpoints ready, "
                    f"{endpoints.get('stale', 0)} stale; {signals}",
                )
        if ready.get("status") == "True" and not degraded:
            yield r.passed(
                resource,
                f"Ready: {status.get('readyEndpoints', 0)} ready endpoint(s) for {status.get('models', '')} "
                f"at {status.get('address', '')}",
            )


CHECK = FunctionCheck(META, _run)
