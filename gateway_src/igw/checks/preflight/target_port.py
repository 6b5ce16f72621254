"""IGW-PF013: the scheduler's ``targetPort`` is where the model server listens.

The listening port is ``--port`` from the container's argv or the engine's default (vLLM 8000,
SGLang 30000); declared ``containerPorts`` that omit ``targetPort`` are flagged too, because
Services and NetworkPolicies are written against them.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import container_ports
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, detect_engine, listen_port, server_groups

META = CheckMeta(
    id="IGW-PF013",
    title="targetPort matches a container port",
    command=Command.PREFLIGHT,
    category="routing",
    severity=Severity.HIGH,
    description="spec.schedulers[].targetPort (default 8000) must be the port the model server listens on.",
    remediation="Set targetPort to the server's --port (SGLang defaults to 30000) and declare it as a "
    "containerPort.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        target = group.scheduler.target_port
        listening = listen_port(detect_engine(group.image, group.argv), group.argv)
        declared = container_ports(group.container)
        if listening is not None and listening != target:
            yield r.fail(group.resource, f"targetPort {target} but the server listens on {listening}")
        elif declared and target not in declared:
            yield r.warn(
                group.resource,
                f"targetPort {target} is not among declared containerPorts {declared}",
                severity=Severity.MEDIUM,
            )
        elif listening is None and not declared:
            yield r.warn(
                group.resource,
                f"no --port and no containerPort declared; cannot confirm targetPort {target}",
                severity=Severity.LOW,
            )
        else:
            yield r.passed(group.resource, f"server listens on {target}")


CHECK = FunctionCheck(META, _run)
