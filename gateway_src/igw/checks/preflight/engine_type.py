"""IGW-PF012: the scheduler's ``engineType`` matches the engine its pods really run.

``engineType`` picks the metric names the gateway scrapes; a vLLM pod under ``engineType: sglang``
(or the reverse) yields no queue or KV-cache signal.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, detect_engine, server_groups
from igw.engines import GENERIC

META = CheckMeta(
    id="IGW-PF012",
    title="engineType matches the model-server container",
    command=Command.PREFLIGHT,
    category="model-servers",
    severity=Severity.HIGH,
    description="The engine read from the container's command/args and image must equal the scheduler's "
    "engineType.",
    remediation="Set spec.schedulers[].engineType to the engine the pods run (vllm or sglang), or list the "
    "scheduler under spec.extensions.engines (tgi, or generic with metric specs).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        engine = detect_engine(group.image, group.argv)
        declared = group.scheduler.engine_type
        if declared == GENERIC:
            yield r.passed(
                group.resource, f"generic engine (metric specs from the config); container: {engine}"
            )
            continue
        if engine is None:
            yield r.warn(
                group.resource,
                f"cannot tell the engine of {group.image} from its image or args; engineType says {declared}",
                severity=Severity.LOW,
            )
        elif engine != declared:
            yield r.fail(
                group.resource, f"engineType {declared} but the container runs {engine} ({group.image})"
            )
        else:
            yield r.passed(group.resource, f"{engine}")


CHECK = FunctionCheck(META, _run)
