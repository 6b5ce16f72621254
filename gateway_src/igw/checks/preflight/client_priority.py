"""IGW-PF018: a model server that schedules by priority is not left to take it from the clients.

vLLM (``--scheduling-policy priority``) and SGLang (``--enable-priority-scheduling``) read each
request's priority from the body's ``priority`` field. The gateway forwards request bodies unchanged
unless the pool is listed in ``spec.extensions.flowControl.enginePriority``, where it writes the
request's band there instead (replacing whatever the client sent). So a server started with the flag
behind a pool without that entry lets every client pick its own priority: on SGLang, whose priority
scheduler preempts running requests of a lower priority, one tenant marking its requests important
evicts everyone else's (HIGH); on vLLM, which only orders its waiting queue by it, it jumps the queue
(MEDIUM).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, server_groups
from igw.checks.preflight.engine_priority import flag_value

META = CheckMeta(
    id="IGW-PF018",
    title="Clients cannot set the priority a model server schedules by",
    command=Command.PREFLIGHT,
    category="model-servers",
    severity=Severity.HIGH,
    description="A model-server container that schedules by the request's priority (vLLM "
    "--scheduling-policy priority; SGLang --enable-priority-scheduling) must belong to a scheduler "
    "listed in spec.extensions.flowControl.enginePriority, where the gateway writes each request's "
    "band into the body's priority; elsewhere it forwards the client's own value.",
    remediation="Add an enginePriority entry for the scheduler (the gateway then sets the priority from "
    "the request's band), or start the model servers without the priority flag.",
)


def priority_flag(argv: list[str]) -> tuple[str, Severity] | None:
    """The priority-scheduling flag ``argv`` enables and what a client-chosen priority can do there
    (``None``: the server does not schedule by priority)."""
    if flag_value(argv, "--scheduling-policy") == "priority":
        return "--scheduling-policy priority", Severity.MEDIUM
    if flag_value(argv, "--enable-priority-scheduling") is not None:
        if flag_value(argv, "--disable-priority-preemption") is not None:
            return "--enable-priority-scheduling", Severity.MEDIUM
        return "--enable-priority-scheduling", Severity.HIGH
    return None


def _listed(group: ServerGroup) -> bool:
    flow = section(group.scheduler.config, "extensions", "flowControl") or {}
    return any(
        isinstance(entry, Mapping) and entry.get("scheduler") == group.scheduler.name
        for entry in flow.get("enginePriority") or ()
    )


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        found = priority_flag(group.argv)
        if found is None:
            yield r.passed(group.resource, "does not schedule by a client-supplied priority")
            continue
        flag, severity = found
        if _listed(group):
            yield r.passed(group.resource, f"{flag}: the gateway writes the priority (enginePriority)")
            continue
        effect = (
            "preempt other clients' running requests"
            if severity is Severity.HIGH
            else "move ahead of other clients' waiting requests"
        )
        yield r.fail(
            group.resource,
            f"the server runs with {flag} but scheduler {group.scheduler.name!r} has no "
            f"flowControl.enginePriority entry: the gateway forwards the client's own 'priority', so any "
            f"client can {effect}",
            severity=severity,
        )


CHECK = FunctionCheck(META, _run)
