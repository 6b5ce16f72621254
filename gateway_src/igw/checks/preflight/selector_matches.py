"""IGW-PF010: each scheduler's ``modelSelector`` matches at least one Ready pod, with near-miss diagnosis.

A selector that matches nothing leaves the model with no endpoints: every request gets 503. The
diagnosis names pods that almost match (key typo, value case/suffix, other namespace).
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import schedulers
from igw.checks.inventory import need
from igw.checks.k8s import is_pod_ready
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.selectors import by_namespace, diagnose, matching, nearest_values, selector_from_mapping

META = CheckMeta(
    id="IGW-PF010",
    title="Scheduler modelSelector matches Ready pods",
    command=Command.PREFLIGHT,
    category="routing",
    severity=Severity.CRITICAL,
    description="Every scheduler needs at least one Ready model-server pod in its namespace carrying the "
    "labels of its modelSelector.",
    remediation="Align the pod template labels with spec.schedulers[].modelSelector (same namespace as the "
    "InferenceGatewayConfig), and make sure the pods pass their readiness probe.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    pods = need(ctx.inventory.kube.of("Pod"))
    static = ctx.inventory.kube.static
    index = by_namespace(pods)
    for config in configs:
        for sched in schedulers(config):
            try:
                selector = selector_from_mapping(sched.model_selector)
            except ValueError as exc:
                yield r.fail(sched.resource, str(exc))
                continue
            query = selector.to_query() or "<empty>"
            matched = matching(selector, index.get(sched.namespace, []), namespace=sched.namespace)
            ready = [p for p in matched if is_pod_ready(p)]
            if static and matched:
                yield r.passed(sched.resource, f"{len(matched)} pod template(s) match {query}")
            elif ready:
                yield r.passed(
                    sched.resource, f"{len(ready)} Ready pod(s) of {len(matched)} matching {query}"
                )
            elif matched:
                yield r.fail(
                    sched.resource,
                    f"{len(matched)} pod(s) match {query} but none is Ready",
                    severity=Severity.HIGH,
                )
            else:
                hints = diagnose(selector, namespace=sched.namespace, pods=pods) or nearest_values(
                    selector, namespace=sched.namespace, pods=pods
                )
                why = f"; near misses: {' | '.join(hints)}" if hints else ""
                yield r.fail(sched.resource, f"no pod in namespace {sched.namespace!r} matches {query}{why}")


CHECK = FunctionCheck(META, _run)
