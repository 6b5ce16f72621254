"""IGW-AU603: priority bands cannot be claimed by any client.

With ``spec.extensions.flowControl`` the ``x-gateway-inference-objective`` header picks a request's
band. The header is the client's choice, so unless ``headerPriorityLimit`` caps it or
``objectiveAccess`` reserves the high objectives for authenticated tenants, any caller
can put batch traffic in the top band and the bands protect nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU603",
    title="Priority bands not claimable by any client",
    command=Command.AUDIT,
    category="tenancy",
    severity=Severity.MEDIUM,
    description="The x-gateway-inference-objective header is chosen by the client: without a limit any "
    "caller can mark its traffic Critical and push every other tenant's requests behind it.",
    remediation="Set spec.extensions.flowControl.headerPriorityLimit (e.g. 0) and list the tenants that may "
    "use higher objectives in spec.extensions.flowControl.objectiveAccess.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        flow = section(config, "extensions", "flowControl")
        if flow is None:
            yield r.passed(ref(config), "no flowControl: requests are not put in bands")
            continue
        reserved = list(flow.get("objectiveAccess") or ())
        if "headerPriorityLimit" not in flow and not reserved:
            yield r.warn(
                ref(config),
                "any client can claim any band with x-gateway-inference-objective "
                "(no flowControl.headerPriorityLimit, no flowControl.objectiveAccess)",
            )
        elif reserved and section(config, "auth", "jwt") is None:
            yield r.warn(
                ref(config),
                "flowControl.objectiveAccess needs authenticated tenants, and spec.auth.jwt is not set: "
                "no request can use the reserved objectives",
                severity=Severity.LOW,
            )
        else:
            limit = flow.get("headerPriorityLimit")
            yield r.passed(
                ref(config),
                f"headerPriorityLimit={limit if limit is not None else 'none'}, "
                f"{len(reserved)} objective(s) reserved for listed tenants",
            )


CHECK = FunctionCheck(META, _run)
