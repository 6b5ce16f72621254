"""IGW-PF017: model servers of a pool with ``flowControl.enginePriority`` run the engine's priority flags.

The gateway writes each request's band into the body's ``priority`` for these pools. A vLLM server
without ``--scheduling-policy priority`` answers 400 to every request with a non-zero priority (all
Critical and Sheddable traffic would fail); an SGLang server without ``--enable-priority-scheduling``
aborts every request that carries one. The SGLang settings the gateway assumes (the preemption
threshold, preemption on or off, which end of the scale is important) must match the server's
flags too, or the bands would not preempt (or be ordered) as configured.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, server_groups
from igw.scheduling.engine_priority import EnginePriority, EnginePriorityError, PriorityEngine

META = CheckMeta(
    id="IGW-PF017",
    title="Model servers run the priority flags flowControl.enginePriority needs",
    command=Command.PREFLIGHT,
    category="model-servers",
    severity=Severity.HIGH,
    description="For a scheduler listed in spec.extensions.flowControl.enginePriority, the model-server "
    "container's argv must enable the engine's priority scheduler (vLLM --scheduling-policy priority; "
    "SGLang --enable-priority-scheduling) with the preemption threshold, --disable-priority-preemption "
    "and --schedule-low-priority-values-first the entry assumes.",
    remediation="Start the model servers with the flag named in the finding, or change or remove the "
    "scheduler's enginePriority entry.",
)


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """``--flag V`` / ``--flag=V`` from argv; ``""`` for a bare ``--flag``; ``None`` when absent."""
    for index, token in enumerate(argv):
        if token == flag:
            following = argv[index + 1] if index + 1 < len(argv) else ""
            return "" if following.startswith("--") else following
        if token.startswith(flag + "="):
            return token[len(flag) + 1 :]
    return None


def problems(engine: EnginePriority, argv: Sequence[str]) -> list[tuple[Severity, str]]:
    """What the server's flags get wrong for ``engine`` (empty: they match)."""
    if engine.engine is PriorityEngine.VLLM:
        policy = flag_value(argv, "--scheduling-policy")
        if policy != "priority":
            return [
                (
                    Severity.HIGH,
                    "vLLM without --scheduling-policy priority answers 400 to a non-zero priority",
                )
            ]
        return []
    if flag_value(argv, "--enable-priority-scheduling") is None:
        return [
            (Severity.HIGH, "SGLang without --enable-priority-scheduling aborts requests carrying a priority")
        ]
    found: list[tuple[Severity, str]] = []
    no_preemption = flag_value(argv, "--disable-priority-preemption") is not None
    if no_preemption != (engine.preemption_threshold is None):
        said = "runs with" if no_preemption else "runs without"
        found.append(
            (
                Severity.MEDIUM,
                f"the server {said} --disable-priority-preemption; the entry's preemption disagrees",
            )
        )
    if engine.preemption_threshold is not None:
        raw = flag_value(argv, "--priority-scheduling-preemption-threshold")
        threshold = 10 if raw is None else int(raw) if raw.lstrip("-").isdigit() else None
        if threshold != engine.preemption_threshold:
            found.append(
                (
                    Severity.MEDIUM,
                    f"--priority-scheduling-preemption-threshold is {raw or '10 (default)'}, "
                    f"the entry assumes {engine.preemption_threshold}",
                )
            )
    low_first = flag_value(argv, "--schedule-low-priority-values-first") is not None
    if low_first != engine.low_values_first:
        found.append(
            (Severity.MEDIUM, "--schedule-low-priority-values-first and the entry's lowValuesFirst disagree")
        )
    return found


def _entries(group: ServerGroup) -> Mapping[str, Any] | None:
    flow = section(group.scheduler.config, "extensions", "flowControl") or {}
    for entry in flow.get("enginePriority") or ():
        if isinstance(entry, Mapping) and entry.get("scheduler") == group.scheduler.name:
            return entry
    return None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        entry = _entries(group)
        if entry is None:
            continue
        try:
            engine = EnginePriority.from_entry(
                entry, engine=group.scheduler.engine_type, where="enginePriority"
            )
        except (EnginePriorityError, ValueError, KeyError, TypeError):
            continue  # igw validate (IGW-PF009) reports the entry itself
        found = problems(engine, group.argv)
        if not found:
            yield r.passed(group.resource, f"{engine.flag} as enginePriority assumes")
            continue
        severity = Severity.HIGH if any(s is Severity.HIGH for s, _ in found) else Severity.MEDIUM
        yield r.fail(group.resource, "; ".join(message for _, message in found), severity=severity)


CHECK = FunctionCheck(META, _run)
